"""The S3 endpoint behind Tansu's S3 mode (``FLOWCTL_TANSU_STORAGE=s3``).

Tansu stores its log in an S3 bucket through the standard ``AWS_*``
variables. If ``AWS_ENDPOINT`` is set, that endpoint (MinIO, AWS, ...) is
used as is and only checked. Otherwise, when ``moto[server]`` is installed, a
local moto S3 server is started on ``FLOWCTL_S3_PORT`` (default 9000) and the
bucket of ``FLOWCTL_TANSU_S3_URL`` is created in it. moto keeps objects in its
own memory: topics survive Tansu restarts (``down --only tansu`` / ``up``) and
crashes, but not a restart of the S3 server itself (a full ``down``): moto is a test
double of S3, and a log in it is not durable. Point ``AWS_ENDPOINT`` at a real S3 or
MinIO for data that must outlive everything (:func:`durability` says which holds).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import urllib.error
import urllib.request
from urllib.parse import urlparse

from flowctl.config import ConfigError, Settings
from flowctl.services.base import DOWN, EXTERNAL, UNREACHABLE, ServiceError, ServiceStatus
from flowctl.services.process import Daemon

NAME = "s3"
PORT_ENV = "FLOWCTL_S3_PORT"
DEFAULT_PORT = 9000
# Credentials the local server accepts (moto checks none); Tansu's S3 client requires some.
LOCAL_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "flowctl",
    "AWS_SECRET_ACCESS_KEY": "flowctl",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def port(settings: Settings) -> int:
    """The local S3 port (``Settings.s3_port``, from ``FLOWCTL_S3_PORT``)."""
    return settings.s3_port


def bucket(settings: Settings) -> str:
    """The bucket named by ``tansu_s3_url`` (``s3://tansu/`` -> ``tansu``)."""
    parsed = urlparse(settings.tansu_s3_url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ConfigError(
            f"FLOWCTL_TANSU_S3_URL={settings.tansu_s3_url!r} must look like s3://<bucket>/"
        )
    return parsed.netloc


def external_endpoint() -> str | None:
    """``AWS_ENDPOINT`` if the user configured an S3 endpoint of their own."""
    return os.environ.get("AWS_ENDPOINT") or None


def moto_available() -> bool:
    """Whether ``moto[server]`` can be imported (it ships the local S3 server)."""
    return (
        importlib.util.find_spec("moto") is not None
        and importlib.util.find_spec("flask") is not None
    )


def durability(settings: Settings) -> str:
    """One line saying where the broker's log lives and whether it survives a full ``down``:
    only a real S3 endpoint the operator names (``AWS_ENDPOINT``) makes Tansu's log durable;
    moto and the memory engine keep it in a process's memory. It names the variable that
    picks the engine (``settings.tansu_storage_variable``: the process cluster has its own)."""
    if settings.kafka_bootstrap_servers:
        return (
            f"log: in the external Kafka at {settings.kafka_bootstrap_servers}; "
            "durable as that cluster is"
        )
    if settings.tansu_storage != "s3":
        return (
            "log: in Tansu's memory, NOT durable (lost when Tansu stops); durability: "
            f"docker-compose's Apache Kafka, or {settings.tansu_storage_variable}=s3 with "
            "AWS_ENDPOINT naming a real S3"
        )
    endpoint = external_endpoint()
    if endpoint:
        return f"log: in the S3 bucket {bucket(settings)!r} at {endpoint}; durable as that store is"
    return (
        f"log: in moto's memory (a test double of S3 at {local_endpoint(settings)}), NOT "
        "durable: it survives a Tansu restart, not `down`; durability: docker-compose's "
        "Apache Kafka, or AWS_ENDPOINT (+ AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_DEFAULT_REGION) naming a real S3"
    )


def local_endpoint(settings: Settings) -> str:
    return f"http://{settings.host}:{port(settings)}"


def tansu_env(settings: Settings) -> dict[str, str]:
    """The ``AWS_*`` variables Tansu needs to reach the bucket.

    With ``AWS_ENDPOINT`` set the caller's environment already holds them;
    otherwise they point at the local server (caller's credentials win).
    """
    if external_endpoint():
        return {"AWS_ALLOW_HTTP": os.environ.get("AWS_ALLOW_HTTP", "true")}
    env = {name: os.environ.get(name) or value for name, value in LOCAL_CREDENTIALS.items()}
    return {**env, "AWS_ENDPOINT": local_endpoint(settings), "AWS_ALLOW_HTTP": "true"}


def http_health(endpoint: str, timeout: float) -> None:
    """Any HTTP answer (even 403 without credentials) proves an S3 server is there."""
    try:
        with urllib.request.urlopen(endpoint.rstrip("/") + "/", timeout=timeout):
            return
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServiceError(f"no S3 server answers at {endpoint}: {reason}") from None


def create_bucket(endpoint: str, name: str, timeout: float = 5.0) -> None:
    """Create the bucket on the local server (moto accepts unsigned requests)."""
    request = urllib.request.Request(f"{endpoint}/{name}", method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        if exc.code == 409:  # BucketAlreadyOwnedByYou / BucketAlreadyExists
            return
        raise ServiceError(f"s3: cannot create bucket {name!r} at {endpoint}: {exc}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceError(f"s3: cannot create bucket {name!r} at {endpoint}: {exc}") from None


def daemon(settings: Settings) -> Daemon:
    """The local moto S3 server for these settings (nothing started yet)."""
    endpoint = local_endpoint(settings)
    return Daemon(
        name=NAME,
        argv=(sys.executable, "-m", "moto.server", "-H", settings.host, "-p", str(port(settings))),
        host=settings.host,
        port=port(settings),
        settings=settings,
        health=lambda timeout: http_health(endpoint, timeout),
        start_timeout=30.0,  # moto imports a lot before it listens
    )


class S3Service:
    """Tansu's S3 store: an external endpoint, a local moto server, or not used."""

    name = NAME

    def up(self, settings: Settings) -> str:
        if settings.tansu_storage != "s3":
            return f"{NAME}: not used ({settings.tansu_storage_variable}={settings.tansu_storage})"
        endpoint = external_endpoint()
        if endpoint:
            http_health(endpoint, timeout=5.0)
            return f"{NAME}: using external S3 at {endpoint} (reachable)"
        if not moto_available():
            raise ServiceError(
                f"s3: {settings.tansu_storage_variable}=s3 needs an S3 endpoint; set AWS_ENDPOINT, "
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION (and "
                "AWS_ALLOW_HTTP=true for http://), or `pip install 'moto[server]'` for a local one"
            )
        message = daemon(settings).up()
        create_bucket(local_endpoint(settings), bucket(settings))
        return f"{message}; bucket {bucket(settings)!r} ready"

    def down(self, settings: Settings) -> str:
        if external_endpoint():
            return f"{NAME}: external S3 at {external_endpoint()} is not ours to stop"
        return daemon(settings).down()

    def status(self, settings: Settings) -> ServiceStatus:
        endpoint = external_endpoint()
        if endpoint:
            try:
                http_health(endpoint, timeout=3.0)
            except ServiceError as exc:
                return ServiceStatus(NAME, UNREACHABLE, None, endpoint, str(exc))
            return ServiceStatus(NAME, EXTERNAL, None, endpoint, "external S3")
        if settings.tansu_storage != "s3" and daemon(settings).running() is None:
            return ServiceStatus(NAME, DOWN, None, local_endpoint(settings), "not used")
        status = daemon(settings).status()
        note = "moto, in memory: not durable"
        return dataclasses.replace(status, detail=f"{status.detail}; {note}".lstrip("; "))
