"""MemcachedStore against a real memcached: the Store contract the MRWQ relies on."""

from __future__ import annotations

import pickle
import secrets
from unittest import mock

import pytest
from pymemcache.exceptions import MemcacheUnexpectedCloseError

from flowctl.adapters.memcached_store import (
    LaneFeedback,
    MemcachedStore,
    MemcachedUnavailable,
    wire_key,
)
from flowctl.core.backoff import FlumeBackoff
from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushPolicy, MrwqFlusher
from flowctl.core.persistence import MrwqWriter, QueueItem
from flowctl.services.ports import free_port

pytestmark = [pytest.mark.integration]


@pytest.fixture
def store(memcached_address: str) -> MemcachedStore:
    # A fresh prefix per test: the session's memcached is shared by every test.
    return MemcachedStore(memcached_address, prefix=f"t{secrets.token_hex(4)}:")


def test_incr_counts_and_never_creates(store: MemcachedStore) -> None:
    assert store.incr("ctr", 1) is None
    assert store.get_many(["ctr"]) == {}
    assert store.add("ctr", b"0") is True
    assert store.incr("ctr", 5) == 5
    assert store.incr("ctr", 0) == 5
    assert store.incr("ctr", 2) == 7
    with pytest.raises(ValueError, match=r"incr delta must be an int >= 0, got -1"):
        store.incr("ctr", -1)


def test_add_only_when_absent(store: MemcachedStore) -> None:
    assert store.add("k", b"first") is True
    assert store.add("k", b"second") is False
    assert store.get_many(["k"]) == {"k": b"first"}


def test_set_get_delete_many(store: MemcachedStore) -> None:
    assert store.set_many({"a": b"1", "b": b'{"x":2}', "c": b""}) == []
    assert store.get_many(["a", "b", "c", "missing"]) == {"a": b"1", "b": b'{"x":2}', "c": b""}
    store.delete_many(["a", "missing"])
    assert store.get_many(["a", "b"]) == {"b": b'{"x":2}'}
    assert store.get_many([]) == {}
    store.delete_many([])


def test_set_many_reports_keys_the_server_refused(store: MemcachedStore) -> None:
    too_big = b"x" * (2 * 1024 * 1024)  # over memcached's default 1 MiB item limit
    failed = store.set_many({"small": b"ok", "big": too_big})
    assert failed == ["big"]
    assert store.get_many(["small", "big"]) == {"small": b"ok"}


def test_unsafe_and_long_keys_are_hashed_consistently(store: MemcachedStore) -> None:
    long_key = "topic:" + "p" * 400
    odd = "key with spaces\tand\ncontrol é"
    assert store.set_many({long_key: b"L", odd: b"O"}) == []
    assert store.get_many([long_key, odd]) == {long_key: b"L", odd: b"O"}
    assert len(wire_key(store.prefix, long_key)) <= 250
    assert wire_key(store.prefix, "plain:key") == store.prefix + "plain:key"
    other = MemcachedStore(store.address, prefix=store.prefix)
    assert other.get_many([long_key]) == {long_key: b"L"}


def test_values_must_be_bytes(store: MemcachedStore) -> None:
    with pytest.raises(ValueError, match=r"value of memcached key 'k' must be bytes, got str"):
        store.set_many({"k": "text"})  # type: ignore[dict-item]


def test_pickles_without_a_socket_and_works_after(store: MemcachedStore) -> None:
    store.set_many({"before": b"1"})
    clone = pickle.loads(pickle.dumps(store))
    assert clone._client is None
    assert clone.get_many(["before"]) == {"before": b"1"}


def test_init_opens_no_socket_and_rejects_bad_addresses() -> None:
    store = MemcachedStore(f"127.0.0.1:{free_port()}")
    assert store._client is None
    with pytest.raises(ValueError, match=r"memcached address must be 'host:port', got 'nohost'"):
        MemcachedStore("nohost")
    with pytest.raises(ValueError, match=r"timeout_s must be a number > 0, got 0"):
        MemcachedStore("127.0.0.1:1", timeout_s=0)


def test_unreachable_server_is_retried_then_named() -> None:
    waits: list[float] = []
    address = f"127.0.0.1:{free_port()}"
    store = MemcachedStore(
        address, retry_policy=FlumeBackoff(0.1, 0.4, max_attempts=3), sleep=waits.append
    )
    with pytest.raises(
        MemcachedUnavailable, match=rf"memcached at {address}: get_many .*4 attempt"
    ):
        store.get_many(["k"])
    assert waits == [0.1, 0.2, 0.4]
    waits.clear()
    with pytest.raises(MemcachedUnavailable, match=rf"memcached at {address}: incr 'tail' by 1"):
        store.incr("tail", 1)  # refused before sending: safe to retry
    assert waits == [0.1, 0.2, 0.4]


def test_incr_is_not_retried_once_the_request_may_have_left(store: MemcachedStore) -> None:
    # A connection dropped mid-reply cannot be produced on demand by a real server: the
    # client call is replaced for this error path only.
    store.add("ctr", b"0")
    waits: list[float] = []
    store._sleep = waits.append
    client = store._get_client()
    with (
        mock.patch.object(client, "incr", side_effect=MemcacheUnexpectedCloseError()),
        pytest.raises(MemcachedUnavailable, match=r"incr 'ctr' by 1 failed and is not safe"),
    ):
        store.incr("ctr", 1)
    assert waits == []
    assert store.incr("ctr", 0) == 0  # reconnects after the drop


def test_mrwq_round_trip_through_the_real_store(store: MemcachedStore) -> None:
    writer = MrwqWriter(store, "mrwq.test")
    written: list[QueueItem] = []

    class Sink:
        def write_batch(self, items):  # type: ignore[no-untyped-def]
            written.extend(items)

    flusher = MrwqFlusher(
        store, Sink(), "mrwq.test", policy=FlushPolicy(2, 10.0), clock=FakeClock()
    )
    assert flusher.open() is None
    assert writer.append_many([("t:0:0-2", [("applied", {"a": 1})])]) == range(1, 2)
    assert writer.append_many([("t:0:2-4", [("applied", {"b": 2})])]) == range(2, 3)
    result = flusher.poll()
    assert result is not None and result.trigger == "length"
    assert result.durable_tuple_ids == ("t:0:0-2", "t:0:2-4")
    assert [item.value for item in written] == [{"a": 1}, {"b": 2}]
    assert flusher.length() == 0


def test_lane_feedback_round_trip(store: MemcachedStore) -> None:
    feedback = LaneFeedback(store, "wc.blue")
    feedback.put(7, 0, {"acked": ["t:0:0-10"], "rt": {"t:0:0-10": 0.12}})
    feedback.put(7, 2, {"acked": [], "failed": ["t:0:10-20"]})
    assert feedback.collect(7, [0, 1, 2]) == {
        0: {"acked": ["t:0:0-10"], "rt": {"t:0:0-10": 0.12}},
        2: {"acked": [], "failed": ["t:0:10-20"]},
    }
    feedback.discard(7, [0, 1, 2])
    assert feedback.collect(7, [0, 1, 2]) == {}
    with pytest.raises(ValueError, match=r"lane must be an int >= 0, got -1"):
        feedback.key(7, -1)
    with pytest.raises(ValueError, match=r"not JSON-serialisable"):
        feedback.put(8, 0, {"bad": {1, 2}})
