"""A check declares how it acts on a run, and the runner, the isolation probe and the gate read only that.

Each early stop is one judgement with its check's verdict: the runner's watch, asking every check's declared
stop over the live run, ends the job at a moment where the judge (reading the roll call as it stood then)
names that check's problem. Whether a failure is run again follows from the checks' ``retried`` and
``gate_only``; the trials of ``--isolate`` are judged by the checks that declare ``in_trials``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.collect import Collector
from rollcall.isolation.probe import TRIAL_CHECKS
from rollcall.jobspec import HangBounds, JobSpec
from rollcall.judge import (
    CHECKS,
    ORDER,
    SITE_CHECK_ERROR,
    Check,
    EarlyStop,
    RunView,
    SiteCheck,
    SiteCheckError,
    final_kinds,
    gate_kinds,
    judge,
    site_checks,
)
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, _Watch, retriable
from rollcall.verdict import Blame, Kind, Layout, Observed, Owner, Problem, RankState, Verdict
from rollcall_workload import contract
from rollcall_workload.rank.watchdog import encode_stack
from tests.unit.helpers import Clock, event, judged, two_by_two

J = 10.0  # the join bound of these runs; the start skew is twice it
SPEC = JobSpec("run", 2, 2, hang_bounds=HangBounds(join_hang_after_s=J))
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
BARRIER = [
    ["train.py", 1490, "run", 'acc.barrier(f"rollcall-epoch-{epoch}")', True],
    [C10D, 4800, "barrier", "work.wait()", False],
]
SLEEP = [["train.py", 1585, "_maybe_inject_fault", "time.sleep(3600)", True]]
JOINING = [
    ["run.py", 116, "run", "acc.init_process_group(env)", True],
    [C10D, 1520, "init_process_group", "store, rank, world_size = next(rendezvous_iterator)", False],
]


def _stack(rank: int, frames: list, phase: str = "epoch 1 end", stalled: float = 11.0) -> bytes:
    return encode_stack(
        rank, 4, frames, dump=1, thread="MainThread", main=True, phase=phase, stalled_s=stalled, hang_after=J
    )


def _silent(rank: int) -> bytes:
    return contract.encode_event(
        "silent",
        rank,
        4,
        phase="epoch 1 end",
        steps=9,
        stalled_s=21.0,
        heartbeat_s=20.0,
        hang_after=J,
        margin_s=5.0,
        pid=4242,
        state="T",
        state_name="stopped",
    )


def _launcher(node: int, state: str, waited: float) -> bytes:
    return contract.encode_event(
        "launcher",
        -1,
        -1,
        state=state,
        node_rank=node,
        node=f"n{node}",
        pid=100 + node,
        waited_s=waited,
        bound_s=J,
        process_state="S",
        process_state_name="sleeping",
        state_held_s=0.0,
    )


def _start(rank: int, **fields: object) -> bytes:
    node, local = divmod(rank, 2)
    return (
        event("start", rank, 4, local_rank=local, node_rank=node, host=f"n{node}", **fields) + "\n"
    ).encode()


ALONE = [(100.0, _launcher(0, "started", 0.0)), (110.2, _launcher(0, "waiting", 10.2))]
WAITING = [(50.0 + r, _stack(r, BARRIER)) for r in (0, 2, 3)]
JOINED = [(50.0, _stack(r, JOINING, contract.JOIN_PHASE)) for r in (0, 2, 3)]

#: Each way a check's early stop fires: the lines a live roll call read, each at its time on the suite's clock,
#: the moment the watch looks, and the kind of the verdict's first problem. Every check that declares an early
#: stop has at least one.
STOPPED: dict[str, list[tuple[str, list[tuple[float, bytes]], float, str]]] = {
    "workload_version": [
        ("a rank of another contract", [(1.0, _start(0)), (1.1, _start(1, contract_version=99))], 1.2,
         "workload_version"),
    ],
    "never_started": [("a node never heard from", ALONE, 120.0, "never_started")],
    "hangs": [
        ("a hung rank", [(50.0, _stack(1, SLEEP)), *WAITING], 54.0, "hung"),
        ("a silent rank", [(50.0, _silent(1)), *WAITING], 54.0, "silent"),
        ("a rank that never joined", [(50.0, _stack(1, SLEEP, contract.JOIN_PHASE)), *JOINED], 50.5,
         "never_joined"),
    ],
}  # fmt: skip


def _live(timed: list[tuple[float, bytes]], now: float) -> RollCall:
    """A roll call that read each line at its time, its job still running, its clock at ``now``."""
    clock = Clock()
    roll = RollCall(clock=clock)
    parser = roll.parser("node-0")
    for t, line in timed:
        clock.t = t
        parser.feed(line)
    clock.t = now
    return roll


def _watched(tmp_path: Path, roll: RollCall, checks=CHECKS) -> _Watch:
    collector = Collector(tmp_path)
    collector.roll = roll
    return _Watch(SPEC, 0.0, collector, None, checks=checks, unit="node")


def _judged(roll: RollCall, reason: str, watch: _Watch, checks=CHECKS) -> Verdict:
    observed = Observed(roll, Layout(2, 2), JobStatus(JobState.STOPPED, reason), SPEC, "node")
    return judge(observed, None, checks, stopped_by=watch.stopped_by)


def test_every_check_that_may_end_a_run_early_has_its_ways_here_and_comes_before_the_jobs_line():
    stopping = [c.name for c in CHECKS if c.stops is not None]
    assert stopping == list(STOPPED) == ["workload_version", "never_started", "hangs"]
    assert all(ORDER.index(name) < ORDER.index("job_state") for name in stopping)


@pytest.mark.parametrize(
    ("name", "how", "timed", "now", "first"),
    [(name, *way) for name, ways in STOPPED.items() for way in ways],
    ids=[f"{name}: {way[0]}" for name, ways in STOPPED.items() for way in ways],
)
def test_a_run_a_checks_early_stop_ended_is_judged_with_that_checks_problem(
    tmp_path, name, how, timed, now, first
):
    check = next(c for c in CHECKS if c.name == name)
    roll = _live(timed, now)
    watch = _watched(tmp_path, roll)
    reason = watch.poll()
    assert reason is not None, how
    assert watch.stopped_by == name and roll.ended == roll.stopped == now
    verdict = _judged(roll, reason, watch)
    kinds = [p.kind for p in verdict.findings]
    assert kinds[0].value == first and kinds[0] in check.stop_kinds, f"{how}: {reason}; judged {kinds}"
    assert verdict.first_failure is not None and verdict.first_failure.kind == first
    assert "job" in [k.value for k in kinds]  # the job's own line, after the problem that ended it


def test_a_stop_does_not_fire_before_its_bound_and_the_check_names_nothing_there(tmp_path):
    _, timed, _, _ = STOPPED["never_started"][0]
    roll = _live(timed, 119.9)  # T0 + S is 120
    watch = _watched(tmp_path, roll)
    assert watch.poll() is None and watch.stopped_by is None and roll.ended is None
    roll.ended = 119.9
    verdict = judge(Observed(roll, Layout(2, 2), JobStatus(JobState.SUCCEEDED), SPEC, "node"))
    assert not any(p.kind.value == "never_started" for p in verdict.findings)


def test_a_runs_checks_decide_its_stops_a_bare_predicate_stops_nothing(tmp_path):
    _, timed, now, _ = STOPPED["hangs"][0]
    bare: Callable[..., list[Problem]] = lambda run: []  # noqa: E731
    watch = _watched(tmp_path, _live(timed, now), checks=(bare,))
    assert watch.poll() is None and watch.stopped_by is None


def test_only_the_release_gate_or_a_final_failure_keeps_a_run_from_another_attempt():
    assert {k.value for k in gate_kinds()} == {
        "straggler",
        "compute_straggler",
        "slow_link",
        "regression",
        "unfit_device",
        "config_drift",
        "expectation",
    }
    assert {k.value for k in final_kinds()} == {"workload_version"}
    spec = JobSpec("job-abc123", 2, 2)
    slow = judged(two_by_two(tp={3: 5.0}), spec, straggler_ratio=0.5)
    assert [p.kind.value for p in slow.verdict.findings] == ["straggler"] and not retriable(slow)
    missing = judged(two_by_two(skip={3: ("complete",)}), spec)
    assert not missing.passed and retriable(missing)
    # a check that judged it but declares nothing of it (a bare predicate) leaves its failures retried
    assert retriable(slow, checks=())


def test_a_trial_is_judged_by_the_checks_that_declare_it_each_in_its_trial_form():
    names = [c.name for c in TRIAL_CHECKS]
    assert names == [
        "workload_version",
        "never_started",
        "never_joined",
        "silent",
        "hangs",
        "errors",
        "exited_nonzero",
        "job_state",
        "efa",
        "completed",  # missing_events' trial form: a trial trains nothing, so only complete is asked
        "unexpected_ranks",
        "layout",
        "slow_links",
        "busbw_floors",
    ]
    # a trial a check's early stop ends is judged by the checks that name its problem
    stopped = {k for c in CHECKS if c.stops is not None for k in c.stop_kinds}
    assert stopped <= {k for c in TRIAL_CHECKS for k in c.kinds}
    roll = two_by_two(skip={2: ("complete", "throughput", "epoch_time")})
    trial = judge(Observed(roll, Layout(2, 2), JobStatus(JobState.SUCCEEDED)), None, TRIAL_CHECKS)
    assert [(p.kind.value, set(p.ranks)) for p in trial.findings] == [("missing_event", {2})]
    assert trial.findings[0].message == "complete missing on 1 rank(s): 2 (node 1)"


#: A site's kind: its check names the ranks whose dataset mount is short, from their ``start``.
SHORT = Kind("dataset_too_small", RankState.FAILED, Blame(Owner.CLUSTER, "the site's dataset mount is short"))


def dataset_size(run: RunView) -> list[Problem]:
    short = [r for r, rep in run.reports.items() if rep.start and rep.start.get("dataset_bytes", 10) < 10]
    return [Problem(SHORT, f"rank {r}'s dataset mount holds 3 bytes", {r: "short dataset"}) for r in short]


def short_at_start(run: RunView, now: float) -> str | None:
    """The site's early stop: its check's own predicate over the live run."""
    found = dataset_size(run)
    return f"{found[0].message}: ended at its start" if found else None


def site(predicate=dataset_size, stop=short_at_start, **acts) -> tuple[SiteCheck, ...]:
    stops = EarlyStop(stop, when="at the start of a rank whose dataset is short") if stop else None
    declared = Check(predicate, "a short dataset", "the ranks' start", (SHORT,), stops=stops, **acts)
    return site_checks([("acme", [declared])])


SHORT_START = [(1.0, _start(0)), (1.0, _start(1)), (1.1, _start(2, dataset_bytes=3)), (1.2, _start(3))]


def test_a_site_checks_early_stop_ends_the_run_and_its_problem_leads_the_verdict(tmp_path):
    checks = (*CHECKS, *site())
    roll = _live(SHORT_START, 1.5)
    watch = _watched(tmp_path, roll, checks)
    reason = watch.poll()
    assert (
        reason == "rank 2's dataset mount holds 3 bytes: ended at its start"
        and watch.stopped_by == "dataset_size"
    )
    verdict = _judged(roll, reason, watch, checks)
    assert [p.kind.value for p in verdict.findings[:2]] == ["dataset_too_small", "job"]
    assert verdict.first_failure is not None and verdict.first_failure.owner == "cluster"
    # judged as though no stop of its ended the job: the job's line leads, whose cause is undetermined
    unstopped = judge(
        Observed(roll, Layout(2, 2), JobStatus(JobState.STOPPED, reason), SPEC, "node"), None, checks
    )
    assert unstopped.findings[0].kind.value == "job" and unstopped.first_failure.owner == "undetermined"


def test_a_site_check_whose_stop_ended_a_run_it_then_names_nothing_in_broke_its_contract(tmp_path):
    def nothing(run: RunView) -> list[Problem]:
        return []

    checks = (*CHECKS, *site(nothing, lambda run, now: "the mount went away"))
    roll = _live(SHORT_START, 1.5)
    watch = _watched(tmp_path, roll, checks)
    reason = watch.poll()
    assert reason == "the mount went away" and watch.stopped_by == "nothing"
    verdict = _judged(roll, reason, watch, checks)
    first = verdict.findings[0]
    assert first.kind is SITE_CHECK_ERROR and first.ranks == {}
    assert first.message.startswith(
        "site check nothing (plugin acme) ended the job early, yet names no failure of the run it ended"
    )
    assert verdict.first_failure is not None and verdict.first_failure.owner == "platform"


def test_a_site_stop_that_raises_or_says_no_reason_stops_nothing_more_and_its_check_still_judges(
    tmp_path, caplog
):
    calls = []

    def broken(run: RunView, now: float) -> str | None:
        calls.append(now)
        raise OSError("stale file handle")

    checks = (*CHECKS, *site(stop=broken))
    roll = _live(SHORT_START, 1.5)
    watch = _watched(tmp_path, roll, checks)
    assert watch.poll() is None and watch.poll() is None and calls == [1.5]
    assert (
        "site check dataset_size (plugin acme): its early stop raised OSError: stale file handle"
        in caplog.text
    )
    roll.ended = 1.5
    verdict = judge(Observed(roll, Layout(2, 2), JobStatus(JobState.SUCCEEDED), SPEC, "node"), None, checks)
    assert SHORT in [p.kind for p in verdict.findings]
    odd = _watched(tmp_path, _live(SHORT_START, 1.5), (*CHECKS, *site(stop=lambda run, now: 42)))
    assert odd.poll() is None and "returned 42, not a reason" in caplog.text


def _attempt(checks, roll, state=JobState.SUCCEEDED) -> Attempt:
    spec = JobSpec("job-abc123", 2, 2)
    status = JobStatus(state, "exited 1")
    verdict = judge(Observed(roll, Layout(2, 2), status, spec), None, checks)
    return Attempt(spec, status, verdict, Path("a"), 1.0)


def test_a_site_check_declares_whether_its_failure_is_run_again():
    whole = two_by_two()  # every rank answered; rank 2's dataset is short
    whole.ranks[2].start = {**(whole.ranks[2].start or {}), "dataset_bytes": 3}
    plain, gate, final = site(stop=None), site(stop=None, gate_only=True), site(stop=None, retried=False)
    assert [p.kind for p in _attempt((*CHECKS, *plain), whole).verdict.findings] == [SHORT]
    assert retriable(_attempt((*CHECKS, *plain), whole), (*CHECKS, *plain))
    assert not retriable(_attempt((*CHECKS, *gate), whole), (*CHECKS, *gate))  # the gate's alone
    failed = _attempt((*CHECKS, *final), whole, JobState.FAILED)
    assert not retriable(failed, (*CHECKS, *final)) and retriable(failed, (*CHECKS, *plain))


@pytest.mark.parametrize(
    ("acts", "said"),
    [
        ({"in_trials": True}, "in_trials: the trials of --isolate are judged by rollcall's own checks alone"),
        ({"in_trials_as": dataset_size}, "in_trials: the trials of --isolate"),
        ({"retried": "no"}, "retried is 'no'; give True or False"),
        ({"stops": short_at_start}, "stops is <function short_at_start"),
        ({"stops": EarlyStop(short_at_start, when="")}, "its early stop says not when it fires"),
        ({"stops": EarlyStop(short_at_start, "at its start", (SHORT,))}, "its early stop's judged_as names"),
    ],
)
def test_how_a_site_check_acts_is_held_to_what_a_site_check_may_declare(acts, said):
    declared = Check(dataset_size, "a short dataset", "the ranks' start", (SHORT,), **acts)
    with pytest.raises(
        SiteCheckError, match=r"^plugin acme: pytest_rollcall_checks: check dataset_size: "
    ) as refused:
        site_checks([("acme", [declared])])
    assert said in str(refused.value)
