"""Settings and command lines: a bad ``FLOWCTL_*`` value is a ConfigError naming the variable and
the value; ``flowctl`` exits 2 naming a bad argument (argparse) or 1 with one
``flowctl: error:`` line for a bad value, never with a traceback; the stream job's parser
refuses bad ``--parallelism``, ``--colour`` and ``--poll-seconds``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl import cli
from flowctl.config import ConfigError, Settings
from flowctl.core.validation import COMPRESSION_CODECS
from flowctl.ingest import MAX_SYNTHETIC_LINES
from flowctl.pipelines.config import PIPELINES_DIR
from flowctl.services import manager
from flowctl.spark import job

PROPERTY = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

INT_VARIABLES = {
    "FLOWCTL_KAFKA_PORT": (1, 65535),
    "FLOWCTL_S3_PORT": (1, 65535),
    "FLOWCTL_MEMCACHED_PORT": (1, 65535),
    "FLOWCTL_AIRFLOW_PORT": (1, 65535),
    "FLOWCTL_MEMCACHED_MEMORY_MB": (16, 65536),
}
env_text = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**20), 2**20).map(str),
    st.sampled_from(["0", "65536", "1e3", "0x10", " 80", "memory", "s3", "S3", "nan"]),
)
argv_text = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**40), 2**40).map(str),
    st.sampled_from(["0", "-1", "1.5", "nan", "inf", "-inf", "1e3", "", " ", "blue ", "GREEN"]),
)


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# --- Settings.from_env ------------------------------------------------------------------------


@PROPERTY
@given(name=st.sampled_from(sorted(INT_VARIABLES)), raw=env_text)
def test_an_integer_setting_is_in_range_or_a_config_error_naming_variable_and_value(
    name: str, raw: str
) -> None:
    lo, hi = INT_VARIABLES[name]
    try:
        Settings.from_env({name: raw})
    except ConfigError as exc:
        message = str(exc)
        assert name in message, message
        number = _integer(raw)
        assert repr(raw) in message or f"{name}={number}" in message, message
        assert raw != "" and (number is None or not lo <= number <= hi)
    else:
        number = _integer(raw)
        assert raw == "" or (number is not None and lo <= number <= hi)


@PROPERTY
@given(raw=env_text)
def test_tansu_storage_is_memory_or_s3_or_a_config_error_naming_variable_and_value(
    raw: str,
) -> None:
    try:
        settings_ = Settings.from_env({"FLOWCTL_TANSU_STORAGE": raw})
    except ConfigError as exc:
        assert "FLOWCTL_TANSU_STORAGE" in str(exc) and repr(raw) in str(exc)
    else:
        assert settings_.tansu_storage in ("memory", "s3")


@PROPERTY
@given(raw=st.text(max_size=12))
def test_a_home_that_cannot_be_a_path_is_a_config_error_naming_variable_and_value(
    raw: str,
) -> None:
    try:
        settings_ = Settings.from_env({"FLOWCTL_HOME": raw})
    except ConfigError as exc:
        assert "FLOWCTL_HOME" in str(exc) and repr(raw) in str(exc)
    else:
        assert settings_.home.is_absolute()


# --- flowctl ... ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("home"))


def _exits_2_naming(capsys: pytest.CaptureFixture[str], argv: list[str], *names: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, (argv, err)
    assert "Traceback" not in err and err.startswith("usage: flowctl"), err
    for name in names:
        assert name in err, (name, err)
    return err


def _fails_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], *shown: str) -> str:
    capsys.readouterr()
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 1, (argv, err)
    assert err.startswith("flowctl: error: ") and err.count("\n") == 1, err
    for text in shown:
        assert text in err, (text, err)
    return err


@PROPERTY
@given(action=st.sampled_from(["up", "down", "status"]), value=argv_text)
def test_services_only_with_an_unknown_service_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], home: str, action: str, value: str
) -> None:
    if value in manager.NAMES:
        return
    argv = ["services", action, f"--home={home}", f"--only={value}"]
    _exits_2_naming(capsys, argv, "--only", repr(value))


@PROPERTY
@given(
    flag=st.sampled_from(["--kafka-port", "--memcached-port"]),
    value=argv_text,
    nested=st.booleans(),
)
def test_a_bad_port_exits_2_naming_the_flag_and_value(
    capsys: pytest.CaptureFixture[str], home: str, flag: str, value: str, nested: bool
) -> None:
    number = _integer(value)
    if number is not None and 1 <= number <= 65535:
        return
    command = ["services", "status"]
    argv = (
        [*command, f"--home={home}", f"{flag}={value}"]
        if nested
        else [f"{flag}={value}", f"--home={home}", *command]
    )
    err = _exits_2_naming(capsys, argv, flag)
    assert repr(value) in err or str(number) in err, err


@PROPERTY
@given(value=st.one_of(argv_text, st.sampled_from(["tansu", "MEMORY"])))
def test_a_bad_tansu_storage_flag_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], home: str, value: str
) -> None:
    if value in ("memory", "s3"):
        return
    _exits_2_naming(
        capsys,
        ["services", "status", f"--home={home}", f"--tansu-storage={value}"],
        "--tansu-storage",
        repr(value),
    )


@PROPERTY
@given(flag=st.sampled_from(["--lines", "--seed"]), value=argv_text)
def test_ingest_with_a_non_integer_count_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], home: str, flag: str, value: str
) -> None:
    if _integer(value) is not None:
        return
    _exits_2_naming(capsys, ["ingest", f"--home={home}", f"{flag}={value}"], flag, repr(value))


@PROPERTY
@given(value=argv_text)
def test_ingest_with_an_unknown_codec_exits_2_naming_the_flag_and_value(
    capsys: pytest.CaptureFixture[str], home: str, value: str
) -> None:
    if value.strip().lower() in COMPRESSION_CODECS:
        return
    _exits_2_naming(capsys, ["ingest", f"--home={home}", f"--compression={value}"],
                    "--compression", repr(value))  # fmt: skip


def test_an_ingest_request_with_an_unknown_codec_names_the_field_and_value() -> None:
    from flowctl.ingest import IngestRequest

    assert IngestRequest.parse(pipeline="wordcount", compression=" LZ4").compression == "lz4"
    assert IngestRequest.parse(pipeline="wordcount", compression="").compression is None
    with pytest.raises(ValueError, match=r"^compression='brotli' must be one of none, gzip"):
        IngestRequest.parse(pipeline="wordcount", compression="brotli")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['codec'\]"):
        IngestRequest.parse(pipeline="wordcount", codec="lz4")


@PROPERTY
@given(lines=st.one_of(st.integers(-(2**40), 0), st.integers(MAX_SYNTHETIC_LINES + 1, 2**62)))
def test_ingest_with_a_line_count_out_of_range_fails_with_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], home: str, lines: int
) -> None:
    _fails_with_one_line(capsys, ["ingest", f"--home={home}", f"--lines={lines}"], f"lines={lines}")


@PROPERTY
@given(name=st.text(max_size=20))
def test_ingest_from_a_file_that_is_not_there_fails_with_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], home: str, name: str
) -> None:
    path = str(Path(home) / "missing" / name)
    _fails_with_one_line(capsys, ["ingest", f"--home={home}", f"--file={path}"], repr(path))


def _not_a_pipeline(name: str) -> bool:
    shipped = {p.stem for p in PIPELINES_DIR.glob("*.toml")}
    return name not in shipped and "pipelines" not in name and ".toml" not in name


@PROPERTY
@given(name=st.text(max_size=20).filter(_not_a_pipeline))
def test_ingest_into_an_unknown_pipeline_exits_2_naming_it_and_the_known_ones(
    capsys: pytest.CaptureFixture[str], home: str, name: str
) -> None:
    # Refused by argparse, before anything is produced: no broker is needed to refuse it.
    argv = ["ingest", f"--home={home}", f"--pipeline={name}", "--lines=5"]
    _exits_2_naming(capsys, argv, "--pipeline", "unknown pipeline", "logetl, wordcount")


@PROPERTY
@given(name=st.text(max_size=20).filter(_not_a_pipeline))
@pytest.mark.parametrize("command", ["list", "status", "counts"])
def test_a_stream_command_on_an_unknown_pipeline_exits_2_naming_it_and_the_known_ones(
    capsys: pytest.CaptureFixture[str], home: str, name: str, command: str
) -> None:
    argv = ["stream", command, f"--home={home}", f"--pipeline={name}"]
    _exits_2_naming(capsys, argv, "--pipeline", "unknown pipeline", "logetl, wordcount")


@PROPERTY
@given(value=argv_text)
def test_stream_counts_with_a_top_that_is_not_a_positive_integer_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], home: str, value: str
) -> None:
    number = _integer(value)
    if number is not None and number >= 1:
        return
    _exits_2_naming(
        capsys, ["stream", "counts", f"--home={home}", f"--top={value}"], "--top", repr(value)
    )


def test_ingest_with_both_lines_and_file_exits_2_naming_both(
    capsys: pytest.CaptureFixture[str], home: str
) -> None:
    _exits_2_naming(
        capsys, ["ingest", f"--home={home}", "--lines=5", "--file=x"], "--file", "--lines"
    )


@pytest.mark.parametrize("extra", [[], ["some-id", "--pipeline=wordcount"]])
def test_stream_stop_needs_exactly_one_target(
    capsys: pytest.CaptureFixture[str], home: str, extra: list[str]
) -> None:
    _fails_with_one_line(capsys, ["stream", "stop", f"--home={home}", *extra], "--pipeline")


@pytest.mark.parametrize(
    "argv", [[], ["nosuch"], ["services"], ["services", "restart"], ["stream"], ["ingest", "x"]]
)
def test_a_missing_or_unknown_command_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    _exits_2_naming(capsys, argv)


# --- the stream job's arguments ---------------------------------------------------------------


def _job_exits_2_naming(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        job.parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err and flag in err, err
    return err


@PROPERTY
@given(value=argv_text)
def test_job_parallelism_is_a_positive_integer_or_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # The DAGs' rule: a power of two within the config's bounds (wordcount: 1..16).
    number = _integer(value)
    if number in (1, 2, 4, 8, 16):
        assert job.parse_args([f"--parallelism={value}"]).parallelism == number
        return
    err = _job_exits_2_naming(capsys, [f"--parallelism={value}"], "--parallelism")
    if number is not None and number >= 1:
        assert f"--parallelism={number} is not allowed" in err and "[1, 2, 4, 8, 16]" in err, err
    else:
        assert repr(value) in err, err


@PROPERTY
@given(value=argv_text)
def test_job_colour_is_blue_or_green_or_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    if value in job.COLOURS:
        assert job.parse_args([f"--colour={value}"]).colour == value
        return
    err = _job_exits_2_naming(capsys, [f"--colour={value}"], "--colour")
    assert repr(value) in err, err


@PROPERTY
@given(value=st.one_of(argv_text, st.floats().map(repr)))
def test_job_poll_seconds_is_a_finite_positive_number_or_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number > 0:
        assert job.parse_args([f"--poll-seconds={value}"]).poll_seconds == number
        return
    err = _job_exits_2_naming(capsys, [f"--poll-seconds={value}"], "--poll-seconds")
    assert repr(value) in err, err
