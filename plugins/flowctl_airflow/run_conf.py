"""Refuse a DAG run whose conf holds keys its DAG does not read (issue 47, item 8).

Airflow takes any key of a run's conf: with ``[core] dag_run_conf_overrides_params`` (the
default) each one is merged into the task's ``params``, declared or not, and nothing reads
an undeclared one. A misspelt ``paralelism`` or the rescale form's old ``direction`` was
accepted at trigger and silently ignored, and the run went on with the defaults. Every
flowctl task calls :func:`refuse_unknown_conf` first in its ``execute``: a conf key that is
not one of its DAG's Params fails the task at once (``AirflowFailException``: no retry),
before any Spark, Kafka or database work, with one line naming the key(s) and listing the
accepted keys. The reference is the DAG's own ``params``, not ``context["params"]``, which
holds the conf's keys already.

A key the DAG used to read (``renamed``: old key -> the field that replaced it) is answered
with that field's name and its accepted values (its Param's ``enum``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Keys listed by name in a refusal; more are counted.
MAX_LISTED = 10


def _name(key: object) -> str:
    text = str(key)
    return f"`{text}`" if text.isprintable() else repr(text)


def _names(keys: Sequence[str]) -> str:
    shown = [_name(k) for k in keys[:MAX_LISTED]]
    if len(keys) > MAX_LISTED:
        shown.append(f"{len(keys) - MAX_LISTED} more")
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def accepted_values(schema: Mapping[str, Any]) -> str:
    """A Param's allowed values in words, from its ``enum`` (empty without one; null left out).

    ``["up", "down", 1, 2]`` -> ``up, down, or one of [1, 2]``.
    """
    enum = [v for v in schema.get("enum") or () if v is not None]
    words = [str(v) for v in enum if isinstance(v, str)]
    others = [v for v in enum if not isinstance(v, str)]
    if words and others:
        return f"{', '.join(words)}, or one of {others}"
    if words:
        return f"one of: {', '.join(words)}"
    return f"one of {others}" if others else ""


def param_schemas(*sources: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """Each Param of ``sources`` (the DAG's ``params``, then the task's) with its JSON schema,
    in order; a plain value or a Param without a schema has ``{}``."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for params in sources:
        get_param = getattr(params, "get_param", None)  # ParamsDict's public accessor
        for key in params or {}:
            if key not in schemas:
                schema = getattr(get_param(key), "schema", None) if get_param else None
                schemas[key] = schema if isinstance(schema, Mapping) else {}
    return schemas


def conf_problem(
    dag_id: str,
    conf: Mapping[str, Any] | None,
    params: Mapping[str, Mapping[str, Any]],
    renamed: Mapping[str, str] | None = None,
) -> str | None:
    """The refusal of a run's ``conf``, or None if each of its keys is one of ``params``.

    ``params``: the accepted keys, in order, each with its JSON schema (:func:`param_schemas`).
    One line: the keys ``renamed`` maps (each answered with its new field and that field's
    accepted values), the other unknown keys, then the accepted keys.
    """
    accepted = list(params)
    unknown = [k for k in conf or {} if k not in params]
    if not unknown:
        return None
    renamed = renamed or {}
    parts: list[str] = []
    by_field: dict[str, list[str]] = {}
    for key in unknown:
        if key in renamed:
            by_field.setdefault(renamed[key], []).append(key)
    for field, old in by_field.items():
        values = accepted_values(params.get(field, {}))
        verb = "is" if len(old) == 1 else "are"
        parts.append(
            f"{_names(old)} {verb} no longer read: give {_name(field)}"
            + (f" ({values})" if values else "")
        )
    others = [k for k in unknown if k not in renamed]
    if others:
        parts.append(f"unknown key{'s' if len(others) > 1 else ''} {_names(others)}")
    listed = ", ".join(accepted) if accepted else "none (this DAG takes no conf)"
    return f"{dag_id} conf: {'; '.join(parts)}; accepted keys: {listed}"


def refuse_unknown_conf(context: Context, renamed: Mapping[str, str] | None = None) -> None:
    """Fail the task (no retry) if its run's conf has a key its DAG's Params do not declare.

    Call it first in ``execute``. Without a DAG run or a DAG in ``context`` (an operator
    executed on its own, outside a run) there is no conf to check.
    """
    dag_run = context.get("dag_run")
    dag = context.get("dag")
    conf = getattr(dag_run, "conf", None)
    if not conf or dag is None or not isinstance(conf, Mapping):
        return
    task = context.get("task")
    # A task's own Params are read from the conf too: accepted, after the DAG's.
    params = param_schemas(dag.params, getattr(task, "params", None))
    problem = conf_problem(dag.dag_id, conf, params, renamed)
    if problem:
        raise AirflowFailException(problem)
