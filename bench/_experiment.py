"""What every experiment shares apart from the platform: its command line, its main, its result.

- :func:`experiment_parser`: the parser each experiment adds its own flags to (the
  description from the module's docstring, ``--seed``);
- :func:`run_experiment`: the ``main`` skeleton (parse, check, run, exit code);
- :func:`write_result`: ``bench/results/<experiment>.json`` with the command, the commit,
  whether the work tree was modified, the date and the machine;
- figures and small statistics (:func:`pyplot`, :func:`save_figure`, :func:`percentile`,
  :func:`ratio`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flowctl.config import PROJECT_ROOT

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


class BadArgument(ValueError):
    """A flag's value the experiment cannot run with; the message names the flag and value."""


def experiment_parser(doc: str | None, *, seed: int) -> argparse.ArgumentParser:
    """The parser every experiment starts from: ``doc``'s first paragraph as its
    description and ``--seed`` (the data generator's seed; each experiment keeps its own
    default so that a rerun reproduces its committed result's data)."""
    parser = argparse.ArgumentParser(
        prog=_module_command(), description=(doc or "").split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=seed, help="seed of the generated data")
    return parser


def run_experiment(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """The ``main`` of every experiment: parse ``argv``, ``run(args)``, return its exit code
    (0 when the target is met, 1 when it is missed). A :class:`BadArgument` raised before
    anything ran is argparse's usage error (exit 2), naming the flag and the value."""
    args = parser.parse_args(argv)
    try:
        return run(args)
    except BadArgument as exc:
        parser.error(str(exc))
    except KeyboardInterrupt:
        print("interrupted: no result written", file=sys.stderr)
        return 130


def exit_code(summary: dict[str, Any]) -> int:
    """0 when the summary meets its target (or has none), 1 when it misses it."""
    return 1 if summary.get("meets_target") is False else 0


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (benchmarks run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, write at the size every benchmark uses, and free the figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


# -- results --------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import pyspark

    mem_gb = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "spark": pyspark.__version__,
        "platform": platform.platform(),
    }


def _module_command() -> str:
    """``python -m bench.<name>``: how the running experiment was started."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):  # not a file of the project (an interactive run)
        return "python -m " + ".".join(script.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return script.name


def command_line() -> str:
    """How to run the experiment again: ``.venv/bin/python -m bench.<name> <its arguments>``."""
    return " ".join([f".venv/bin/{_module_command()}", *sys.argv[1:]])


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_tree() -> dict[str, Any]:
    """The commit the experiment ran on, and whether the work tree had changes beside it.

    A result is only comparable with the code it names: a result file kept after the
    code changed says so by its commit. ``commit`` is None outside a git checkout.
    """
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "HEAD"), "tree_modified": bool(status)}


def provenance() -> dict[str, Any]:
    """The fields every result file carries: command, commit, work tree state, date, machine."""
    return {
        "command": command_line(),
        **source_tree(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }


def write_result(experiment: str, result: dict[str, Any], name: str | None = None) -> Path:
    """``bench/results/<name or experiment>.json``: the result with :func:`provenance` added,
    so no experiment can forget its commit and date."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"experiment": experiment, **result, **provenance()}
    path = RESULTS / f"{name or experiment}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def ratio(candidate: float | None, baseline: float | None) -> float | None:
    if candidate is None or baseline is None or baseline == 0:
        return None
    return round(candidate / baseline, 3)
