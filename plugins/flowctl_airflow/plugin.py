"""The Airflow plugin object of flowctl (hooks and operators are plain imports).

Besides naming flowctl in Airflow's plugin list, it mounts the metrics page and
its JSON API in the api-server (``fastapi_apps``, under ``/flowctl``) and puts
the page in the UI's navigation (``external_views``).

Why an external view and not a ``react_apps`` entry: a React app must be a
JavaScript bundle built against the UI's React runtime (a Node tool chain and a
build step for one page), whereas an external view whose ``href`` is relative
is the api-server's own origin shown in the UI's iframe. Same origin means the
browser sends the UI's session cookie with the page's requests, so the page and
its API are protected by Airflow's login with no extra code, and the page also
works on its own at ``<base_url>/flowctl/``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from flowctl_airflow.ui.app import URL_PREFIX, create_app


class FlowctlPlugin(AirflowPlugin):
    """flowctl's entry in Airflow's plugin list (Admin > Plugins), its page and API."""

    name = "flowctl"
    # AirflowPlugin annotates these as instance attributes but reads them from the class
    # (plugins are registered as classes); ruff (RUF012) wants a mutable class attribute
    # marked ClassVar, which mypy then reports as an override of an instance variable.
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [  # type: ignore[misc]
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "flowctl metrics"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [  # type: ignore[misc]  # as above
        {
            "name": "Flowctl metrics",
            # Relative (no leading slash): resolved against the api-server's base URL.
            "href": URL_PREFIX.lstrip("/") + "/",
            "url_route": "flowctl-metrics",
            "destination": "nav",
            "category": "browse",
        }
    ]
