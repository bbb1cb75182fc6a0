"""Every Kafka codec is readable, and a producer's codec is a checked setting."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from kafka import codec as kafka_codec

from bench.lib.derive import derive_config
from flowctl.adapters.kafka_produce import compression_type
from flowctl.core.validation import COMPRESSION_CODECS, DEFAULT_COMPRESSION, InvalidValue
from flowctl.core.validation import compression as valid_compression
from flowctl.pipelines.base import Record
from flowctl.pipelines.config import PipelineConfigError, load_pipeline_config


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_finds_the_library_of_every_codec(codec: str) -> None:
    """Without it a batch another producer wrote with that codec cannot be read: the
    planner fails with UnsupportedCodecError and the topology stalls."""
    assert getattr(kafka_codec, f"has_{codec}")(), f"kafka.codec.has_{codec}() is False"


def test_every_codec_round_trips_through_kafka_python() -> None:
    data = b"the quick brown fox " * 200
    pairs = {
        "gzip": (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
        "snappy": (kafka_codec.snappy_encode, kafka_codec.snappy_decode),
        "lz4": (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
        "zstd": (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
    }
    assert set(pairs) | {"none"} == set(COMPRESSION_CODECS)
    for codec, (encode, decode) in pairs.items():
        packed = encode(data)
        assert len(packed) < len(data), codec
        assert decode(packed) == data, codec


def test_a_codec_name_is_checked_naming_the_field_and_the_value() -> None:
    assert [compression_type(c) for c in COMPRESSION_CODECS] == [
        None,
        "gzip",
        "snappy",
        "lz4",
        "zstd",
    ]
    assert valid_compression("compression", " LZ4 ") == "lz4"
    for bad in ("brotli", "", None, 4):
        with pytest.raises(InvalidValue, match=r"^compression=.* must be one of none, gzip"):
            compression_type(bad)
    assert DEFAULT_COMPRESSION in COMPRESSION_CODECS


def test_a_pipeline_config_names_its_producers_codec(tmp_path: Path) -> None:
    assert load_pipeline_config("wordcount").compression == DEFAULT_COMPRESSION
    good = derive_config(
        tmp_path, "zipped", shipped="wordcount", sections={"topics": {"compression": "zstd"}}
    )
    assert load_pipeline_config(good).compression == "zstd"
    bad = derive_config(
        tmp_path, "badzip", shipped="wordcount", sections={"topics": {"compression": "brotli"}}
    )
    with pytest.raises(PipelineConfigError, match=r"topics.compression='brotli' must be one of"):
        load_pipeline_config(bad)


def test_a_record_keeps_key_and_headers_and_pickles() -> None:
    record = Record("t", 1, 7, 123, None, b"k", (("a", b"1"), ("a", None)))
    assert pickle.loads(pickle.dumps(record)) == record
    assert Record("t", 1, 7, 123, b"v").headers == ()
