"""The JVM options of every Spark driver the platform starts: a fixed heap and the class archive.

A driver's heap is reserved whole at its start: ``-Xms`` equal to its size
(``spark.driver.memory``, which spark-submit turns into ``-Xmx``) and every page touched
before the driver runs (``-XX:+AlwaysPreTouch``). Left to itself G1 grows a heap it has
room for in steps and shrinks it rarely: in the hour at ef6161c the stream driver's JVM
went from 597 MB resident at minute 5 to 817 MB at minute 60 (steps of 20-130 MB, one
shrink), while its Python process and workers stayed flat (bench/README.md, "The hour at
ef6161c"). Growth within the size the operator gave is no leak, but it cannot be told
from one. With the heap held from the first second, the driver's resident memory is its
size plus what lives outside the heap (classes, code, threads, buffers), and only that
part can grow: what the soak's RSS figure then shows (the hour at a583216: 1,433 ->
1,452 MB from minute 5 to 60).

Touching a 1 GB heap page by page costs 0.5-1.5 s of a driver's start on the 2-core dev
machine; backed by transparent huge pages, 0.1-0.2 s (``java -version`` with and without,
three runs each). The JVM asks for them (``-XX:+UseTransparentHugePages``) where the
kernel offers them (``always`` or ``madvise``); where it does not, the flag is left out
(the JVM would print a warning and start without).

The size is ``FLOWCTL_SPARK_DRIVER_MEMORY`` (``Settings.spark_driver_memory``, Spark's
default 1g); a ``spark.driver.memory`` in an operator's ``conf`` wins, and the heap is
fixed at that size instead.
"""

from __future__ import annotations

from pathlib import Path

from flowctl.adapters import class_archive

#: Where Linux says whether transparent huge pages are offered (the choice in brackets).
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_offered(setting: Path | None = None) -> bool:
    """Whether the kernel backs a JVM's heap with huge pages when asked (``madvise``):
    ``setting`` says, by default :data:`THP_SETTING`."""
    try:
        text = (setting or THP_SETTING).read_text()
    except OSError:  # not Linux, or no THP in this kernel
        return False
    return "[always]" in text or "[madvise]" in text


def java_options(memory: str, archive: bool = True) -> str:
    """The driver JVM's options for a heap of ``memory`` (a JVM size, e.g. ``1g``): fixed
    and touched at start, on huge pages where offered, and the class archive if
    ``archive`` and one is built."""
    options = [f"-Xms{memory}", "-XX:+AlwaysPreTouch"]
    if huge_pages_offered():
        options.append("-XX:+UseTransparentHugePages")
    mapped = class_archive.driver_java_options(archive)
    if mapped:
        options.append(mapped)
    return " ".join(options)


def driver_conf(memory: str, archive: bool = True) -> dict[str, str]:
    """The Spark conf that starts a driver this way, with a heap of ``memory``
    (``Settings.spark_driver_memory``, or an operator's own ``spark.driver.memory``) and the
    class archive if ``archive`` (``Settings.spark_class_archive``)."""
    return {
        "spark.driver.memory": memory,
        "spark.driver.extraJavaOptions": java_options(memory, archive),
    }
