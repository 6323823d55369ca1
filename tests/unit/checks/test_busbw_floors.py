"""Published bus-bandwidth floors by instance type, and ``--min-busbw auto`` holding a run to them."""

import pytest

from rollcall.backends import Placement
from rollcall.checks.busbw_floors import busbw_floors
from rollcall.checks.runview import RunView
from rollcall.checks.slow_links import SLOW_LINK
from rollcall.evidence.floors import (
    FLOORS,
    MAX_MEASURE_BYTES,
    Fabric,
    floors_of,
    measure_args,
    measure_bytes,
)
from rollcall.gate import criteria_of
from rollcall.jobspec import JobSpec
from rollcall.options import DEFAULTS, OptionError, resolve
from rollcall.ranklog import RollCall
from rollcall.suite import job_spec
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload.rank import cli
from tests.unit.helpers import event, judged, rank_lines


def bandwidth_log(node, nodes, ppn, *, world, own):
    """One node's log: every rank's whole roll call, its world's and its node's bandwidth (GB/s)."""
    size = nodes * ppn
    lines = []
    for r in range(node * ppn, (node + 1) * ppn):
        fields = {"bytes": 2**31, "iters": 20, "seconds": 0.01}
        first, last = node * ppn, (node + 1) * ppn - 1
        measured = [
            event(
                "bandwidth",
                r,
                size,
                scope="world",
                ranks=f"0-{size - 1}",
                nodes=f"0-{nodes - 1}",
                algbw_gbps=world,
                busbw_gbps=world,
                **fields,
            ),
            event(
                "bandwidth",
                r,
                size,
                scope="node",
                ranks=f"{first}-{last}",
                nodes=str(node),
                algbw_gbps=own[node],
                busbw_gbps=own[node],
                **fields,
            ),
        ]
        roll = rank_lines(r, size, ppn)
        lines += [f"[{r}]:{line}" for line in [*roll[:-1], *measured, roll[-1]]]
    return "\n".join(lines) + "\n"


def judged_bandwidth(instance_type, *, world, own, nodes=2, ppn=2, accelerator="nvidia", **criteria):
    roll = RollCall()
    for node in range(nodes):
        parser = roll.parser(f"pod-{node}")
        parser.feed(bandwidth_log(node, nodes, ppn, world=world, own=own).encode())
        parser.close()
    spec = JobSpec("job", nodes, ppn, accelerator=accelerator, instance_type=instance_type)
    return judged(roll, spec, **criteria).verdict


def slow_lines(verdict):
    return [p.message for p in verdict.of_kind(SLOW_LINK)]


def test_each_floor_has_a_source_and_the_fabric_of_its_scope():
    assert FLOORS, "the table is empty"
    for name, floors in FLOORS.items():
        assert floors.instance_type == name
        assert floors.node is not None or floors.nodes is not None, name
        if floors.node is not None:
            assert floors.node.fabric is Fabric.NVLINK and floors.node.source and floors.node.busbw_gbps > 0
        if floors.nodes is not None:
            assert floors.nodes.fabric is not Fabric.NVLINK and floors.nodes.source
    p5 = floors_of("p5.48xlarge")
    assert p5 is not None and p5.node is not None and p5.nodes is not None
    assert (p5.node.busbw_gbps, p5.node.message_bytes) == (460, 16 * 2**30)
    assert (p5.nodes.busbw_gbps, p5.nodes.fabric, p5.nodes.message_bytes) == (300, Fabric.EFA, None)
    # a node is held to NVLink's floor; a pair, and a world of two nodes or more, to the fabric's
    assert p5.for_group("node", 1) is p5.node
    assert p5.for_group("world", 1) is p5.node
    assert p5.for_group("world", 2) is p5.nodes and p5.for_group("pair", 2) is p5.nodes
    assert floors_of("m5.large") is None and floors_of(None) is None


def test_the_phase_measures_at_the_floors_size_capped_at_2_gib_on_gpus_only():
    p5 = floors_of("p5.48xlarge")
    assert p5 is not None
    assert measure_bytes(p5) == MAX_MEASURE_BYTES == 2 * 2**30  # the 16 GB of the NVLink floor, capped
    mega = floors_of("a3-megagpu-8g")
    assert mega is not None and measure_bytes(mega) == MAX_MEASURE_BYTES  # no size published: the largest
    assert measure_args("p5.48xlarge", "nvidia") == ("--bandwidth-mb", "2048")
    assert measure_args("p5.48xlarge", "cpu") == ()
    assert measure_args("m5.large", "nvidia") == ()


def test_a_job_on_a_type_with_floors_measures_at_their_size_and_the_users_own_size_wins():
    options = resolve({"workload_args": "--bandwidth-mb 64"}, environ={})
    placement = Placement("nvidia", 8, instance_type="p5.48xlarge")
    spec = job_spec(options, placement, "job")
    assert spec.workload_args == ("--bandwidth-mb", "2048", "--bandwidth-mb", "64")  # argparse: last wins
    fixed = resolve({"min_busbw": "10"}, environ={})
    assert job_spec(fixed, placement, "job").workload_args == ()


def test_min_busbw_is_auto_by_default_and_takes_gbps_or_auto():
    assert DEFAULTS.judging.min_busbw == "auto"
    assert criteria_of(DEFAULTS).busbw_floors and criteria_of(DEFAULTS).min_busbw is None
    given = criteria_of(resolve({"min_busbw": "12.5"}, environ={}))
    assert (given.min_busbw, given.busbw_floors) == (12.5, False)
    assert resolve({}, environ={"ROLLCALL_MIN_BUSBW": "auto"}).judging.min_busbw == "auto"
    with pytest.raises(OptionError, match=r"invalid --min-busbw value 'fast'.*or auto"):
        resolve({"min_busbw": "fast"}, environ={})


def test_auto_fails_a_node_below_its_nvlink_floor_naming_it_and_the_source():
    verdict = judged_bandwidth("p5.48xlarge", world=350.0, own={0: 470.0, 1: 400.0}, busbw_ratio=0)
    lines = slow_lines(verdict)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "slow link: node 1 (pod(s) pod-1): bus bandwidth 400 GB/s at 2 GB, below the p5.48xlarge floor of "
        "460 GB/s over NVLink (Azure/azurehpc-health-checks"
    ), lines
    assert "at 16 GB" in lines[0] and lines[0].endswith("(--min-busbw auto)")
    assert sorted(verdict.failed_ranks) == [2, 3]


def test_auto_fails_a_world_of_two_nodes_below_its_efa_floor_naming_no_rank():
    verdict = judged_bandwidth("p5.48xlarge", world=130.7, own={0: 470.0, 1: 480.0}, busbw_ratio=0)
    lines = slow_lines(verdict)
    assert len(lines) == 1 and lines[0].startswith(
        "slow link: world: bus bandwidth 130.7 GB/s at 2 GB, below"
    )
    assert "floor of 300 GB/s over EFA (NVIDIA/aicr" in lines[0] and "no message size given" in lines[0]
    assert verdict.failed_ranks == {}
    found = verdict.of_kind(SLOW_LINK)[0].detail.as_dict()
    assert (found["bytes"], found["floor"]["busbw_gbps"], found["instance_type"]) == (
        2**31,
        300,
        "p5.48xlarge",
    )
    p5 = floors_of("p5.48xlarge")
    assert p5 is not None
    doc = p5.as_dict(verdict.perf.groups)
    assert doc["measured_bytes"] == [2**31] and doc["nodes"]["source"].startswith("NVIDIA/aicr")


def test_auto_passes_groups_above_their_floors_and_types_without_floors():
    assert judged_bandwidth("p5.48xlarge", world=320.0, own={0: 470.0, 1: 480.0}).passed
    assert judged_bandwidth("m5.large", world=1.0, own={0: 1.0, 1: 1.0}).passed
    assert judged_bandwidth(None, world=1.0, own={0: 1.0, 1: 1.0}).passed
    # the floors are the GPUs': the type's CPUs training with gloo are not held to them
    assert judged_bandwidth("p5.48xlarge", world=1.0, own={0: 1.0, 1: 1.0}, accelerator="cpu").passed


def test_a_given_min_busbw_replaces_the_floors():
    verdict = judged_bandwidth(
        "p5.48xlarge", world=130.0, own={0: 470.0, 1: 400.0}, min_busbw=100.0, busbw_floors=False
    )
    assert verdict.passed, verdict.problems
    off = judged_bandwidth("p5.48xlarge", world=130.0, own={0: 470.0, 1: 400.0}, busbw_floors=False)
    assert off.passed


def test_a_sweep_of_sizes_is_parsed_like_nccl_tests_and_reaches_the_groups():
    assert cli.parse_args(["--bandwidth-sizes", "1M:8M:2"]).bandwidth_sizes == (2**20, 2**21, 2**22, 2**23)
    assert cli.parse_args(["--bandwidth-sizes", "64K:1M:4"]).bandwidth_sizes == (2**16, 2**18, 2**20)
    assert cli.parse_args(["--bandwidth-sizes", "2G:2G"]).bandwidth_sizes == (2 * 2**30,)
    for bad in ("8M:1M", "1M", "1M:2M:1", "1X:2M", "1M:8G"):
        with pytest.raises(cli.CommandLineError, match="--bandwidth-sizes: must be MIN:MAX"):
            cli.parse_args(["--bandwidth-sizes", bad])
    roll = RollCall()
    parser = roll.parser("pod-0")
    common = {"scope": "world", "ranks": "0-1", "nodes": "0", "bytes": 2**22, "algbw_gbps": 1.0}
    parser.feed(
        (
            event("bandwidth", 0, 2, busbw_gbps=1.0, sweep=[[2**20, 0.5], [2**22, 1.0]], **common)
            + "\n"
            + event("bandwidth", 1, 2, busbw_gbps=0.9, sweep=[[2**20, 0.4], [2**22, 0.9]], **common)
            + "\n"
        ).encode()
    )
    parser.close()
    assert roll.ranks[0].bandwidth[("world", (0,))].sweep == ((2**20, 0.5), (2**22, 1.0))
    from rollcall.evidence.perf import PerfFigures

    (world,) = PerfFigures.of(roll, 2, lambda r: 0).groups
    assert world.sweep == ((2**20, 0.4), (2**22, 0.9))  # the lowest member at each size
    assert world.as_dict()["sweep"] == ((2**20, 0.4), (2**22, 0.9))


def floor_facts(instance_type, *, world, own, accelerator="nvidia", **criteria):
    roll = RollCall()
    for node in range(2):
        parser = roll.parser(f"pod-{node}")
        parser.feed(bandwidth_log(node, 2, 2, world=world, own=own).encode())
        parser.close()
    spec = JobSpec("job", 2, 2, accelerator=accelerator, instance_type=instance_type)
    return RunView(Observed(roll, Layout(2, 2), spec=spec), Criteria(**{"busbw_floors": True, **criteria}))


def test_the_predicate_names_a_node_below_its_types_floor_and_nothing_above_it_or_without_floors():
    [problem] = list(busbw_floors(floor_facts("p5.48xlarge", world=350.0, own={0: 470.0, 1: 400.0})))
    assert problem.kind is SLOW_LINK and set(problem.ranks) == {2, 3}
    assert problem.message.startswith(
        "slow link: node 1 (pod(s) pod-1): bus bandwidth 400 GB/s at 2 GB, below the p5.48xlarge floor"
    )
    assert list(busbw_floors(floor_facts("p5.48xlarge", world=320.0, own={0: 470.0, 1: 480.0}))) == []
    slow = {"world": 1.0, "own": {0: 1.0, 1: 1.0}}
    assert list(busbw_floors(floor_facts("m5.large", **slow))) == []  # no floors known
    assert list(busbw_floors(floor_facts("p5.48xlarge", accelerator="cpu", **slow))) == []
    assert list(busbw_floors(floor_facts("p5.48xlarge", busbw_floors=False, **slow))) == []
    assert list(busbw_floors(floor_facts("p5.48xlarge", min_busbw=0.5, **slow))) == []  # replaced
