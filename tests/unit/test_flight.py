"""The flight recorder: the workload's ``collectives`` line from a real dump, and the suite naming from them.

The records the evidence reads are encoded as the workload writes them (``contract.encode_event``) beside stack
dumps encoded by the workload's watchdog, parsed by :mod:`rollcall.ranklog` and judged whole
(:func:`rollcall.judge.judge`). The dump itself comes from torch.distributed's own recorder on gloo, in a
process of its own (the recorder's size is read when torch loads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollcall.checks.hangs import HUNG, WAITING
from rollcall.evidence.flight import stuck
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank import flight
from rollcall_workload.rank import watchdog as workload_watchdog
from tests.unit.helpers import LineLog

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
WAITS = [["rank/run.py", 248, "run", "acc.barrier()", True], [C10D, 4800, "barrier", "work.wait()", False]]
BACKWARD = [
    ["rank/run.py", 194, "train_steps", "loss.backward()", True],
    [
        "/venv/lib/python3.11/site-packages/torch/_tensor.py",
        625,
        "backward",
        "torch.autograd.backward(",
        False,
    ],
]
SLEEPS = [["faults.py", 490, "inject_fault", "time.sleep(3600)", True]]
#: The default group's last collectives on a rank that went as far as the others: they wait in barrier #13.
WAITING_TAIL = [[11, "all_reduce", True], [12, "all_reduce", True], [13, "barrier", False]]


def _stack(rank, frames, world=4, **fields):
    return workload_watchdog.encode_stack(
        rank,
        world,
        frames,
        dump=1,
        thread="MainThread",
        main=True,
        threads=1,
        phase="epoch 2 barrier",
        stalled_s=61.0,
        hang_after=60.0,
        **fields,
    )


def _record(rank, tails, world=4, members=None, dump=1, **fields):
    return contract.encode_event(
        "collectives",
        rank,
        world,
        dump=dump,
        tails=tails,
        labels={"0": "default_pg", "1": "rollcall_fault"},
        members=members or {"0": f"0-{world - 1}"},
        entries=40,
        **fields,
    )


def _judge(lines, world=4):
    """The verdict on a world of ``world`` ranks, two per node, that said ``lines`` (each rank on its node)."""
    roll = RollCall()
    for node in range(world // 2):
        parser = roll.parser(f"node-{node}")
        parser.feed(b"".join(line for rank, line in lines if rank // 2 == node))
        parser.close()
    return judge(Observed(roll, Layout(world // 2, 2)))


def _world(culprit_frames, culprit_tails, others=WAITING_TAIL, culprit=1, world=4, **record):
    lines = []
    for r in range(world):
        frames, tails = (culprit_frames, culprit_tails) if r == culprit else (WAITS, {"0": others})
        if tails is not None:
            lines.append((r, _record(r, tails, world, **record)))
        if frames is not None:
            lines.append((r, _stack(r, frames, world)))
    return _judge(lines, world)


def test_a_rank_that_never_entered_the_collective_the_others_wait_in_is_named_with_it():
    verdict = _world(SLEEPS, {"0": WAITING_TAIL[:2]})
    (hung,) = verdict.of_kind(HUNG)
    assert set(hung.ranks) == {1}
    assert hung.message.startswith("rank 1 (node 0, pod node-0) hung in a sleep, not in a collective")
    assert hung.message.endswith(
        "; it never entered barrier #13 of the default group, which ranks 0, 2-3 (nodes 0-1) entered and "
        "wait in (flight recorder)"
    ), hung.message
    (waiting,) = verdict.of_kind(WAITING)
    assert (
        waiting.message
        == "ranks 0, 2-3 waiting in barrier #13 of the default group for rank 1 (flight recorder)"
    )


def test_a_rank_in_backward_that_entered_another_op_is_named_from_the_records_not_its_stack():
    verdict = _world(BACKWARD, {"0": [*WAITING_TAIL[:2], [13, "all_reduce", False]]})
    (hung,) = verdict.of_kind(HUNG)
    assert hung.message.startswith(
        "rank 1 (node 0, pod node-0) entered all_reduce as #13 of the default group, where ranks 0, 2-3 "
        "(nodes 0-1) entered barrier and wait in it (flight recorder); its stack: backward"
    ), hung.message
    assert verdict.ranks[1].notes[0].startswith("entered all_reduce as #13 of the default group at ")


def test_a_rank_waiting_by_its_stack_is_named_when_it_never_entered_the_other_groups_collective():
    """Rank 2 skipped an all_reduce of group 1 and waits in the default group's barrier, which the others
    never reach: its stack says waiting like theirs, the records tell it apart."""
    members = {"0": "0-3", "1": "0-3"}
    others = {"0": WAITING_TAIL[:2], "1": [[1, "all_reduce", False]]}
    verdict = _world(WAITS, {"0": WAITING_TAIL}, others=others["0"], culprit=2, members=members)
    assert verdict.of_kind(HUNG) == []  # the default group alone: rank 2 went further, nobody waits for it
    lines = []
    for r in range(4):
        lines.append((r, _record(r, {"0": WAITING_TAIL} if r == 2 else others, members=members)))
        lines.append((r, _stack(r, WAITS)))
    verdict = _judge(lines)
    (hung,) = verdict.of_kind(HUNG)
    assert hung.message.startswith(
        "rank 2 (node 1, pod node-1) never entered all_reduce #1 of group 1 (rollcall_fault), which ranks "
        "0-1, 3 (nodes 0-1) entered and wait in (flight recorder); its stack: barrier"
    ), hung.message
    (waiting,) = verdict.of_kind(WAITING)
    assert waiting.message.startswith("ranks 0-1, 3 waiting in all_reduce #1 of group 1 (rollcall_fault)")


def test_a_wrapped_ring_buffer_holds_only_the_last_collectives_and_names_from_those():
    """Rank 1's record ends earlier and starts earlier: where another rank's buffer no longer holds a number,
    that rank is left out of it, never taken as absent."""
    behind = [[s, "all_reduce", True] for s in range(5, 11)]
    ahead = [[s, "all_reduce", True] for s in range(8, 13)] + [[13, "barrier", False]]
    verdict = _world(SLEEPS, {"0": behind}, others=ahead, wrapped=True)
    (hung,) = verdict.of_kind(HUNG)
    assert "; it never entered all_reduce #11 of the default group, which ranks 0, 2-3" in hung.message


def test_a_rank_holding_the_gil_without_a_record_is_named_from_the_others():
    verdict = _world(SLEEPS, None)
    (hung,) = verdict.of_kind(HUNG)
    assert hung.message.endswith(
        "; it wrote no flight record (its Python could not run) while ranks 0, 2-3 (nodes 0-1) wait in "
        "barrier #13 of the default group (flight recorder)"
    ), hung.message


@pytest.mark.parametrize(
    "tails",
    [
        pytest.param(None, id="healthy: every record alike"),
        pytest.param(
            {"0": [*WAITING_TAIL[:2], [13, "barrier", True]]}, id="one finished what the rest wait in"
        ),
    ],
)
def test_records_that_agree_name_nobody(tails):
    verdict = _world(BACKWARD, tails or {"0": WAITING_TAIL})
    (hung,) = verdict.of_kind(HUNG)  # named by its stack alone, as without records
    assert "flight recorder" not in hung.message
    assert (
        verdict.of_kind(WAITING)[0].message
        == "ranks 0, 2-3 waiting in a collective (barrier) for the hung rank"
    )


def test_records_that_part_evenly_or_too_few_to_agree_name_nobody():
    lines = []
    for r in range(4):  # two ranks entered barrier #13, two never did: nothing can be told
        lines += [(r, _record(r, {"0": WAITING_TAIL if r < 2 else WAITING_TAIL[:2]})), (r, _stack(r, WAITS))]
    assert stuck(_roll(lines).ranks, 4, range(4)) == []
    two = [(r, _record(r, {"0": WAITING_TAIL[: 2 + r]}, world=2)) for r in range(2)]
    two += [(r, _stack(r, WAITS, world=2)) for r in range(2)]
    assert stuck(_roll(two).ranks, 2, range(2)) == []  # one other rank cannot outvote


def test_a_record_withdrawn_by_progress_does_not_count():
    lines = [(r, _record(r, {"0": WAITING_TAIL})) for r in (0, 2, 3)]
    lines += [(1, _record(1, {"0": WAITING_TAIL[:2]}))]
    lines += [(1, contract.encode_event("resumed", 1, 4, dump=1, stalled_s=70.0, phase="epoch 2 step 1"))]
    roll = _roll(lines)
    assert roll.ranks[1].flight is None
    assert stuck(roll.ranks, 4, (0, 2, 3)) == []  # rank 1 made progress: not stalled, its record gone


def _resumed(rank, dump, world=4):
    return contract.encode_event("resumed", rank, world, dump=dump, stalled_s=70.0, phase="epoch 2 step 1")


def test_a_resumed_withdraws_only_the_record_of_the_stall_it_ends():
    """Rank 1 stalled (dumps 1-2), resumed, and stalled again (dump 3): the second stall's record stands."""
    first, second = {"0": WAITING_TAIL[:2]}, {"0": WAITING_TAIL}
    lines = [(1, _record(1, first, dump=1)), (1, _resumed(1, 2)), (1, _record(1, second, dump=3))]
    flight = _roll(lines).ranks[1].flight
    assert flight is not None and flight.dump == 3 and flight.tails["0"][-1] == (13, "barrier", False)
    assert _roll([*lines, (1, _resumed(1, 3))]).ranks[1].flight is None  # the stall it ends: withdrawn
    for earlier in (
        2,
        0,
    ):  # the first stall's end read late, the node's monitor's (dump 0): the record stands
        flight = _roll([*lines, (1, _resumed(1, earlier))]).ranks[1].flight
        assert flight is not None and flight.dump == 3
    late = [(1, _record(1, first, dump=2))]  # a record of the first stall said after its end counts not
    assert _roll([*lines[:2], *late]).ranks[1].flight is None


@pytest.mark.parametrize(
    ("with_record", "without", "named"),
    [
        pytest.param(3, 1, {3}, id="3 with, 1 without: named"),
        pytest.param(4, 2, {4, 5}, id="4 with, 2 without: named"),
        pytest.param(3, 3, set(), id="3 with, 3 without: as many, nobody"),
        pytest.param(1, 3, set(), id="1 with, 3 without: nobody"),
    ],
)
def test_ranks_without_a_record_are_named_only_where_those_with_one_outnumber_them(
    with_record, without, named
):
    """Every record waits in barrier #13 of the default group: the ranks with none are named from them only
    where they are strictly fewer."""
    world = with_record + without
    lines = [(r, _record(r, {"0": WAITING_TAIL}, world)) for r in range(with_record)]
    lines += [(r, _stack(r, SLEEPS, world)) for r in range(with_record, world)]
    found = stuck(_roll(lines).ranks, world, range(world))
    assert {c.rank for hit in found for c in hit.culprits if c.how == "no_record"} == named
    if named:
        assert found[0].collective() == "barrier #13 of the default group"


def _raw_dump(tail):
    """The recorder's dump (PyTorch's JSON) of the default group's collectives ``tail``."""
    entries = [
        {
            "process_group": ["0", "default_pg"],
            "collective_seq_id": seq,
            "profiling_name": f"gloo:{op}",
            "retired": done,
            "record_id": i,
        }
        for i, (seq, op, done) in enumerate(tail)
    ]
    return json.dumps({"entries": entries}).encode()


def test_a_rank_that_stalled_resumed_and_stalled_again_writes_the_second_stalls_record():
    """Rank 1's own watchdog and recorder: it stalls in all_reduce #12 (dumps 1-2), resumes, and stalls again
    in barrier #13 with the others (dump 3). Its second stall writes its record, so the records of ranks 0-4
    name only rank 5, which holds the GIL without one; rank 1 waits with the others, never named for none."""
    world, now = 6, [0.0]
    log = LineLog(rank=1, world_size=world)
    dumps = iter([_raw_dump([*WAITING_TAIL[:1], [12, "all_reduce", False]]), _raw_dump(WAITING_TAIL)])
    recorder = flight.FlightRecorder(log, "gloo", None, read=lambda _: next(dumps), members=dict)
    dog = workload_watchdog.Watchdog(
        log, 60.0, 60.0, clock=lambda: now[0], stacks=lambda: [("MainThread", True, WAITS)], recorder=recorder
    )
    dog.joined()
    dog.first_step_done()
    dog.beat("epoch 2 step 1", step=True)
    for t in (61.0, 122.0):  # the first stall: its first dump writes the record, the second none
        now[0] = t
        assert dog.check()
    now[0] = 130.0
    dog.beat("epoch 2 barrier")  # it resumed: the stall of dumps 1-2 is over
    now[0] = 191.0
    assert dog.check()  # the second stall's first dump: dump 3
    said = [json.loads(line.decode().split(" ", 1)[1]) for line in log.lines]
    assert [(e["event"], e["dump"]) for e in said if e["event"] != "stack"] == [
        ("collectives", 1),
        ("resumed", 2),
        ("collectives", 3),
    ]
    lines = [(1, line) for line in log.lines]
    for r in (0, 2, 3, 4):
        lines += [(r, _record(r, {"0": WAITING_TAIL}, world)), (r, _stack(r, WAITS, world))]
    lines.append((5, _stack(5, SLEEPS, world)))
    verdict = _judge(lines, world)
    (hung,) = verdict.of_kind(HUNG)  # rank 1 is not named for a record it wrote
    assert set(hung.ranks) == {5} and "wrote no flight record" in hung.message, hung.message
    (waiting,) = verdict.of_kind(WAITING)
    assert set(waiting.ranks) == {0, 1, 2, 3, 4}, waiting.message


def test_the_recorder_writes_once_per_stall_and_never_for_a_stall_already_over():
    log = LineLog()
    recorder = flight.FlightRecorder(log, "gloo", None, read=lambda _: _raw_dump(WAITING_TAIL), members=dict)
    recorder.record(1)
    recorder.record(2)  # the same stall: nothing more
    recorder.resumed(2)
    recorder.record(2)  # a dump of the stall that ended, late (the watchdog's thread raced the beat): nothing
    recorder.record(3)  # the next stall's first dump
    recorder.record(4)
    said = [json.loads(line.decode().split(" ", 1)[1]) for line in log.lines]
    assert [(s["event"], s["dump"]) for s in said] == [("collectives", 1), ("collectives", 3)]


def _roll(lines):
    roll = RollCall()
    parser = roll.parser("node-0")
    parser.feed(b"".join(line for _, line in lines))
    parser.close()
    return roll


def test_the_workload_summarizes_torchs_own_dump_of_a_gloo_group(tmp_path):
    """A one-rank gloo world runs all_reduce, barrier and an all_reduce in a second group; the dump torch
    writes is summarized as the suite reads it, and the recorder writes it whole beside its line."""
    script = textwrap.dedent(
        """
        import json, sys, time
        from rollcall_workload.rank import flight
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        t = torch.ones(2)
        dist.all_reduce(t)
        dist.barrier()
        dist.all_reduce(t, group=dist.new_group([0], group_desc="second"))
        # torch marks an entry completed (or retired) from its own thread: under load the last can lag its return
        deadline = time.monotonic() + 60
        while True:
            raw = flight.read_dump("gloo")
            entries = json.loads(raw)["entries"]
            if all(e.get("retired") or e.get("state") == "completed" for e in entries) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        sys.stdout.buffer.write(raw)
        print()
        print(flight.group_members())
        """
    )
    env = {**os.environ, **flight.FLIGHT_RECORDER_ENV}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, check=True, timeout=120
    )
    raw, members = out.stdout.decode().splitlines()
    fields = flight.summarize(json.loads(raw), eval(members))
    assert fields["tails"] == {
        "0": [(1, "all_reduce", True), (2, "barrier", True)],
        "1": [(1, "all_reduce", True)],
    }
    assert fields["labels"] == {"0": "default_pg", "1": "second"}
    assert fields["members"] == {"0": "0", "1": "0"} and fields["entries"] == 3 and not fields["wrapped"]

    log = LineLog(rank=0, world_size=1)
    recorder = flight.FlightRecorder(
        log, "gloo", str(tmp_path), read=lambda _: raw.encode(), members=lambda: {"0": [0]}
    )
    recorder.record(1)
    recorder.record(2)  # once per stall
    (line,) = log.lines
    said = json.loads(line.decode().split(" ", 1)[1])
    assert (
        said["event"] == "collectives"
        and said["dump"] == 1
        and said["tails"]["0"][-1] == [2, "barrier", True]
    )
    assert (tmp_path / "rank-0.flight.json").read_bytes() == raw.encode() and said["file"].endswith(
        "rank-0.flight.json"
    )


def test_the_workload_reads_nccls_own_dump_as_it_reads_gloos():
    """NCCL's dump, pinned from a one-rank run on an H100 (torch 2.11, NCCL 2.28.9, hack/gpu/nccl_flight_dump.py):
    an all_reduce, a barrier (NCCL's is an all_reduce, ``all_reduce_barrier``) and an all_reduce of a second
    group, finished as NCCL says it (``state`` completed, never ``retired``). The multi-rank NCCL path is
    unproven here: NCCL cannot run two ranks on one GPU."""
    raw = (Path(__file__).parent / "data" / "nccl-flight-record.json").read_text()
    fields = flight.summarize(json.loads(raw), {"0": [0], "1": [0]})
    assert fields["tails"] == {
        "0": [(1, "all_reduce", True), (2, "all_reduce_barrier", True)],
        "1": [(1, "all_reduce", True)],
    }
    assert fields["labels"] == {"0": "default_pg", "1": "second"} and fields["entries"] == 3


def test_a_recorder_that_holds_nothing_says_why():
    empty, broken, xla = LineLog(), LineLog(), LineLog()
    flight.FlightRecorder(empty, "gloo", None, read=lambda _: b'{"entries": []}', members=dict).record(1)
    flight.FlightRecorder(broken, "gloo", None, read=lambda _: b"", members=dict).record(1)
    flight.FlightRecorder(xla, "xla", None, unavailable="torch_xla keeps none").record(1)
    said = [json.loads(log.lines[0].decode().split(" ", 1)[1]) for log in (empty, broken, xla)]
    assert [s["available"] for s in said] == [False] * 3
    assert "TORCH_FR_BUFFER_SIZE" in said[0]["why"] and "JSONDecodeError" in said[1]["why"]
    assert said[2]["why"] == "torch_xla keeps none"


def test_many_groups_stay_within_one_line():
    entries = [
        {
            "process_group": [str(g), "pair"],
            "collective_seq_id": 1,
            "profiling_name": "gloo:all_reduce",
            "retired": True,
            "record_id": g,
        }
        for g in range(300)
    ]
    fields = flight.summarize({"entries": entries}, {str(g): [g, g + 1] for g in range(300)})
    assert 0 < len(fields["tails"]) < 300 and "299" in fields["tails"]  # the newest groups kept
    assert len(contract.encode_event("collectives", 0, 2, dump=1, **fields)) < contract.MAX_LINE_BYTES


def test_a_frames_source_line_loses_its_comment_not_a_hash_in_a_string():
    """A hang's line never ends with a source comment (``# an exception is also written to ...``)."""
    strip = workload_watchdog.without_comment
    assert (
        strip("record(run)(args, env, log)  # an exception is also written") == "record(run)(args, env, log)"
    )
    assert strip('print("a # b")') == 'print("a # b")'
    assert strip("loss = train_steps(  # cut mid-call") == "loss = train_steps("
