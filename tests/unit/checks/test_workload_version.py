"""The workload's version against the suite's: an image older than the suite, or of another contract, is refused."""

from __future__ import annotations

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.runview import RunView
from rollcall.checks.workload_version import WORKLOAD_VERSION as WORKLOAD_VERSION_KIND
from rollcall.checks.workload_version import workload_version
from rollcall.evidence import versions
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload.contract import CONTRACT_VERSION, WORKLOAD_VERSION
from tests.unit.helpers import event, node_log, roll_of

OURS = {"workload_version": WORKLOAD_VERSION, "contract_version": CONTRACT_VERSION}


def _older(version: str) -> str:
    parts = [int(p) for p in version.split(".")]
    i = max(i for i, p in enumerate(parts) if p > 0)
    parts[i] -= 1
    return ".".join(map(str, parts))


def _newer(version: str) -> str:
    parts = [int(p) for p in version.split(".")]
    parts[-1] += 1
    return ".".join(map(str, parts))


def test_the_suites_own_workload_and_a_newer_one_of_the_same_contract_are_accepted():
    assert versions.refused(OURS) is None
    assert versions.refused({**OURS, "workload_version": _newer(WORKLOAD_VERSION)}) is None
    short = ".".join(WORKLOAD_VERSION.split(".")[:2]) if WORKLOAD_VERSION.endswith(".0") else None
    if short:  # 0.2 is 0.2.0
        assert versions.refused({**OURS, "workload_version": short}) is None


def test_a_newer_contract_is_named_newer_and_a_refused_image_is_not_tried_again(tmp_path):
    from rollcall.jobspec import JobSpec
    from rollcall.runner import retriable
    from tests.unit.helpers import judged

    roll = _roll({0: {**OURS, "contract_version": CONTRACT_VERSION + 1}})
    mismatch = versions.version_mismatch(roll.ranks)
    assert mismatch is not None and "the image is newer than the suite" in mismatch.message
    attempt = judged(roll, JobSpec("job-abc123", 1, 1), JobStatus(JobState.FAILED, "ended at its start"))
    assert not retriable(attempt)


@pytest.mark.parametrize(
    ("start", "said"),
    [
        ({}, (None, 1)),  # a workload from before versions were stated
        ({"workload_version": _older(WORKLOAD_VERSION), "contract_version": CONTRACT_VERSION},
         (_older(WORKLOAD_VERSION), CONTRACT_VERSION)),
        ({**OURS, "contract_version": CONTRACT_VERSION + 1}, (WORKLOAD_VERSION, CONTRACT_VERSION + 1)),
        ({**OURS, "workload_version": "main"}, ("main", CONTRACT_VERSION)),
        ({**OURS, "contract_version": "2"}, (WORKLOAD_VERSION, 1)),
    ],
)  # fmt: skip
def test_an_older_workload_or_another_contract_is_refused(start, said):
    assert versions.refused(start) == said


def _roll(starts: dict[int, dict[str, object]]) -> RollCall:
    roll = RollCall()
    p = roll.parser("pod-0")
    for rank, fields in starts.items():
        line = event("start", rank, len(starts), local_rank=rank, node_rank=0)
        if fields is not None:  # replace the helper's versions with the test's
            import json

            obj = json.loads(line.removeprefix("ROLLCALL "))
            for key in ("workload_version", "contract_version"):
                obj.pop(key)
            obj.update(fields)
            line = "ROLLCALL " + json.dumps(obj)
        p.feed((line + "\n").encode())
    p.close()
    return roll


def test_the_job_ends_at_the_first_refused_start_naming_both_versions():
    roll = _roll({0: OURS, 1: {}})
    reason = versions.stop_reason(roll.ranks)
    assert reason == (
        "rank(s) 1 run a workload from before versions were stated (rank-log contract 1), this suite reads "
        f"workload {WORKLOAD_VERSION} (contract {CONTRACT_VERSION}): the image is older than the suite; rebuild "
        "it from this suite's checkout (images/bert-training) or run the suite of the image's version: ended at "
        "its start"
    )
    assert versions.stop_reason(_roll({0: OURS, 1: OURS}).ranks) is None


def test_the_judge_names_the_version_first_and_the_ranks_failed():
    old = _older(WORKLOAD_VERSION)
    roll = _roll({r: {"workload_version": old, "contract_version": CONTRACT_VERSION} for r in range(2)})
    v = judge(Observed(roll, Layout(1, 2), JobStatus(JobState.FAILED, "ended at its start")))
    first = v.findings[0]
    assert first.kind is WORKLOAD_VERSION_KIND and sorted(first.ranks) == [0, 1]
    assert f"run workload {old} (rank-log contract {CONTRACT_VERSION})" in first.message
    assert f"this suite reads workload {WORKLOAD_VERSION}" in first.message
    assert all(any(p.kind is WORKLOAD_VERSION_KIND for p in r.problems) for r in v.ranks.values())


def test_a_sound_run_of_the_suites_workload_has_no_version_finding():
    roll = RollCall()
    for node in range(2):
        p = roll.parser(f"pod-{node}")
        p.feed(node_log(node, 2, 1).encode())
        p.close()
    v = judge(Observed(roll, Layout(2, 1), JobStatus(JobState.SUCCEEDED)))
    assert v.passed and not [p for p in v.findings if p.kind is WORKLOAD_VERSION_KIND]


def test_the_predicate_names_the_ranks_of_an_older_workload_and_nothing_of_the_suites_own():
    old = _older(WORKLOAD_VERSION)
    lines = [
        event("start", 0, 2, local_rank=0, node_rank=0),
        event("start", 1, 2, local_rank=1, node_rank=0, workload_version=old),
    ]
    run = RunView(Observed(roll_of("\n".join(lines) + "\n"), Layout(1, 2)), Criteria())
    [problem] = list(workload_version(run))
    assert problem.kind is WORKLOAD_VERSION_KIND and set(problem.ranks) == {1}
    assert old in problem.message and WORKLOAD_VERSION in problem.message
    assert "older than the suite" in problem.ranks[1]
    sound = RunView(Observed(roll_of(node_log(0, 1, 2)), Layout(1, 2)), Criteria())
    assert list(workload_version(sound)) == []
