"""Process inspection for the service tests, straight from /proc."""

from __future__ import annotations

from pathlib import Path


def pid_gone(pid: int) -> bool:
    """True if ``pid`` no longer exists or is a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def processes_mentioning(needle: str) -> list[int]:
    """PIDs of live processes whose command line contains ``needle``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and not pid_gone(int(proc.name)):
            found.append(int(proc.name))
    return found
