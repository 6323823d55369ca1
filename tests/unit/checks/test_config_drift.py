"""The config_drift check: under --drift fail (warn: as a warning) the nodes agree on every version they report."""

from rollcall.checks.config_drift import CONFIG_DRIFT, config_drift
from rollcall.checks.runview import RunView
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.test_fitness import facts_of, fake_nvml, roll_with, verdict_of


def test_nodes_that_differ_in_a_version_are_named_as_a_warning_by_default():
    roll = roll_with(
        {0: {**facts_of(fake_nvml()), "torch": "2.11.0"}, 1: {**facts_of(fake_nvml()), "torch": "2.10.0"}}
    )
    warned = verdict_of(roll)
    assert warned.passed
    [warning] = warned.warnings
    assert warning.kind is CONFIG_DRIFT
    assert warning.message == "config drift: torch differs between nodes: 2.10.0 (node 1); 2.11.0 (node 0)"
    failed = verdict_of(roll, drift="fail")
    assert [p.message for p in failed.of_kind(CONFIG_DRIFT)] == [warning.message] and not failed.passed
    assert verdict_of(roll, drift="off").warnings == ()


def test_the_predicate_names_the_version_the_nodes_differ_in_and_nothing_when_they_agree():
    roll = roll_with(
        {0: {**facts_of(fake_nvml()), "torch": "2.11.0"}, 1: {**facts_of(fake_nvml()), "torch": "2.10.0"}}
    )
    [problem] = list(config_drift(RunView(Observed(roll, Layout(2, 1)), Criteria(drift="fail"))))
    assert problem.kind is CONFIG_DRIFT and not problem.warning
    assert problem.message == "config drift: torch differs between nodes: 2.10.0 (node 1); 2.11.0 (node 0)"
    [warning] = list(config_drift(RunView(Observed(roll, Layout(2, 1)), Criteria())))
    assert warning.warning and warning.message == problem.message  # warn by default
    assert list(config_drift(RunView(Observed(roll, Layout(2, 1)), Criteria(drift="off")))) == []
    same = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml())})
    assert list(config_drift(RunView(Observed(same, Layout(2, 1)), Criteria(drift="fail")))) == []
