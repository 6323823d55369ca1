"""The job_state check: a job that did not succeed is a problem of its own, naming no rank."""

from rollcall.backends import JobState, JobStatus
from rollcall.checks.job_state import JOB, job_state
from rollcall.checks.missing_events import MISSING_EVENT
from rollcall.checks.runview import RunView
from rollcall.evidence.endings import Disruption
from rollcall.judge import judge
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import two_by_two


def test_a_failed_job_comes_first_and_names_no_rank():
    status = JobStatus(JobState.FAILED, "pod x-1 (index 1) on node n1: OOMKilled")
    v = judge(Observed(two_by_two(skip={3: ("complete",)}), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [JOB, MISSING_EVENT]
    assert v.problems[0] == "job failed: pod x-1 (index 1) on node n1: OOMKilled"
    assert v.failed_ranks == {3: ["no complete"]}


def test_the_predicate_names_a_failed_job_and_no_rank_and_nothing_of_one_that_succeeded():
    status = JobStatus(JobState.FAILED, "pod x-1 (index 1) on node n1: OOMKilled")
    [problem] = list(job_state(RunView(Observed(two_by_two(), Layout(2, 2), status), Criteria())))
    assert problem.kind is JOB and problem.ranks == {} and problem.detail is status
    assert problem.message == "job failed: pod x-1 (index 1) on node n1: OOMKilled"
    for sound in (JobStatus(JobState.SUCCEEDED), None):
        assert list(job_state(RunView(Observed(two_by_two(), Layout(2, 2), sound), Criteria()))) == []
    lost = Disruption("job-0-abcde", 0, "n0", "NodeDeleted", "node n0 was deleted while the pod ran")
    disrupted = Observed(two_by_two(), Layout(2, 2), JobStatus.disrupted(lost))
    assert list(job_state(RunView(disrupted, Criteria()))) == []  # the errors check names it first
