"""Bring the embedded services up and down together, in dependency order.

The database comes first (it is only checked), then memcached, then the broker: Apache
Kafka (``kafka``, the default), or with ``FLOWCTL_BROKER=tansu`` the S3 store (Tansu's S3
mode only) and Tansu; ``down`` goes in reverse. Each step
logs what happened and how long it took, so ``flowctl services up`` explains
itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from flowctl.config import Settings
from flowctl.services.base import Service, ServiceError, ServiceStatus
from flowctl.services.database import DatabaseService
from flowctl.services.kafka import KafkaService
from flowctl.services.memcached import MemcachedService
from flowctl.services.process import run_dir
from flowctl.services.s3 import S3Service
from flowctl.services.tansu import TansuService

log = logging.getLogger(__name__)

SERVICES: dict[str, Service] = {
    "db": DatabaseService(),
    "memcached": MemcachedService(),
    "kafka": KafkaService(),
    "s3": S3Service(),
    "tansu": TansuService(),
}
NAMES: tuple[str, ...] = tuple(SERVICES)


def _in_use(settings: Settings, name: str) -> bool:
    """The broker ``FLOWCTL_BROKER`` names; s3 only for Tansu's S3 mode. A service that
    is not in use but still runs (its PID file is there) is in use until it is stopped."""
    if (run_dir(settings) / f"{name}.pid").exists():
        return True
    if name == "kafka":
        return settings.broker == "kafka"
    if name == "tansu":
        return settings.broker == "tansu"
    if name == "s3":
        return settings.broker == "tansu" and settings.tansu_storage == "s3"
    return True


def _select(
    settings: Settings, only: Iterable[str] | str | None, starting: bool = False
) -> list[Service]:
    if only is None:
        return [svc for name, svc in SERVICES.items() if _in_use(settings, name)]
    wanted = {only} if isinstance(only, str) else set(only)
    unknown = sorted(wanted - set(SERVICES))
    if unknown:
        raise ServiceError(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
    if starting and "tansu" in wanted and settings.tansu_storage == "s3":
        wanted.add("s3")  # Tansu's S3 mode cannot start without its store
    return [svc for name, svc in SERVICES.items() if name in wanted]


def up(settings: Settings, only: Iterable[str] | str | None = None) -> list[str]:
    """Start (or check) the selected services; already-running ones are left as they are.

    On a failure the services this call started are stopped again, so a
    failed ``up`` leaves nothing half-running behind, then the error is raised.
    """
    started: list[Service] = []
    messages: list[str] = []
    t0 = time.monotonic()
    for svc in _select(settings, only, starting=True):
        before = svc.status(settings).pid
        try:
            message = svc.up(settings)
        except ServiceError:
            for done in reversed(started):
                log.warning("rolling back after the failure: %s", done.down(settings))
            raise
        log.info(message)
        messages.append(message)
        if before is None and svc.status(settings).pid is not None:
            started.append(svc)
    log.info("services up in %.2f s", time.monotonic() - t0)
    return messages


def down(
    settings: Settings, only: Iterable[str] | str | None = None, purge: bool = False
) -> list[str]:
    """Stop the selected services we run (reverse order); a stopped one is a no-op.

    ``purge``: then delete what they keep on disk (the embedded broker's log)."""
    messages: list[str] = []
    t0 = time.monotonic()
    errors: list[str] = []
    for svc in reversed(_select(settings, only)):
        try:
            message = svc.down(settings)
        except ServiceError as exc:  # keep stopping the others
            errors.append(str(exc))
            continue
        log.info(message)
        messages.append(message)
        if purge and isinstance(svc, KafkaService) and not svc.is_external(settings):
            message = svc.purge(settings)
            log.info(message)
            messages.append(message)
    if errors:
        raise ServiceError("; ".join(errors))
    log.info("services down in %.2f s", time.monotonic() - t0)
    return messages


def status(settings: Settings, only: Iterable[str] | str | None = None) -> list[ServiceStatus]:
    """The state of every selected service (db, memcached, the broker; s3 in S3 mode)."""
    return [svc.status(settings) for svc in _select(settings, only)]
