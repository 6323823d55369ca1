"""Interleaved writers: whole writes always survive; torn writes may lose records but never invent values."""

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from rollcall.ranklog import RollCall


def record(rank, value):
    obj = {"event": "throughput", "rank": rank, "world_size": 64, "samples_per_sec": value}
    return "ROLLCALL " + json.dumps(obj, separators=(",", ":")) + "\n"


def parse(data: bytes) -> RollCall:
    roll = RollCall()
    p = roll.parser("pipe")
    p.feed(data)
    p.close()
    return roll


values = st.floats(min_value=0.001, max_value=1e6, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(st.data(), st.lists(st.lists(values, min_size=1, max_size=4), min_size=1, max_size=8))
def test_random_interleavings_never_yield_a_wrong_value(data, per_writer):
    """Writers emit each record in one write or as print() does (text, then newline), and a writer may die
    mid-record. Interleaved at random, each rank's value is exactly the last one it wrote whole."""
    writes, expected = [], {}
    for rank, tps in enumerate(per_writer):
        killed = data.draw(st.booleans())
        ops = []
        for i, tp in enumerate(tps):
            text = record(rank, tp)
            if killed and i == len(tps) - 1:
                ops.append(text[: data.draw(st.integers(1, len(text) - 2))])
                break
            ops += [text] if data.draw(st.booleans()) else [text[:-1], "\n"]
            expected[rank] = tp
        writes.append(ops)
    out = []
    while any(writes):
        live = [i for i, w in enumerate(writes) if w]
        i = live[data.draw(st.integers(0, len(live) - 1))]
        out.append(writes[i].pop(0))
    roll = parse("".join(out).encode())
    assert {r: rep.throughput for r, rep in roll.ranks.items()} == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=1, max_size=64), st.randoms())
def test_whole_records_in_any_order_are_all_read(tps, rnd):
    texts = [record(rank, tp) for rank, tp in enumerate(tps)]
    rnd.shuffle(texts)
    roll = parse("".join(f"[{i}]:{t}" for i, t in enumerate(texts)).encode())
    assert {r: roll.ranks[r].throughput for r in roll.ranks} == dict(enumerate(tps))


WRITER = r"""
import json, os, sys
rank, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for step in range(n):
    obj = {"event": "epoch_time", "rank": rank, "world_size": 32, "epoch": step + 1,
           "seconds": rank + (step + 1) / 1000, "pad": "x" * 200}
    text = "ROLLCALL " + json.dumps(obj, separators=(",", ":"))
    if mode == "single":
        os.write(1, (text + "\n").encode())
    else:
        print(text)  # text and newline are two writes under -u
"""


def run_writers(mode: str, procs: int = 32, lines: int = 50) -> RollCall:
    """Many real processes writing to one pipe at once."""
    r, w = __import__("os").pipe()
    children = [
        subprocess.Popen([sys.executable, "-u", "-c", WRITER, str(rank), str(lines), mode], stdout=w)
        for rank in range(procs)
    ]
    __import__("os").close(w)
    roll = RollCall()
    parser = roll.parser("pipe")
    with open(r, "rb") as stream:
        while chunk := stream.read1(65536):
            parser.feed(chunk)
    parser.close()
    for child in children:
        assert child.wait() == 0
    return roll


def test_single_write_lines_from_32_processes_on_one_pipe_all_survive():
    roll = run_writers("single")
    assert sorted(roll.ranks) == list(range(32))
    for rank, report in roll.ranks.items():
        assert report.epoch_times == {e: rank + e / 1000 for e in range(1, 51)}


def test_print_lines_from_32_processes_never_yield_wrong_values():
    roll = run_writers("print")
    read = sum(len(report.epoch_times) for report in roll.ranks.values())
    assert read > 0, "no record was read whole: the check below would hold of nothing"
    for rank, report in roll.ranks.items():
        for epoch, seconds in report.epoch_times.items():
            assert seconds == rank + epoch / 1000
