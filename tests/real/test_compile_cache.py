"""``--compile-cache host:/PATH`` on real nodes: a pod's compiled graphs outlive it, and the next run's pods
compile from them.

Two roll calls of one pod on a real node (1 rank, BERT tiny compiled by inductor on the CPU: the image's g++
builds the kernels in the pod), each a JobSet, with the same node directory, empty at first. The Job mounts
it at the pod's cache path (a hostPath, created by the kubelet); the rank's ``throughput`` says what its
first step found there: the first run compiles every graph afresh (``miss``), the second finds every one
(``hit``). One pod, not two: two compiling pods doubled the longest test of CI's longest session, and the
directory is the same for both real nodes (kubelets of this machine), as an NFS export is for a cluster's
nodes; ``host`` on a real cluster keeps a cache per node.
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
            nodes="1",
            procs_per_node="1",
            workload_args=COMPILED,
            job_timeout="600",
            straggler_ratio="0",  # a compiling pod on 2 shared cores: its speed is not the question
            busbw_ratio="0",
            job_kind="jobset",  # passing runs as JobSets (the rotated log's is 2 pods x 2 ranks)
        )
        name = f"{request.node.name}-{run}"
        attempt = suite.run(f"{request.node.nodeid}[{run}]", name).result.last
        assert attempt.passed, attempt.status.reason + "\n" + attempt.verdict.message()
        assert attempt.verdict.layout.world_size == 1
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
