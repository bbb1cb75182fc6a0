"""The embedded memcached: the MRWQ store of the delayed persistence queue.

Run in the foreground (no ``-d``) so the PID we record is memcached's own.
memcached refuses to run as root without ``-u``: as root we pass
``-u memcache`` (the Debian package's user) or ``-u root`` if that user does
not exist. No PyPI wheel ships the server, so a missing binary is installed
from the Debian package when we are root, and reported otherwise.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

from flowctl.config import Settings
from flowctl.services.base import ServiceError
from flowctl.services.process import Daemon, EmbeddedService

NAME = "memcached"
INSTALL_HINT = "install it with `sudo apt-get install memcached` (Debian/Ubuntu)"


def binary(install: bool = True) -> str:
    """Path of the ``memcached`` executable, installing the Debian package if allowed."""
    found = shutil.which("memcached")
    if found:
        return found
    if not install or os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServiceError(f"memcached: the memcached binary is not on PATH; {INSTALL_HINT}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "memcached"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:  # the package lists may be missing on a fresh image
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which("memcached")
    if result.returncode != 0 or not found:
        reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["unknown"]
        raise ServiceError(f"memcached: `{' '.join(cmd)}` failed ({reason[0]}); {INSTALL_HINT}")
    return found


def run_as_user() -> list[str]:
    """``-u <user>`` when running as root (memcached refuses root otherwise)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("memcache")
    except KeyError:
        return ["-u", "root"]
    return ["-u", "memcache"]


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)`` with a clear error naming the value."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ServiceError(f"memcached: address {address!r} is not host:port")
    return host, int(port)


def memcached_health(address: str, timeout: float) -> None:
    """A protocol round trip (``version``) within ``timeout``.

    The round trip is the memcached adapter's; it is imported here, not at the
    top, so the CLI starts without loading the memcached client.
    """
    parse_address(address)
    from flowctl.adapters.memcached_store import MemcachedUnavailable, check_server

    try:
        check_server(address, timeout)
    except MemcachedUnavailable as exc:
        raise ServiceError(str(exc)) from None


def is_external(settings: Settings) -> bool:
    """True when the settings name a memcached other than the embedded one."""
    embedded = f"{settings.host}:{settings.memcached_port}"
    return bool(settings.memcached_server) and settings.memcached_server != embedded


def daemon(settings: Settings, for_start: bool = False) -> Daemon:
    """The memcached process for these settings (nothing started yet)."""
    exe = binary(install=for_start) if for_start else (shutil.which("memcached") or "memcached")
    argv = (
        exe,
        "-l",
        settings.host,
        "-p",
        str(settings.memcached_port),
        "-U",
        "0",  # no UDP listener: one port to manage, and no amplification surface
        "-m",
        str(settings.memcached_memory_mb),
        *run_as_user(),
    )
    address = f"{settings.host}:{settings.memcached_port}"
    return Daemon(
        name=NAME,
        argv=argv,
        host=settings.host,
        port=settings.memcached_port,
        settings=settings,
        health=lambda timeout: memcached_health(address, timeout),
    )


class MemcachedService(EmbeddedService):
    """The embedded memcached, or a health check of an external one."""

    name = NAME
    kind = "memcached"

    def is_external(self, settings: Settings) -> bool:
        return is_external(settings)

    def address(self, settings: Settings) -> str:
        return settings.memcached_address

    def health(self, address: str, timeout: float) -> None:
        memcached_health(address, timeout)

    def daemon(self, settings: Settings, for_start: bool = False) -> Daemon:
        return daemon(settings, for_start)
