"""The flight recorder: the workload's ``collectives`` line from a real dump, and the suite naming from them.

The records the evidence reads are encoded as the workload writes them (``contract.encode_event``) beside stack
dumps encoded by the workload's watchdog, parsed by :mod:`rollcall.ranklog` and judged whole
(:func:`rollcall.judge.judge`). The dump itself comes from torch.distributed's own recorder on gloo, in a
process of its own (the recorder's size is read when torch loads).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollcall.checks.hangs import HUNG, WAITING
from rollcall.evidence.flight import Dumps, dumps, stuck
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


def _dump_files(root, ranks, stall=1, ppn=2):
    """Each rank's whole dump where the local backend's node writes it, touched: its path by rank."""
    files = {}
    for r in ranks:
        path = root / f"node-{r // ppn}-monitor" / "flight" / f"stall-{stall}-rank-{r}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        files[r] = str(path)
    return files


@pytest.mark.parametrize("gil", [False, True], ids=["every rank wrote one", "rank 1 wrote none"])
def test_the_first_line_the_records_name_a_rank_in_says_torchs_analysis_of_the_whole_dumps(tmp_path, gil):
    """The dumps lie where the nodes' monitor directories are (the artifacts directory): the command reads
    that one, with ``--allow-incomplete-ranks`` where a rank wrote none; the others' line does not repeat it."""
    root = tmp_path / "artifacts dir"  # a path a shell must have quoted
    files = _dump_files(root, [0, 2, 3] if gil else range(4))
    lines = []
    for r in range(4):
        if r in files:
            lines.append((r, _record(r, {"0": WAITING_TAIL if r != 1 else WAITING_TAIL[:2]}, file=files[r])))
        lines.append((r, _stack(r, SLEEPS if r == 1 else WAITS)))
    verdict = _judge(lines)
    (hung,) = verdict.of_kind(HUNG)
    command = f"python -m torch.distributed.flight_recorder.fr_trace '{root}' --prefix stall-1-rank-"
    expected = f"; torch's analysis of the whole dumps: {command}{' --allow-incomplete-ranks' if gil else ''}"
    assert hung.message.endswith(expected), hung.message
    (waiting,) = verdict.of_kind(WAITING)
    assert "fr_trace" not in waiting.message


def test_dumps_kept_where_this_machine_cannot_read_them_say_no_command():
    """On Kubernetes each pod writes its dump into its own emptyDir: the path is not this machine's."""
    lines = []
    for r in range(4):
        file = f"/rollcall-monitor/flight/stall-1-rank-{r}"
        lines.append((r, _record(r, {"0": WAITING_TAIL if r != 1 else WAITING_TAIL[:2]}, file=file)))
        lines.append((r, _stack(r, SLEEPS if r == 1 else WAITS)))
    (hung,) = _judge(lines).of_kind(HUNG)
    assert "never entered barrier #13" in hung.message and "fr_trace" not in hung.message, hung.message


def test_the_dumps_read_are_of_the_stall_the_most_records_are_of(tmp_path):
    """Rank 1 resumed and stalled again: its record is of its second stall, the others' of their first. The
    command reads the first stall's dumps and lets rank 1's be missing; a name not ending in its rank's
    number is no dump of it."""
    files = {**_dump_files(tmp_path, [0, 2, 3], ppn=4), **_dump_files(tmp_path, [1], stall=2, ppn=4)}
    files[3] = files[3][:-1] + "9"
    lines = [(r, _record(r, {"0": WAITING_TAIL}, file=f, dump=1 + (r == 1))) for r, f in files.items()]
    found = dumps(_roll(lines).ranks, 4)
    assert found == Dumps(str(tmp_path), "stall-1-rank-", (0, 2), 4) and found.missing == (1, 3)
    assert dumps(_roll(lines).ranks, 4, exists=lambda _: False) is None
    assert dumps(_roll(lines[:0]).ranks, 4) is None


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
    """The recorder's dump (PyTorch's, decoded) of the default group's collectives ``tail``."""
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
    return {"entries": entries}


def test_a_rank_that_stalled_resumed_and_stalled_again_writes_the_second_stalls_record():
    """Rank 1's own watchdog and recorder: it stalls in all_reduce #12 (dumps 1-2), resumes, and stalls again
    in barrier #13 with the others (dump 3). Its second stall writes its record, so the records of ranks 0-4
    name only rank 5, which holds the GIL without one; rank 1 waits with the others, never named for none."""
    world, now = 6, [0.0]
    log = LineLog(rank=1, world_size=world)
    dumps = iter([_raw_dump([*WAITING_TAIL[:1], [12, "all_reduce", False]]), _raw_dump(WAITING_TAIL)])
    recorder = flight.FlightRecorder(log, "gloo", None, read=lambda _: next(dumps), groups=dict)
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
    recorder = flight.FlightRecorder(log, "gloo", None, read=lambda _: _raw_dump(WAITING_TAIL), groups=dict)
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
    writes is summarized as the suite reads it, and the recorder writes it whole beside its line, as torch's
    analyser reads it: a pickle named for its stall and rank, with the groups gloo's recorder left out of its
    ``pg_config`` written there from torch's own table."""
    script = textwrap.dedent(
        """
        import pickle, sys, time
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
            dump = flight.read_dump("gloo")
            entries = dump["entries"]
            if all(e.get("retired") or e.get("state") == "completed" for e in entries) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with open(sys.argv[1], "wb") as f:
            pickle.dump((dump, flight.process_groups()), f)
        """
    )
    env = {**os.environ, **flight.FLIGHT_RECORDER_ENV}
    out = tmp_path / "dump.pickle"
    subprocess.run(
        [sys.executable, "-c", script, str(out)], env=env, capture_output=True, check=True, timeout=120
    )
    dump, groups = pickle.loads(out.read_bytes())
    assert groups == {"0": flight.Group("default_pg", (0,)), "1": flight.Group("second", (0,))}
    fields = flight.summarize(dump, {name: list(g.ranks) for name, g in groups.items()})
    assert fields["tails"] == {
        "0": [(1, "all_reduce", True), (2, "barrier", True)],
        "1": [(1, "all_reduce", True)],
    }
    assert fields["labels"] == {"0": "default_pg", "1": "second"}
    assert fields["members"] == {"0": "0", "1": "0"} and fields["entries"] == 3 and not fields["wrapped"]
    assert {"0", "1"}.isdisjoint(dump["pg_config"])  # gloo's recorder keeps no group's config

    log = LineLog(rank=0, world_size=1)
    recorder = flight.FlightRecorder(log, "gloo", str(tmp_path), read=lambda _: dump, groups=lambda: groups)
    recorder.record(1)
    recorder.record(2)  # once per stall
    (line,) = log.lines
    said = json.loads(line.decode().split(" ", 1)[1])
    assert (
        said["event"] == "collectives"
        and said["dump"] == 1
        and said["tails"]["0"][-1] == [2, "barrier", True]
    )
    assert said["file"] == str(tmp_path / "flight" / "stall-1-rank-0")
    whole = pickle.loads(Path(said["file"]).read_bytes())
    assert whole["entries"] == dump["entries"] and whole["version"] == dump["version"]  # torch's own, whole
    assert whole["pg_config"] == {
        **dump["pg_config"],
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0]"},
        "1": {"name": "1", "desc": "second", "ranks": "[0]"},
    }
    assert whole[flight.ADDED] == ["0", "1"]
    assert sorted(p.name for p in (tmp_path / "flight").iterdir()) == ["stall-1-rank-0"]  # no part left


def test_each_stall_writes_its_own_dump_and_a_groups_config_the_dump_holds_is_torchs(tmp_path):
    """NCCL's recorder writes the config of the groups that made a communicator: those stay as torch wrote
    them, a group it lacks is added; the second stall's dump goes to a file of its own."""
    nccl = json.loads((Path(__file__).parent / "data" / "nccl-flight-record.json").read_text())
    groups = {"0": flight.Group("default_pg", (0, 1)), "2": flight.Group("undefined", (1,))}
    out = flight.for_analysis(nccl, groups)
    assert out["pg_config"]["0"] == nccl["pg_config"]["0"] and out["pg_config"]["1"] == nccl["pg_config"]["1"]
    assert out["pg_config"]["2"] == {"name": "2", "desc": "undefined", "ranks": "[1]"} and out[
        flight.ADDED
    ] == ["2"]
    assert flight.ADDED not in flight.for_analysis(nccl, {"0": groups["0"]})  # nothing added, nothing said

    log = LineLog(rank=1, world_size=2)
    recorder = flight.FlightRecorder(log, "nccl", str(tmp_path), read=lambda _: nccl, groups=lambda: groups)
    recorder.record(1)
    recorder.resumed(1)
    recorder.record(2)
    said = [json.loads(line.decode().split(" ", 1)[1])["file"] for line in log.lines]
    assert said == [str(tmp_path / "flight" / f"stall-{n}-rank-1") for n in (1, 2)]
    assert all(os.path.isfile(f) for f in said)


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
    flight.FlightRecorder(empty, "gloo", None, read=lambda _: {"entries": []}, groups=dict).record(1)
    flight.FlightRecorder(broken, "gloo", None, read=lambda _: pickle.loads(b""), groups=dict).record(1)
    flight.FlightRecorder(xla, "xla", None, unavailable="torch_xla keeps none").record(1)
    said = [json.loads(log.lines[0].decode().split(" ", 1)[1]) for log in (empty, broken, xla)]
    assert [s["available"] for s in said] == [False] * 3
    assert "TORCH_FR_BUFFER_SIZE" in said[0]["why"] and "EOFError" in said[1]["why"]
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
