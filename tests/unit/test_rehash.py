"""SPEC E, equation 5: power-of-two rehash on doubling and halving."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.rehash import (
    index_for,
    is_power_of_two,
    moved_keys,
    shrink_index,
    split_index,
    stable_hash,
)


def identity(h: int) -> int:
    return h


def test_doubling_example_keeps_or_adds_old_cap() -> None:
    # oldcap 4: hashes 0b0001 and 0b0101 share lane 1; at 8 the one with bit 4 set moves to 5.
    assert index_for(0b0001, 4) == index_for(0b0101, 4) == 1
    assert split_index(0b0001, 4) == 1
    assert split_index(0b0101, 4) == 5
    assert index_for(0b0101, 8) == 5


def test_halving_example_masks_the_high_bit() -> None:
    assert [shrink_index(j, 4) for j in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_moved_keys_on_doubling_lists_the_moves() -> None:
    plan = moved_keys([1, 5, 6, 10, 12], 4, 8, identity)
    assert [(m.key, m.old_index, m.new_index) for m in plan.moves] == [
        (5, 1, 5),
        (6, 2, 6),
        (12, 0, 4),
    ]
    assert plan.stayed == 2
    assert plan.moved_fraction == 0.6


def test_moved_keys_on_halving_moves_only_the_upper_half() -> None:
    plan = moved_keys([1, 5, 6, 10, 12], 8, 4, identity)
    assert [(m.key, m.old_index, m.new_index) for m in plan.moves] == [
        (5, 5, 1),
        (6, 6, 2),
        (12, 4, 0),
    ]


def test_a_jump_of_two_doublings_is_supported() -> None:
    plan = moved_keys([3, 7, 11, 15], 4, 16, identity)
    assert {m.key: m.new_index for m in plan.moves} == {7: 7, 11: 11, 15: 15}


@pytest.mark.parametrize("cap", [0, 3, 6, -4])
def test_non_power_of_two_capacities_are_rejected(cap: int) -> None:
    with pytest.raises(ValueError, match=f"old_cap must be a power of two >= 1, got {cap}"):
        moved_keys([1], cap, 8, identity)


def test_negative_hash_is_rejected() -> None:
    with pytest.raises(ValueError, match="hash must be a non-negative int, got -1"):
        index_for(-1, 4)


def test_shrink_index_rejects_an_index_outside_the_old_table() -> None:
    with pytest.raises(ValueError, match=r"j must be an index in \[0, 7\], got 8"):
        shrink_index(8, 4)


def test_stable_hash_is_fixed_across_processes() -> None:
    # A pinned value: if this changes, keys would land on other lanes after a restart.
    assert stable_hash("word") == int.from_bytes(
        hashlib.blake2b(b"word", digest_size=8).digest(), "big"
    )
    assert stable_hash(b"word") == stable_hash("word")
    assert 0 <= stable_hash(-5) < 2**64


def test_is_power_of_two() -> None:
    assert [n for n in range(-2, 20) if is_power_of_two(n)] == [1, 2, 4, 8, 16]


@settings(max_examples=100)
@given(
    hashes=st.lists(st.integers(0, 2**64 - 1), max_size=200, unique=True),
    exp=st.integers(0, 12),
)
def test_doubling_moves_exactly_the_keys_whose_new_bit_is_set(hashes: list[int], exp: int) -> None:
    old = 1 << exp
    plan = moved_keys(hashes, old, old * 2, identity)
    assert {m.key for m in plan.moves} == {h for h in hashes if h & old}
    assert all(m.new_index == m.old_index + old for m in plan.moves)
    assert plan.stayed + len(plan.moves) == len(hashes)


def test_doubling_moves_about_half_of_many_keys() -> None:
    plan = moved_keys([f"key-{i}" for i in range(4000)], 8, 16)
    assert 0.45 < plan.moved_fraction < 0.55
