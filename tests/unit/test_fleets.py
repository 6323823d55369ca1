"""Never fail a healthy cluster: generated fleets through the suite's real decisions (``tests/sim/fleet.py``).

Hypothesis draws fleets of 2 to 64 ranks here (2,048 in the two slow cases below, and up to 2,048 in
``bench/blame.py``'s 10,000 runs): nodes heard up to the start skew apart, slow launchers and imports, long
first steps, pauses in Python and in C below the hang bound, brief ``D`` states, events on GPUs no rank of the
run uses, node clocks apart and logs late. A healthy one must pass naming nobody; one with a fault of any
class must fail naming its culprit's ranks and node and no other, within the deadline its bounds state. And
each known bug of the past, put back, must make some fleet go wrong.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim import fleet
from tests.sim.bugs import BUGS, bug

pytestmark = pytest.mark.slow

FLEETS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FLEETS
@given(st.randoms(use_true_random=False), st.integers(2, 64))
def test_a_healthy_but_uneven_fleet_passes_naming_nobody(rng: random.Random, world: int) -> None:
    plan = fleet.plan_of(rng, None, world, edge=0.5)
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (plan, outcome.verdict.message(), outcome.reason)


@FLEETS
@given(st.randoms(use_true_random=False), st.sampled_from(fleet.FAULTS), st.integers(2, 64))
def test_a_fleet_with_one_fault_names_its_culprit_and_no_other_within_its_deadline(
    rng: random.Random, fault: fleet.Fault, world: int
) -> None:
    plan = fleet.plan_of(rng, fault, world, edge=0.5)
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (plan, outcome.verdict.message(), outcome.reason)


@pytest.mark.parametrize("fault", [None, "hung", "never_started"])
def test_a_fleet_of_2048_ranks_is_judged_as_a_small_one(fault: fleet.Fault | None) -> None:
    plan = fleet.plan_of(random.Random(2048), fault, 2048, edge=0.5)
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (outcome.verdict.message(), outcome.reason)


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_known_bug_put_back_makes_some_fleet_go_wrong(name: str) -> None:
    """The harness catches what the predicates' old versions got wrong (see tests/sim/bugs.py)."""
    seen = []
    with bug(name):
        for seed in range(400):
            plan = next(fleet.plans(seed, 1, start=seed))
            if plan.world > 64:
                continue
            if wrong := fleet.wrongs(fleet.simulate(plan)):
                seen.append((plan.fault, wrong))
                break
    assert seen, f"no fleet went wrong with the bug {name} put back"
    assert all(fleet.wrongs(fleet.simulate(next(fleet.plans(s, 1, start=s)))) == [] for s in range(3))


def test_the_generator_draws_near_every_bound_on_both_sides():
    """Of the plans drawn, at least 5% lie within 5% of each bound inside it; of those where a part is late
    past the start skew, at least 5% lie within 5% past it."""
    drawn = list(fleet.plans(7, 600))
    near = [label for plan in drawn for label in plan.near]
    for bound in ("start skew", "launcher", "rank import", "first step", "pause in python", "pause in c"):
        assert near.count(f"{bound}, inside") >= 0.05 * len(drawn), bound
    late = [plan for plan in drawn if plan.fault == "never_started"]
    assert sum("start skew, outside" in plan.near for plan in late) >= 0.05 * len(late)
