"""Linux's ``/proc``: what a process id runs, read without starting anything.

The services that start and stop the platform's daemons and the detached driver's keeper
both need to tell a live process from a dead or recycled pid; this is the one reader.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["proc_cmdline"]


def proc_cmdline(pid: int) -> tuple[str, ...] | None:
    """The command line of a live (non-zombie) process, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # The state follows the parenthesised command name, which may itself hold spaces.
        if stat[stat.rindex(")") + 2] in "ZX":
            return None
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)
