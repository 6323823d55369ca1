"""``--compile-cache host:/PATH`` on real nodes: a pod's compiled graphs outlive it, and the next run's pods
compile from them.

Two roll calls on the two real nodes (1 rank each, BERT tiny compiled by inductor on the CPU: the image's g++
builds the kernels in the pod) with the same node directory, empty at first. The Job mounts it at the pods'
cache path (a hostPath, created by the kubelet); each rank's ``throughput`` says what its first step found
there: the first run's ranks compile every graph afresh (``miss``), the second run's find every one
(``hit``). Both real nodes are kubelets of this machine, so they share the directory, as the nodes of a
cluster share an NFS export; ``host`` on a real cluster keeps a cache per node.
"""

from __future__ import annotations

import pytest

from rollcall.ranklog import CompileCache

from .conftest import SHORT

# Two compiled runs, a cold one of minutes on 2 shared cores, each under a job timeout of 600 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

COMPILED = f"{SHORT} --model tiny --compile --epochs 1"


def test_the_second_run_on_real_nodes_compiles_from_the_first_runs_cache(
    make_suite, real_nodes, tmp_path, request
):
    cache = tmp_path / "compile-cache"

    def ranks_cache(run: int) -> dict[int, CompileCache | None]:
        suite, _ = make_suite(
            compile_cache=f"host:{cache}",
            procs_per_node="1",
            workload_args=COMPILED,
            job_timeout="600",
            straggler_ratio="0",  # two compiling pods share 2 cores: their speed is not the question
            busbw_ratio="0",
            job_kind="jobset",  # the JobSet's passing runs on real nodes (the others are mostly Jobs)
        )
        name = f"{request.node.name}-{run}"
        attempt = suite.run(f"{request.node.nodeid}[{run}]", name).result.last
        assert attempt.passed, attempt.status.reason + "\n" + attempt.verdict.message()
        assert attempt.verdict.layout.world_size == 2
        return {r: result.compile_cache for r, result in attempt.verdict.ranks.items()}

    first = ranks_cache(1)
    assert all(c and c.state == "miss" and c.misses and not c.hits for c in first.values()), first
    assert any((cache / "inductor").iterdir()), "the pods kept nothing in the node directory"
    second = ranks_cache(2)
    assert all(c and c.state == "hit" and c.hits and not c.misses for c in second.values()), second
    for r in first:
        print(
            f"rank {r}: first step {first[r].compile_s:.1f} s (miss), then {second[r].compile_s:.1f} s (hit)"
        )
