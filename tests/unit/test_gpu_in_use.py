"""Memory another process held on a GPU before the run: the workload's reading, rule ``gpu_in_use``, and an
out-of-memory it causes named in the root cause, the cluster's.

No GPU is here and nothing here can make a stranger hold one: the memory and processes are fed at the NVML
boundary (a fake ``pynvml``, :func:`tests.unit.test_fitness.fake_nvml`). Where each pid stands to the rank is
read from this machine's real ``/proc``, with real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from rollcall import reports
from rollcall.backends import JobState, JobStatus
from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import FitnessPolicy
from rollcall.jobspec import JobSpec
from rollcall.options import resolve
from rollcall.ranklog import RollCall
from rollcall.runner import Attempt, RunResult
from rollcall.verdict import Owner
from rollcall_workload import contract
from rollcall_workload.contract import RUN_ID_ENV
from rollcall_workload.rank import facts as workload_facts
from rollcall_workload.rank.gpumem import holder

from .helpers import rank_lines
from .test_fitness import facts_of, fake_nvml, verdict_of

GIB = 1 << 30
#: A pid no Linux namespace can hold (the most ``kernel.pid_max`` allows is 2**22).
NO_SUCH_PID = (1 << 22) + 1


@pytest.fixture
def child():
    """A real process of this test's own, waiting on its stdin: its parent is this process."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def process(pid: int, gib: float | None) -> SimpleNamespace:
    """One entry of NVML's running processes, as ``pynvml`` gives it (``None``: memory not available)."""
    return SimpleNamespace(pid=pid, usedGpuMemory=None if gib is None else int(gib * GIB))


# ---------------------------------------------------------------- where each pid stands to the rank


def test_a_pid_is_the_rank_itself_its_job_a_process_it_sees_or_one_outside_its_container(child):
    me, parent = os.getpid(), os.getppid()
    assert holder(me, me=me, parent=parent) == "self"
    assert holder(parent, me=me, parent=parent) == "job"
    # the child's parent is this process: seen from a rank whose launcher is this process, a sibling rank
    assert holder(child.pid, me=NO_SUCH_PID, parent=me) == "job"
    # seen from this process, whose launcher is another, the child is just a process of the container
    assert holder(child.pid, me=me, parent=parent) == "container"
    assert holder(NO_SUCH_PID, me=me, parent=parent) == "outside"


def test_a_process_carrying_this_runs_id_is_the_jobs_as_simulated_nodes_sharing_a_gpu_are():
    """On the local backend two simulated nodes may share one GPU: the other node's rank has another
    launcher, but carries the same run id, so it is the job's, never a stranger; another run's is not."""
    me, parent = os.getpid(), os.getppid()
    env = {**os.environ, RUN_ID_ENV: "run-a"}
    script = "import sys; print('ready', flush=True); sys.stdin.read()"
    other = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert other.stdout is not None
        assert other.stdout.readline() == "ready\n"  # its exec is over: its environment reads whole
        assert holder(other.pid, me=me, parent=parent, run_id="run-a") == "job"
        assert holder(other.pid, me=me, parent=parent, run_id="run-b") == "container"
        assert holder(other.pid, me=me, parent=parent) == "container"
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait(timeout=30)


def test_the_workload_reads_memory_in_use_and_each_process_before_its_context(child):
    nvml = fake_nvml(
        used=int(110.6 * GIB),
        compute=[process(NO_SUCH_PID, 110.5), process(child.pid, 0.5)],
        graphics=[process(child.pid, None)],  # the same pid listed twice: once, with its larger reading
    )
    found, unknown = workload_facts.held_before_context(0, nvml_loader=lambda: nvml)
    assert unknown == {} and "shutdown" in nvml.calls
    assert found["memory_used_mib"] == int(110.6 * 1024)
    assert found["gpu_processes"] == [[NO_SUCH_PID, 110.5 * 1024, "outside"], [child.pid, 512, "container"]]
    # start carries them, said before anything can run out of memory; facts (after warm-up) has nothing to add
    line = contract.encode_event("start", 0, 1, local_rank=0, **found)
    assert b'"gpu_processes":[[4194305,113152,"outside"]' in line
    decoded = json.loads(line.decode().removeprefix(contract.EVENT_PREFIX))
    assert contract.breaches("start", decoded) == []
    facts = workload_facts.device_facts("cuda", 0, nvml_loader=lambda: nvml, held=(found, unknown))
    assert "memory_used_mib" not in facts and facts["unknown"] == {}


def test_without_nvml_nothing_is_read_and_the_facts_say_why_and_never_read_after_the_context():
    def missing():
        raise ImportError("No module named 'pynvml'")

    found, unknown = workload_facts.held_before_context(0, nvml_loader=missing)
    assert found == {}
    assert unknown == dict.fromkeys(
        ("memory_used_mib", "gpu_processes"),
        "no NVML: ImportError: " + str(ImportError("No module named 'pynvml'")),
    )
    said = workload_facts.device_facts("cuda", 0, nvml_loader=fake_nvml, held=(found, unknown))
    assert said["unknown"]["gpu_processes"] == "no NVML: ImportError: No module named 'pynvml'"
    # the facts read after warm-up never read it (the rank's own context holds memory then): said so
    late = workload_facts.device_facts("cuda", 0, nvml_loader=lambda: fake_nvml(used=80 * GIB))
    assert "memory_used_mib" not in late
    assert late["unknown"]["memory_used_mib"] == "not read before the rank's CUDA context"


# ---------------------------------------------------------------- rule gpu_in_use


def held(*processes: SimpleNamespace, used_gib: float = 110.6) -> dict[str, Any]:
    """What a rank reads of its GPU before its context (``start``'s fields), others holding ``processes``."""
    nvml = fake_nvml(used=int(used_gib * GIB), compute=list(processes))
    found, unknown = workload_facts.held_before_context(0, nvml_loader=lambda: nvml)
    assert unknown == {}
    return found


def roll_held(readings: dict[int, dict[str, Any]], errors: dict[int, str] | None = None) -> RollCall:
    """Two nodes of one rank: each rank's ``start`` with its reading, ``facts`` of a healthy GPU, and the
    whole roll call; a rank of ``errors`` reports that error right after ``start``, and nothing more."""
    errors = errors or {}
    text = []
    for r in range(2):
        lines = rank_lines(r, 2, 1, skip=("epoch_time", "throughput", "complete") if r in errors else ())
        start = json.loads(lines[0].removeprefix(contract.EVENT_PREFIX))
        lines[0] = contract.EVENT_PREFIX + json.dumps({**start, **readings.get(r, {})})
        if r in errors:
            lines.append(contract.encode_event("error", r, 2, message=errors[r]).decode().rstrip("\n"))
        else:
            lines.append(contract.encode_event("facts", r, 2, **facts_of(fake_nvml())).decode().rstrip("\n"))
        text += lines
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(("\n".join(text) + "\n").encode())
    parser.close()
    return roll


def test_memory_held_by_a_process_the_rank_sees_warns_by_default_naming_its_pid_and_memory(child):
    roll = roll_held({1: held(process(child.pid, 110.5))})
    verdict = verdict_of(roll)
    assert verdict.passed and verdict.unfit_nodes == []
    [warning] = verdict.warnings
    assert warning.kind is UNFIT_DEVICE and set(warning.ranks) == {1}
    assert f"held by pid {child.pid} (110.5 GiB)" in warning.message
    assert "memory_used_mib=113254 in use before the run" in warning.message
    assert "rule gpu_in_use" in warning.message and "(warning)" in warning.message
    assert "node 1 (n1) rank 1 GPU 3, UUID GPU-5f0c3e2a-0000-1111-2222-333344445555" in warning.message


def test_a_pid_outside_the_container_is_never_named_and_fitness_fail_makes_it_fail():
    roll = roll_held({0: held(process(NO_SUCH_PID, 110.5))})
    failed = verdict_of(roll, fitness=FitnessPolicy(fail=frozenset({"gpu_in_use"})))
    assert not failed.passed and failed.unfit_nodes == ["n0"]
    [problem] = failed.of_kind(UNFIT_DEVICE)
    assert "held by a process outside this container (110.5 GiB)" in problem.message
    assert str(NO_SUCH_PID) not in problem.message
    off = verdict_of(
        roll, fitness=FitnessPolicy(fail=frozenset({"gpu_in_use"}), off=frozenset({"gpu_in_use"}))
    )
    assert off.passed and off.warnings == ()


def test_the_options_steer_it(child):
    options = resolve({"fitness_fail": ["gpu_in_use"]}, environ={})
    assert options.judging.fitness_fail == {"gpu_in_use"}
    assert resolve({}, environ={"ROLLCALL_FITNESS_FAIL": "gpu_in_use"}).judging.fitness_fail == {"gpu_in_use"}


def test_the_rank_itself_and_its_jobs_processes_are_never_strangers():
    me, parent = os.getpid(), os.getppid()
    nvml = fake_nvml(used=int(2 * GIB), compute=[process(me, 1.0), process(parent, 1.0)])
    found, unknown = workload_facts.held_before_context(0, nvml_loader=lambda: nvml)
    assert {p[0]: p[2] for p in found["gpu_processes"]} == {me: "self", parent: "job"}
    assert unknown == {}
    verdict = verdict_of(roll_held({0: found}))
    assert verdict.passed and verdict.warnings == ()


def test_memory_in_use_with_no_process_listed_counts_from_a_floor():
    quiet = roll_held({0: held(used_gib=0.5)})
    assert verdict_of(quiet).warnings == ()
    [warning] = verdict_of(roll_held({0: held(used_gib=40)})).warnings
    assert "40960 in use before the run, by no process NVML lists" in warning.message


# ---------------------------------------------------------------- an out-of-memory on such a GPU

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity"


def test_an_out_of_memory_on_a_gpu_held_before_the_run_names_the_memory_as_cause_the_clusters(tmp_path):
    """The rank ran out of memory before its facts: what its start said of the GPU names the cause."""
    roll = roll_held({1: held(process(NO_SUCH_PID, 110.5))}, errors={1: OOM})
    verdict = verdict_of(roll)
    [root] = verdict.of_kind(ROOT_CAUSE)
    assert root.message.startswith("first failure: rank 1 (node 1) reported an error: torch.OutOfMemoryError")
    assert root.message.endswith(
        "its GPU had 110.6 GiB in use before the run, held by a process outside this container (110.5 GiB)"
    )
    assert root.blame is not None and root.blame.owner is Owner.CLUSTER
    assert "another process held before the run" in root.blame.why
    spec = JobSpec("job", 2, 1, accelerator="nvidia")
    attempt = Attempt(spec, JobStatus(JobState.FAILED, "rank 1 failed"), verdict, tmp_path, 1.0)
    record = reports.TestRecord("t.py::t", RunResult("local", [attempt]), "nvidia")
    reports.write_results(tmp_path / "results.json", [record], {})
    test = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    first = test["root_cause"]["first"]
    assert first["held"] == {"used_mib": 113254, "holders": [{"pid": None, "used_mib": 113152}]}


def test_an_out_of_memory_on_a_free_gpu_stays_the_workloads():
    verdict = verdict_of(roll_held({1: held(used_gib=0.2)}, errors={1: OOM}))
    [root] = verdict.of_kind(ROOT_CAUSE)
    assert "its GPU had" not in root.message
    assert root.blame is not None and root.blame.owner is Owner.WORKLOAD
