"""The replace operator with green started by a function, not by a DAG run.

Outside a scheduler (the live autoscale benchmark, the handover fault tests) nobody would
run green's DAG run of ``stream_<pipeline>``, so :class:`DirectReplace` overrides the one
step that creates it and hands green's run conf to ``start_green`` (which submits the
stream job with ``--standby``). Everything else is the real operator: ``execute`` with
``deferrable=False`` drives the same phases, waits, rollback and ``on_kill``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator

#: Starts green from its run conf (``topology_id``, ``parallelism``, ``colour``, ``standby``).
StartGreen = Callable[[dict[str, Any]], Any]


def standby_args(conf: dict[str, Any]) -> list[str]:
    """The stream job's extra arguments for green's run conf: a coloured standby."""
    return ["--standby", "--colour", str(conf["colour"])]


class DirectReplace(BlueGreenReplaceOperator):
    """:class:`BlueGreenReplaceOperator` whose green is started by ``start_green(conf)``.

    Run it with ``deferrable=False`` (nothing would resume a deferred task): ``execute``
    then returns the replacement event as the operator's XCom would.
    """

    def __init__(self, *, start_green: StartGreen, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._start_green_with = start_green

    def _start_green(self, context: Any, progress: Any, conf: dict[str, Any]) -> None:
        self.log.info("step start green %s (spark-submit, no DAG run)", conf["topology_id"])
        self._start_green_with(conf)
