"""The gpu_events check: what the nodes' GPUs said during the run, tied to the rank on that GPU and judged.

An Xid, a double-bit ECC error and a lost GPU are faults nothing here can produce (no GPU on this machine):
each test writes the ``gpu_event`` line the node's monitor writes when NVML delivers one (the workload's own
encoder, as :mod:`rollcall_workload.node.gpu_listener` calls it; that listener is tested at the NVML boundary in
``tests/unit/test_gpu_events.py``), into the log of the node it happened on, and judges the whole roll call.
"""

from __future__ import annotations

from typing import Any

from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.gpu_events import GPU_EVENT, gpu_events
from rollcall.checks.runview import RunView
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.evidence.xids import XidClass, XidPolicy
from rollcall.ranklog import RollCall
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


def test_a_gpu_lost_that_no_rank_used_names_its_node_and_gpu_and_no_rank():
    verdict = verdict_of(roll_of([gpu_line("lost", gpu=5, uuid="GPU-5bbb", reason="NVML: GPU is lost")]))
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.ranks == {} and "(rule gpu_lost)" in problem.message
    assert "node 1 (n1) GPU 5, UUID GPU-5bbb, serial 165005" in problem.message
    assert "GPU lost (NVML: GPU is lost)" in problem.message and "(no rank on that GPU)" in problem.message
    assert verdict.unfit_nodes == ["n1"] and not verdict.passed


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
