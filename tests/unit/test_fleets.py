"""Never fail a healthy cluster: generated fleets through the suite's real decisions (``tests/sim/fleet.py``).

Hypothesis draws fleets of 2 to 64 ranks here (2,048 in the slow cases below, and up to 2,048 in
``bench/blame.py``'s 10,000 runs): nodes heard up to the start skew apart, slow launchers and imports, long
first steps, pauses in Python and in C below the hang bound, brief ``D`` states, events on GPUs no rank of the
run uses, node clocks apart and logs late; each under a wing of its own (``tests/sim/wings.py``): nodes on
their way (a Kubernetes pod pulling its image, a Slurm node importing it inside the step), a node's ``Ready``
flapping well under its bound, a stall past the hang bound that recovers before it is a hang (the ranks that
dumped write a flight record, and write another at the next stall), imports and device setup up to S + J,
an Xid on a rank's GPU a minute and more before its error. A healthy one must pass naming nobody; one with a
fault of any class must fail naming its culprit's ranks and node and no other, within the deadline its
bounds state. And each known bug of the past, put back, must make some fleet go wrong.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.sim import fleet
from tests.sim.bugs import BUGS, bug

pytestmark = pytest.mark.slow

FLEETS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FLEETS
@given(st.randoms(use_true_random=False), st.integers(2, 64), st.sampled_from(fleet.WINGS))
def test_a_healthy_but_uneven_fleet_passes_naming_nobody(
    rng: random.Random, world: int, wing: fleet.Wing
) -> None:
    plan = fleet.plan_of(rng, None, world, edge=0.5, wing=wing)
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (plan, outcome.verdict.message(), outcome.reason)


@FLEETS
@given(
    st.randoms(use_true_random=False),
    st.sampled_from(fleet.FAULTS),
    st.integers(2, 64),
    st.sampled_from(fleet.WINGS),
)
def test_a_fleet_with_one_fault_names_its_culprit_and_no_other_within_its_deadline(
    rng: random.Random, fault: fleet.Fault, world: int, wing: fleet.Wing
) -> None:
    plan = fleet.plan_of(rng, fault, world, edge=0.5, wing=wing)
    assume(not fleet.slow_setup_named(plan))  # the suite's known false name: the test below holds it
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (plan, outcome.verdict.message(), outcome.reason)


@pytest.mark.xfail(
    strict=True, reason="a rank seen, never heard, is named at S + J + m: before its join's dump"
)
def test_a_rank_slow_to_set_up_beside_a_rank_stuck_in_setup_is_not_named() -> None:
    """Rank 3 sets up for 150 s (within the S + J = 180 s its watchdog gives it), then waits in the join for
    rank 1, stuck in its setup: it says nothing until its join bound runs out (S + J + J after its start), so
    naming it at S + J + m after it was seen names a healthy rank (``fleet.slow_setup_named``)."""
    plan = fleet.plan_of(random.Random(4), "stuck_in_setup", 8, edge=0.0, wing="local")
    plan = dataclasses.replace(plan, culprit=1, rank_import=tuple(150.0 if r == 3 else 5.0 for r in range(8)))
    assert fleet.slow_setup_named(plan)
    assert fleet.wrongs(fleet.simulate(plan)) == []


@pytest.mark.parametrize("fault", [None, "hung", "never_started", "ready_lost", "never_began"])
def test_a_fleet_of_2048_ranks_is_judged_as_a_small_one(fault: fleet.Fault | None) -> None:
    plan = fleet.plan_of(random.Random(2048), fault, 2048, edge=0.5)
    outcome = fleet.simulate(plan)
    assert fleet.wrongs(outcome) == [], (outcome.verdict.message(), outcome.reason)


def _targeted(name: str) -> list[fleet.Plan]:
    """Small plans that draw what the bug ``name`` gets wrong (none: the generated ones find it)."""
    rng = random.Random(name)
    if (
        name == "once-per-process"
    ):  # a few ranks stall past their bound in step 2, recover; rank 5 holds the GIL
        gil = fleet.plan_of(rng, "gil", 16, edge=0.0, wing="local")
        return [dataclasses.replace(gil, culprit=5, recovery=(1, 2, 0.2), pauses=())]
    if name == "one-look-ready":  # node 1's Ready Unknown for 5 s, a kubelet that missed its lease
        healthy = fleet.plan_of(rng, None, 8, edge=0.0, wing="kubernetes")
        return [dataclasses.replace(healthy, flaps=((1, 30.0, 5.0, "Unknown"),))]
    if name == "slurm-arrival":  # node 1 imports its image for 300 s; node 1's task never begins
        healthy = fleet.plan_of(rng, None, 8, edge=0.0, wing="slurm")
        late = dataclasses.replace(healthy, node_start=(0.0, 300.0, *healthy.node_start[2:]))
        return [late, fleet.plan_of(rng, "never_began", 8, edge=0.0)]
    return []


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_known_bug_put_back_makes_some_fleet_go_wrong(name: str) -> None:
    """The harness catches what the predicates' old versions got wrong (see tests/sim/bugs.py): in a small
    plan that draws it, or else in some generated one."""
    targeted = _targeted(name)
    assert all(fleet.wrongs(fleet.simulate(plan)) == [] for plan in targeted)
    seen = []
    with bug(name):
        for plan in targeted:
            if wrong := fleet.wrongs(fleet.simulate(plan)):
                seen.append((plan.fault, wrong))
        for seed in range(0 if targeted else 400):
            plan = next(fleet.plans(seed, 1, start=seed))
            if plan.world > 64:
                continue
            if wrong := fleet.wrongs(fleet.simulate(plan)):
                seen.append((plan.fault, wrong))
                break
    assert len(seen) == (len(targeted) or 1), f"no fleet went wrong with the bug {name} put back: {seen}"
    assert all(fleet.wrongs(fleet.simulate(next(fleet.plans(s, 1, start=s)))) == [] for s in range(3))


def test_the_generator_draws_near_every_bound_on_both_sides():
    """Of the plans drawn, at least 5% lie within 5% of each bound inside it; of those where a part is late
    past the start skew (or a Slurm node's task past its start bound), at least 5% lie within 5% past it."""
    drawn = list(fleet.plans(7, 600))
    near = [label for plan in drawn for label in plan.near]
    for bound in ("start skew", "launcher", "rank import", "first step", "pause in python", "pause in c",
                  "setup", "start bound"):  # fmt: skip
        assert near.count(f"{bound}, inside") >= 0.05 * len(drawn), bound
    for fault, bound in (("never_started", "start skew"), ("never_began", "start bound")):
        late = [plan for plan in drawn if plan.fault == fault]
        assert sum(f"{bound}, outside" in plan.near for plan in late) >= 0.05 * len(late), fault


def test_the_generator_draws_each_shape_beside_faults_and_in_healthy_fleets():
    """Each wing, nodes on their way, Ready flaps, a recovered stall and a setup past S come in healthy plans
    and in faulty ones; an Xid well before the error in crashes."""
    drawn = list(fleet.plans(7, 600))
    for faulty in (False, True):
        tally = [name for plan in drawn if (plan.fault is not None) == faulty for name in fleet.shapes(plan)]
        for shape in ("local wing", "kubernetes wing", "slurm wing", "nodes on their way", "Ready flaps",
                      "a stall recovered", "setup past S"):  # fmt: skip
            assert tally.count(shape) >= 10, (faulty, shape)
    crashes = [plan for plan in drawn if plan.fault == "crash"]
    assert sum("an Xid well before the error" in fleet.shapes(plan) for plan in crashes) >= 5
