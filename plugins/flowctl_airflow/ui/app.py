"""The flowctl metrics page and its JSON API: a FastAPI app mounted in Airflow's api-server.

Mounted by :class:`~flowctl_airflow.plugin.FlowctlPlugin` under ``/flowctl``
(``fastapi_apps``) and shown inside the Airflow UI as an external view. It is
served by the api-server itself, so the page and the API share the UI's
origin: the browser sends the ``_token`` cookie the Airflow UI holds with
every same-origin ``fetch``, and no second login, CORS or token plumbing is
needed.

Authentication is Airflow's own: :func:`airflow.api_fastapi.core_api.security.get_user`
accepts an ``Authorization: Bearer <JWT>`` header (API clients, tokens from
``POST /auth/token``) or the UI's cookie, and rejects anything else with 401/403.
Authorisation asks the configured auth manager whether the user may ``GET``
the custom view ``flowctl`` (``is_authorized_custom_view``), the hook Airflow
provides for plugin views, so an auth manager with roles can grant or refuse it.

The database is the one of the ``flowctl_db`` connection, resolved on each
request (an edit of the connection in the UI takes effect at once); engines
are cached per URL and the schema is ensured once per URL per process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep, get_user
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from flowctl.adapters.db import DatabaseUnavailable
from flowctl.adapters.schema_setup import SchemaVersionError, ensure_schema
from flowctl_airflow.ui.queries import MetricsQuery, MetricsReader, UnknownPipeline

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The custom view the auth manager is asked about (``is_authorized_custom_view``).
RESOURCE_NAME = "flowctl"
#: Where the plugin mounts the app in the api-server.
URL_PREFIX = "/flowctl"

MAX_WINDOWS = 2000
MAX_HISTORY = 100
MAX_REPLACEMENTS = 500
PIPELINE_PATTERN = r"^[A-Za-z0-9_.\-]{1,100}$"

_readers: dict[str, MetricsReader] = {}
_readers_lock = threading.Lock()


def reader_for(url: str) -> MetricsReader:
    """One reader per database URL per process, its schema ensured on first use."""
    with _readers_lock:
        reader = _readers.get(url)
        if reader is None:
            reader = MetricsReader(url)
            # A fresh database (nothing ran yet) gets its empty tables, so the page
            # shows "no pipelines" instead of an SQL error.
            ensure_schema(reader.engine)
            _readers[url] = reader
        return reader


def _field_name(loc: Sequence[object]) -> str:
    parts = [str(p) for p in loc if p not in ("query", "path", "body")]
    return ".".join(parts) or "request"


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 whose message names each bad parameter and the value it was given."""
    messages = []
    errors = []
    for error in exc.errors():
        name = _field_name(error.get("loc", ()))
        value = error.get("input")
        messages.append(f"{name}={value!r}: {error.get('msg')}")
        errors.append({"parameter": name, "value": value, "message": error.get("msg")})
    return JSONResponse(
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        content={"detail": "; ".join(messages), "errors": errors},
    )


def require_flowctl_access(user: GetUserDep) -> BaseUser:
    """The authenticated user, if the auth manager lets them read the ``flowctl`` view."""
    allowed = get_auth_manager().is_authorized_custom_view(
        method="GET", resource_name=RESOURCE_NAME, user=user
    )
    if not allowed:
        raise HTTPException(
            status_code=status.HTTP_403_FORBIDDEN,
            detail=f"user {user.get_name()!r} may not read the custom view {RESOURCE_NAME!r}",
        )
    return user


def database(request: Request) -> MetricsReader:
    """The reader of the app's connection's database; 503 naming the connection if unusable."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook

    conn_id = request.app.state.flowctl_conn_id
    try:
        url = FlowctlDbHook(flowctl_conn_id=conn_id).sqlalchemy_url
    except AirflowNotFoundException as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=f"connection {conn_id!r} is not defined ({exc})",
        ) from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None
    try:
        return reader_for(url)
    except (DatabaseUnavailable, SchemaVersionError, ValueError) as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None


Reader = Annotated[MetricsReader, Depends(database)]
Pipeline = Annotated[
    str, PathParam(pattern=PIPELINE_PATTERN, description="pipeline name (config file name)")
]


def create_app(*, flowctl_conn_id: str = "flowctl_db") -> FastAPI:
    """The app the plugin mounts; ``flowctl_conn_id`` names the database connection."""

    app = FastAPI(
        title="flowctl metrics",
        description="Per-pipeline metrics windows, topologies and replacements of flowctl.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.flowctl_conn_id = flowctl_conn_id
    # Starlette types a handler as taking any Exception; FastAPI calls this one only with
    # RequestValidationError, which is what it is typed to take.
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]

    @app.exception_handler(UnknownPipeline)
    async def _unknown_pipeline(request: Request, exc: UnknownPipeline) -> JSONResponse:
        return JSONResponse(status_code=status.HTTP_404_NOT_FOUND, content={"detail": str(exc)})

    @app.exception_handler(DatabaseUnavailable)
    async def _db_down(request: Request, exc: DatabaseUnavailable) -> JSONResponse:
        return JSONResponse(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE, content={"detail": str(exc)}
        )

    guarded = [Depends(require_flowctl_access)]

    @app.get("/api/pipelines", dependencies=guarded)
    def list_pipelines(db: Reader) -> dict[str, Any]:
        """Every pipeline the control database knows, with its current topology."""
        return {"pipelines": db.pipelines()}

    @app.get("/api/pipelines/{pipeline}/metrics", dependencies=guarded)
    def pipeline_metrics(
        db: Reader,
        pipeline: Pipeline,
        limit: Annotated[int, Query(ge=1, le=MAX_WINDOWS, description="windows to return")] = 120,
        history: Annotated[
            int | None,
            Query(ge=1, le=MAX_HISTORY, description="A (default: the pipeline's [scaling])"),
        ] = None,
        threshold_c: Annotated[
            float | None,
            Query(ge=0, allow_inf_nan=False, description="C (default: the pipeline's [scaling])"),
        ] = None,
    ) -> dict[str, Any]:
        """The last ``limit`` metrics windows with E(M), S^2 and the paper's signal."""
        return db.metrics(pipeline, MetricsQuery(limit, history, threshold_c))

    @app.get("/api/pipelines/{pipeline}/topologies", dependencies=guarded)
    def pipeline_topologies(db: Reader, pipeline: Pipeline) -> dict[str, Any]:
        """The parallelism timeline: one band per topology."""
        return db.topologies(pipeline)

    @app.get("/api/pipelines/{pipeline}/replacements", dependencies=guarded)
    def pipeline_replacements(
        db: Reader,
        pipeline: Pipeline,
        limit: Annotated[int, Query(ge=1, le=MAX_REPLACEMENTS)] = 50,
    ) -> dict[str, Any]:
        """The most recent blue-green replacements, with their steps and pauses."""
        return db.replacements(pipeline, limit)

    @app.get("/", include_in_schema=False)
    async def page(request: Request) -> Response:
        """The page; a visitor without a valid session is sent to Airflow's login first."""
        try:
            await get_user(request, _oauth_token=None, bearer_credentials=None)
        except HTTPException:
            login = get_auth_manager().get_url_login(next_url=str(request.url))
            return RedirectResponse(login, status_code=status.HTTP_307_TEMPORARY_REDIRECT)
        return HTMLResponse((STATIC_DIR / "index.html").read_text(encoding="utf-8"))

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
