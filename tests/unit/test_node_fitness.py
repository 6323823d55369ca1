"""Node fitness beyond one device's own facts: a node that sees (or advertises) fewer devices than its
instance type has, a compute straggler's device facts in its line, ``--expect-file``, and the libfabric and aws-ofi-nccl
versions the workload reads from the install layout (a temporary directory stands for it)."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rollcall import nodeverdicts, reports
from rollcall.backends import JobState, JobStatus
from rollcall.backends.kubernetes.instances import advertised_counts, count_facts, expected_devices
from rollcall.backends.kubernetes.nodeviews import INSTANCE_TYPE_LABEL, Node
from rollcall.backends.kubernetes.views import Pod
from rollcall.checks.compute_stragglers import COMPUTE_STRAGGLER
from rollcall.checks.expectations import EXPECTATION
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.drift import parse_expect
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.gate import criteria_of
from rollcall.jobspec import JobSpec
from rollcall.judge import judge
from rollcall.options import DEFAULTS, OptionError, resolve
from rollcall.page import report as htmlreport
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Layout, Observed
from rollcall_workload import contract
from rollcall_workload.rank import facts as workload_facts

from .helpers import event
from .test_bad_input import local_usage_error
from .test_fitness import facts_of, fake_nvml, roll_with

pytest_plugins = ["pytester"]

P5 = {"instance_type": "p5.48xlarge", "expected_gpus": "8"}


def judged(
    roll: RollCall, observed: dict[str, dict[str, str]], nodes: int = 2, ppn: int = 1, **criteria: Any
):
    """The verdict on ``roll`` with what the backend ``observed`` of each node (by name)."""
    spec = JobSpec("job", nodes, ppn, accelerator="nvidia")
    status = JobStatus(JobState.SUCCEEDED, node_info=observed)
    return judge(Observed(roll, Layout(nodes, ppn), status, spec), replace(criteria_of(DEFAULTS), **criteria))


# ---------------------------------------------------------------- fewer devices than the instance type has


def test_a_node_whose_ranks_see_fewer_gpus_than_its_type_fails_naming_node_counts_and_type():
    """A GPU missing from a node is a fault nothing here can produce: NVML's count comes from a fake."""
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml(count=7))})
    verdict = judged(roll, {"n0": P5, "n1": P5})
    assert not verdict.passed
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1): gpus=7 seen, expected 8 GPUs with its instance type p5.48xlarge "
        "(rule device_count)"
    )
    assert set(problem.ranks) == {1} and verdict.unfit_nodes == ["n1"]
    assert [n["verdict"] for n in verdict.node_verdicts()] == ["fit", "unfit"]
    [unfit] = verdict.unfit
    assert unfit.as_dict()["rule"] == "device_count" and unfit.as_dict()["value"] == 7


def test_cuda_listing_fewer_devices_than_nvml_is_the_count_named():
    """CUDA failing to use a GPU that NVML lists cannot be produced here either: both counts are given."""
    short = workload_facts.device_facts("cuda", 0, nvml_loader=fake_nvml, cuda_devices=6)
    verdict = judged(roll_with({0: facts_of(fake_nvml()), 1: short}), {"n0": P5, "n1": P5})
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert "node 1 (n1): cuda_devices=6 seen, expected 8 GPUs" in problem.message
    assert "p5.48xlarge" in problem.message


def test_a_neuron_node_seeing_fewer_devices_than_its_type_fails():
    """A Neuron device missing from a node cannot be produced here: the ranks' facts are written out."""
    seen = {0: {"host": "n0", "neuron_devices": 16}, 1: {"host": "n1", "neuron_devices": 15}}
    trn1 = {"instance_type": "trn1.32xlarge", "expected_neuron_devices": "16"}
    verdict = judged(roll_with(seen), {"n0": trn1, "n1": trn1})
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1): neuron_devices=15 seen, expected 16 Neuron devices with its instance type "
        "trn1.32xlarge (rule device_count)"
    )


def test_device_count_warns_or_is_off_by_name_and_asks_nothing_where_nothing_is_expected():
    roll = roll_with({0: facts_of(fake_nvml(count=7)), 1: facts_of(fake_nvml())})
    options = resolve({"fitness_warn": ["device_count"]}, environ={})
    warned = judged(roll, {"n0": P5, "n1": P5}, fitness=criteria_of(options).fitness)
    assert warned.passed and warned.unfit_nodes == []
    [warning] = warned.warnings
    assert warning.message.startswith("unfit device (warning): node 0 (n0): gpus=7 seen, expected 8 GPUs")
    off = judged(roll, {"n0": P5, "n1": P5}, fitness=FitnessPolicy(off=frozenset({"device_count"})))
    assert off.passed and off.warnings == ()
    assert judged(roll, {}).passed  # no instance type known (local, slurm, a type not in the table)


def test_the_whole_node_and_one_of_its_devices_are_named_apart():
    roll = roll_with({0: facts_of(fake_nvml(count=7, width=8)), 1: facts_of(fake_nvml())})
    messages = [p.message for p in judged(roll, {"n0": P5, "n1": P5}).of_kind(UNFIT_DEVICE)]
    assert len(messages) == 2
    assert messages[0].startswith("unfit device: node 0 (n0): gpus=7 seen")
    assert "GPU 3, UUID" in messages[1] and "pcie_width=8" in messages[1] and "gpus=" not in messages[1]


def test_the_kubernetes_wing_expects_every_device_of_a_type_only_of_a_pod_given_them_all():
    assert expected_devices("p5.48xlarge", {"nvidia.com/gpu": 8}) == {"expected_gpus": "8"}
    assert expected_devices("p5.48xlarge", {"nvidia.com/gpu": 4}) == {}  # --procs-per-node 4: its share
    assert expected_devices("trn2.48xlarge", {"aws.amazon.com/neuroncore": 64}) == {
        "expected_neuron_devices": "16"
    }
    assert expected_devices("trn1.32xlarge", {"aws.amazon.com/neurondevice": 16}) == {
        "expected_neuron_devices": "16"
    }
    assert expected_devices("x9.weird", {"nvidia.com/gpu": 8}) == {} and expected_devices(None, {}) == {}
    pod = Pod(
        {
            "spec": {
                "containers": [
                    {
                        "resources": {
                            "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": 32, "memory": "1Gi"}
                        }
                    }
                ]
            }
        }
    )
    assert pod.limits == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    node = Node({"metadata": {"labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}})
    assert node.facts == {"instance_type": "p5.48xlarge"}


# ---------------------------------------------------------------- fewer devices advertised than the type has


def p5_node(
    name: str, gpus: str = "8", efa: str = "32", allocatable_gpus: str | None = None
) -> dict[str, Any]:
    """A fake p5.48xlarge Node object advertising ``gpus`` GPUs (``allocatable_gpus`` of them allocatable)."""
    return {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
        "status": {
            "capacity": {"nvidia.com/gpu": gpus, "vpc.amazonaws.com/efa": efa},
            "allocatable": {"nvidia.com/gpu": allocatable_gpus or gpus, "vpc.amazonaws.com/efa": efa},
        },
    }


def observed_of(obj: dict[str, Any], gpus_given: int) -> dict[str, str]:
    """What the kubernetes wing observes of a node whose pod was given ``gpus_given`` GPUs (job.py's facts)."""
    seen = Node(obj)
    return {
        **seen.facts,
        **seen.health.facts,
        **count_facts(seen.instance_type, advertised_counts(seen.advertised)),
        **expected_devices(seen.instance_type, {"nvidia.com/gpu": gpus_given}),
    }


def test_a_node_advertising_fewer_gpus_than_its_type_fails_though_its_ranks_saw_all_they_were_given():
    """A GPU a node does not advertise is a fault nothing here can produce: the Node objects are written.

    Discovery lowered each pod's request to the 7 GPUs the short node offers: the ranks see all 7, so
    device_count finds nothing, and advertised_devices names the node, both counts and its type.
    """
    observed = {"n0": observed_of(p5_node("n0"), 7), "n1": observed_of(p5_node("n1", gpus="7"), 7)}
    assert "expected_gpus" not in observed["n1"]  # device_count cannot see it
    roll = roll_with({0: facts_of(fake_nvml(count=7)), 1: facts_of(fake_nvml(count=7))})
    verdict = judged(roll, observed)
    assert not verdict.passed
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1): advertised_gpus=7 advertised, its instance type p5.48xlarge has 8 GPUs "
        "(rule advertised_devices)"
    )
    assert verdict.unfit_nodes == ["n1"]
    [unfit] = verdict.unfit
    assert unfit.as_dict()["rule"] == "advertised_devices" and unfit.as_dict()["value"] == 7


def test_an_unhealthy_gpu_left_out_of_allocatable_counts_as_not_advertised():
    """The device plugin calling a GPU unhealthy cannot be produced here: allocatable is written short."""
    assert Node(p5_node("n", allocatable_gpus="6")).advertised("nvidia.com/gpu") == 6
    assert Node(p5_node("n")).advertised("aws.amazon.com/neuroncore") is None
    observed = {
        "n0": observed_of(p5_node("n0", allocatable_gpus="6"), 6),
        "n1": observed_of(p5_node("n1"), 6),
    }
    roll = roll_with({0: facts_of(fake_nvml(count=6)), 1: facts_of(fake_nvml(count=6))})
    [problem] = judged(roll, observed).of_kind(UNFIT_DEVICE)
    assert problem.message.startswith("unfit device: node 0 (n0): advertised_gpus=6 advertised")


def test_a_trn1_node_advertising_fewer_neuroncores_than_its_type_fails_naming_both_counts():
    """A NeuronCore a node does not advertise cannot be produced here: the Node's status is written out."""
    trn1 = {
        "metadata": {"name": "n1", "labels": {"node.kubernetes.io/instance-type": "trn1.32xlarge"}},
        "status": {
            "capacity": {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "30"},
            "allocatable": {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "30"},
        },
    }
    seen = Node(trn1)
    facts = count_facts(seen.instance_type, advertised_counts(seen.advertised))
    assert facts == {
        "advertised_neuron_devices": "16",
        "advertised_neuroncores": "30",
        "type_neuron_devices": "16",
        "type_neuroncores": "32",
        "type_efa": "8",
    }  # the node lists no EFA: nothing is held against the type's 8
    full = {**facts, "advertised_neuroncores": "32"}
    observed = {"n0": {**seen.facts, **full}, "n1": {**seen.facts, **facts}}
    ranks = {0: {"host": "n0", "neuron_devices": 16}, 1: {"host": "n1", "neuron_devices": 16}}
    [problem] = judged(roll_with(ranks), observed).of_kind(UNFIT_DEVICE)
    assert problem.message == (
        "unfit device: node 1 (n1): advertised_neuroncores=30 advertised, its instance type trn1.32xlarge has "
        "32 NeuronCores (rule advertised_devices)"
    )


def test_advertised_devices_warns_or_is_off_by_name_and_a_type_not_in_the_table_asks_nothing():
    observed = {"n0": observed_of(p5_node("n0", gpus="7"), 7), "n1": observed_of(p5_node("n1"), 7)}
    roll = roll_with({0: facts_of(fake_nvml(count=7)), 1: facts_of(fake_nvml(count=7))})
    options = resolve({"fitness_warn": ["advertised_devices"]}, environ={})
    warned = judged(roll, observed, fitness=criteria_of(options).fitness)
    assert warned.passed and warned.unfit_nodes == []
    [warning] = warned.warnings
    assert warning.message.startswith("unfit device (warning): node 0 (n0): advertised_gpus=7 advertised")
    off = judged(roll, observed, fitness=FitnessPolicy(off=frozenset({"advertised_devices"})))
    assert off.passed and off.warnings == ()
    unknown = {
        **p5_node("n0", gpus="7"),
        "metadata": {"name": "n0", "labels": {INSTANCE_TYPE_LABEL: "x9.big"}},
    }
    assert count_facts("x9.big", advertised_counts(Node(unknown).advertised)) == {
        "advertised_gpus": "7",
        "advertised_efa": "32",
    }
    assert judged(roll, {"n0": observed_of(unknown, 7), "n1": observed_of(p5_node("n1"), 7)}).passed


# ---------------------------------------------------------------- a compute straggler's device facts


def straggling_roll(
    compute: dict[int, float], per_rank: dict[int, dict[str, Any]], world: int = 4
) -> RollCall:
    """A roll call of ``world`` ranks, one a node, each with its compute time and ``facts``."""
    lines = []
    for r in range(world):
        lines += [
            event("start", r, world, local_rank=0, node_rank=r, host=f"n{r}", device="cuda:0"),
            event("epoch_time", r, world, epoch=1, seconds=0.5),
            event("throughput", r, world, samples_per_sec=50.0, compute_ms=compute.get(r, 10.0)),
            event("complete", r, world),
        ]
        if r in per_rank:
            lines.append(contract.encode_event("facts", r, world, **per_rank[r]).decode().rstrip("\n"))
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(("\n".join(lines) + "\n").encode())
    parser.close()
    return roll


def test_a_compute_stragglers_line_carries_its_devices_clocks_pcie_temperature_and_power():
    """A throttled clock cannot be produced here: the slow rank's NVML answers come from a fake."""
    slow = facts_of(fake_nvml(events=0x4 | 0x8, sm=1200, gen=4, width=8, temperature=87, power=500_000))
    per_rank = {r: facts_of(fake_nvml()) for r in range(3)} | {3: slow}
    verdict = judged(straggling_roll({3: 31.0}, per_rank), {}, nodes=4)
    [problem] = verdict.of_kind(COMPUTE_STRAGGLER)
    assert "rank 3 (node 3" in problem.message
    assert problem.message.endswith(
        "; their devices: rank 3 GPU 3 (UUID GPU-5f0c3e2a-0000-1111-2222-333344445555): clock events "
        "sw_power_cap, hw_slowdown, SM clock 1200 of 1980 MHz, PCIe gen 4 of 5, x8 of 16, 87 C, "
        "power limit 500.0 of 700.0 W"
    )


def test_a_compute_straggler_without_facts_keeps_its_line():
    verdict = judged(straggling_roll({3: 31.0}, {}), {}, nodes=4)
    [problem] = verdict.of_kind(COMPUTE_STRAGGLER)
    assert "their devices" not in problem.message and "rank 3" in problem.message


# ---------------------------------------------------------------- --expect-file FILE


def test_expect_file_reads_key_glob_lines_skipping_comments_and_blank_lines_beside_expect(tmp_path):
    golden = tmp_path / "golden.expect"
    golden.write_text("# the p5 node image\n\ndriver=580.*   # the R580 branch\n  nccl = 2.27.*\n")
    options = resolve({"expect": ["torch=2.*"], "expect_file": [str(golden)]}, environ={})
    assert options.judging.expect_file == (("driver", "580.*"), ("nccl", "2.27.*"))
    assert criteria_of(options).expect == (("torch", "2.*"), ("driver", "580.*"), ("nccl", "2.27.*"))
    from_env = resolve({}, environ={"ROLLCALL_EXPECT_FILE": str(golden)})
    assert from_env.judging.expect_file == (("driver", "580.*"), ("nccl", "2.27.*"))
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml(driver="570.86.15"))})
    verdict = judged(roll, {}, expect=criteria_of(options).expect)
    assert [p.message for p in verdict.of_kind(EXPECTATION) if "driver" in p.message] == [
        "expectation not met: node 1 (n1): driver is 570.86.15, expected driver=580.* (--expect)"
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("driver=580.*\n# fine\ntorchh=2.*\n", "line 3: unknown key 'torchh'; the keys are host"),
        ("driver=580.*\ntorch\n", "line 2: 'torch' is not KEY=GLOB"),
        ("=2.*\n", "line 1: '=2.*' is not KEY=GLOB"),
    ],
)
def test_a_malformed_line_or_unknown_key_in_the_file_is_refused_naming_file_and_line(tmp_path, text, said):
    golden = tmp_path / "golden.expect"
    golden.write_text(text)
    with pytest.raises(OptionError, match="--expect-file") as caught:
        resolve({"expect_file": [str(golden)]}, environ={})
    assert f"{golden}, {said}" in str(caught.value)


def test_a_missing_expect_file_is_refused_naming_it(tmp_path):
    with pytest.raises(OptionError, match=r"--expect-file.*cannot read .*nothing\.expect"):
        resolve({"expect_file": [str(tmp_path / "nothing.expect")]}, environ={})


def test_a_bad_expect_file_stops_the_session_with_exit_4_before_anything_starts(pytester, tmp_path):
    golden = tmp_path / "golden.expect"
    golden.write_text("driver=580.*\nfirmware=1.*\n")
    err = local_usage_error(pytester, "--expect-file", str(golden))
    assert f"{golden}, line 2: unknown key 'firmware'" in err


# ---------------------------------------------------------------- libfabric and aws-ofi-nccl versions


def install(
    root: Path, *, pc: bool = True, plugin: bytes | None = b"\0NET/OFI Initializing aws-ofi-nccl 1.14.0\0"
) -> None:
    """The EFA installer's and aws-ofi-nccl's layout under ``root``, as on the NVIDIA image."""
    efa = root / "opt/amazon/efa/lib"
    (efa / "pkgconfig").mkdir(parents=True)
    (efa / "libfabric.so.1").write_bytes(b"\x7fELF")
    if pc:
        (efa / "pkgconfig/libfabric.pc").write_text(
            "prefix=/opt/amazon/efa\nName: libfabric\nVersion: 1.22.0amzn4.0\n"
        )
    if plugin is not None:
        ofi = root / "opt/amazon/ofi-nccl/lib"
        ofi.mkdir(parents=True)
        (ofi / "libnccl-net-ofi.so").write_bytes(b"\x7fELF" + plugin)


def fabric(root: Path, **env: str):
    """:func:`fabric_facts` reading ``root``'s layout, with no ``fi_info`` on ``PATH`` unless ``env`` says."""
    prefixes = tuple(str(root / p) for p in ("opt/amazon/efa", "opt/amazon/ofi-nccl", "usr"))
    return functools.partial(
        workload_facts.fabric_facts, env={"PATH": str(root / "bin"), **env}, prefixes=prefixes
    )


def cut(reason: str) -> str:
    """``reason`` as a ``facts`` event keeps it."""
    return (
        reason
        if len(reason) <= workload_facts.MAX_REASON
        else reason[: workload_facts.MAX_REASON - 3] + "..."
    )


def cuda_facts(root: Path, **env: str) -> dict[str, Any]:
    held = workload_facts.held_before_context(0, nvml_loader=fake_nvml)
    return workload_facts.device_facts(
        "cuda", 0, nvml_loader=fake_nvml, fabric=fabric(root, **env), held=held
    )


def test_the_installed_libfabric_and_aws_ofi_nccl_versions_are_facts(tmp_path):
    install(tmp_path)
    facts = cuda_facts(tmp_path)
    assert facts["libfabric"] == "1.22.0amzn4.0" and facts["aws_ofi_nccl"] == "1.14.0"
    assert facts["unknown"] == {}


def test_fi_info_on_path_gives_libfabric_s_version_first(tmp_path):
    install(tmp_path, pc=False)
    (tmp_path / "bin").mkdir()
    fi_info = tmp_path / "bin/fi_info"
    fi_info.write_text(
        "#!/bin/sh\necho 'fi_info: 1.23.1amzn1.0'\necho 'libfabric: 1.23.1amzn1.0'\necho 'libfabric api: 1.23'\n"
    )
    fi_info.chmod(0o755)
    assert cuda_facts(tmp_path)["libfabric"] == "1.23.1amzn1.0"


def test_absent_libraries_are_unknown_with_where_they_were_looked_for_never_healthy(tmp_path):
    facts = cuda_facts(tmp_path)
    assert "libfabric" not in facts and "aws_ofi_nccl" not in facts
    assert facts["unknown"]["libfabric"].startswith("no fi_info; no libfabric.so* in no library directory")
    assert facts["unknown"]["aws_ofi_nccl"] == "no libnccl-net*.so in no library directory"
    install(tmp_path, pc=False, plugin=b"\0some other vendor's net plugin\0")
    lib = tmp_path / "opt/amazon/efa/lib"
    unknown = cuda_facts(tmp_path)[
        "unknown"
    ]  # each the functions' own reason, cut to workload_facts.MAX_REASON
    prefixes = fabric(tmp_path).keywords["prefixes"]
    with pytest.raises(LookupError) as fabric_said:
        workload_facts.libfabric_version({}, prefixes, fi_info=lambda env, prefixes: None)
    with pytest.raises(LookupError) as plugin_said:
        workload_facts.ofi_nccl_version({}, prefixes)
    assert str(fabric_said.value) == f"no fi_info; {lib}/libfabric.so.1 has no libfabric.pc beside it"
    plugin = tmp_path / "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    assert str(plugin_said.value) == f"{plugin} carries no aws-ofi-nccl version"
    assert unknown["libfabric"] == cut(str(fabric_said.value))
    assert unknown["aws_ofi_nccl"] == cut(str(plugin_said.value))
    assert workload_facts.device_facts("cpu")["unknown"] == {
        "nvml": "no NVML: device is cpu"
    }  # cpu reads neither


def test_nccl_net_plugin_and_ld_library_path_choose_the_plugin(tmp_path):
    install(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "libnccl-net.so").write_bytes(b"aws-ofi-nccl 1.15.0-rc1\0")
    assert cuda_facts(tmp_path, LD_LIBRARY_PATH=str(mine))["aws_ofi_nccl"] == "1.15.0-rc1"
    assert cuda_facts(tmp_path, LD_LIBRARY_PATH=str(mine), NCCL_NET_PLUGIN="ofi")["aws_ofi_nccl"] == "1.14.0"
    linked = tmp_path / "opt/nccl-net"  # the NVIDIA image's layout: a link named as NCCL loads by default
    linked.mkdir(parents=True)
    (linked / "libnccl-net.so").symlink_to(tmp_path / "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so")
    assert cuda_facts(tmp_path, LD_LIBRARY_PATH=f"{linked}:{mine}")["aws_ofi_nccl"] == "1.14.0"
    path = str(mine / "libnccl-net.so")
    assert cuda_facts(tmp_path, NCCL_NET_PLUGIN=path)["aws_ofi_nccl"] == "1.15.0-rc1"
    off = cuda_facts(tmp_path, NCCL_NET_PLUGIN="none")["unknown"]
    assert off["aws_ofi_nccl"] == "NCCL_NET_PLUGIN=none: no net plugin"
    missing = cuda_facts(tmp_path, NCCL_NET_PLUGIN="aws")["unknown"]["aws_ofi_nccl"]
    assert missing.startswith("no NCCL_NET_PLUGIN=aws in ")


def test_the_versions_drift_and_are_expected_like_the_others(tmp_path):
    install(tmp_path)
    good = cuda_facts(tmp_path)
    roll = roll_with({0: good, 1: {**good, "aws_ofi_nccl": "1.13.2", "libfabric": "1.21.0amzn1.0"}})
    warned = judged(roll, {})
    assert [w.message for w in warned.warnings] == [
        "config drift: libfabric differs between nodes: 1.21.0amzn1.0 (node 1); 1.22.0amzn4.0 (node 0)",
        "config drift: aws_ofi_nccl differs between nodes: 1.13.2 (node 1); 1.14.0 (node 0)",
    ]
    absent = cuda_facts(tmp_path / "nothing")
    expected = judged(roll_with({0: good, 1: absent}), {}, expect=parse_expect(["aws_ofi_nccl=1.14.*"]))
    [problem] = expected.of_kind(EXPECTATION)
    assert problem.message.startswith(
        "expectation not met: node 1 (n1): aws_ofi_nccl unknown (no libnccl-net*.so"
    )


def test_the_real_path_reads_them_from_the_process_environment(tmp_path, monkeypatch):
    install(tmp_path)
    monkeypatch.setenv(
        "LD_LIBRARY_PATH", f"{tmp_path}/opt/amazon/ofi-nccl/lib{os.pathsep}{tmp_path}/opt/amazon/efa/lib"
    )
    sheet = workload_facts.FactSheet()
    workload_facts.fabric_facts(sheet, prefixes=())
    assert sheet.values["aws_ofi_nccl"] == "1.14.0" and sheet.values["libfabric"] == "1.22.0amzn4.0"


def test_results_json_the_page_junit_and_unfit_nodes_txt_name_a_node_short_of_devices(tmp_path):
    """The node itself, not one of its GPUs, is what every report names (the missing GPU is a fake's)."""
    roll = roll_with({0: facts_of(fake_nvml()), 1: facts_of(fake_nvml(count=7))})
    verdict = judged(roll, {"n0": P5, "n1": P5})
    attempt = Attempt(
        JobSpec("job", 2, 1, accelerator="nvidia"), JobStatus(JobState.SUCCEEDED), verdict, tmp_path, 1.0
    )
    record = reports.TestRecord("t.py::test_x", RunResult("local", [attempt]), "nvidia")
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert test["unfit_nodes"] == ["n1"]
    [unfit] = [n for n in test["nodes_detail"] if n["verdict"] == "unfit"]
    assert unfit["name"] == "n1" and unfit["facts"]["expected_gpus"] == "8" and unfit["facts"]["gpus"] == "7"
    assert unfit["reasons"] == [
        "fail: node 1 (n1): gpus=7 seen, expected 8 GPUs with its instance type p5.48xlarge (rule device_count)"
    ]
    assert dict(reports.junit_properties(record))["unfit_nodes"] == "n1"
    page = htmlreport.render([record], {"backend": "local"}, tmp_path)
    assert "gpus=7 seen, expected 8 GPUs" in page and ">unfit<" in page
    nodes, breaker = nodeverdicts.of_records([record], 3600.0)
    assert [(n.name, n.verdict) for n in nodes] == [("n0", "fit"), ("n1", "unfit")] and not breaker.tripped
    assert nodeverdicts.write_unfit_nodes(tmp_path / "unfit-nodes.txt", nodes)
    assert (tmp_path / "unfit-nodes.txt").read_text() == "n1\n"


# ---------------------------------------------------------------- whose each --expect key is


def _node_verdicts(verdict) -> dict[str, Any]:
    found = nodeverdicts.of_verdict(
        verdict, test="t.py::test_x", backend="local", passed=verdict.passed, checked_at=1.0, ttl_s=60.0
    )
    return {n.name: n for n in found}


def test_an_expect_key_of_the_platforms_fails_the_run_as_the_platforms_and_marks_no_node():
    from .test_fitness import H200

    verdict = judged(roll_with({0: H200, 1: H200}), {}, expect=parse_expect(["torch=0.0.1"]))
    assert not verdict.passed
    problems = verdict.of_kind(EXPECTATION)
    assert [p.message for p in problems] == [
        f"expectation not met: node {i} (n{i}): torch is 2.11.0+cu130, expected torch=0.0.1 (--expect)"
        for i in (0, 1)
    ]
    assert all(p.blame is not None and p.blame.owner.value == "platform" for p in problems)
    assert verdict.first_failure is not None and verdict.first_failure.owner == "platform"
    assert verdict.unfit_nodes == [] and verdict.out_of_service() == {}
    nodes = _node_verdicts(verdict)
    assert {(n.verdict, n.owner) for n in nodes.values()} == {("undetermined", "platform")}
    assert "torch is 2.11.0+cu130" in nodes["n1"].reasons[0]


def test_an_expect_key_of_the_nodes_own_fails_the_run_as_the_clusters_and_makes_that_node_unfit():
    from .test_fitness import H200

    roll = roll_with({0: {**H200, "driver": "1"}, 1: H200})
    verdict = judged(roll, {}, expect=parse_expect(["driver=1"]))
    assert not verdict.passed
    [problem] = verdict.of_kind(EXPECTATION)
    assert problem.message == (
        "expectation not met: node 1 (n1): driver is 580.159.04, expected driver=1 (--expect)"
    )
    assert problem.blame is not None and problem.blame.owner.value == "cluster"
    assert verdict.first_failure is not None and verdict.first_failure.owner == "cluster"
    assert verdict.unfit_nodes == ["n1"] and list(verdict.out_of_service()) == [1]
    nodes = _node_verdicts(verdict)
    assert (nodes["n1"].verdict, nodes["n1"].owner) == ("unfit", "cluster")
    assert nodes["n1"].reasons == ("node 1 (n1): driver is 580.159.04, expected driver=1 (--expect)",)
    assert nodes["n0"].verdict == "fit"


def test_an_expect_key_the_node_could_not_read_marks_nothing():
    from .test_fitness import H200

    verdict = judged(roll_with({0: H200, 1: H200}), {}, expect=parse_expect(["retired_pending=False"]))
    assert not verdict.passed and len(verdict.of_kind(EXPECTATION)) == 2
    assert verdict.unfit_nodes == [] and verdict.out_of_service() == {}
    assert all(n.verdict != "unfit" for n in _node_verdicts(verdict).values())
