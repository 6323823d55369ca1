"""A state counts only once it has held (rollcall.backends.held)."""

import pytest

from rollcall.backends import held
from rollcall.backends.held import Held, Holding, has_held


def test_a_state_counts_only_once_held_past_its_bound():
    seen: Held[str] = Held(bound_s=10.0)
    first = seen.see("n1", "Unknown", 100.0)
    assert first == Holding("Unknown", 100.0, 0.0, 10.0, 1)
    assert not first.counts
    assert not seen.see("n1", "Unknown", 109.9).counts
    late = seen.see("n1", "Unknown", 110.0)
    assert late.counts and late.since == 100.0 and late.held_s == 10.0 and late.looks == 3
    assert late.line() == "Unknown for 10s (counts past 10s)"


def test_one_look_never_counts_even_with_no_bound():
    seen: Held[str] = Held(bound_s=0.0)
    assert not seen.see("n1", "DOWN", 5.0).counts
    assert seen.see("n1", "DOWN", 5.0).counts


def test_a_state_that_changes_or_clears_starts_again():
    seen: Held[str] = Held(bound_s=10.0)
    seen.see("n1", "False", 0.0)
    changed = seen.see("n1", "Unknown", 8.0)
    assert changed.since == 8.0 and changed.held_s == 0.0
    assert not seen.see("n1", "Unknown", 15.0).counts
    assert seen.see("n1", None, 16.0) is None and seen.get("n1") is None
    again = seen.see("n1", "Unknown", 30.0)
    assert again.since == 30.0 and not again.counts


def test_each_key_holds_apart_and_a_key_not_kept_starts_again():
    seen: Held[tuple[str, int]] = Held(bound_s=5.0)
    seen.see(("a", 0), "x", 0.0)
    seen.see(("b", 1), "x", 3.0)
    assert seen.see(("a", 0), "x", 6.0).counts
    assert not seen.see(("b", 1), "x", 6.0).counts
    seen.keep([("b", 1)])
    assert set(seen.holdings()) == {("b", 1)}
    assert seen.see(("a", 0), "x", 20.0).since == 20.0


def test_a_state_may_have_a_bound_of_its_own():
    seen: Held[str] = Held(bound_s=60.0, bounds={"Unknown": 5.0})
    assert seen.bound_of("Unknown") == 5.0 and seen.bound_of("False") == 60.0
    seen.see("n", "Unknown", 0.0)
    assert seen.see("n", "Unknown", 5.0).counts
    seen.see("m", "False", 0.0)
    assert not seen.see("m", "False", 5.0).counts


def test_a_clock_that_went_back_starts_again():
    seen: Held[str] = Held(bound_s=1.0)
    seen.see("n", "x", 10.0)
    assert seen.see("n", "x", 5.0).since == 5.0


@pytest.mark.parametrize(
    ("held_s", "looks", "counts"), [(0.0, 1, False), (9.0, 5, False), (10.0, 1, False), (10.0, 2, True)]
)
def test_has_held_is_the_one_predicate(held_s, looks, counts, monkeypatch):
    holding = Holding("Unknown", 0.0, held_s, 10.0, looks)
    assert has_held(holding) is counts
    assert holding.counts is counts
    monkeypatch.setattr(held, "has_held", lambda _: True)  # a one-look bug put back reaches every caller
    assert Holding("Unknown", 0.0, 0.0, 10.0).counts
