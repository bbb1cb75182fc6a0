"""A pipeline config derived from a shipped one: renamed, with some settings changed.

Tests and benchmarks give every run a pipeline of its own, so its topics, offsets and
results never meet another run's on a shared broker and database, with settings sized
for the run. Both derive it here from the shipped file: a change to a shipped config
reaches them, and a setting that the shipped file does not have fails loudly instead of
leaving the shipped value in place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from flowctl.pipelines.config import resolve_path

__all__ = ["derive_config"]

_SECTION = re.compile(r"(?m)^\[(?P<name>[a-z_]+)\]\s*$")


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _set(text: str, key: str, value: object, where: str) -> str:
    """``key = value`` in ``text``, which must hold the key exactly once."""
    text, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {_shown(value)}", text)
    if n != 1:
        raise ValueError(f"{key!r} is not a setting of {where} (found {n} times)")
    return text


def derive_config(
    directory: Path,
    name: str,
    *,
    shipped: str = "wordcount",
    definition: str | None = None,
    sections: Mapping[str, Mapping[str, object]] | None = None,
) -> Path:
    """Write ``<directory>/<name>.toml``: the shipped config ``shipped`` renamed ``name``
    (Eden topic ``<name>.eden``), with the module ``definition`` if given and, per section
    (``topics``, ``stream``, ``flow``, ``scaling``), the given settings changed."""
    text = resolve_path(shipped).read_text()
    bounds = [(m.group("name"), m.start()) for m in _SECTION.finditer(text)]
    head, parts = text[: bounds[0][1]] if bounds else text, {}
    for i, (section, start) in enumerate(bounds):
        end = bounds[i + 1][1] if i + 1 < len(bounds) else len(text)
        parts[section] = text[start:end]
    head = _set(head, "name", name, f"the {shipped} config")
    if definition is not None:
        head = _set(head, "definition", definition, f"the {shipped} config")
    wanted = {"topics": {"eden": f"{name}.eden"}}
    for section, values in (sections or {}).items():
        wanted.setdefault(section, {}).update(values)
    for section, values in wanted.items():
        if section not in parts:
            raise ValueError(f"[{section}] is not a section of the {shipped} config")
        for key, value in values.items():
            parts[section] = _set(parts[section], key, value, f"[{section}] of {shipped}")
    path = directory / f"{name}.toml"
    path.write_text(head + "".join(parts[s] for s, _ in bounds))
    return path
