"""The rank-log contract as typed records: the writer holds its lines to them, the reader takes lines through them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rollcall_workload import contract

ROOT = Path(__file__).resolve().parents[2]


def test_docs_contract_md_is_what_the_records_say():
    text = (ROOT / "docs" / "contract.md").read_text()
    assert text == contract.markdown(), (
        "docs/contract.md differs from the contract's records: regenerate it with `make contract-docs` "
        "(python -m rollcall_workload.contract --markdown > docs/contract.md)"
    )


def test_the_reference_names_every_event_field_and_rule():
    text = contract.markdown()
    for name, record in contract.EVENTS.items():
        assert f"## `{name}`" in text
        for spec in contract.fields_of(record):
            assert f"| `{spec.name}` |" in text
    assert "`ROLLCALL`" in text and str(contract.MAX_LINE_BYTES) in text and "single `write(2)`" in text
    assert "| `samples_per_sec` | number | yes |" in text
    assert "| `compute_ms` | number \\| null | no |" in text


def test_every_event_the_suite_requires_is_declared():
    assert set(contract.REQUIRED_EVENTS) <= set(contract.EVENTS)
    assert contract.BANDWIDTH_SCOPES == ("world", "node", "pair")
    assert contract.COMPILE_CACHE_STATES == ("hit", "miss", "off")


@pytest.mark.parametrize(
    ("event", "fields", "problem"),
    [
        ("epoch_time", {"epoch": 1}, "'seconds' is missing"),
        ("epoch_time", {"seconds": "0.3"}, "seconds='0.3' is not number"),
        ("epoch_time", {"seconds": 0.3, "epoch": True}, "epoch=True is not integer"),
        ("epoch_time", {"seconds": 0.3, "secs": 1}, "'secs' is not in its record"),
        (
            "bandwidth",
            {"scope": "rack", "ranks": "0-1", "nodes": "0", "bytes": 8, "algbw_gbps": 1.0, "busbw_gbps": 1.0},
            "scope='rack'",
        ),
        ("stack", {"dump": 1, "thread": "t", "frames": [["f", "1", "g", "c", True]]}, "frames="),
        ("start", {"kernels": {"attention": 1}}, "kernels="),
        ("throughput", {"samples_per_sec": 1.0, "compile_cache": "warm"}, "compile_cache='warm'"),
        ("hello", {}, "no event 'hello'"),
    ],
)
def test_a_line_that_breaks_its_record_raises_in_tests(event, fields, problem):
    with pytest.raises(contract.ContractError, match=problem):
        contract.encode_event(event, 0, 1, **fields)


def test_facts_take_any_fact_but_unknown_is_reasons():
    contract.encode_event("facts", 0, 1, driver="580", gpus=8, unknown={"ecc": "Not Supported"})
    with pytest.raises(contract.ContractError, match="unknown="):
        contract.encode_event("facts", 0, 1, unknown={"ecc": 3})


def test_a_real_run_writes_the_line_and_says_the_breach_once(monkeypatch, capsys):
    monkeypatch.delenv(contract.STRICT_ENV)
    first = contract.encode_event("epoch_time", 0, 1, epoch=1, seconds="slow")
    contract.encode_event("epoch_time", 0, 1, epoch=2, seconds="slow")
    assert json.loads(first[len(contract.EVENT_PREFIX) :])["seconds"] == "slow"
    err = capsys.readouterr().err
    assert err.count("broke its contract") == 1 and "seconds='slow' is not number" in err


def test_non_finite_numbers_are_checked_as_numbers_and_written_null():
    data = contract.encode_event("epoch_time", 0, 1, epoch=1, seconds=0.5, loss=math.nan)
    assert json.loads(data[len(contract.EVENT_PREFIX) :])["loss"] is None


def test_the_reader_takes_what_it_can_and_drops_what_is_not_a_record():
    def read(**obj):
        return contract.read({"event": "epoch_time", "rank": 1, **obj})

    rec = read(seconds=1, epoch=2, steps="many", loss=None, extra=[1])
    assert isinstance(rec, contract.EpochTime)
    assert (rec.seconds, rec.epoch, rec.steps, rec.loss) == (1.0, 2, None, None)
    assert isinstance(rec.seconds, float)
    assert read(seconds=1).loss is contract.ABSENT and read(seconds=1).epoch == 0
    assert read(seconds="1") is None and read(epoch=1) is None  # the required field, wrong or missing
    assert read(seconds=1, epoch="2") is None  # strict: present, it must be an integer
    assert contract.read({"event": "epoch_time", "rank": True, "seconds": 1}) is None
    assert contract.read({"event": "gossip", "rank": 1}) is None
    stack = contract.read(
        {
            "event": "stack",
            "rank": 0,
            "dump": 1,
            "thread": "t",
            "frames": [["a", 1, "f", "c", True], ["x", "1"], 3],
        }
    )
    assert isinstance(stack, contract.Stack) and stack.frames == [("a", 1, "f", "c", True)]  # partial
    start = contract.read({"event": "start", "rank": 0, "kernels": {"a": "on: ok", "b": 2}})
    assert isinstance(start, contract.Start) and start.kernels == {"a": "on: ok"}
    bw = contract.read(
        {
            "event": "bandwidth",
            "rank": 0,
            "scope": "node",
            "ranks": "0-1",
            "nodes": "0",
            "bytes": 8,
            "algbw_gbps": 1,
            "busbw_gbps": 2.5,
            "sweep": [[4, 1], [8, "x"]],
        }
    )
    assert (
        isinstance(bw, contract.Bandwidth) and bw.sweep == () and bw.algbw_gbps == 1.0
    )  # sweep is whole or none


LINES = [
    '{"event":"epoch_time","rank":1,"world_size":4,"epoch":2,"seconds":1,"loss":null,"steps":5,"param_digest":"ab","x":1}',
    '{"event":"epoch_time","rank":1,"world_size":4,"epoch":3,"seconds":0.5,"loss":"bad","steps":true}',
    '{"event":"epoch_time","rank":2,"epoch":"4","seconds":0.5}',
    '{"event":"epoch_time","rank":2,"seconds":NaN,"loss":Infinity}',
    '{"event":"epoch_time","rank":2,"seconds":1,"event":"complete","param_digest":"cd"}',
    '{"event":"complete","rank":3,"param_digest":7,"time":12.5} ROLLCALL {"event":"complete","rank":4}',
    '{"event":"bandwidth","rank":0,"scope":"node","ranks":"0-1","nodes":"0","bytes":8,"algbw_gbps":1,"busbw_gbps":2,"sweep":[[4,1],[8,2]],"mismatch":{"iters":"x","got":1}}',
    '{"event":"bandwidth","rank":1,"scope":"node","ranks":"1-0","nodes":"0","bytes":8,"algbw_gbps":1,"busbw_gbps":2}',
    '{"event":"bandwidth","rank":1,"scope":"pair","ranks":"0-1","nodes":"0-1","bytes":8,"algbw_gbps":1,"busbw_gbps":2,"sweep":[[0,1]]}',
    '{"event":"stack","rank":5,"dump":1,"thread":"MainThread","main":true,"frames":[["a.py",1,"f","c",true],["x"]],"phase":"p","stalled_s":3}',
    '{"event":"resumed","rank":6,"dump":1}',
    '{"event":"stack","rank":6,"dump":1,"thread":"t","frames":[]}',
    '{"event":"kernels","rank":7,"kernels":{"attention":"off: why","gelu":3}}',
    '{"event":"error","rank":8,"message":"boom","time":"late"}',
    '{"event":"start","rank":9,"node_rank":1,"kernels":{"a":"on: ok"},"extra":{"k":1}}',
    '{"event":"throughput","rank":9,"samples_per_sec":12,"compute_ms":"x","compile_cache":"hit","compile_s":2}',
    '{"event":"facts","rank":9,"driver":"580","unknown":{"ecc":"n/a"}}',
    '{"event":"gossip","rank":9}',
    '{"event":"complete","rank":true}',
]


def _parse(monkeypatch, typed: bool):
    from rollcall import ranklog

    if not typed:
        monkeypatch.setattr(ranklog.parser, "_TYPED", {})
    roll = ranklog.RollCall()
    parser = roll.parser("log")
    parser.feed("".join(f"[default0]:ROLLCALL {line}\r\n" for line in LINES).encode())
    parser.close()
    return roll


def test_the_fast_path_reads_every_line_as_the_object_path_does(monkeypatch):
    fast = _parse(monkeypatch, typed=True)
    slow = _parse(monkeypatch, typed=False)
    assert fast.records == slow.records == 16
    assert repr(fast.ranks) == repr(slow.ranks)  # NaN compares unequal; its repr does not
    r1, r2 = fast.ranks[1], fast.ranks[2]
    assert r1.epoch_times == {2: 1.0, 3: 0.5} and r1.epoch_steps == {2: 5} and r1.digests == {2: "ab"}
    assert math.isnan(r1.losses[2]) and 3 not in r1.losses
    assert 4 not in r2.epoch_times and r2.complete and r2.final_digest == "cd"  # the last "event" counts
    assert fast.ranks[3].final_digest is None and fast.ranks[4].complete
    assert fast.ranks[0].bandwidth[("node", (0,))].sweep == ((4, 1.0), (8, 2.0))
    assert fast.ranks[1].bandwidth[("pair", (0, 1))].sweep == ()
    assert fast.ranks[7].kernels == {"attention": "off: why"} and fast.ranks[6].stall is None
    assert fast.ranks[5].stall is not None and len(fast.ranks[5].stall.threads[0].frames) == 1
    assert fast.ranks[9].start == {"node_rank": 1, "kernels": {"a": "on: ok"}, "extra": {"k": 1}}
    assert fast.ranks[9].compute_ms is None and fast.ranks[9].facts == {"driver": "580"}
