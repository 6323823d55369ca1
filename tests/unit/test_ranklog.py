import io
import json

import pytest

from rollcall.ranges import ranges
from rollcall.ranklog import CompileCache, LogParser, RollCall, parse_files


def line(event, rank, world=4, **kw):
    return "ROLLCALL " + json.dumps(
        {"event": event, "rank": rank, "world_size": world, **kw}, separators=(",", ":")
    )


def full_rank(rank, world=4, tp=50.0, secs=(0.4, 0.5)):
    out = [line("start", rank, world, local_rank=rank % 2, node_rank=rank // 2, host="h", device="cpu")]
    out += [line("epoch_time", rank, world, epoch=i + 1, seconds=s) for i, s in enumerate(secs)]
    out += [line("throughput", rank, world, samples_per_sec=tp), line("complete", rank, world)]
    return out


def parse(text, fmt="auto", chunk=None):
    roll = RollCall()
    data = text.encode() if isinstance(text, str) else text
    parser = roll.parser("pod-0", fmt)
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        parser.feed(data[i : i + step])
    parser.close()
    return roll


def test_all_events_of_every_rank_are_read():
    roll = parse("\n".join(sum((full_rank(r) for r in range(4)), [])) + "\n")
    assert roll.missing(4) == {"throughput": [], "epoch_time": [], "complete": []}
    assert roll.ranks[2].throughput == 50.0
    assert roll.ranks[2].epoch_time == pytest.approx(0.45)
    assert roll.ranks[3].node_rank == 1
    assert roll.ranks[0].sources == {"pod-0"}


@pytest.mark.parametrize(
    "prefix",
    [
        "[default3]:",
        "[3]:",
        "2026-11-30T10:00:00.123456789Z ",
        "2026-11-30T10:00:00.123456789Z stdout F ",
        "\x1b[32m",
        "INFO 12:00:01 worker said: ",
    ],
)
def test_anything_may_stand_before_the_marker(prefix):
    roll = parse("".join(prefix + text + "\n" for text in full_rank(3)))
    assert (
        roll.ranks[3].has("throughput") and roll.ranks[3].has("complete") and roll.ranks[3].has("epoch_time")
    )


def test_ansi_colour_after_the_object_is_ignored():
    roll = parse("\x1b[1m" + line("throughput", 1, samples_per_sec=7.5) + "\x1b[0m\n")
    assert roll.ranks[1].throughput == 7.5


def test_crlf_endings():
    roll = parse("\r\n".join(full_rank(0)) + "\r\n")
    assert not any(roll.missing(1).values())


def test_several_markers_on_one_physical_line_each_count():
    # print() with unbuffered stdout writes text then newline: two processes' lines merge.
    merged = line("throughput", 0, samples_per_sec=1.5) + line("throughput", 1, samples_per_sec=2.5) + "\n\n"
    roll = parse(merged)
    assert roll.ranks[0].throughput == 1.5 and roll.ranks[1].throughput == 2.5


def test_truncated_record_never_becomes_a_value():
    broken = line("throughput", 0, samples_per_sec=49.97)[:-3]  # ..."samples_per_sec":49.
    roll = parse(broken + line("throughput", 1, samples_per_sec=3.0) + "\n" + broken)
    assert 0 not in roll.ranks
    assert roll.ranks[1].throughput == 3.0


def test_record_cut_mid_number_by_another_write_is_dropped():
    # rank 0's object cut after "4", rank 1's record, then the rest of rank 0's.
    cut = line("throughput", 0, samples_per_sec=49.97)
    head, tail = cut[: cut.index("49.97") + 1], cut[cut.index("49.97") + 1 :]
    roll = parse(head + line("complete", 1) + tail + "\n")
    assert 0 not in roll.ranks
    assert roll.ranks[1].complete


def test_junk_and_non_objects_are_ignored():
    text = "\n".join(
        [
            "ROLLCALL",
            "ROLLCALL not json",
            'ROLLCALL ["event","throughput"]',
            'ROLLCALL {"event":"throughput","rank":"1","samples_per_sec":2}',
            'ROLLCALL {"event":"throughput","rank":true,"samples_per_sec":2}',
            'ROLLCALL {"event":"throughput","rank":1,"samples_per_sec":"2"}',
            'ROLLCALL {"event":"mystery","rank":1}',
            "\x00\xff binary junk",
        ]
    )
    roll = parse(text.encode("latin-1") + b"\n\xc3\x28 bad utf8 " + line("complete", 2).encode() + b"\n")
    assert list(roll.ranks) == [2]


def test_repeated_event_keeps_the_last_record_and_epochs_are_distinct():
    text = [
        line("throughput", 0, samples_per_sec=1.0),
        line("epoch_time", 0, epoch=1, seconds=9.0),
        line("epoch_time", 0, epoch=1, seconds=1.0),
        line("epoch_time", 0, epoch=2, seconds=3.0),
        line("throughput", 0, samples_per_sec=2.0),
    ]
    roll = parse("\n".join(text) + "\n")
    assert roll.ranks[0].throughput == 2.0
    assert roll.ranks[0].epoch_times == {1: 1.0, 2: 3.0}
    assert roll.ranks[0].epoch_time == 2.0


def test_ranks_outside_the_world_are_unexpected():
    roll = parse("\n".join(full_rank(0, world=2) + full_rank(5, world=2) + [line("complete", -1)]) + "\n")
    assert roll.unexpected(2) == [-1, 5]
    assert roll.missing(2)["complete"] == [1]


def test_last_line_without_newline_counts_when_whole():
    roll = parse(line("complete", 0))
    assert roll.ranks[0].complete


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4096])
def test_chunk_boundaries_do_not_matter(chunk):
    text = "".join(f"[default{r}]:{t}\n" for r in range(4) for t in full_rank(r))
    roll = parse(text, chunk=chunk)
    assert not any(roll.missing(4).values())
    assert [roll.ranks[r].throughput for r in range(4)] == [50.0] * 4


def test_a_line_longer_than_the_pending_limit_is_still_read():
    junk = b"x" * (9 << 20)
    roll = parse(junk + line("complete", 0).encode() + b"\n", chunk=1 << 20)
    assert roll.ranks[0].complete


LEGACY = "[Rank {r}] - local_samples=100.0, total_time=2.00s, local_throughput={tp} samples/s, local_avg_epoch_time=0.40s"


def test_legacy_neuron_format():
    text = "\n".join(
        [f"[1,{r}]<stdout>:" + LEGACY.format(r=r, tp=50 + r) for r in range(3)]
        + [f"[Rank {r}] training complete. Exiting main()." for r in range(3)]
    )
    roll = parse(text + "\n", fmt="neuron-legacy")
    assert roll.missing(3) == {"throughput": [], "epoch_time": [], "complete": []}
    assert roll.ranks[2].throughput == 52.0
    assert roll.ranks[2].epoch_time == 0.4
    assert roll.ranks[2].details["local_samples"] == 100.0


def test_legacy_record_counts_only_up_to_and_including_its_unit():
    full = LEGACY.format(r=1, tp="50.00")
    throughput_end = full.index(" samples/s") + len(" samples/s")
    for cut in range(len(full)):
        roll = parse(full[:cut] + "\n", fmt="neuron-legacy")
        rank = roll.ranks.get(1)
        if cut < throughput_end:
            assert rank is None or rank.throughput is None, full[:cut]
        else:  # the throughput and its unit are whole; the epoch time after it is cut
            assert rank is not None and rank.throughput == 50.0, full[:cut]
            assert rank.epoch_times == {}, full[:cut]
    whole = parse(full + "\n", fmt="neuron-legacy").ranks[1]
    assert whole.throughput == 50.0 and whole.epoch_time == 0.4


def test_legacy_formats_are_ignored_when_rollcall_is_asked_for_and_vice_versa():
    text = LEGACY.format(r=0, tp=1) + "\n" + line("complete", 1) + "\n"
    assert list(parse(text, fmt="rollcall").ranks) == [1]
    assert list(parse(text, fmt="neuron-legacy").ranks) == [0]
    assert sorted(parse(text, fmt="auto").ranks) == [0, 1]


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="neuron-legacy"):
        LogParser(RollCall(), "x", "json")  # type: ignore[arg-type]


def test_each_file_is_parsed_on_its_own(tmp_path):
    # A record cut at the end of one file must not be completed by the start of the next.
    a, b = tmp_path / "pod-a.log", tmp_path / "pod-b.log"
    rec = line("throughput", 0, samples_per_sec=12.5)
    a.write_text(rec[:30])
    b.write_text(rec[30:] + "\n" + line("complete", 1) + "\n")
    roll = parse_files([a, b])
    assert 0 not in roll.ranks
    assert roll.ranks[1].sources == {"pod-b.log"}


def test_read_stream_counts_bytes():
    roll = RollCall()
    data = ("\n".join(full_rank(0)) + "\n").encode()
    roll.read_stream(io.BytesIO(data), "s")
    assert roll.bytes_read == len(data)
    assert roll.records == 5


def test_ranges():
    assert ranges([]) == ""
    assert ranges([7, 19, 40, 41, 42, 43, 44, 45, 46, 47]) == "7, 19, 40-47"
    assert ranges([3, 1, 2, 2]) == "1-3"


# -- compute time and bandwidth ------------------------------------------------------------------------


def bw(rank, scope="node", ranks="0-1", nodes="0", world=4, **kw):
    fields = {
        "scope": scope,
        "ranks": ranks,
        "nodes": nodes,
        "bytes": 2097152,
        "iters": 10,
        "seconds": 0.002,
        "algbw_gbps": 1.05,
        "busbw_gbps": 1.05,
        **kw,
    }
    return line("bandwidth", rank, world, **{k: v for k, v in fields.items() if v is not None})


def test_compute_time_fields_of_throughput_are_kept():
    roll = parse(line("throughput", 1, samples_per_sec=50.0, compute_ms=12.5, compute_ms_p90=14.0) + "\n")
    assert (roll.ranks[1].compute_ms, roll.ranks[1].compute_ms_p90) == (12.5, 14.0)
    assert roll.ranks[1].details["compute_ms"] == 12.5


@pytest.mark.parametrize("value", ["12.5", True, None, [1], {"ms": 1}])
def test_a_compute_time_of_the_wrong_type_is_dropped_not_the_throughput(value):
    roll = parse(line("throughput", 1, samples_per_sec=50.0, compute_ms=value) + "\n")
    assert roll.ranks[1].throughput == 50.0
    assert roll.ranks[1].compute_ms is None and roll.ranks[1].compute_ms_p90 is None


def test_without_compute_time_a_rank_still_answers():
    roll = parse("\n".join(full_rank(0, world=1)) + "\n")
    assert roll.missing(1) == {"throughput": [], "epoch_time": [], "complete": []}
    assert roll.ranks[0].compute_ms is None and roll.ranks[0].bandwidth == {}


def test_bandwidth_records_are_kept_per_group_the_last_one_winning():
    text = "\n".join(
        [
            bw(0, scope="world", ranks="0-3", nodes="0-1", busbw_gbps=0.3),
            bw(0, busbw_gbps=0.9),
            bw(0, busbw_gbps=1.2),  # the same group again: the last counts
            bw(2, ranks="2-3", nodes="1", busbw_gbps=0.1),
        ]
    )
    roll = parse(text + "\n", chunk=7)
    zero = roll.ranks[0].bandwidth
    assert sorted(zero) == [("node", (0,)), ("world", (0, 1))]
    assert zero[("node", (0,))].busbw_gbps == 1.2
    world = zero[("world", (0, 1))]
    assert (world.scope, world.ranks, world.nodes, world.bytes, world.seconds) == (
        "world",
        (0, 1, 2, 3),
        (0, 1),
        2097152,
        0.002,
    )
    assert roll.ranks[2].bandwidth[("node", (1,))].ranks == (2, 3)
    assert roll.records == 4


@pytest.mark.parametrize(
    "changes",
    [
        {"scope": "rack"},
        {"scope": None},
        {"ranks": "0-"},
        {"ranks": "3-1"},
        {"ranks": ""},
        {"ranks": [0, 1]},
        {"nodes": "a"},
        {"nodes": None},
        {"bytes": 0},
        {"bytes": 2.5},
        {"bytes": True},
        {"busbw_gbps": "1.0"},
        {"busbw_gbps": None},
        {"algbw_gbps": None},
        {"ranks": "0-99999999999"},
    ],
)
def test_a_bandwidth_record_counts_only_when_whole(changes):
    roll = parse(bw(0, **changes) + "\n")
    assert 0 not in roll.ranks or roll.ranks[0].bandwidth == {}
    assert roll.records == 0


def test_a_truncated_bandwidth_record_does_not_count():
    whole = bw(0)
    roll = parse(whole[: whole.index('"busbw_gbps"') + 16] + "\n" + line("complete", 0) + "\n")
    assert roll.ranks[0].bandwidth == {} and roll.ranks[0].complete


def test_parse_ranges():
    from rollcall.ranges import parse_ranges

    assert parse_ranges("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_ranges("5") == (5,)
    assert parse_ranges("2, 0-1") == (0, 1, 2)
    for bad in ("", "-1", "1-", "a", "1,,2", None, 3):
        assert parse_ranges(bad) is None


def test_each_event_keeps_when_the_rank_said_it_last():
    text = "\n".join(
        [
            line("start", 0, time=100.0, model="tiny"),
            line("epoch_time", 0, epoch=1, seconds=0.4, time=101.0),
            line("epoch_time", 0, epoch=1, seconds=0.4, time=101.5),  # the same epoch again: the last counts
            line("epoch_time", 0, epoch=2, seconds=0.5, time=102.0),
            bw(0, time=103.0),
            line("complete", 0, time=104.0),
            line("error", 0, message="late", time="soon"),  # a time that is no number: no mark
        ]
    )
    report = parse(text + "\n").ranks[0]
    assert {label: (m.event, m.time) for label, m in report.marks.items()} == {
        "start": ("start", 100.0),
        "epoch 1": ("epoch_time", 101.5),
        "epoch 2": ("epoch_time", 102.0),
        "bandwidth node 0": ("bandwidth", 103.0),
        "complete": ("complete", 104.0),
    }
    assert report.start == {"model": "tiny"}  # the stamp is envelope, not a setting
    assert [e.message for e in report.errors] == ["late"]


def test_the_compile_cache_answer_is_read_from_throughput_with_the_compile_seconds():
    hit = {"compile_cache": "hit", "compile_cache_hits": 2, "compile_cache_misses": 0}
    roll = parse(
        "\n".join(
            [
                line("throughput", 0, samples_per_sec=5.0, compile_s=3.25, **hit),
                line("throughput", 1, samples_per_sec=5.0, compile_s=9.5, compile_cache="miss"),
                line("throughput", 2, samples_per_sec=5.0, compile_cache="maybe", compile_s=1.0),
                line("throughput", 3, samples_per_sec=5.0, compile_cache="hit", compile_cache_hits="2"),
            ]
        )
        + "\n"
    )
    caches = {r: roll.ranks[r].compile_cache for r in range(4)}
    assert caches[0] == CompileCache("hit", 3.25, 2, 0)
    assert caches[1] == CompileCache("miss", 9.5, None, None)
    assert caches[2] is None  # an unknown answer is no answer; the throughput still counts
    assert roll.ranks[2].throughput == 5.0
    assert caches[3] == CompileCache("hit", None, None, None)  # a garbled count is dropped, not the answer


def test_every_rank_of_a_group_shares_one_parsed_member_list():
    world = 64
    fields = {"scope": "world", "nodes": "0-1", "bytes": 8, "algbw_gbps": 1.0, "busbw_gbps": 1.9}
    text = "\n".join(line("bandwidth", r, world, ranks=f"0-{world - 1}", **fields) for r in range(world))
    roll = parse(text + "\n")
    members = {id(rec.ranks) for rep in roll.ranks.values() for rec in rep.bandwidth.values()}
    assert len(members) == 1  # one tuple for the group, not one copy per rank
    assert roll.ranks[5].bandwidth["world", (0, 1)].ranks == tuple(range(world))


def test_auto_reads_a_log_as_the_rollcall_workloads_once_it_shows_a_rollcall_record():
    """The two formats never share a log: after the piece holding a rollcall record, no legacy scan."""
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed((LEGACY.format(r=0, tp=1) + "\n" + line("complete", 1) + "\n").encode())  # one piece: both
    parser.feed((LEGACY.format(r=2, tp=1) + "\n").encode())  # a later piece: read as the rollcall workload's
    parser.close()
    assert sorted(roll.ranks) == [0, 1]
    legacy_only = RollCall()
    only = legacy_only.parser("pod-1")
    for r in range(3):  # a log of the legacy workload alone is read piece after piece
        only.feed((LEGACY.format(r=r, tp=1) + "\n").encode())
    only.close()
    assert sorted(legacy_only.ranks) == [0, 1, 2]


def test_every_event_of_the_contract_has_its_keeper_and_no_keeper_keeps_another():
    """A new event of the contract is kept as soon as it is declared, or this fails: never dropped unread."""
    from rollcall.ranklog.keep import KEEPERS
    from rollcall_workload import contract

    assert set(KEEPERS) == set(contract.EVENTS.values())
