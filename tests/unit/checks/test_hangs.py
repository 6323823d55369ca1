"""Stalled ranks from real stacks: the workload's watchdog captures them, the suite parses and classifies them.

Each stack here is captured from a real thread of this process by the workload's own capture code
(``workload_watchdog.thread_stacks``), encoded as the workload writes it (``workload_watchdog.encode_stack``), parsed by
:mod:`rollcall.ranklog` and classified by :mod:`rollcall.evidence.hangs`.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from datetime import timedelta

import pytest

from rollcall.checks.hangs import HUNG, WAITING, hangs
from rollcall.checks.runview import RunView
from rollcall.evidence.hangs import DDP_WAIT, classify, resolve, stall_of, stalls, stop_reason
from rollcall.judge import judge
from rollcall.ranklog import Frame, RollCall
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank import cli
from rollcall_workload.rank import watchdog as workload_watchdog
from tests.unit.helpers import LineLog, roll_of_lines, two_by_two
from tests.waiting import wait_until


def _captured(name: str, where: str) -> list:
    """The frames of thread ``name`` once its innermost frame runs function ``where``."""

    def probe():
        for thread, _, frames in workload_watchdog.thread_stacks():
            if thread == name and frames and frames[-1][2] == where:
                return frames
        return None

    return wait_until(f"thread {name} in {where}", probe, timeout=30, every=0.01)


def _stack_line(rank: int, frames: list, dump: int = 1, **fields) -> bytes:
    return workload_watchdog.encode_stack(
        rank,
        4,
        frames,
        dump=dump,
        thread=fields.pop("thread", "MainThread"),
        main=fields.pop("main", True),
        threads=1,
        phase=fields.pop("phase", "epoch 1 end"),
        stalled_s=61.0,
        hang_after=60.0,
        **fields,
    )


def _start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=f"test-{target.__name__}", daemon=True)
    thread.start()
    return thread


def sleeps_forever() -> None:
    time.sleep(3600)


def reads_a_pipe(fd: int) -> None:
    select.select([fd], [], [])


RENDEZVOUS_S = 10


def joins_a_world_of_two(path: str) -> None:
    import torch.distributed as dist

    # The second rank never comes: the wait ends at the rendezvous timeout, with an error nobody needs.
    with contextlib.suppress(Exception):
        dist.init_process_group(
            "gloo",
            init_method=f"file://{path}",
            rank=0,
            world_size=2,
            timeout=timedelta(seconds=RENDEZVOUS_S),
        )


def test_a_thread_in_a_sleep_is_hung_in_a_sleep_at_its_innermost_frame():
    _start(sleeps_forever)  # a daemon: it sleeps on unseen after the test, as a hung rank would
    frames = _captured("test-sleeps_forever", "sleeps_forever")
    roll = roll_of_lines([_stack_line(1, frames)])
    stall = stall_of(roll.ranks[1])
    assert stall is not None and not stall.waiting and stall.where == "a sleep"
    # none of these frames is the workload's own: the innermost frames of any code are shown
    assert str(stall.frames[0]).startswith(f"{__file__}:") and "in sleeps_forever: time.sleep(3600)" in str(
        stall.frames[0]
    )


def test_a_thread_blocked_reading_a_pipe_is_hung_in_io():
    read, write = os.pipe()
    try:
        thread = _start(reads_a_pipe, read)
        frames = _captured("test-reads_a_pipe", "reads_a_pipe")
        assert classify(tuple(Frame(*f) for f in frames)) == (False, "I/O")
    finally:
        os.write(write, b"x")
        thread.join(timeout=30)
        os.close(read)
        os.close(write)
    assert not thread.is_alive()


def test_a_thread_waiting_in_the_rendezvous_of_torch_distributed_is_waiting(tmp_path):
    import torch.distributed  # noqa: F401

    store = tmp_path / "store"
    thread = _start(joins_a_world_of_two, str(store))
    try:
        frames = wait_until(
            "the rendezvous on a torch.distributed frame",
            lambda: next(
                (
                    f
                    for t, _, f in workload_watchdog.thread_stacks()
                    if t == "test-joins_a_world_of_two" and any("torch/distributed/" in x[0] for x in f)
                ),
                None,
            ),
            timeout=60,
            every=0.05,
        )
        waiting, where = classify(tuple(Frame(*f) for f in frames))
        assert (waiting, where) == (True, "init_process_group"), frames
    finally:
        thread.join(timeout=RENDEZVOUS_S + 60)
    assert not thread.is_alive()


class BlockingDataset:
    """A map-style dataset whose first item waits until the test lets it go, as a stuck read would."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        self.gate.wait(60)
        return index


def iterates_a_data_loader(dataset: BlockingDataset) -> None:
    from torch.utils.data import DataLoader

    for _ in DataLoader(dataset, batch_size=1):
        pass


def test_a_thread_stuck_in_the_data_loader_is_hung_in_the_data_loader():
    import torch.utils.data  # noqa: F401

    dataset = BlockingDataset()
    thread = _start(iterates_a_data_loader, dataset)
    try:
        frames = _captured("test-iterates_a_data_loader", "wait")  # threading.Event.wait, under __getitem__
        assert any("torch/utils/data/" in f[0] for f in frames)
        assert classify(tuple(Frame(*f) for f in frames)) == (False, "the data loader")
    finally:
        dataset.gate.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


def runs_a_backward_that_waits(gate: threading.Event) -> None:
    import torch

    class Waits(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            gate.wait(60)  # as DDP's gradient all-reduce waits, or a stuck kernel
            return grad * 2

    Waits.apply(torch.ones(2, requires_grad=True)).sum().backward()


def test_a_thread_stalled_in_backward_is_ambiguous_waiting_beside_a_hung_rank_else_hung():
    import torch  # noqa: F401

    gate = threading.Event()
    thread = _start(runs_a_backward_that_waits, gate)
    try:
        frames = wait_until(
            "the backward to wait",
            lambda: next(
                (
                    f
                    for t, _, f in workload_watchdog.thread_stacks()
                    if t == "test-runs_a_backward_that_waits" and f and f[-1][2] == "wait" and len(f) > 3
                ),
                None,
            ),
            timeout=60,
            every=0.01,
        )
    finally:
        gate.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    sleeping = [["train.py", 1585, "_maybe_inject_fault", "time.sleep(3600)", True]]
    roll = roll_of_lines([_stack_line(0, frames), _stack_line(1, sleeping)])
    stalled = stall_of(roll.ranks[0])
    assert stalled is not None and stalled.ambiguous and not stalled.waiting
    hung, waiting = resolve(stalls(roll.ranks))
    assert [s.rank for s in hung] == [1] and [(s.rank, s.where) for s in waiting] == [(0, DDP_WAIT)]
    hung, waiting = resolve(stalls({0: roll.ranks[0]}))
    assert [s.rank for s in hung] == [0] and waiting == [] and hung[0].where.startswith("backward")


def test_store_and_work_waits_read_as_waiting_by_their_line():
    store = (Frame("x.py", 3, "f", "value = store.get('ready')", True),)
    work = (Frame("x.py", 4, "g", "work.wait()", True),)
    assert classify(store) == (True, "store get/wait")
    assert classify(work) == (True, "work.wait")
    loader = (Frame("/l/torch/utils/data/dataloader.py", 9, "__next__", "data = self._next_data()", False),)
    assert classify(loader) == (False, "the data loader")
    assert classify((Frame("x.py", 1, "step", "y = model(x)", True),)) == (False, "its own compute")


def test_a_new_dump_replaces_the_last_and_resumed_withdraws_it():
    frames = [["train.py", 10, "run", "time.sleep(1)", True]]
    resumed = contract.encode_event("resumed", 2, 4, dump=1, stalled_s=70.0, phase="epoch 2 step 1")
    roll = roll_of_lines(
        [_stack_line(2, frames, dump=1), resumed, _stack_line(2, frames, dump=1, thread="late")]
    )
    assert roll.ranks[2].stall is None  # the late line of the withdrawn dump is ignored
    roll = roll_of_lines(
        [_stack_line(2, frames, dump=1, phase="a"), _stack_line(2, frames, dump=2, phase="b")]
    )
    assert roll.ranks[2].stall is not None and (roll.ranks[2].stall.dump, roll.ranks[2].stall.phase) == (
        2,
        "b",
    )
    bad = contract.encode_event(  # a malformed line on purpose: written past the contract's check
        "stack", 2, 4, strict=False, dump=1, thread="MainThread", main=True, frames=[["x", "1"], 3]
    )
    roll = roll_of_lines([bad])
    stall = roll.ranks[2].stall
    assert (
        stall is not None and stall.main is not None and stall.main.frames == ()
    )  # malformed frames dropped


def test_a_deep_stack_keeps_its_innermost_frames_on_one_line_under_the_limit():
    frames = [[f"/very/long/path/{'d' * 60}/m{i}.py", i, f"f{i}", "x" * 150, False] for i in range(200)]
    line = _stack_line(0, frames)
    assert len(line) < contract.MAX_LINE_BYTES and line.count(b"\n") == 1
    stall = stall_of(roll_of_lines([line]).ranks[0])
    assert stall is not None and stall.dump.main is not None
    kept = stall.dump.main
    assert kept.frames[-1].function == "f199" and kept.dropped == 200 - len(kept.frames) > 0


def _stalled_world(hung_rank: int, world: int = 4, op: str = "barrier") -> RollCall:
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    lines = []
    for r in range(world):
        if r == hung_rank:
            frames = [
                ["train.py", 1600, "main", "run(args, env, log)", True],
                ["train.py", 1509, "run", "_maybe_inject_fault(env.rank)", True],
                ["train.py", 1585, "_maybe_inject_fault", "time.sleep(3600)", True],
            ]
        else:
            frames = [
                ["train.py", 1490, "run", 'acc.barrier(f"rollcall-epoch-{epoch}")', True],
                ["train.py", 900, "barrier", "dist.barrier()", True],
                [
                    "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
                    81,
                    "wrapper",
                    "",
                    False,
                ],
                [c10d, 4800, op, "work.wait()", False],
            ]
        lines.append(_stack_line(r, frames))
    return roll_of_lines(lines)


def test_the_verdict_names_the_hung_rank_where_it_sleeps_and_folds_the_waiting_ones():
    roll = _stalled_world(1)
    verdict = judge(Observed(roll, Layout(2, 2)))
    hung, waiting = verdict.of_kind(HUNG), verdict.of_kind(WAITING)
    assert [p.ranks.keys() for p in hung] == [{1}]
    assert verdict.problems[0].startswith("rank 1 (node 0, pod node-0) hung in a sleep, not in a collective")
    assert "train.py:1585 in _maybe_inject_fault: time.sleep(3600) <- train.py:1509 in run" in hung[0].message
    assert [p.message for p in waiting] == [
        "ranks 0, 2-3 waiting in a collective (barrier) for the hung rank"
    ]


def test_the_job_is_ended_once_every_open_rank_is_stalled():
    roll = _stalled_world(1)
    reason = stop_reason(roll, 4)
    assert reason is not None and reason.startswith("rank(s) 1 hung")
    assert stop_reason(roll, 5) is None  # rank 4 not heard from: it may not have started
    roll.ranks[3].stall = None  # rank 3 made progress
    assert stop_reason(roll, 4) is None
    roll.ranks[3].complete = True  # ... and completed: the others still hold up the job
    assert stop_reason(roll, 4) is not None
    waiting_only = _stalled_world(-1)
    assert "no rank made progress" in (stop_reason(waiting_only, 4) or "")


def test_the_watchdog_dumps_at_the_bound_again_each_bound_and_says_when_the_rank_resumes():
    now = [0.0]
    log = LineLog()
    dog = workload_watchdog.Watchdog(log, hang_after=None, first_step=120.0, clock=lambda: now[0])
    assert dog.bound() == 120.0  # until the first step completes
    dog.first_step_done()
    assert dog.bound() == workload_watchdog.HANG_FLOOR_S  # no step time yet: the floor
    for seconds in (4.0, 5.0, 6.0):
        dog.step_time(seconds)
    assert dog.bound() == workload_watchdog.HANG_STEP_MULTIPLE * 5.0  # 20 x the median, above the floor
    dog.beat("epoch 1 end")
    now[0] = 99.0
    assert not dog.check() and log.lines == []
    now[0] = 100.0
    assert dog.check()
    assert not dog.check()  # not again until another bound has passed
    now[0] = 200.0
    assert dog.check()
    roll = roll_of_lines(log.lines)
    stall = roll.ranks[0].stall
    assert stall is not None and (stall.dump, stall.phase, stall.stalled_s) == (2, "epoch 1 end", 200.0)
    assert stall.main is not None and stall.main.thread == threading.current_thread().name
    dog.beat("epoch 2 barrier")
    assert roll_of_lines(log.lines).ranks[0].stall is None


def test_an_explicit_hang_after_holds_after_the_first_step_and_is_the_first_steps_floor():
    dog = workload_watchdog.Watchdog(LineLog(), hang_after=5.0, first_step=120.0)
    assert dog.bound() == 120.0
    dog.first_step_done()
    assert dog.bound() == 5.0
    assert workload_watchdog.Watchdog(LineLog(), hang_after=500.0, first_step=120.0).bound() == 500.0
    assert (
        workload_watchdog.first_step_bound("xla", False) == 1800.0
        and workload_watchdog.first_step_bound("cpu", True) == 600.0
    )


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_bad_hang_after_is_refused_by_the_parser(value):
    with pytest.raises(cli.CommandLineError, match="argument --hang-after: must be a number > 0"):
        cli.parse_args(["--hang-after", value])


def test_the_predicate_names_the_hung_rank_then_the_waiting_ones_and_nothing_of_a_run_that_ended():
    found = list(hangs(RunView(Observed(_stalled_world(2), Layout(2, 2)), Criteria())))
    assert [p.kind for p in found] == [HUNG, WAITING]
    assert set(found[0].ranks) == {2} and found[0].message.startswith(
        "rank 2 (node 1, pod node-0) hung in a sleep"
    )
    assert "time.sleep(3600)" in found[0].ranks[2]
    assert set(found[1].ranks) == {0, 1, 3} and "waiting in a collective (barrier)" in found[1].message
    assert list(hangs(RunView(Observed(two_by_two(), Layout(2, 2)), Criteria()))) == []


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def test_a_stack_is_read_alike_with_windows_separators_and_an_empty_one_is_its_own_compute():
    c10d = Frame(
        "C:\\py\\Lib\\site-packages\\torch\\distributed\\distributed_c10d.py", 9, "barrier", "", False
    )
    assert classify((Frame("train.py", 1, "run", "dist.barrier()", True), c10d)) == (True, "barrier")
    loader = Frame(
        "C:\\py\\Lib\\site-packages\\torch\\utils\\data\\dataloader.py", 9, "__next__", "x()", False
    )
    assert classify((loader,)) == (False, "the data loader")
    sock = Frame("C:\\py\\Lib\\socket.py", 9, "accept", "fd, addr = self._accept()", False)
    assert classify((sock,)) == (False, "I/O")
    assert classify(()) == (False, "its own compute")


def test_only_torch_xlas_own_collectives_wait():
    xla = "/venv/lib/python3.11/site-packages/torch_xla/core/xla_model.py"
    assert classify((Frame(xla, 9, "all_reduce", "", False),)) == (True, "all_reduce")
    assert classify((Frame(xla, 9, "mark_step", "", False),)) == (False, "its own compute")
    assert classify((Frame("train.py", 9, "all_reduce", "total = x + y", True),)) == (
        False,
        "its own compute",
    )
    assert classify((Frame("/venv/torch_xla/distributed/xla_backend.py", 9, "rendezvous", "", False),)) == (
        True,
        "rendezvous",
    )


def test_a_rank_stalled_in_backward_beside_a_hung_rank_waits_in_ddps_all_reduce():
    backward = [
        ["train.py", 1, "step", "loss.backward()", True],
        ["/venv/torch/_tensor.py", 2, "backward", "torch.autograd.backward(", False],
        ["/venv/torch/autograd/__init__.py", 3, "backward", "_engine_run_backward(", False],
    ]
    sleeping = [["train.py", 1585, "_maybe_inject_fault", "time.sleep(3600)", True]]
    roll = roll_of_lines([_stack_line(0, backward), _stack_line(1, sleeping)])
    hung, waiting = resolve(stalls(roll.ranks))
    assert [(s.rank, s.waiting) for s in hung] == [(1, False)]
    assert [(s.rank, s.waiting, s.where, s.ambiguous) for s in waiting] == [(0, True, DDP_WAIT, True)]
