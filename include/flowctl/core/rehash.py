"""Power-of-two rehash: which keys move when parallelism doubles or halves (SPEC E, seed 002).

Equation 5 of the paper: with capacities that are powers of two and
``index = hash & (cap - 1)``, doubling ``oldcap -> 2*oldcap`` keeps a key at ``j`` or moves
it to ``j + oldcap`` (exactly when the key's hash has the bit ``oldcap`` set), and halving
maps ``j`` to ``j & (newcap - 1)``. So a doubling moves about half the keys and a halving
moves only the keys of the upper half, instead of nearly all of them under ``hash % n``.

The platform keys lanes with :func:`stable_hash`, not ``hash()``: Python salts ``str``
hashes per process, and a key must land on the same lane in every executor and in the
blue and green topologies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "Move",
    "RehashPlan",
    "index_for",
    "is_power_of_two",
    "moved_keys",
    "shrink_index",
    "split_index",
    "stable_hash",
]

K = TypeVar("K", bound=Hashable)


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, ...; the capacities this scheme supports."""
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def _check_cap(name: str, cap: int) -> None:
    if not is_power_of_two(cap):
        raise ValueError(f"{name} must be a power of two >= 1, got {cap!r}")


def _check_hash(value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"hash must be a non-negative int, got {value!r}")


def stable_hash(key: str | bytes | int) -> int:
    """A 64-bit hash that is the same in every process (blake2b of the key's bytes)."""
    if isinstance(key, bool):
        raise TypeError(f"stable_hash: key must be str, bytes or int, got {key!r}")
    if isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, bytes):
        data = key
    elif isinstance(key, int):
        data = key.to_bytes((key.bit_length() + 8) // 8 or 1, "big", signed=True)
    else:
        raise TypeError(f"stable_hash: key must be str, bytes or int, got {type(key).__name__}")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def index_for(hash_value: int, cap: int) -> int:
    """``hash & (cap - 1)``: the lane (bucket) of a hash under capacity ``cap``."""
    _check_hash(hash_value)
    _check_cap("cap", cap)
    return hash_value & (cap - 1)


def split_index(hash_value: int, old_cap: int) -> int:
    """The index after doubling ``old_cap``: ``j`` or ``j + old_cap`` (equation 5, scale up)."""
    j = index_for(hash_value, old_cap)
    return j + old_cap if hash_value & old_cap else j


def shrink_index(j: int, new_cap: int) -> int:
    """The index after halving to ``new_cap``: ``j & (new_cap - 1)`` (equation 5, scale down)."""
    _check_cap("new_cap", new_cap)
    if isinstance(j, bool) or not isinstance(j, int) or j < 0 or j >= 2 * new_cap:
        raise ValueError(f"j must be an index in [0, {2 * new_cap - 1}], got {j!r}")
    return j & (new_cap - 1)


@dataclass(frozen=True)
class Move(Generic[K]):
    """One key changing lane: from ``old_index`` (under old_cap) to ``new_index``."""

    key: K
    old_index: int
    new_index: int


@dataclass(frozen=True)
class RehashPlan(Generic[K]):
    """The keys that change lane between two capacities, and how many stay."""

    old_cap: int
    new_cap: int
    moves: tuple[Move[K], ...]
    stayed: int

    @property
    def moved_fraction(self) -> float:
        total = len(self.moves) + self.stayed
        return len(self.moves) / total if total else 0.0


def moved_keys(
    keys: Iterable[K],
    old_cap: int,
    new_cap: int,
    hash_fn: Callable[[K], int] = stable_hash,  # type: ignore[assignment]
) -> RehashPlan[K]:
    """Which keys move from ``hash & (old_cap-1)`` to ``hash & (new_cap-1)``.

    Any two powers of two are accepted (a DS2-style decision may jump more than one
    doubling); for one doubling the moved keys are exactly those whose hash has the bit
    ``old_cap`` set, each going to ``j + old_cap``.
    """
    _check_cap("old_cap", old_cap)
    _check_cap("new_cap", new_cap)
    moves: list[Move[K]] = []
    stayed = 0
    for key in keys:
        h = hash_fn(key)
        _check_hash(h)
        old, new = h & (old_cap - 1), h & (new_cap - 1)
        if old == new:
            stayed += 1
        else:
            moves.append(Move(key, old, new))
    return RehashPlan(old_cap, new_cap, tuple(moves), stayed)
