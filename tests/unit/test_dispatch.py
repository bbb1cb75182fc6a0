"""Dispatch policies: an unknown name is refused with the known ones (the policies'
choices are tested through the spout, tests/unit/test_spout.py)."""

from __future__ import annotations

import pytest

from flowctl.core.dispatch import make_policy


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="unknown name 'fastest'; choose one of least_loaded, round"
    ):
        make_policy("fastest")
