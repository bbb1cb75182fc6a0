"""The replace operator with its stream runs started by a function, not by DAG runs.

Outside a scheduler (the live autoscale benchmark, the handover fault tests) nobody would
run a DAG run of ``stream_<pipeline>``, so :class:`DirectReplace` overrides the one step
that creates them and hands the run conf to ``start_green``: green's (``standby`` with
``replaces``: submit the stream job ``--standby``) and, after a replacement that took a
warm standby, the next standby's (``replaces`` empty: ``--warm-standby``). Everything else
is the real operator: ``execute`` with ``deferrable=False`` drives the same phases, waits,
rollback and ``on_kill``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator

#: Starts a stream run from its conf (``topology_id``, ``parallelism``, ``colour``,
#: ``standby``, ``replaces``): green, or the next warm standby.
StartGreen = Callable[[dict[str, Any]], Any]


def standby_args(conf: dict[str, Any]) -> list[str]:
    """The stream job's extra arguments for a run conf: a coloured standby, the green of a
    replacement (``replaces`` set) or a warm standby (``replaces`` empty), as
    :class:`~flowctl_airflow.operators.stream.FlowctlStreamOperator` submits them."""
    flag = "--standby" if conf.get("replaces") else "--warm-standby"
    return [flag, "--colour", str(conf["colour"])]


class DirectReplace(BlueGreenReplaceOperator):
    """:class:`BlueGreenReplaceOperator` whose stream runs are started by ``start_green(conf)``.

    Run it with ``deferrable=False`` (nothing would resume a deferred task): ``execute``
    then returns the replacement event as the operator's XCom would.
    """

    def __init__(self, *, start_green: StartGreen, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._start_green_with = start_green

    def _trigger_stream_run(
        self, context: Any, *, dag_id: str, run_id: str, conf: dict[str, Any], note: str
    ) -> None:
        self.log.info("starting %s (spark-submit, no DAG run): %s", conf["topology_id"], note)
        self._start_green_with(conf)
