"""The memcached adapter of the delayed persistence queue (SPEC F) and of the lanes' feedback.

:class:`MemcachedStore` implements :class:`flowctl.core.persistence.Store` on pymemcache,
so the MRWQ writer (the lanes) and the flusher (the driver) share one queue in memcached,
as in the final version of seed 002's Algorithm 3. What the adapter adds to the raw client:

- **Replies, always.** pymemcache defaults to ``noreply=True`` for storage commands,
  which would turn a failed ``add`` or ``set`` into a silent loss; every call here waits
  for the server's answer.
- **Safe keys.** A logical key becomes ``<prefix><key>`` on the wire; a key that would be
  longer than memcached's 250 bytes, or holds spaces, control characters or non-ASCII,
  is replaced by a SHA-256 digest (the mapping is deterministic, so every process agrees).
- **Retries with backoff (SPEC G), then a clear error.** A connection error is retried
  under a :class:`flowctl.core.backoff.BackoffPolicy`; when the policy gives up,
  :class:`MemcachedUnavailable` names the address and the operation. ``incr`` is not
  idempotent, so it is retried only when the request cannot have reached the server
  (connection refused, name resolution): a retried ``incr`` that had in fact been applied
  would burn sequence numbers and make the flusher report a gap.
- **Picklable.** Lanes build the store on executors from a pickled reader: ``__init__``
  only stores the configuration; the socket is opened on first use and dropped on
  pickling.

:class:`LaneFeedback` is the other use of memcached in a topology
(docs/flow-control.md): each lane's ``read()`` writes its per-batch stats (acked, failed,
timed-out tuple ids, rt) as JSON under a key the planner's next ``latestOffset`` reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheServerError, MemcacheUnexpectedCloseError

from flowctl.core.backoff import BackoffPolicy, HadoopBackoff, RetryError, retry

__all__ = ["LaneFeedback", "MemcachedStore", "MemcachedUnavailable", "check_server", "wire_key"]

log = logging.getLogger(__name__)

#: memcached's key limit (bytes).
MAX_KEY_BYTES = 250
_SAFE_KEY = re.compile(rb"^[\x21-\x7e]+$")  # printable ASCII, no space, no control character
_PREFIX = re.compile(r"^[\x21-\x7e]{0,100}$")

#: Errors meaning "the server could not be talked to"; anything else is a real answer.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    MemcacheUnexpectedCloseError,
)
#: Errors raised before a request leaves this process: safe to retry even for ``incr``.
_NOT_SENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionRefusedError, socket.gaierror)


class MemcachedUnavailable(ConnectionError):
    """memcached could not be reached for an operation (after every retry) or a health check."""


def _default_policy() -> BackoffPolicy:
    # About 1.5 s of retries in all: long enough for a brief blip, short enough that a lane
    # fails its tuples (and they are replayed) instead of hanging on a dead cache.
    return HadoopBackoff(0.05, 4, cap_s=1.0)


def wire_key(prefix: str, key: str) -> str:
    """The memcached key for ``key``: ``prefix + key``, or a digest when that is unsafe.

    A digest key keeps the prefix and ``#`` + SHA-256 of the full logical key, so it is
    still grouped under the prefix and is the same in every process.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"memcached key must be a non-empty str, got {key!r}")
    raw = (prefix + key).encode("utf-8")
    if len(raw) <= MAX_KEY_BYTES and _SAFE_KEY.match(raw):
        return raw.decode("ascii")
    return f"{prefix}#{hashlib.sha256(key.encode('utf-8')).hexdigest()}"


def _parse_address(address: str) -> tuple[str, int]:
    if not isinstance(address, str):
        raise ValueError(f"memcached address must be 'host:port', got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"memcached address must be 'host:port', got {address!r}")
    return host.strip("[]"), int(port)


def check_server(address: str, timeout: float) -> None:
    """A protocol round trip (``version``) to ``address`` within ``timeout``, no retry.

    The health check of ``flowctl services``: raises :class:`MemcachedUnavailable`
    naming the address and the reason when nothing answers.
    """
    client = Client(_parse_address(address), connect_timeout=timeout, timeout=timeout)
    try:
        client.version()
    except Exception as exc:
        raise MemcachedUnavailable(
            f"no memcached answers at {address}: {exc or type(exc).__name__}"
        ) from None
    finally:
        client.close()


class MemcachedStore:
    """A :class:`flowctl.core.persistence.Store` on one memcached server.

    :param address: ``"host:port"``.
    :param timeout_s: connect and read timeout of every call (a dead server must not hang
        a lane or the flusher).
    :param retry_policy: backoff between retries of a connection error (default: Hadoop
        style, 4 retries, about 1.5 s in all).
    :param prefix: prepended to every key (e.g. to keep test runs apart).
    :param sleep: how to wait between retries (tests pass a recorder).

    Thread-safe: one client per store, used under a lock (the flusher thread and the
    driver's metrics both read the queue length).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 2.0,
        retry_policy: BackoffPolicy | None = None,
        prefix: str = "",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = address
        self._server = _parse_address(address)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        if retry_policy is not None and not isinstance(retry_policy, BackoffPolicy):
            raise ValueError(f"retry_policy must be a BackoffPolicy, got {retry_policy!r}")
        self.retry_policy = retry_policy if retry_policy is not None else _default_policy()
        if not isinstance(prefix, str) or not _PREFIX.match(prefix):
            raise ValueError(
                f"prefix must be at most 100 printable ASCII characters without spaces, "
                f"got {prefix!r}"
            )
        self.prefix = prefix
        self._sleep = sleep
        self._client: Any = None
        self._lock = threading.Lock()

    # -- pickling: configuration only, never a socket --

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemcachedStore({self.address!r}, prefix={self.prefix!r})"

    # -- plumbing --

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = Client(
                self._server,
                connect_timeout=self.timeout_s,
                timeout=self.timeout_s,
                no_delay=True,
                default_noreply=False,
            )
        return self._client

    def close(self) -> None:
        """Close the connection (the next call reopens it)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _call(
        self,
        operation: str,
        fn: Callable[[Any], Any],
        *,
        retry_on: tuple[type[BaseException], ...] = _CONNECTION_ERRORS,
    ) -> Any:
        def once() -> Any:
            with self._lock:
                client = self._get_client()
                try:
                    return fn(client)
                except Exception:
                    # Replies of a multi-key command may be left unread after an error; the
                    # next command must not parse them as its own: start a fresh connection.
                    client.close()
                    raise

        describe = f"memcached at {self.address}: {operation}"
        try:
            return retry(
                once,
                self.retry_policy,
                sleep=self._sleep,
                retry_on=retry_on,
                describe=describe,
                logger=log,
            )
        except RetryError as exc:
            raise MemcachedUnavailable(
                f"{describe} failed after {exc.attempts} attempt(s): "
                f"{type(exc.last_error).__name__}: {exc.last_error}"
            ) from exc.last_error
        except _CONNECTION_ERRORS as exc:  # not retried (incr after the request left)
            raise MemcachedUnavailable(
                f"{describe} failed and is not safe to retry: {type(exc).__name__}: {exc}"
            ) from exc

    def _key(self, key: str) -> str:
        return wire_key(self.prefix, key)

    # -- the Store protocol --

    def incr(self, key: str, delta: int) -> int | None:
        """Add ``delta`` (>= 0) to the counter; ``None`` when the key does not exist."""
        if isinstance(delta, bool) or not isinstance(delta, int) or delta < 0:
            raise ValueError(f"incr delta must be an int >= 0, got {delta!r}")
        wk = self._key(key)
        value = self._call(
            f"incr {key!r} by {delta}",
            lambda c: c.incr(wk, delta, noreply=False),
            retry_on=_NOT_SENT_ERRORS,
        )
        return None if value is None else int(value)

    def add(self, key: str, value: bytes, *, expire_s: int = 0) -> bool:
        """Store ``value`` only if ``key`` is absent; True if this call stored it.

        A retry after a lost reply may answer False for a value this call did store;
        every caller treats False as "someone's value is there", which is still true.
        """
        wk = self._key(key)
        body = _check_value(key, value)
        return bool(
            self._call(f"add {key!r}", lambda c: c.add(wk, body, expire=expire_s, noreply=False))
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The values of the keys that exist (missing keys are absent, never ``None``)."""
        if not keys:
            return {}
        by_wire = {self._key(k): k for k in keys}
        got = self._call(f"get_many of {len(by_wire)} key(s)", lambda c: c.get_many(by_wire))
        return {by_wire[_text(wk)]: bytes(v) for wk, v in got.items() if v is not None}

    def set_many(self, mapping: Mapping[str, bytes], *, expire_s: int = 0) -> list[str]:
        """Store every pair; return the (logical) keys the server did not store."""
        if not mapping:
            return []
        by_wire = {self._key(k): k for k in mapping}
        values = {self._key(k): _check_value(k, v) for k, v in mapping.items()}
        try:
            failed = self._call(
                f"set_many of {len(values)} key(s)",
                lambda c: c.set_many(values, expire=expire_s, noreply=False),
            )
        except MemcacheServerError:
            # The server refused one value outright (too large, out of memory) and pymemcache
            # stops at the first refusal: store the values one by one to know which failed.
            failed = [wk for wk, body in values.items() if not self._set_one(wk, body, expire_s)]
        return [by_wire[_text(wk)] for wk in failed]

    def _set_one(self, wk: str, body: bytes, expire_s: int) -> bool:
        try:
            return bool(
                self._call(f"set {wk!r}", lambda c: c.set(wk, body, expire=expire_s, noreply=False))
            )
        except MemcacheServerError as exc:
            log.warning(
                "memcached at %s refused %r (%d bytes): %s", self.address, wk, len(body), exc
            )
            return False

    def delete_many(self, keys: Sequence[str]) -> None:
        """Delete the keys; absent keys are not an error."""
        if not keys:
            return
        wire = [self._key(k) for k in keys]
        self._call(
            f"delete_many of {len(wire)} key(s)", lambda c: c.delete_many(wire, noreply=False)
        )

    # -- JSON conveniences (lane feedback, small state) --

    def set_json(self, key: str, value: Any, *, expire_s: int = 0) -> None:
        """Store ``value`` as compact JSON bytes; raises if the server did not store it."""
        body = _to_json(key, value)
        if self.set_many({key: body}, expire_s=expire_s):
            raise MemcachedUnavailable(
                f"memcached at {self.address}: set of {key!r} was not stored "
                f"({len(body)} bytes; the server's item size limit is usually 1 MiB)"
            )

    def get_json(self, key: str) -> Any | None:
        """The JSON value at ``key``, or ``None`` if absent."""
        raw = self.get_many([key]).get(key)
        return None if raw is None else _from_json(key, raw)


def _text(key: str | bytes) -> str:
    return key.decode("ascii") if isinstance(key, bytes) else key


def _check_value(key: str, value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ValueError(
            f"value of memcached key {key!r} must be bytes, got {type(value).__name__}"
        )
    return bytes(value)


def _to_json(key: str, value: Any) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"value of memcached key {key!r} is not JSON-serialisable: {exc}") from exc


def _from_json(key: str, raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"memcached key {key!r} holds a value that is not JSON: {exc}") from exc


#: What :class:`LaneFeedback` uses of its store (a MemcachedStore, or a test's fake).
_FEEDBACK_METHODS = ("set_json", "get_many", "delete_many")


class LaneFeedback:
    """Per-micro-batch lane stats, from the lanes' ``read()`` to the planner.

    A lane cannot return anything to the planner process directly (``read()`` runs in an
    executor, the planner in Spark's source runner), so it writes its stats to memcached
    and the planner's next ``latestOffset`` collects them: exactly one batch behind
    (docs/flow-control.md). Keys are ``<namespace>:fb:<batch_id>:<lane>``; entries expire
    after ``ttl_s`` so a planner that never collects (a crashed topology) leaves nothing
    behind for long. Nothing here is needed for correctness: a lost entry only makes the
    planner treat that lane's tuples as not yet acknowledged (they time out and replay).
    """

    def __init__(self, store: Any, namespace: str, *, ttl_s: int = 3600) -> None:
        if not all(callable(getattr(store, m, None)) for m in _FEEDBACK_METHODS):
            raise ValueError(
                f"store must have {', '.join(_FEEDBACK_METHODS)} (a MemcachedStore), got {store!r}"
            )
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty str, got {namespace!r}")
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise ValueError(f"ttl_s must be an int >= 1 (seconds), got {ttl_s!r}")
        self.store = store
        self.namespace = namespace
        self.ttl_s = ttl_s

    def key(self, batch_id: int, lane: int) -> str:
        """The memcached key of one lane's stats for one batch."""
        _check_index("batch_id", batch_id)
        _check_index("lane", lane)
        return f"{self.namespace}:fb:{batch_id}:{lane}"

    def put(self, batch_id: int, lane: int, stats: Mapping[str, Any]) -> None:
        """Write a lane's stats for a batch (a JSON object); raises if not stored."""
        if not isinstance(stats, Mapping):
            raise ValueError(f"stats of lane {lane} must be a mapping, got {stats!r}")
        self.store.set_json(self.key(batch_id, lane), dict(stats), expire_s=self.ttl_s)

    def collect(self, batch_id: int, lanes: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The stats present for ``lanes`` of ``batch_id`` (a lane still running is absent)."""
        keys = {self.key(batch_id, lane): lane for lane in lanes}
        got = self.store.get_many(list(keys))
        out: dict[int, dict[str, Any]] = {}
        for key, raw in got.items():
            value = _from_json(key, raw)
            if not isinstance(value, dict):
                raise ValueError(f"lane feedback {key!r} is not a JSON object: {value!r}")
            out[keys[key]] = value
        return out

    def discard(self, batch_id: int, lanes: Iterable[int]) -> None:
        """Delete the batch's entries once applied, so they are not applied twice."""
        self.store.delete_many([self.key(batch_id, lane) for lane in lanes])


def _check_index(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field} must be an int >= 0, got {value!r}")
