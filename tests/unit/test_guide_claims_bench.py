"""bench/guide_claims.py's measures, by hand: the up-and-down of a curve (its oscillation on
docs/guide_claims.md) and the window means that take the training reward's sampling noise out."""

import sys
from pathlib import Path

import pytest

# bench/ by this file's place: `conftest` may name a sub-folder's conftest here (tests/unit/serve/conftest.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from guide_claims import smooth, up_and_down  # noqa: E402


@pytest.mark.parametrize("curve, expected", [
    ([0.1, 0.2, 0.4, 0.7], 0.0),  # monotone up: travels exactly its net change
    ([0.7, 0.5, 0.5, 0.1], 0.0),  # monotone down, with a flat step
    ([0.2, 0.5, 0.2], 0.6),  # one detour of height 0.3 out and back: 2 x 0.3
    ([0.2, 0.6, 0.4, 0.8], 0.4),  # travels 0.4 + 0.2 + 0.4 = 1.0, net 0.6
    ([0.3], 0.0), ([], 0.0),
])
def test_up_and_down_is_the_distance_beyond_the_net_change(curve, expected):
    assert up_and_down(curve) == pytest.approx(expected)


def test_smooth_takes_means_of_whole_windows_only():
    assert smooth([1, 3, 2, 4, 10, 0, 7], 2) == [2, 3, 5]  # the lone last value is left out
    assert smooth([1, 2], 3) == []
