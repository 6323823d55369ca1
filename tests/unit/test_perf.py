"""Compute stragglers and slow links: the pure checks, the figures from a roll call, and the gate's hook."""

import json

import pytest

from rollcall.evidence.perf import (
    GroupBandwidth,
    PerfFigures,
    PerfReport,
    RankCompute,
    common_node,
    compute_straggler_problem,
    compute_stragglers,
    slow_groups,
)
from rollcall.gate import GateReport
from rollcall.jobspec import JobSpec
from rollcall.ranklog import RollCall
from tests.unit.helpers import event, judged, node_log


def ranks(*ms, per_node=2):
    return [RankCompute(r, r // per_node, f"pod-{r // per_node}", v) for r, v in enumerate(ms)]


def node_group(node, busbw, per_node=2):
    members = tuple(range(node * per_node, (node + 1) * per_node))
    return GroupBandwidth("node", (node,), members, 2**20, busbw, busbw)


def pair_group(a, b, busbw):
    return GroupBandwidth("pair", (a, b), (a, b), 2**20, busbw, busbw)


# -- compute stragglers ------------------------------------------------------------------------


def test_a_rank_above_the_median_by_more_than_1_over_the_ratio_is_a_compute_straggler():
    found = compute_stragglers(ranks(10.0, 10.4, 9.8, 30.0), 0.8)
    assert [(s.rank, s.node, s.pod) for s in found] == [(3, 1, "pod-1")]
    assert found[0].median_ms == pytest.approx(10.2)
    assert found[0].ratio == pytest.approx(30.0 / 10.2)
    assert str(found[0]) == "rank 3 (node 1, pod pod-1) at 30.00 ms per step, 2.94 x the median"


def test_the_compute_limit_is_the_median_over_the_ratio():
    # 0.8 -> 1.25 x the median: 12.5 is at the limit (not above), 12.6 is above it
    assert compute_stragglers(ranks(10.0, 10.0, 10.0, 12.5), 0.8) == []
    assert [s.rank for s in compute_stragglers(ranks(10.0, 10.0, 10.0, 12.6), 0.8)] == [3]
    assert compute_stragglers(ranks(10.0, 10.0, 10.0, 12.6), 0.75) == []


def test_compute_check_off_or_without_peers_finds_nothing():
    assert compute_stragglers(ranks(10.0, 10.0, 10.0, 90.0), 0) == []
    assert compute_stragglers(ranks(90.0), 0.8) == []
    assert compute_stragglers([], 0.8) == []


def test_a_fast_rank_is_never_a_compute_straggler():
    assert compute_stragglers(ranks(10.0, 10.0, 10.0, 1.0), 0.8) == []


# -- slow links --------------------------------------------------------------------------------


def test_a_node_below_the_ratio_of_the_median_node_is_slow():
    groups = [node_group(0, 1.0), node_group(1, 1.1), node_group(2, 0.3), node_group(3, 0.9)]
    found = slow_groups(groups, busbw_ratio=0.5, pods={2: ("pod-2",)})
    assert [(s.group.nodes, s.pods) for s in found] == [((2,), ("pod-2",))]
    assert found[0].median_gbps == pytest.approx(0.95)
    assert str(found[0]) == (
        "node 2 (pod(s) pod-2): bus bandwidth 0.3 GB/s, 0.32 x the median node's 0.95 GB/s (--busbw-ratio 0.5)"
    )
    assert slow_groups(groups, busbw_ratio=0.3) == []
    assert slow_groups(groups, busbw_ratio=0) == []


def test_min_busbw_names_every_group_below_it_the_world_included():
    world = GroupBandwidth("world", (0, 1), (0, 1, 2, 3), 2**20, 5.0, 7.5)
    groups = [world, node_group(0, 20.0), node_group(1, 19.0)]
    found = slow_groups(groups, min_busbw=10.0, busbw_ratio=0.5)
    assert [s.group.label for s in found] == ["world"]
    assert str(found[0]) == "world: bus bandwidth 7.5 GB/s, below --min-busbw 10 GB/s"
    assert [s.group.label for s in slow_groups(groups, min_busbw=19.5)] == ["world", "node 1"]
    # the world has no peer to be compared with
    assert slow_groups([world], busbw_ratio=0.99) == []


def test_one_node_alone_has_no_median_to_fall_below():
    assert slow_groups([node_group(0, 0.001)], busbw_ratio=0.5) == []


def test_a_node_in_every_slow_ring_pair_is_named():
    pairs = [pair_group(0, 1, 10.0), pair_group(1, 2, 2.0), pair_group(2, 3, 1.8), pair_group(0, 3, 11.0)]
    found = slow_groups(pairs, busbw_ratio=0.5)
    assert [s.group.label for s in found] == ["nodes 1-2", "nodes 2-3"]
    assert common_node(found) == 2
    assert common_node(found[:1]) is None  # one slow pair: either end


def checked(figures, straggler_ratio, busbw_ratio=0.0):
    """The figures with what the pure checks find in them."""
    return PerfReport(
        figures,
        straggler_ratio,
        None,
        busbw_ratio,
        tuple(compute_stragglers(figures.compute, straggler_ratio)),
        tuple(slow_groups(figures.groups, busbw_ratio=busbw_ratio, pods=figures.pods)),
    )


def test_each_finding_says_its_line_and_its_note_on_each_rank():
    figures = PerfFigures(
        compute=tuple(ranks(10.0, 10.0, 10.0, 31.0)),
        groups=(node_group(0, 1.0), node_group(1, 0.1)),
        pods={0: ("pod-0",), 1: ("pod-1",)},
    )
    report = checked(figures, straggler_ratio=0.8, busbw_ratio=0.5)
    assert compute_straggler_problem(report.stragglers, 0.8) == (
        "1 compute straggler(s) above 1.25 x the median compute time of 10.00 ms per step "
        "(--straggler-ratio 0.8): rank 3 (node 1, pod pod-1) at 31.00 ms per step, 3.10 x the median"
    )
    assert [str(s) for s in report.slow] == [
        "node 1 (pod(s) pod-1): bus bandwidth 0.1 GB/s, 0.18 x the median node's 0.55 GB/s "
        "(--busbw-ratio 0.5)",
    ]
    assert [s.note() for s in report.stragglers] == ["compute straggler: 3.10 x the median compute time"]
    assert [(s.group.ranks, s.note()) for s in report.slow] == [((2, 3), "slow link: node 1 at 0.1 GB/s")]
    assert report.summary() == [
        "slowest rank: 3 (node 1, pod pod-1), 31.00 ms compute per step, 3.10 x the median of 10.00 ms",
        "lowest bus bandwidth: node 1 (pod(s) pod-1), 0.1 GB/s, 0.18 x the median of 0.55 GB/s",
    ]
    doc = json.loads(json.dumps(report.as_dict()))
    assert [c["compute_ms"] for c in doc["compute"]] == [10.0, 10.0, 10.0, 31.0]
    assert doc["bandwidth"]["nodes"] == [
        {"node": 0, "pods": ["pod-0"], "busbw_gbps": 1.0, "pair_busbw_gbps": None},
        {"node": 1, "pods": ["pod-1"], "busbw_gbps": 0.1, "pair_busbw_gbps": None},
    ]
    assert doc["compute_stragglers"][0]["rank"] == 3 and doc["slow_links"][0]["nodes"] == [1]


def test_a_healthy_run_still_names_its_slowest_rank_and_node():
    figures = PerfFigures(compute=tuple(ranks(10.0, 10.2, 9.9, 10.1)), groups=(node_group(0, 1.0),))
    report = checked(figures, straggler_ratio=0.8, busbw_ratio=0.5)
    assert report.stragglers == () and report.slow == ()
    assert report.summary() == [
        "slowest rank: 1 (node 0, pod pod-0), 10.20 ms compute per step, 1.01 x the median of 10.05 ms",
        "lowest bus bandwidth: node 0, 1 GB/s",
    ]
    assert checked(PerfFigures(), straggler_ratio=0.8).summary() == []


# -- figures from a roll call ----------------------------------------------------------------------


def perf_log(node, nodes=2, ppn=2, compute=None, node_busbw=None, world_busbw=0.3, machines=None):
    """A pod's log with compute times in throughput and bandwidth events, as the workload writes them.

    ``machines`` maps a node index to the Kubernetes node its ranks' ``start`` events name.
    """
    compute, node_busbw = compute or {}, node_busbw or {}
    world = nodes * ppn
    lines = []
    text_of_node = node_log(node, nodes, ppn)
    if machines and node in machines:
        text_of_node = text_of_node.replace('"host":', f'"node":"{machines[node]}","host":')
    for text in text_of_node.splitlines():
        rank = next((r for r in range(world) if f'"event":"throughput","rank":{r},' in text), None)
        value = f'"compute_ms":{compute.get(rank, 10.0)},"samples_per_sec"'
        lines.append(text if rank is None else text.replace('"samples_per_sec"', value))
    members = range(node * ppn, (node + 1) * ppn)
    fields = {"bytes": 2097152, "iters": 10, "seconds": 0.002}
    for r in members:
        busbw = node_busbw.get(node, 1.0)
        lines.append(
            f"[{r}]:"
            + event(
                "bandwidth",
                r,
                world,
                scope="world",
                ranks=f"0-{world - 1}",
                nodes=f"0-{nodes - 1}",
                algbw_gbps=world_busbw / 1.5,
                busbw_gbps=world_busbw + r / 1000,
                **fields,
            )
        )
        lines.append(
            f"[{r}]:"
            + event(
                "bandwidth",
                r,
                world,
                scope="node",
                ranks=f"{members[0]}-{members[-1]}",
                nodes=str(node),
                algbw_gbps=busbw,
                busbw_gbps=busbw,
                **fields,
            )
        )
    return "\n".join(lines) + "\n"


def attempt_with(nodes=2, ppn=2, criteria=None, **kw):
    roll = RollCall()
    for node in range(nodes):
        parser = roll.parser(f"job-{node}")
        parser.feed(perf_log(node, nodes, ppn, **kw).encode())
        parser.close()
    spec = JobSpec("job", nodes, ppn, accelerator="cpu")
    return judged(roll, spec, **(criteria or {}))


def test_figures_of_a_roll_call():
    figures = attempt_with(compute={3: 31.5}, node_busbw={1: 0.2}).verdict.perf
    assert [(c.rank, c.node, c.pod, c.compute_ms) for c in figures.compute] == [
        (0, 0, "job-0", 10.0),
        (1, 0, "job-0", 10.0),
        (2, 1, "job-1", 10.0),
        (3, 1, "job-1", 31.5),
    ]
    world, node0, node1 = figures.groups
    assert (world.label, world.ranks, world.reported) == ("world", (0, 1, 2, 3), 4)
    assert world.busbw_gbps == pytest.approx(0.3)  # the lowest any member measured
    assert (node0.label, node0.ranks, node0.busbw_gbps) == ("node 0", (0, 1), 1.0)
    assert (node1.label, node1.ranks, node1.busbw_gbps) == ("node 1", (2, 3), 0.2)
    assert figures.pods == {0: ("job-0",), 1: ("job-1",)}
    assert [(n.node, n.busbw_gbps) for n in figures.nodes()] == [(0, 1.0), (1, 0.2)]


def test_the_gated_figures_are_the_median_rank_compute_time_and_the_world_bus_bandwidth():
    figures = attempt_with(compute={0: 8.0, 3: 31.5}, world_busbw=0.3).verdict.figures
    assert figures.compute_ms_median == 10.0  # of 8, 10, 10, 31.5
    assert figures.busbw_world == pytest.approx(0.3)  # the lowest any member measured


def test_non_finite_or_missing_figures_are_left_out():
    roll = RollCall()
    parser = roll.parser("p")
    parser.feed(
        (
            event("throughput", 0, 2, samples_per_sec=5.0, compute_ms=0)
            + "\n"
            + event("throughput", 1, 2, samples_per_sec=5.0)
            + "\n"
            + event(
                "bandwidth",
                1,
                2,
                scope="world",
                ranks="0-1",
                nodes="0",
                bytes=8,
                algbw_gbps=0.0,
                busbw_gbps=0.0,
            )
            + "\n"
        ).encode()
    )
    parser.close()
    figures = PerfFigures.of(roll, 2, lambda r: 0)
    assert figures.compute == () and figures.groups == ()


# -- the gate's hook ---------------------------------------------------------------------------------


def test_a_healthy_run_passes_the_gate():
    attempt = attempt_with()
    report = GateReport.of("t::a", attempt)
    assert attempt.passed and report.sound and report.perf is not None
    assert report.perf.summary()[0].startswith("slowest rank: 0 (node 0, pod job-0)")
