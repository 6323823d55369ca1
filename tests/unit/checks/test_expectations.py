"""The expectations check: every node matches the golden configuration (--expect KEY=GLOB); unknown does not."""

from rollcall.checks.expectations import EXPECTATION, expectations
from rollcall.checks.runview import RunView
from rollcall.evidence.drift import parse_expect
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload.rank import facts as workload_facts
from tests.unit.test_fitness import facts_of, fake_nvml, roll_with, verdict_of


def test_expect_fails_a_node_whose_fact_does_not_match_naming_the_value_and_the_node():
    roll = roll_with({0: facts_of(fake_nvml()), 1: {**facts_of(fake_nvml()), "torch": "2.11.0+cu130"}})
    verdict = verdict_of(roll, expect=parse_expect(["torch=0.0.*", "driver=580.*"]))
    messages = [p.message for p in verdict.of_kind(EXPECTATION)]
    assert len(messages) == 2 and not verdict.passed
    assert "node 1 (n1): torch is 2.11.0+cu130, expected torch=0.0.* (--expect)" in messages[1]


def test_expect_of_a_fact_a_node_could_not_read_does_not_pass():
    cpu = {0: workload_facts.device_facts("cpu"), 1: workload_facts.device_facts("cpu")}
    verdict = verdict_of(roll_with(cpu), expect=(("driver", "580.*"),))
    assert len(verdict.of_kind(EXPECTATION)) == 2
    assert "driver unknown" in verdict.of_kind(EXPECTATION)[0].message
    nothing = verdict_of(roll_with({}), expect=(("torch", "*"),))
    assert [p.message for p in nothing.of_kind(EXPECTATION)] == [
        "--expect torch=*: no rank reported its facts"
    ]


def test_the_predicate_names_the_node_short_of_the_golden_configuration_and_nothing_of_one_that_matches():
    roll = roll_with(
        {0: {**facts_of(fake_nvml()), "torch": "2.10.0"}, 1: {**facts_of(fake_nvml()), "torch": "2.11.0"}}
    )
    expect = Criteria(expect=parse_expect(["torch=2.10.*"]))
    [problem] = list(expectations(RunView(Observed(roll, Layout(2, 1)), expect)))
    assert problem.kind is EXPECTATION and problem.message.startswith("expectation not met: node 1 (n1)")
    assert "torch is 2.11.0, expected torch=2.10.* (--expect)" in problem.message
    loose = Criteria(expect=parse_expect(["torch=2.1*"]))
    assert list(expectations(RunView(Observed(roll, Layout(2, 1)), loose))) == []
    assert list(expectations(RunView(Observed(roll, Layout(2, 1)), Criteria()))) == []  # nothing expected
