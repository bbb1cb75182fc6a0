"""The flow-controlled mode of ``flowctl_kafka``: the spout's planner, the lanes, the driver.

docs/flow-control.md is the contract; this package is its Spark side, one module per role:

- :mod:`~flowctl.spark.flow.settings`: the settings the planner and lanes share, the
  pipeline config and per-process caches;
- :mod:`~flowctl.spark.flow.plan`: the batch plan, stored as the end offset in Spark's
  offset log (and a standby topology's warm-up batches);
- :mod:`~flowctl.spark.flow.channels`: the typed memcached channels between planner,
  lanes and driver;
- :mod:`~flowctl.spark.flow.planner`: :class:`FlowPlanner`, the spout's process side
  (Spark's long-lived source runner);
- :mod:`~flowctl.spark.flow.planner_feedback`: the lanes' feedback, collected and applied
  to the spout by the planner;
- :mod:`~flowctl.spark.flow.planner_handover`: the planner's side of activation and of an
  overlapped handover;
- :mod:`~flowctl.spark.flow.log_ends`: the Kafka log's end offsets as the planner reads
  them once per micro-batch (on a thread of their own), and the bounds rule;
- :mod:`~flowctl.spark.flow.reader`: the stream reader of ``mode=flow``;
- :mod:`~flowctl.spark.flow.lane`: a lane (one executor task), its steps and its I/O;
- :mod:`~flowctl.spark.flow.preload`: the Spark Python workers warmed while the query
  starts;
- :mod:`~flowctl.spark.flow.worker_gc`: the workers' imports kept out of the garbage
  collection Spark runs after every task;
- :mod:`~flowctl.spark.flow.deadline`: a tuple's ``process`` under a deadline;
- :mod:`~flowctl.spark.flow.routing`: where a failed tuple's records go (pure rules);
- :mod:`~flowctl.spark.flow.job`: the driver (:class:`FlowStreamJob`: the MRWQ flusher,
  the control key, metrics rows, the control signals);
- :mod:`~flowctl.spark.flow.job_flusher`: the driver's MRWQ flusher thread (mixed into
  :class:`FlowStreamJob`);
- :mod:`~flowctl.spark.flow.job_handover`: the driver's two sides of an overlapped
  handover (mixed into :class:`FlowStreamJob`).

The durable state (Eden checkpoint, flusher position, the replay pointer) is read and
written through :mod:`flowctl.adapters.flow_state`.
"""
