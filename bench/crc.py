"""What checking record CRCs costs a kafka-python reader, with and without the C extension.

Every consumer of flowctl checks the CRC-32C of each record batch it reads
(``check_crcs`` in ``flowctl.adapters.kafka_log``), so a corrupted record is refused
instead of counted. kafka-python computes the checksum with the ``crc32c`` C
extension when it is installed (a dependency of flowctl), in pure Python otherwise.
One topic is produced once; the same read loop (poll, decode, count words; no Spark,
no database) then reads all of it three ways, each ``--rounds`` times in turn:

- ``unchecked``: ``check_crcs=False`` (the baseline: what skipping the check saves);
- ``checked``: ``check_crcs=True`` with the C extension (what flowctl ships);
- ``checked-pure-python``: ``check_crcs=True`` with kafka-python's pure-Python CRC.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.crc [--records 300000]

Writes bench/results/crc.json; exits 1 if the shipped reader is below 0.9x the
unchecked one (the check must cost little) or the C extension is not in use.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator

from bench._common import platform_up, produce, random_lines, read_loop, unique_name
from bench._experiment import experiment_parser, ratio, run_experiment, write_result

#: The shipped reader keeps at least this share of the unchecked reader's records/s.
TARGET = 0.9


@contextlib.contextmanager
def pure_python_crc() -> Iterator[None]:
    """kafka-python's batches checksum with its pure-Python CRC-32C inside this block."""
    from kafka.record import _crc32c, default_records

    saved = default_records.calc_crc32c
    default_records.calc_crc32c = _crc32c.crc
    try:
        yield
    finally:
        default_records.calc_crc32c = saved


def c_extension_in_use() -> bool:
    from kafka.record import util

    return util._crc32c is not util.crc32c_py


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="reads of each kind, interleaved")
    return p


def _run(args: argparse.Namespace) -> int:

    rates: dict[str, list[float]] = {"unchecked": [], "checked": [], "checked-pure-python": []}
    with platform_up() as plat:
        topic = unique_name("crc") + ".eden"
        produced = produce(plat, topic, args.partitions, random_lines(args.records, args.seed))
        for _ in range(args.rounds):
            rates["unchecked"].append(read_loop(plat.bootstrap, topic, produced, False))
            rates["checked"].append(read_loop(plat.bootstrap, topic, produced, True))
            with pure_python_crc():
                rates["checked-pure-python"].append(
                    read_loop(plat.bootstrap, topic, produced, True)
                )
            print({k: round(v[-1]) for k, v in rates.items()}, flush=True)

    median = {k: round(statistics.median(v)) for k, v in rates.items()}
    shipped = ratio(median["checked"], median["unchecked"])
    extension = c_extension_in_use()
    meets = extension and shipped is not None and shipped >= TARGET
    write_result(
        "crc",
        {
            "metric": "records/s of a kafka-python read loop (median of rounds)",
            "unit": "records/s",
            "candidate": "check_crcs=True with the crc32c C extension (shipped)",
            "baseline": "check_crcs=False",
            "candidate_value": median["checked"],
            "baseline_value": median["unchecked"],
            "ratio": shipped,
            "pure_python_value": median["checked-pure-python"],
            "pure_python_ratio": ratio(median["checked-pure-python"], median["unchecked"]),
            "c_extension_in_use": extension,
            "target": f"checked >= {TARGET}x unchecked, with the C extension",
            "meets_target": meets,
            "params": vars(args),
            "rounds": rates,
        },
    )
    print("| reader | records/s | vs unchecked |")
    for kind, value in median.items():
        print(f"| {kind} | {value} | {ratio(value, median['unchecked'])} |")
    return 0 if meets else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
