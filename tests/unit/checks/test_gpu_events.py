"""The gpu_events check: what the nodes' GPUs said during the run, tied to the rank on that GPU and judged.

An Xid, a double-bit ECC error and a lost GPU are faults nothing here can produce (no GPU on this machine):
each test writes the ``gpu_event`` line the node's monitor writes when NVML delivers one (the workload's own
encoder, as :mod:`rollcall_workload.node.gpu_listener` calls it; that listener is tested at the NVML boundary in
``tests/unit/test_gpu_events.py``), into the log of the node it happened on, and judges the whole roll call.
"""

from __future__ import annotations

from typing import Any

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.gpu_events import GPU_EVENT, _device, _when, gpu_events
from rollcall.checks.runview import RunView
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.evidence.gpu_events import (
    SAME_EVENT_S,
    GpuEventSeen,
    beside_error,
    events_seen,
    phase_at,
    program_evidence,
)
from rollcall.evidence.gpu_owners import RunGpus
from rollcall.evidence.nodefacts import Device
from rollcall.evidence.xids import XidClass, XidPolicy
from rollcall.gate import criteria_of
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.options import DEFAULTS
from rollcall.ranklog import GpuHeard, Mark, RankError, RankProcessHeard, RankReport, RollCall
from rollcall.verdict import Criteria, Layout, Observed, Owner, Verdict
from rollcall_workload import contract
from tests.unit.helpers import rank_lines
from tests.unit.test_fitness import verdict_of

#: Each rank's GPU as its ``facts`` read it: rank r on node r, GPU r of that node.
GPUS = {r: {"device_index": r, "gpu_uuid": f"GPU-{r}aaa", "gpu_serial": f"16500{r}"} for r in (0, 1)}
#: The wall clock of rank 1's epochs (the line's time) and of its error.
EPOCH_1, ERROR_AT = 1000.0, 1010.0


def _line(event: str, rank: int, **fields: Any) -> str:
    return contract.encode_event(event, rank, 2, strict=True, **fields).decode().rstrip("\n")


def gpu_line(
    kind: str = "xid", gpu: int = 1, uuid: str | None = "GPU-1aaa", at: float = 1005.0, **kw: Any
) -> str:
    """The line node 1's monitor writes for one event of its GPU ``gpu``."""
    fields = {"kind": kind, "gpu": gpu, "node": "n1", "time": at, **kw}
    if uuid is not None:
        fields.update(uuid=uuid, serial=f"16500{gpu}")
    return _line("gpu_event", -1, **fields)


def roll_of(events: list[str], fails: str | None = None) -> RollCall:
    """Two nodes of one rank each; rank 1 (node 1) fails with ``fails`` after its first epoch if given."""
    roll = RollCall()
    for rank in (0, 1):
        lines = rank_lines(rank, 2, 1)
        if rank == 1 and fails is not None:
            lines = [
                _line(
                    "start",
                    1,
                    node_rank=1,
                    host="n1",
                    device="cuda:0",
                    time=990.0,
                    workload_version=contract.WORKLOAD_VERSION,
                    contract_version=contract.CONTRACT_VERSION,
                ),
                _line("epoch_time", 1, epoch=1, seconds=1.0, time=EPOCH_1),
                _line("error", 1, message=fails, time=ERROR_AT),
            ]
        lines.append(_line("facts", rank, **GPUS[rank]))
        if rank == 1:
            lines += events
        parser = roll.parser(f"node-{rank}.log")
        parser.feed(("\n".join(lines) + "\n").encode())
        parser.close()
    return roll


ILLEGAL = "AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_xid_31_on_a_failing_ranks_gpu_is_named_beside_that_ranks_error_whose_owner_stays_the_errors():
    verdict = verdict_of(roll_of([gpu_line(xid=31, data=31, event_type=8)], fails=ILLEGAL))
    first = verdict.findings[0]
    assert first.kind is ROOT_CAUSE and set(first.ranks) == {1}
    note = first.ranks[1]
    assert note.startswith(f"error: {ILLEGAL}")
    assert (
        "the GPU said: Xid 31 (GPU memory page fault, program) on GPU 1 (UUID GPU-1aaa), after epoch 1"
        in note
    )
    assert first.blame is not None and first.blame.owner is Owner.UNDETERMINED  # the error's own placing
    assert verdict.of_kind(UNFIT_DEVICE) == [] and verdict.warnings == ()
    [seen] = verdict.gpu_events
    assert (seen.rank, seen.node, seen.klass, seen.phase) == (1, 1, "program", "after epoch 1")


def test_an_event_on_a_gpu_ranks_share_is_tied_to_the_rank_whose_error_followed_it_else_to_none(monkeypatch):
    """Simulated nodes sharing one GPU (as bench/gpu_checks.sh runs on one H200) read the same UUID: the
    Xid goes to the rank whose error followed it, not to the lowest rank; with no error after it, to no
    rank (sharing a GPU does not make a rank the culprit), still with its GPU and the node that heard it."""
    for r in (0, 1):
        monkeypatch.setitem(GPUS, r, {"device_index": 0, "gpu_uuid": "GPU-shared", "gpu_serial": "165000"})
    xid = gpu_line(xid=31, data=31, event_type=8, gpu=0, uuid="GPU-shared")
    verdict = verdict_of(roll_of([xid], fails=ILLEGAL))
    [seen] = verdict.gpu_events
    assert (seen.rank, seen.node, seen.phase) == (1, 1, "after epoch 1")
    assert "the GPU said: Xid 31" in verdict.findings[0].ranks[1]
    [seen] = verdict_of(roll_of([xid])).gpu_events
    assert seen.rank is None and seen.node == 1 and seen.heard.uuid == "GPU-shared"


def test_xid_79_makes_the_gpu_unfit_first_in_the_verdict_ahead_of_the_error_it_caused():
    verdict = verdict_of(
        roll_of([gpu_line(xid=79, data=79, event_type=8)], fails="CUDA error: unknown error")
    )
    first = verdict.findings[0]
    assert first.kind is UNFIT_DEVICE and not first.warning
    for named in ("node 1 (n1) rank 1 GPU 1", "UUID GPU-1aaa", "serial 165001", "Xid 79 (GPU has fallen off"):
        assert named in first.message
    assert "rule hardware_event" in first.message and "after epoch 1" in first.message
    assert set(first.ranks) == {1}  # rank 0's healthy GPU is not named
    assert first.blame is not None and first.blame.owner is Owner.CLUSTER
    assert verdict.findings[1].kind is ROOT_CAUSE
    assert verdict.unfit_nodes == ["n1"]
    assert verdict.message().splitlines()[1].startswith("  - unfit device: node 1 (n1) rank 1 GPU 1")


def test_a_gpu_lost_that_no_rank_used_warns_naming_its_node_and_gpu_and_takes_its_node_out():
    """No rank used GPU 5: the run passes with a warning, yet a GPU lost takes its node out (unfit_nodes)."""
    verdict = verdict_of(roll_of([gpu_line("lost", gpu=5, uuid="GPU-5bbb", reason="NVML: GPU is lost")]))
    assert verdict.passed and verdict.of_kind(UNFIT_DEVICE) == []
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and warning.ranks == {} and "(rule gpu_lost)" in warning.message
    assert "node 1 (n1) GPU 5, UUID GPU-5bbb, serial 165005" in warning.message
    assert "GPU lost (NVML: GPU is lost)" in warning.message and UNUSED in warning.message
    [unfit] = verdict.unfit
    assert (unfit.severity, unfit.rule, unfit.out) == ("warn", "gpu_lost", "node")
    assert verdict.unfit_nodes == ["n1"] and list(verdict.out_of_service()) == [1]
    [seen] = verdict.gpu_events
    assert (seen.used, seen.takes_out) == (False, "node")


def test_fewer_gpus_at_the_end_names_the_gpu_gone_on_the_rank_that_used_it():
    reason = "1 GPUs at the end, 2 at the start"
    verdict = verdict_of(roll_of([gpu_line("lost", reason=reason)]))
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert set(problem.ranks) == {1} and f"GPU lost ({reason})" in problem.message


def test_a_double_bit_ecc_event_is_hardware_and_the_fitness_options_make_it_warn_or_drop_it():
    roll = roll_of([gpu_line("double_bit_ecc", event_type=2, data=0)])
    assert verdict_of(roll).of_kind(UNFIT_DEVICE)[0].message.count("double-bit ECC error") == 1
    warned = verdict_of(roll, fitness=FitnessPolicy(warn=frozenset({"hardware_event"})))
    assert warned.passed and [w.kind for w in warned.warnings] == [UNFIT_DEVICE]
    assert "(warning)" in warned.warnings[0].message
    off = verdict_of(roll, fitness=FitnessPolicy(off=frozenset({"hardware_event"})))
    assert off.passed and off.warnings == ()


def test_an_xid_not_in_the_catalog_is_a_warning_and_never_unfit():
    verdict = verdict_of(roll_of([gpu_line(xid=999, data=999, event_type=8)]))
    assert verdict.passed and verdict.unfit == []
    [warning] = verdict.warnings
    assert warning.kind is GPU_EVENT and warning.ranks == {1: "GPU event: " + warning.detail.what}
    assert "Xid 999 (not in NVIDIA's Xid catalog, unknown)" in warning.message


def test_a_system_xid_and_a_program_xid_on_a_rank_without_error_warn():
    verdict = verdict_of(roll_of([gpu_line(xid=63, data=63), gpu_line(xid=13, data=13)]))
    assert verdict.passed
    assert [w.detail.klass for w in verdict.warnings] == ["system", "program"]


def test_single_bit_ecc_and_clock_changes_are_shown_not_judged():
    events = [gpu_line("single_bit_ecc", data=0), gpu_line("clock", data=0x20)]
    verdict = verdict_of(roll_of(events))
    assert verdict.passed and verdict.warnings == ()
    assert [s.what for s in verdict.gpu_events] == ["single-bit ECC error", "clock event reasons 0x20"]


def _judged(roll: RollCall, xids: XidPolicy) -> Verdict:
    return verdict_of(roll, xids=xids)


def test_the_predicate_follows_xids_moved_between_classes():
    roll = roll_of([gpu_line(xid=31, data=31)], fails=ILLEGAL)
    criteria = Criteria(xids=XidPolicy(((31, XidClass.HARDWARE),)))
    [problem] = list(gpu_events(RunView(Observed(roll, Layout(2, 1)), criteria)))
    assert problem.kind is UNFIT_DEVICE and "Xid 31 (GPU memory page fault, hardware)" in problem.message
    assert list(gpu_events(RunView(Observed(roll, Layout(2, 1)), Criteria()))) == []  # beside the error
    moved = _judged(roll_of([gpu_line(xid=79, data=79)]), XidPolicy(((79, XidClass.SYSTEM),)))
    assert moved.passed and [w.kind for w in moved.warnings] == [GPU_EVENT]


def test_a_rank_that_died_before_its_facts_is_tied_by_the_cuda_index_its_start_names_on_its_node():
    roll = RollCall()
    lines = [
        _line("start", 0, node_rank=0, host="n0", device="cuda:0"),
        _line("start", 1, node_rank=0, host="n0", device="cuda:1"),
        _line("error", 1, message="CUDA error: unknown error"),
        gpu_line(xid=79, gpu=1, uuid="GPU-9zzz", data=79),
    ]
    parser = roll.parser("node-0.log")
    parser.feed(("\n".join(lines) + "\n").encode())
    parser.close()
    [seen] = verdict_of(roll, nodes=1, ppn=2).gpu_events
    assert (seen.rank, seen.node, seen.klass) == (1, 0, "hardware")
    [problem] = verdict_of(roll, nodes=1, ppn=2).of_kind(UNFIT_DEVICE)
    assert set(problem.ranks) == {1} and "GPU 1, UUID GPU-9zzz" in problem.message


def test_an_event_heard_by_two_monitors_of_one_gpu_counts_once_and_a_repeat_by_one_monitor_twice():
    """The local backend's simulated nodes share the host's GPUs: each node's monitor hears every event."""
    from rollcall.evidence.gpu_events import events_seen

    roll = roll_of([gpu_line(xid=31, at=1005.0), gpu_line(xid=31, at=1030.0)])
    echo = roll.parser("node-0.log")  # node 0's monitor heard the first, a poll later
    echo.feed((gpu_line(xid=31, at=1005.8) + "\n").encode())
    echo.close()
    assert len(roll.gpu_events) == 3
    seen = events_seen(roll.gpu_events, roll.ranks, lambda r: r)
    assert [(s.heard.time, s.heard.source) for s in seen] == [(1005.0, "node-1.log"), (1030.0, "node-1.log")]


# ---------------------------------------------------------------- whose GPU it is


def owned(roll: RollCall, owns_nodes: bool | None) -> Verdict:
    """The roll call judged as a backend that says whether the run owned its nodes (None: it does not say)."""
    spec = JobSpec("job", 2, 1, accelerator="nvidia")
    status = JobStatus(JobState.SUCCEEDED, owns_nodes=owns_nodes)
    return judge(Observed(roll, Layout(2, 1), status, spec), criteria_of(DEFAULTS))


def process_line(rank: int, visible: str | None, node_rank: int | None = None) -> str:
    """The ``rank_process`` line the rank's node's monitor writes as it first sees the rank's process."""
    return _line(
        "rank_process", rank, state="seen", pid=4000 + rank, node_rank=node_rank, visible_devices=visible
    )


#: Xid 79 on GPU 5 of node 1, a GPU no rank of the run used (ranks 0 and 1 read GPU-0aaa and GPU-1aaa).
OTHERS_XID = gpu_line(xid=79, gpu=5, uuid="GPU-5bbb", data=79, event_type=8)


def test_a_hardware_xid_on_a_gpu_no_rank_used_on_a_shared_node_warns_naming_the_gpu_and_passes():
    verdict = owned(roll_of([OTHERS_XID]), owns_nodes=False)
    assert verdict.passed and verdict.findings == ()
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and warning.ranks == {}
    for named in ("unfit device (warning): node 1 (n1) GPU 5, UUID GPU-5bbb", "not this run's GPU", "Xid 79"):
        assert named in warning.message
    assert "takes its node out of service" in warning.message
    [seen] = verdict.gpu_events
    assert seen.run_gpu is False and seen.as_dict()["run_gpu"] is False
    assert (seen.used, seen.as_dict()["used"], seen.takes_out) == (False, False, "node")
    assert "(not this run's GPU)" in str(seen)
    # a warning of no rank, yet NVIDIA reboots the node for Xid 79: the node is out of service
    [unfit] = verdict.unfit
    assert (unfit.severity, unfit.device.on_rank, unfit.device.node, unfit.rule, unfit.out) == (
        "warn",
        False,
        1,
        "hardware_event",
        "node",
    )
    assert verdict.unfit_nodes == ["n1"]
    [node_1] = [n for n in verdict.node_verdicts() if n["node"] == 1]
    assert node_1["verdict"] == "unfit"
    assert node_1["reasons"] and "not this run's GPU" in node_1["reasons"][0]


def test_the_same_xid_on_an_idle_gpu_of_a_node_the_run_owns_or_may_own_passes_and_takes_the_node_out():
    """Only an event on a GPU a rank used, or may have used, fails the run: GPU 5 is named by no rank, whether
    the run owns its node (an idle GPU of its own) or the backend does not say."""
    for owns in (True, None):
        verdict = owned(roll_of([OTHERS_XID]), owns_nodes=owns)
        assert verdict.passed and verdict.of_kind(UNFIT_DEVICE) == [], owns
        [warning] = verdict.warnings
        assert warning.kind is UNFIT_DEVICE and warning.ranks == {}
        assert UNUSED in warning.message and "not this run's" not in warning.message
        [seen] = verdict.gpu_events
        assert (seen.run_gpu, seen.used) == (True, False)
        assert verdict.unfit_nodes == ["n1"]


def test_a_gpu_scoped_xid_on_an_idle_gpu_passes_and_takes_out_that_gpu_not_its_node():
    """Xid 95 (RESET_GPU) on GPU 5, which no rank used: a warning, the GPU out, the node still fit."""
    verdict = verdict_of(roll_of([gpu_line(xid=95, gpu=5, uuid="GPU-5bbb", data=95, event_type=8)]))
    assert verdict.passed and verdict.findings == ()
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and "takes this GPU out of service" in warning.message
    [unfit] = verdict.unfit
    assert (unfit.severity, unfit.out) == ("warn", "gpu")
    assert verdict.unfit_nodes == [] and verdict.out_of_service() == {}


def test_a_hardware_xid_on_a_gpu_a_rank_used_fails_on_a_shared_node_too():
    verdict = owned(roll_of([gpu_line(xid=79, data=79, event_type=8)]), owns_nodes=False)
    assert not verdict.passed
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert not problem.warning and set(problem.ranks) == {1}
    assert "node 1 (n1) rank 1 GPU 1, UUID GPU-1aaa" in problem.message


def test_where_a_rank_named_no_gpu_of_its_own_every_gpu_is_the_runs_and_the_xid_fails(monkeypatch):
    """Rank 0 read no UUID nor index, and its monitor reported no devices: which GPUs the run uses is
    unknown, so GPU 5 may be rank 0's."""
    monkeypatch.setitem(GPUS, 0, {"gpu_serial": "165000"})
    verdict = owned(roll_of([OTHERS_XID]), owns_nodes=False)
    assert not verdict.passed and verdict.of_kind(UNFIT_DEVICE)[0].warning is False
    [seen] = verdict.gpu_events
    assert seen.run_gpu is True


def test_the_devices_a_ranks_monitor_reports_name_its_gpus_before_its_facts(monkeypatch):
    """Neither rank said its facts (each died, or is still importing): the devices their environments give
    them, as their monitors report, name their GPUs, by UUID (or a prefix of one) and by index on the node."""
    for r in (0, 1):
        monkeypatch.setitem(GPUS, r, {})
    seen_0 = process_line(0, "GPU-0a")  # a prefix, as CUDA takes one
    seen_1 = process_line(1, "1,2")

    def judged(event: str) -> Verdict:
        roll = roll_of([event, seen_1])
        parser = roll.parser("node-0.log")
        parser.feed((seen_0 + "\n").encode())
        parser.close()
        return owned(roll, owns_nodes=False)

    assert judged(OTHERS_XID).passed  # GPU 5: neither rank's
    on_2 = judged(gpu_line(xid=79, gpu=2, uuid="GPU-2ccc", data=79))  # GPU 2 of node 1: rank 1's to use
    assert not on_2.passed and not on_2.of_kind(UNFIT_DEVICE)[0].warning
    assert not judged(gpu_line(xid=79, gpu=7, uuid="GPU-0aaa", data=79)).passed  # rank 0's, by its UUID


@pytest.mark.parametrize("visible", ["all", "MIG-4f6c8f3e-8b1d-5a1c-9e3a-2f0b7d3c1a55"])
def test_a_rank_that_may_use_every_gpu_or_one_no_event_can_be_matched_to_makes_every_gpu_of_its_node_the_runs(
    visible,
):
    verdict = owned(roll_of([OTHERS_XID, process_line(1, visible)]), owns_nodes=False)
    assert not verdict.passed


def test_simulated_nodes_sharing_a_machine_are_one_machine_for_the_gpus_their_ranks_named(monkeypatch):
    """The local backend's nodes share the host's GPUs and each monitor hears every one of them: rank 1's
    GPU 1, heard first by node 0's monitor, is still the run's, by the machine both monitors name."""
    for r in (0, 1):
        monkeypatch.setitem(GPUS, r, {})
    xid = dict(xid=79, gpu=1, uuid="GPU-1zzz", data=79)
    roll = roll_of([process_line(1, "1"), gpu_line(at=1005.4, **xid)])
    parser = roll.parser("node-0.log")
    parser.feed(("\n".join([process_line(0, "0"), gpu_line(at=1005.0, **xid)]) + "\n").encode())
    parser.close()
    roll.gpu_events.sort(key=lambda h: h.time or 0.0)
    assert [h.node for h in roll.gpu_events] == ["n1", "n1"]
    verdict = owned(roll, owns_nodes=False)
    [seen] = verdict.gpu_events
    assert seen.heard.source == "node-0.log" and seen.run_gpu
    assert not verdict.passed


@pytest.mark.parametrize("visible", ["none", "void", ""])
def test_a_rank_given_no_device_names_its_gpus_as_none(monkeypatch, visible):
    monkeypatch.setitem(GPUS, 0, {})
    roll = roll_of([OTHERS_XID])
    parser = roll.parser("node-0.log")
    parser.feed((process_line(0, visible) + "\n").encode())
    parser.close()
    assert owned(roll, owns_nodes=False).passed


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def heard(
    xid: int | None = 31,
    *,
    kind: str = "xid",
    gpu: int = 1,
    uuid: str | None = "GPU-1aaa",
    at: float | None = 1005.0,
    source: str = "node-1.log",
    node: str | None = "n1",
) -> GpuHeard:
    """One event as a node's monitor reported it (``source``: the log it came in)."""
    return GpuHeard(kind, gpu, uuid, None, node, xid, 8 if kind == "xid" else None, xid, "", at, source)


def report(rank: int, *, source: str = "", errors: tuple[float | None, ...] = (), **facts: Any) -> RankReport:
    """A rank that said its ``facts`` (``facts``), in the log ``source``, and failed at each of ``errors``."""
    return RankReport(
        rank,
        facts=facts or None,
        errors=[RankError("RuntimeError: boom", t) for t in errors],
        sources={source or f"node-{rank}.log"},
    )


def test_of_ranks_sharing_a_gpu_an_event_goes_to_the_first_error_from_two_seconds_before_it_on():
    """The window is :data:`SAME_EVENT_S` wide, both ends in: an error 2.0 s before the event still counts
    (the monitor stamps the event at its next poll), one 2.1 s before does not; an unstamped error never."""
    shared = {"gpu_uuid": "GPU-shared", "device_index": 0}

    def tied(first: float, second: float) -> int | None:
        reports = {
            0: report(0, errors=(None, first), **shared),
            1: report(1, errors=(second,), **shared),
        }
        [seen] = events_seen([heard(uuid="GPU-shared", at=1005.0)], reports, lambda r: r)
        return seen.rank

    assert SAME_EVENT_S == 2.0
    assert tied(1005.0 - SAME_EVENT_S, 1004.5) == 0  # at the window's edge: the first error of the two
    assert tied(1002.9, 1004.5) == 1  # before the window: rank 0's error was not caused by it
    assert tied(1002.9, 1002.95) is None  # no error after it: no rank that merely shares the GPU is blamed


def test_two_monitors_reports_of_one_event_count_once_and_everything_else_is_an_event_of_its_own():
    """One GPU's same event heard by two monitors, up to SAME_EVENT_S apart (both ends in) or either
    unstamped, is one event; a repeat by one monitor, another Xid, another GPU or two reports further apart
    are events of their own. A GPU is named by its UUID where NVML gave one, else by its node and index."""

    def kept(*events: GpuHeard) -> list[tuple[int | None, int, float | None, str]]:
        return [
            (s.heard.xid, s.heard.gpu, s.heard.time, s.heard.source) for s in events_seen(events, {}, int)
        ]

    other = "node-0.log"
    assert kept(heard(), heard(at=1007.0, source=other), heard(79, at=1007.5, source=other)) == [
        (31, 1, 1005.0, "node-1.log"),
        (79, 1, 1007.5, other),
    ]
    assert len(kept(heard(), heard(at=1007.1, source=other))) == 2
    assert len(kept(heard(), heard(at=1030.0, source=other))) == 2
    assert len(kept(heard(), heard(at=1005.5))) == 2  # one monitor said it twice
    assert len(kept(heard(at=None), heard(source=other))) == 1
    assert len(kept(heard(), heard(at=None, source=other))) == 1
    # in containers each monitor numbers its GPUs from 0: one UUID is one GPU, whatever its index
    assert len(kept(heard(gpu=1), heard(gpu=3, source=other))) == 1
    # no UUID: the node and the index tell two GPUs apart
    assert len(kept(heard(gpu=0, uuid=None), heard(gpu=1, uuid=None, source=other))) == 2


def test_an_event_is_tied_by_the_index_a_rank_read_where_no_rank_read_its_uuid_and_named_by_its_node():
    """Ranks 2 and 3 on node 1 (ranks 2 per node), rank 3 on GPU 1 by its facts' index (no UUID read):
    an event on GPU 1 without a UUID is rank 3's, on node 1; its node's name is the event's own, else the
    rank's ``start`` (``node``, then ``host``), else ``unknown``."""
    reports = {
        2: report(2, source="node-1.log", device_index=0),
        3: report(3, source="node-1.log", device_index=1),
    }
    node_of = lambda r: r // 2  # noqa: E731
    [seen] = events_seen([heard(uuid=None, node=None)], reports, node_of)
    assert (seen.rank, seen.node, seen.node_name, seen.phase) == (3, 1, "unknown", "before start")
    reports[3].start = {"host": "h1"}
    assert events_seen([heard(uuid=None, node=None)], reports, node_of)[0].node_name == "h1"
    reports[3].start = {"node": "n1", "host": "h1"}
    assert events_seen([heard(uuid=None, node=None)], reports, node_of)[0].node_name == "n1"
    reports[3].start = {"node": "", "host": "h1"}
    assert events_seen([heard(uuid=None, node=None)], reports, node_of)[0].node_name == "h1"
    assert events_seen([heard(uuid=None, node="own")], reports, node_of)[0].node_name == "own"
    reports[3].start = None
    # a GPU no rank named: the node whose log heard it, its first rank's name, no rank and no phase
    reports[2].start = {"node": "n1"}
    [other] = events_seen([heard(gpu=7, uuid=None, node=None)], reports, node_of)
    assert (other.rank, other.node, other.node_name, other.phase) == (None, 1, "n1", "")
    # heard in a log no rank wrote to: no node, no name
    [alone] = events_seen([heard(gpu=7, uuid=None, node=None, source="monitor.log")], reports, node_of)
    assert (alone.rank, alone.node, alone.node_name) == (None, None, "unknown")


def test_an_empty_uuid_names_no_gpu_and_a_device_that_is_not_cuda_names_no_cuda_index():
    """Two ranks that read an empty UUID do not share a GPU by it: the index tells; a rank whose ``start``
    names a device that is not ``cuda:N`` (``xla:12``) is tied by no CUDA index."""
    on_0 = {"source": "node-0.log", "gpu_uuid": ""}
    reports = {0: report(0, device_index=0, **on_0), 1: report(1, device_index=1, **on_0)}
    [seen] = events_seen([heard(uuid="", source="node-0.log")], reports, lambda r: r)
    assert seen.rank == 1
    xla = {0: RankReport(0, start={"device": "xla:12"}, sources={"node-0.log"})}
    [seen] = events_seen([heard(gpu=2, uuid=None, source="node-0.log")], xla, lambda r: r)
    assert seen.rank is None and seen.node == 0


def test_an_event_heard_by_another_nodes_monitor_is_tied_to_the_rank_and_node_whose_gpu_it_is():
    """The local backend's simulated nodes share the host's GPUs: node 0's monitor hears rank 1's GPU."""
    reports = {0: report(0, gpu_uuid="GPU-0aaa"), 1: report(1, gpu_uuid="GPU-1aaa")}
    [seen] = events_seen([heard(source="node-0.log")], reports, lambda r: r)
    assert (seen.rank, seen.node) == (1, 1)


def test_what_a_rank_was_doing_when_its_gpu_said_something_counts_an_event_at_that_very_time():
    rank = RankReport(1, marks={"epoch 1": Mark("epoch_time", "epoch 1", 1000.0)})
    assert phase_at(rank, None) == "at an unknown time"
    assert phase_at(rank, 999.0) == "before start"
    assert phase_at(rank, 1000.0) == "after epoch 1"
    rank.errors.append(RankError("boom", 1001.0))
    rank.errors.append(RankError("unstamped"))
    assert phase_at(rank, 1000.5) == "after epoch 1"
    assert phase_at(rank, 1001.0) == "after its error"


def seen_on(
    rank: int | None, *, kind: str = "xid", xid: int | None = 31, at: float | None = 1005.0
) -> GpuEventSeen:
    h = heard(xid, kind=kind, at=at)
    return GpuEventSeen(h, 1, "n1", rank, "", XidPolicy().of(xid) if kind == "xid" and xid else None)


def test_the_event_told_beside_an_error_is_a_hardware_one_first_then_the_nearest_in_time():
    far, near = seen_on(1, at=990.0), seen_on(1, at=1004.5)
    assert beside_error([far, near], 1, 1005.0) is near
    assert beside_error([far, near, seen_on(1, xid=79, at=980.0)], 1, 1005.0).heard.xid == 79
    assert beside_error([seen_on(1, at=1007.0)], 1, 1005.0) is not None  # up to 2 s after, both ends in
    assert beside_error([seen_on(1, at=1007.1)], 1, 1005.0) is None
    assert beside_error([seen_on(1, kind="single_bit_ecc", xid=None)], 1, 1005.0) is None  # info: no
    assert beside_error([far, near], 2, 1005.0) is None  # another rank's GPU
    # an unstamped event, or an error without a time, counts, as furthest in time: of several, the first
    unstamped = seen_on(1, at=None)
    assert beside_error([unstamped], 1, 1005.0) is unstamped
    assert beside_error([unstamped, near], 1, 1005.0) is near
    assert beside_error([far, near], 1, None) is far


def test_program_evidence_is_the_program_class_events_of_a_rank():
    program, hardware, nobodys = seen_on(1), seen_on(1, xid=79), seen_on(None)
    assert program_evidence([hardware, program, nobodys]) == {1: [program]}


def test_an_unfit_gpu_is_one_problem_per_gpu_naming_each_of_its_events_and_warns_only_when_all_warn():
    """The severity rule: the problem of a GPU warns only where *every* event of it warns (another tenant's
    GPU, or a rule the fitness options made a warning); one event that fails makes the GPU's problem fail."""
    events = [
        gpu_line(xid=79, data=79, at=1005.0),
        gpu_line("double_bit_ecc", event_type=2, data=0, at=1006.0),
        gpu_line(xid=79, gpu=5, uuid="GPU-5bbb", data=79, at=1007.0),
    ]
    verdict = verdict_of(roll_of(events))
    [first] = verdict.of_kind(UNFIT_DEVICE)  # GPU 5, no rank's, only warns
    [second] = [w for w in verdict.warnings if w.kind is UNFIT_DEVICE]
    assert "rank 1 GPU 1" in first.message and "GPU 5" in second.message and second.warning
    assert (
        "Xid 79 (GPU has fallen off the bus, hardware) on rank 1, before start (rule hardware_event): reboot "
        "the node (NVIDIA: RESTART_BM); double-bit ECC error on rank 1, before start (rule hardware_event)"
    ) in first.message
    assert [(u.rule, u.fact, u.value) for u in first.detail] == [
        ("hardware_event", "gpu_event", "Xid 79 (GPU has fallen off the bus, hardware)"),
        ("hardware_event", "gpu_event", "double-bit ECC error"),
    ]
    assert [u.device for u in first.detail] == [Device(1, 1, "n1", GPUS[1])] * 2
    assert second.ranks == {} and second.detail[0].device == Device(
        1, -1, "n1", {"device_index": 5, "gpu_uuid": "GPU-5bbb", "gpu_serial": "165005"}, on_rank=False
    )
    # the double-bit ECC error warns by the fitness options, Xid 79 still fails: GPU 1 fails
    ecc_warns = verdict_of(roll_of(events[:2]), fitness=FitnessPolicy(warn=frozenset({"hardware_event"})))
    assert ecc_warns.passed
    mixed = [gpu_line("lost", reason="NVML: GPU is lost", at=1004.0), events[1]]
    judged = verdict_of(roll_of(mixed), fitness=FitnessPolicy(warn=frozenset({"hardware_event"})))
    [problem] = judged.of_kind(UNFIT_DEVICE)
    assert not problem.warning and not judged.passed
    assert [u.severity for u in problem.detail] == ["fail", "warn"]
    assert problem.message.startswith("unfit device: ")


def test_an_event_beside_a_ranks_error_does_not_hide_the_events_after_it():
    verdict = verdict_of(roll_of([gpu_line(xid=31, data=31), gpu_line(xid=63, data=63)], fails=ILLEGAL))
    [warning] = verdict.warnings
    assert warning.kind is GPU_EVENT and "Xid 63" in warning.message


def test_a_warning_for_a_gpu_no_rank_used_names_no_rank_and_says_so():
    verdict = verdict_of(roll_of([gpu_line(xid=63, gpu=5, uuid="GPU-5bbb", data=63)]))
    [warning] = verdict.warnings
    assert warning.ranks == {}
    assert f"GPU 5, UUID GPU-5bbb, serial 165005 {UNUSED}: no action needed" in warning.message


#: What a finding says of a GPU no rank is tied to (used, or may be), of a GPU of the run's node no rank used,
#: and of one that is not this run's.
NO_RANK = "(no rank on that GPU)"
UNUSED = "(a GPU of the run's node no rank of it used)"
NOT_OURS = "(not this run's GPU: no rank of this run named it, on a node the run shares)"


def test_the_device_of_an_event_is_the_ranks_as_its_facts_read_it_else_the_gpu_as_the_event_names_it():
    roll = roll_of([])
    run = RunView(Observed(roll, Layout(2, 1)), Criteria())
    facts_device = _device(run, seen_on(1))
    assert facts_device.facts == GPUS[1] and (facts_device.node, facts_device.rank) == (1, 1)
    no_facts = RunView(Observed(RollCall(), Layout(2, 1)), Criteria())
    event = {"device_index": 1, "gpu_uuid": "GPU-1aaa"}
    assert _device(no_facts, seen_on(1)) == Device(1, 1, "n1", event)
    nowhere = GpuEventSeen(heard(), None, "n1", None, "")
    assert _device(no_facts, nowhere) == Device(-1, -1, "n1", event, on_rank=False)
    assert _when(nowhere) == NO_RANK
    assert _when(GpuEventSeen(heard(), None, "n1", None, "", run_gpu=False)) == NOT_OURS


def process(
    rank: int, visible: str | None, source: str = "node-1.log", state: str = "seen"
) -> RankProcessHeard:
    """A ``rank_process`` line of rank ``rank`` whose environment gives it ``visible`` (None: a ``gone``)."""
    return RankProcessHeard(state, rank, 4000 + rank, None, None, visible, None, None, None, source)


def gpus(reports: dict[int, RankReport], processes: list[RankProcessHeard], world: int = 2) -> RunGpus:
    return RunGpus.of(reports, processes, [], [], world_size=world, owns_nodes=False)


def on(gpu: int, uuid: str = "GPU-9zzz", node: str | None = "n1", source: str = "node-1.log") -> GpuHeard:
    return heard(79, gpu=gpu, uuid=uuid, node=node, source=source)


def test_each_log_goes_by_the_name_its_monitor_said_else_by_its_ranks_start():
    reports = {r: RankReport(r, start={"node": f"r{r}"}, sources={f"node-{r}.log"}) for r in (0, 1)}
    reports[2] = RankReport(2, start={"node": 7}, sources={"node-2.log"})  # not a name
    monitors = [heard(source="node-1.log", node="n1")]
    named = RunGpus.of(reports, [], monitors, [], world_size=3)
    assert named.names == {"node-0.log": "r0", "node-1.log": "n1"}


def test_the_gpus_the_ranks_named_by_uuid_and_by_index_on_their_node_are_the_runs_and_no_other():
    reports = {
        0: report(0, source="node-0.log", gpu_uuid="GPU-0aaa"),
        1: report(1, source="node-1.log", device_index=1),
        2: report(2, source="node-1.log", gpu_uuid="", device_index=2),  # an empty UUID names nothing
    }
    run = gpus(reports, [], world=3)
    assert run.known and run.uuids == {"GPU-0aaa"} and run.indexes >= {("node-1.log", 1), ("node-1.log", 2)}
    assert run.owns(on(5, uuid="GPU-0aaa")) and run.owns(on(1)) and run.owns(on(2))
    assert not run.owns(on(5)) and not run.owns(on(1, source="node-0.log", node="n0"))
    # a rank that named nothing: which GPUs the run uses is unknown, every GPU is the run's
    assert gpus({0: reports[0], 1: report(1)}, []).owns(on(5)) is True


def test_the_devices_each_ranks_monitor_reported_name_the_runs_gpus_each_process_line_on_its_own():
    processes = [
        process(0, None, state="gone"),  # a process gone says no devices
        process(0, "None, 3", source="node-0.log"),  # no device is said in any case; the rest stands
        process(1, "1,,2"),
        process(2, "5"),  # no rank of a world of 2
    ]
    run = gpus({}, processes)
    assert run.known
    assert run.indexes == {("node-0.log", 3), ("node-1.log", 1), ("node-1.log", 2)}
    assert not run.owns(on(5)) and run.owns(on(2)) and not run.owns(on(0, source="node-0.log", node=None))
    assert gpus({}, processes[:3]).every == frozenset()
    every = gpus({}, [process(0, "all", source="node-0.log"), process(1, "all")])
    assert every.every == {"node-0.log", "node-1.log"}


def test_whether_every_rank_named_its_gpus_is_known_only_for_a_world_of_ranks():
    assert gpus({0: report(0, gpu_uuid="GPU-0aaa")}, [], world=1).known
    assert not gpus({}, [], world=0).known


def test_an_event_without_a_node_name_is_on_the_node_its_log_goes_by():
    run = RunGpus(every=frozenset({"n1"}), names={"node-1.log": "n1"}, known=True, shared=True)
    assert run.owns(on(5, node=None))
    assert not run.owns(on(5, node=None, source="node-0.log"))


def test_a_gpu_lost_is_hardware_and_a_ranks_error_is_told_beside_it_ahead_of_a_nearer_program_xid():
    lost = seen_on(1, kind="lost", xid=None, at=990.0)
    assert lost.klass == "hardware" and lost.rule == "gpu_lost" and lost.as_dict()["class"] == "hardware"
    assert beside_error([seen_on(1, at=1004.9), lost], 1, 1005.0) is lost
