"""Local TCP ports: a free one to listen on, whether one is taken, who holds it, a check.

Split from :mod:`flowctl.services.process` (daemons and their process trees): the
services, the cluster layout and the tests pick ports here, and a daemon's health check
connects here.
"""

from __future__ import annotations

import errno
import os
import random
import socket
from pathlib import Path

from flowctl.services.base import ServiceError

__all__ = ["check_tcp", "free_port", "port_holder", "port_is_free"]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on, below the kernel's ephemeral range.

    For tests and tools that must stay off the default ports. Ports handed out
    for bind(port 0) come from the ephemeral range, which is also where every
    outgoing connection takes its local port, so such a port can be taken by a
    client socket before the server binds it; a random port between 20000 and
    the start of that range cannot. Another process can still take it before
    use, which the caller sees as :class:`PortInUseError`.
    """
    low = _ephemeral_range()[0]
    rng = random.SystemRandom()
    if low > 20_000:
        for _ in range(200):
            port = rng.randrange(20_000, low)
            if port_is_free(host, port) and not _listening_inodes(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """Whether we could listen on ``host:port`` now (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise ServiceError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_holder(port: int) -> str | None:
    """Best effort: ``"pid 123 (memcached)"`` of the process listening on ``port``."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in targets:
                    comm = (proc / "comm").read_text().strip()
                    return f"pid {proc.name} ({comm})"
        except OSError:
            continue
    return None


def check_tcp(host: str, port: int, timeout: float) -> None:
    """Raise ``OSError`` unless a TCP connection to ``host:port`` succeeds within ``timeout``."""
    with socket.create_connection((host, port), timeout=timeout):
        pass
