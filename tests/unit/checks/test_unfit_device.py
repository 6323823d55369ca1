"""The unfit_device check: no device may break a fitness rule (ECC, row remapping, PCIe, clocks, power...)."""

import pytest

from rollcall.checks.runview import RunView
from rollcall.checks.unfit_device import UNFIT_DEVICE, unfit_device
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.test_fitness import UNHEALTHY, facts_of, fake_nvml, roll_with, verdict_of


@pytest.mark.parametrize("rule", sorted(UNHEALTHY))
def test_an_unfit_device_fails_the_run_naming_node_device_uuid_serial_and_fact(rule):
    over, fact = UNHEALTHY[rule]
    healthy = facts_of(fake_nvml(index=0, uuid="GPU-good", serial="111"))
    bad = facts_of(fake_nvml(**over))
    # ecc_aggregate and power_limit warn by default: held to failing here, as --fitness-fail does
    verdict = verdict_of(roll_with({0: healthy, 1: bad}), fitness=FitnessPolicy(fail=frozenset({rule})))
    assert not verdict.passed
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    for named in ("node 1", "GPU 3", "UUID GPU-5f0c3e2a-0000-1111-2222-333344445555", "serial 1654123456789"):
        assert named in problem.message
    assert fact in problem.message and f"rule {rule}" in problem.message
    assert set(problem.ranks) == {1}
    assert verdict.unfit_nodes == ["n1"]
    assert [n["verdict"] for n in verdict.node_verdicts()] == ["fit", "unfit"]


@pytest.mark.parametrize("rule", ["ecc_aggregate", "power_limit"])
def test_ecc_aggregate_and_power_limit_warn_by_default_and_take_nothing_out(rule):
    over, fact = UNHEALTHY[rule]
    healthy = facts_of(fake_nvml(index=0, uuid="GPU-good", serial="111"))
    verdict = verdict_of(roll_with({0: healthy, 1: facts_of(fake_nvml(**over))}))
    assert verdict.passed and verdict.of_kind(UNFIT_DEVICE) == []
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and warning.warning and f"rule {rule}" in warning.message
    assert fact in warning.message and "(warning)" in warning.message
    [unfit] = verdict.unfit
    assert (unfit.rule, unfit.severity, unfit.out) == (rule, "warn", None)
    assert verdict.unfit_nodes == [] and verdict.out_of_service() == {}
    assert [n["verdict"] for n in verdict.node_verdicts()] == ["fit", "fit"]


def test_healthy_devices_pass_every_rule():
    verdict = verdict_of(roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())}))
    assert verdict.passed and verdict.warnings == () and verdict.unfit == []


def test_a_rule_made_a_warning_is_reported_and_fails_nothing_and_one_off_is_not_applied():
    bad = facts_of(fake_nvml(width=8, remapped=(0, 1, 1, 0)))
    roll = roll_with({0: bad, 1: facts_of(fake_nvml())})
    warned = verdict_of(roll, fitness=FitnessPolicy(warn=frozenset({"pcie_width", "remapped_pending"})))
    assert warned.passed and warned.unfit_nodes == []
    [warning] = warned.warnings
    assert warning.kind is UNFIT_DEVICE and "pcie_width=8" in warning.message
    assert "remapped_pending=True" in warning.message and "(warning)" in warning.message
    assert "warning: unfit device" in warned.message()
    off = verdict_of(
        roll, fitness=FitnessPolicy(warn=frozenset({"remapped_pending"}), off=frozenset({"pcie_width"}))
    )
    assert off.passed and "pcie_width" not in off.warnings[0].message


def test_the_predicate_names_the_unfit_device_and_its_rule_and_nothing_of_healthy_ones():
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml(width=8))})
    [problem] = list(unfit_device(RunView(Observed(roll, Layout(2, 1)), Criteria())))
    assert problem.kind is UNFIT_DEVICE and not problem.warning
    assert problem.ranks == {1: "unfit device: pcie_width"}
    assert problem.message.startswith("unfit device: ") and "node 1" in problem.message
    assert "pcie_width=8" in problem.message and "(rule pcie_width)" in problem.message
    warned = Criteria(fitness=FitnessPolicy(warn=frozenset({"pcie_width"})))
    [warning] = list(unfit_device(RunView(Observed(roll, Layout(2, 1)), warned)))
    assert warning.warning and warning.message.startswith("unfit device (warning): ")
    healthy = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    assert list(unfit_device(RunView(Observed(healthy, Layout(2, 1)), Criteria()))) == []


@pytest.mark.parametrize(
    ("floor", "warn", "fails"),
    [(None, frozenset(), False), (0.70, frozenset(), False), (0.80, frozenset(), True),
     (0.80, frozenset({"power_limit"}), False)],
)  # fmt: skip
def test_an_administrators_power_cap_is_reported_and_fails_only_below_the_floor_the_user_set(
    floor, warn, fails
):
    """500 W of a 700 W default (71%): a warning, unless the user set a floor above it (--power-floor)."""
    capped = facts_of(fake_nvml(power=500_000))
    floors = {"power_limit": floor} if floor is not None else {}
    verdict = verdict_of(
        roll_with({0: facts_of(fake_nvml()), 1: capped}), fitness=FitnessPolicy(warn=warn, floors=floors)
    )
    assert verdict.passed is not fails
    [unfit] = verdict.unfit
    assert unfit.rule == "power_limit" and unfit.device.node == 1
    assert (unfit.severity, unfit.out) == (("fail", "node") if fails else ("warn", None))
    below = floor is not None and floor > 500 / 700
    said = (
        "below the floor 80% of its power_default_w 700.0 (--power-floor)" if below else "below its default"
    )
    assert said in str(unfit), str(unfit)
    assert verdict.unfit_nodes == (["n1"] if fails else [])


def test_power_floor_is_an_option_in_percent_and_refuses_what_is_none():
    from rollcall.options import OptionError, resolve

    assert resolve({"power_floor": "90"}).judging.power_floor == 0.9
    assert resolve({"power_floor": "75%"}).judging.power_floor == 0.75
    for bad in ("0", "120", "most"):
        with pytest.raises(OptionError, match="--power-floor"):
            resolve({"power_floor": bad})
