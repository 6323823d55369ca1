"""The page's states and timeline of a stalled run: hung and waiting ranks have tiles, lanes and counts of their
own, the timeline spans the run to its verdict, with each rank's stall and the times its stacks were taken."""

from dataclasses import replace
from pathlib import Path

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.hangs import HUNG, WAITING
from rollcall.jobspec import JobSpec
from rollcall.page.report import render
from rollcall.page.timeline import timeline
from rollcall.ranklog import RollCall
from rollcall.runner import RunResult
from rollcall.verdict import RankState
from tests.unit.helpers import event, judged
from tests.unit.test_htmlreport import Elements

T0 = 1_764_576_000.0
SLEEP = [["run.py", 320, "_maybe_inject_fault", "time.sleep(3600)", True]]
BARRIER = [
    ["run.py", 250, "run", 'acc.barrier(f"rollcall-epoch-{epoch}")', True],
    ["/venv/torch/distributed/distributed_c10d.py", 4000, "barrier", "work.wait()", False],
]


def stalled_roll() -> RollCall:
    """2 ranks on 1 node: both start and time epoch 1; rank 1 then hangs in a sleep, rank 0 waits for it."""
    roll = RollCall()
    lines = []
    for r in (0, 1):
        lines.append(event("start", r, 2, local_rank=r, node_rank=0, time=T0 + 1))
        lines.append(event("epoch_time", r, 2, epoch=1, seconds=0.4, time=T0 + 2))
    for r, frames in ((0, BARRIER), (1, SLEEP)):
        fields = {"dump": 1, "thread": "MainThread", "main": True, "frames": frames, "time": T0 + 62}
        phase = "epoch 2 barrier" if r == 0 else "epoch 1 end"
        lines.append(event("stack", r, 2, phase=phase, stalled_s=60.0, hang_after=60.0, **fields))
    parser = roll.parser("node-0")
    parser.feed(("\n".join(lines) + "\n").encode())
    parser.close()
    return roll


def stalled_attempt(tmp_path: Path):
    spec = JobSpec("stalled", 1, 2, accelerator="cpu")
    attempt = judged(stalled_roll(), spec, JobStatus(JobState.STOPPED, "hang"), tmp_path, 70.0)
    return replace(attempt, started_at=T0, judged_at=T0 + 70)


def test_hung_and_waiting_ranks_have_states_of_their_own_and_did_not_answer(tmp_path):
    verdict = stalled_attempt(tmp_path).verdict
    assert {p.kind for p in verdict.findings} >= {HUNG, WAITING}
    assert (verdict.ranks[0].state, verdict.ranks[1].state) == (RankState.WAITING, RankState.HUNG)
    assert verdict.answered == 0 and verdict.stalled == {"hung": 1, "waiting": 1}
    assert HUNG.rank_state is RankState.HUNG and WAITING.rank_state is RankState.WAITING
    assert not RankState.SILENT.answered and RankState.SILENT.severity > RankState.HUNG.severity


def test_the_timeline_spans_the_run_to_its_verdict_and_marks_each_stall_and_its_stacks(tmp_path):
    attempt = stalled_attempt(tmp_path)
    drawn = timeline(attempt.verdict, window=(attempt.started_at, attempt.judged_at))
    assert drawn is not None
    assert drawn["start"] == "08:00:00.000 UTC" and drawn["verdict_x"] == f"{drawn['right']:.1f}"
    rows = {row["key"]: row for row in drawn["rows"]}
    assert (rows["0"]["state"], rows["1"]["state"]) == ("waiting", "hung")
    for key, what in (("0", "rank 0 waiting in barrier (epoch 2 barrier)"), ("1", "rank 1 hung in a sleep")):
        (stall,) = [m for m in rows[key]["marks"] if m["cls"] == "stalled"]
        assert stall["title"].startswith("stalled from +2.00 s to the verdict at +70.00 s: ")
        assert what in stall["title"]
        assert float(stall["x0"]) < float(stall["x"]) == float(drawn["right"])
        (stack,) = [m for m in rows[key]["marks"] if m["cls"] == "stack"]
        assert "stacks 1 at +62.00 s" in stack["title"]
    assert {"stack", "stalled"} <= set(drawn["events"])
    folded = timeline(attempt.verdict, window=(attempt.started_at, attempt.judged_at), per_rank_max=1)
    assert folded is not None and [m["cls"] for m in folded["rows"][0]["marks"]].count("stalled") == 1


def test_every_report_shows_the_hung_and_waiting_ranks_as_such(tmp_path):
    attempt = stalled_attempt(tmp_path)
    record = reports.TestRecord("t.py::test_stalled", RunResult("local", [attempt]), "cpu")
    page = render([record], {"backend": "local"}, tmp_path)
    cells = {rank: state for rank, _, state, _ in Elements(page).ranks()}
    assert cells == {0: "waiting", 1: "hung"}
    assert 'class="lane hung' in page and 'class="lane waiting' in page and 'class="verdict"' in page
    assert '<span class="rank hung swatch" aria-hidden="true"></span> hung: 1 rank' in page
    assert '<span class="rank waiting swatch" aria-hidden="true"></span> waiting: 1 rank' in page
    test = record.as_dict()
    assert test["rank_states"] == {"0": "waiting", "1": "hung"}
    assert test["ranks_stalled"] == {"hung": 1, "waiting": 1} and test["ranks_answered"] == 0
    (row,) = reports.summary_table([record])[1:]
    assert "0/2 (1 hung) (1 waiting)" in row


def test_an_ending_recorded_to_the_second_is_drawn_after_the_error_that_caused_it():
    """The API records a container's end to the second: 09:00:01 for a pod whose rank wrote its error at
    09:00:01.7. The timeline draws the end no earlier than the last thing the pod's ranks said."""
    from rollcall.evidence.endings import Termination
    from rollcall.page.timeline import endings
    from tests.unit.checks.test_errors import T0
    from tests.unit.checks.test_errors import judged as crashed

    verdict = crashed(2, 2, {1: ("RuntimeError: injected failure on rank 1", T0 + 1.7)})
    (error,) = [m.time for m in verdict.ranks[1].marks if m.event == "error"]
    pod = verdict.ranks[1].pods[0]
    second = float(int(error))  # the container's end as the API says it, cut to the second
    (by_pod,) = endings(verdict, [Termination(pod, None, None, "Error", 1, time=second)])
    (by_rank,) = endings(verdict, [Termination(pod, None, None, "Error", 1, time=second, rank=1)])
    assert by_pod.time >= error and by_rank.time >= error
    later = error + 5.0  # an end recorded after every event stays where it was recorded
    (after,) = endings(verdict, [Termination(pod, None, None, "Error", 1, time=later, rank=1)])
    assert after.time == later
