"""The GPU's own hang told from outside the rank: its node's monitor reads the GPU through NVML.

A rank whose Python cannot run while it waits on its GPU (a CUDA call that keeps the GIL) cannot probe the GPU
itself; its heartbeat stands, and the node's monitor reads the GPU the heartbeat names. NVML is faked at its
boundary only: :class:`FakeGpu` answers ``read(uuid)`` as :class:`~rollcall_workload.node.gpu_listener.GpuLoads`
does from NVML's utilisation and process list, and :class:`FakeNvml` stands for the ``pynvml`` module (the
three calls ``GpuLoads`` makes). The clock is the test's; the rank's process is this test's own (alive,
running). On a GPU, ``bench/gpu_hang_gil.py`` runs the same with a kernel that never ends and the real NVML.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rollcall.checks.hangs import HUNG, WAITING, hangs
from rollcall.checks.runview import RunView
from rollcall.checks.silent import silent
from rollcall.evidence.hangs import FAULTHANDLER_GPU_NOTE, FAULTHANDLER_NOTE, stop_reason
from rollcall.judge import assess
from rollcall.verdict import Criteria, Layout, Observed, Owner
from rollcall_workload.contract import RollcallLog
from rollcall_workload.contract.heartbeat import Heartbeat, heartbeat_path
from rollcall_workload.node import monitor
from rollcall_workload.node.gpu_listener import GpuLoads, Load
from rollcall_workload.node.ranks import GPU_BUSY_PCT, GPU_CONFIRM_S
from rollcall_workload.rank import watchdog as workload_watchdog
from rollcall_workload.rank.gpu_progress import GpuProgress
from tests.unit.helpers import event, roll_of_lines

UUID = "GPU-7e6d0c1a"
BOUND = 10.0


class FakeGpu:
    """The GPU as NVML reads it, at the test's hand: its utilisation and its compute processes."""

    def __init__(self, utilisation: int = 100, processes: int | None = 1) -> None:
        self.utilisation, self.processes = utilisation, processes
        self.asked: list[str] = []

    def read(self, uuid: str) -> Load | None:
        self.asked.append(uuid)
        return None if uuid != UUID else Load(self.utilisation, self.processes)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _beat(
    directory: Path, *, progress: float, time_: float, uuid: str | None = UUID, steps: int = 11
) -> None:
    beat = Heartbeat(event="heartbeat", rank=0, world_size=1, time=time_, pid=os.getpid(),
                     phase="epoch 1 step 10", steps=steps, progress=progress, hang_after=BOUND, dumps=0,
                     joined=True, gpu=0 if uuid else None, gpu_uuid=uuid)  # fmt: skip
    data = json.dumps({f: getattr(beat, f) for f in Heartbeat.__dataclass_fields__ if f.islower()})
    Path(heartbeat_path(str(directory), 0)).write_text(data)


def _looks(files: monitor.RankFiles, clock: Clock, wall: float, until: float) -> list[tuple[float, dict]]:
    """Each line said at a look a second apart until the clock reads ``until``, with the look's time."""
    said = []
    while clock.t < until:
        clock.t += 1.0
        said += [
            (clock.t, json.loads(line.split(b" ", 1)[1])) for line in files.poll(wall + clock.t - 1000.0)
        ]
    return said


def _stopped_rank(
    tmp_path: Path, gpu: FakeGpu | None, uuid: str | None = UUID
) -> tuple[monitor.RankFiles, Clock]:
    """A rank whose last step was at 1000 and whose heartbeat stood from then on, looked at once."""
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), mono=clock, gpus=gpu)
    wall = time.time()
    _beat(tmp_path, progress=wall, time_=wall, uuid=uuid)
    assert files.poll(wall) == []
    return files, clock


def test_a_rank_standing_still_past_its_bound_with_its_gpu_busy_is_said_once_with_the_gpus_reading(tmp_path):
    gpu = FakeGpu()
    files, clock = _stopped_rank(tmp_path, gpu)
    wall = time.time()
    said = _looks(files, clock, wall, 1000.0 + BOUND + monitor.SILENT_MARGIN_S + 5)
    assert len(said) == 1, said  # once: the plain silence, later, is not said again
    at, line = said[0]
    assert at == 1000.0 + BOUND + 1  # the first look past the bound: the window had held since 1001
    assert line["event"] == "silent" and line["state"] in ("R", "S")
    assert (line["gpu"], line["gpu_uuid"], line["gpu_busy_pct"], line["gpu_reads"]) == (0, UUID, 100, 11)
    assert line["gpu_confirm_s"] == BOUND >= GPU_CONFIRM_S and "margin_s" not in line  # 1001 to 1011
    assert gpu.asked and set(gpu.asked) == {UUID}


def test_the_window_holds_only_reads_at_every_look_each_busy_and_the_gpu_unshared(tmp_path):
    """A read under the threshold, another process on the GPU, or no list of them: the window starts again."""
    for spoil in ("idle", "shared", "unlisted"):
        directory = tmp_path / spoil
        directory.mkdir()
        gpu = FakeGpu()
        files, clock = _stopped_rank(directory, gpu)
        wall = time.time()
        assert _looks(files, clock, wall, 1000.0 + BOUND - 1) == []
        if spoil == "idle":
            gpu.utilisation = GPU_BUSY_PCT - 1
        elif spoil == "shared":
            gpu.processes = 2
        else:
            gpu.processes = None
        assert _looks(files, clock, wall, 1000.0 + BOUND + 2) == []  # past the bound: nothing, it is not busy
        gpu.utilisation, gpu.processes = GPU_BUSY_PCT, 1  # busy again from the look at 1013
        said = _looks(files, clock, wall, 1000.0 + BOUND + 10)
        assert [(at, line["gpu_busy_pct"], line["gpu_reads"]) for at, line in said] == [
            (1000.0 + BOUND + 3 + GPU_CONFIRM_S, GPU_BUSY_PCT, 4)
        ], spoil


def test_a_rank_whose_heartbeat_goes_on_is_never_read_busy_its_watchdog_speaks_for_it(tmp_path):
    gpu = FakeGpu()
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), mono=clock, gpus=gpu)
    wall = time.time()
    for n in range(40):  # its watchdog thread writes the heartbeat at every tick; no step for 40 s
        _beat(tmp_path, progress=wall, time_=wall + n)
        clock.t += 1.0
        assert files.poll(wall + n) == []
    assert gpu.asked == []  # NVML is not even asked while the heartbeat changes


def test_without_nvml_or_a_gpu_uuid_or_with_the_process_stopped_only_the_plain_silence_is_said(tmp_path):
    for case in ("no nvml", "no uuid", "stopped"):
        directory = tmp_path / case.replace(" ", "-")
        directory.mkdir()
        files, clock = _stopped_rank(
            directory, None if case == "no nvml" else FakeGpu(), None if case == "no uuid" else UUID
        )
        if case == "stopped":
            files.state_of = lambda pid: ("T", "stopped")
        said = _looks(files, clock, time.time(), 1000.0 + BOUND + monitor.SILENT_MARGIN_S + 2)
        assert [line.get("gpu_busy_pct") for _, line in said] == [None], case
        assert said[0][0] == 1000.0 + BOUND + monitor.SILENT_MARGIN_S + 1, case  # at the plain bound


def test_the_gpus_reading_is_withdrawn_once_the_heartbeat_comes_back(tmp_path):
    files, clock = _stopped_rank(tmp_path, FakeGpu())
    wall = time.time()
    assert len(_looks(files, clock, wall, 1000.0 + BOUND + 1)) == 1
    _beat(tmp_path, progress=wall + 20, time_=wall + 20, steps=12)
    (back,) = _looks(files, clock, wall, 1000.0 + BOUND + 2)
    assert back[1]["event"] == "resumed" and back[1]["dump"] == 0


class FakeNvml:
    """The three calls of ``pynvml`` that :class:`GpuLoads` makes (pynvml's names), for the GPU :data:`UUID`."""

    class Rates:
        gpu = 97

    def __init__(self) -> None:
        self.handles = 0
        self.processes: list[object] | Exception = [object()]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != UUID:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        self.handles += 1
        return "handle"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> type[Rates]:
        return self.Rates

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[object]:
        if isinstance(self.processes, Exception):
            raise self.processes
        return self.processes


def test_nvmls_load_is_read_by_uuid_and_an_error_is_unknown():
    nvml = FakeNvml()
    loads = GpuLoads(nvml)
    assert loads.read(UUID) == Load(97, 1) and loads.read(UUID) == Load(97, 1)
    assert nvml.handles == 1  # the handle is kept
    assert loads.read("GPU-other") is None
    nvml.processes = RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    assert loads.read(UUID) == Load(97, None)


def test_the_watchdogs_heartbeat_names_its_gpu_and_uuid_for_the_monitor(tmp_path):
    class Marker:
        def record(self) -> None:
            pass

        def query(self) -> bool:
            return True

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        gpu = GpuProgress(3, Marker, uuid=UUID)
        dog = workload_watchdog.Watchdog(
            RollcallLog(0, 1, fd=devnull), 5.0, 5.0, monitor_dir=str(tmp_path), gpu=gpu
        )
        dog.beat("epoch 1 step 1", step=True)
        beat = monitor.RankFiles(str(tmp_path)).heartbeats()[0]
        assert (beat.gpu, beat.gpu_uuid) == (3, UUID)
        plain = workload_watchdog.Watchdog(RollcallLog(1, 2, fd=devnull), 5.0, 5.0, monitor_dir=str(tmp_path))
        plain.beat("epoch 1 step 1", step=True)
        beat = monitor.RankFiles(str(tmp_path)).heartbeats()[1]
        assert (beat.gpu, beat.gpu_uuid) == (None, None)  # cpu, xla: nothing for NVML
    finally:
        dog.stop()
        plain.stop()
        os.close(devnull)


# The suite's reading: the ``silent`` line the monitor writes, with the GPU's reading.

GPU_SILENT = {"phase": "epoch 1 step 10", "steps": 11, "stalled_s": 13.2, "heartbeat_s": 13.2, "hang_after": 10.0,
              "pid": 4242, "state": "R", "state_name": "running", "held_s": 12.0, "gpu": 0, "gpu_uuid": UUID,
              "gpu_busy_pct": 100, "gpu_reads": 4, "gpu_confirm_s": 3.0}  # fmt: skip


def _roll(*lines: str):
    return roll_of_lines([(line + "\n").encode() for line in lines])


def _sleep_stack(rank: int, world: int) -> str:
    frames = [["rank/run.py", 12, "run", "time.sleep(3600)", True]]
    return event("stack", rank, world, dump=1, thread="MainThread", main=True, threads=1, phase="epoch 1 end",
                 stalled_s=11.0, hang_after=10.0, frames=frames)  # fmt: skip


def test_a_rank_its_monitor_read_busy_is_named_hung_on_its_gpu_not_silent_and_the_job_ends_at_it():
    roll = _roll(event("silent", 0, 1, **GPU_SILENT))
    run = RunView(Observed(roll, Layout(1, 1)), Criteria())
    (problem,) = list(hangs(run))
    assert problem.kind is HUNG and list(silent(run)) == []  # not the node's freeze
    assert problem.message == (
        "rank 0 (node 0, pod node-0) hung waiting on its GPU for 13s (--hang-after 10s), seen by its node's "
        f"monitor: GPU 0 of node 0 (UUID {UUID}) busy (NVML utilisation 100% at 4 reads over 3s), its work "
        "queued since epoch 1 step 10 unfinished for 13s: the host waits on the GPU; process 4242 is running (R)"
    )
    assert "no Python thread" not in problem.message
    first = assess(roll, Layout(1, 1)).first_failure
    assert first is not None and first.kind == "hung" and first.owner == Owner.UNDETERMINED.value
    assert (
        stop_reason(roll, 1)
        == "rank(s) 0 hung, every other rank waited past its --hang-after: ended at the hang"
    )
    plain = {k: v for k, v in GPU_SILENT.items() if not k.startswith("gpu")}
    roll = _roll(event("silent", 0, 1, **plain, margin_s=8.0))
    assert list(hangs(RunView(Observed(roll, Layout(1, 1)), Criteria()))) == []
    assert "silent (process running)" in (stop_reason(roll, 1) or "")  # the plain silence, as before


def test_faulthandlers_stack_of_a_rank_read_busy_says_the_gpu_beside_the_host_frame():
    frames = [["rank/run.py", 40, "train_steps", "loss.backward()", True]]
    stack = event("stack", 0, 1, dump=1, thread="MainThread", main=True, threads=1, phase="epoch 1 step 10",
                  stalled_s=15.0, hang_after=10.0, source="faulthandler", frames=frames)  # fmt: skip
    run = RunView(Observed(_roll(event("silent", 0, 1, **GPU_SILENT), stack), Layout(1, 1)), Criteria())
    (problem,) = list(hangs(run))
    assert problem.kind is HUNG and FAULTHANDLER_GPU_NOTE in problem.message
    assert FAULTHANDLER_NOTE not in problem.message
    assert problem.message.endswith(
        f"train_steps: loss.backward(); GPU 0 of node 0 (UUID {UUID}) busy (NVML utilisation 100% at 4 reads "
        "over 3s), its work queued since epoch 1 step 10 unfinished for 13s: the host waits on the GPU"
    )
    alone = RunView(Observed(_roll(stack), Layout(1, 1)), Criteria())
    assert FAULTHANDLER_NOTE in next(iter(hangs(alone))).message  # without the monitor's reading, as before


def test_a_rank_read_busy_while_another_is_hung_for_certain_waits_for_it():
    """A collective's kernel keeps a GPU busy while it waits for a peer: with a rank hung for certain
    elsewhere, the one read busy is not named."""
    roll = _roll(_sleep_stack(1, 2), event("silent", 0, 2, **GPU_SILENT))
    problems = list(hangs(RunView(Observed(roll, Layout(1, 2)), Criteria())))
    assert [(p.kind, sorted(p.ranks)) for p in problems] == [(HUNG, [1]), (WAITING, [0])]
    assert "waiting for the hung rank: GPU 0 of node 0" in problems[1].message
    assert stop_reason(roll, 2) is not None and "rank(s) 1 hung" in (stop_reason(roll, 2) or "")


def test_ranks_stalled_in_backward_wait_for_a_rank_hung_on_its_gpu():
    frames = [["rank/run.py", 40, "train_steps", "loss.backward()", True],
              ["/usr/lib/torch/_tensor.py", 581, "backward", "torch.autograd.backward(", False]]  # fmt: skip
    stack = event("stack", 1, 2, dump=1, thread="MainThread", main=True, threads=1, phase="epoch 1 step 10",
                  stalled_s=11.0, hang_after=10.0, frames=frames)  # fmt: skip
    roll = _roll(stack, event("silent", 0, 2, **GPU_SILENT))
    problems = list(hangs(RunView(Observed(roll, Layout(1, 2)), Criteria())))
    assert [(p.kind, sorted(p.ranks)) for p in problems] == [(HUNG, [0]), (WAITING, [1])]
    assert "hung waiting on its GPU" in problems[0].message
    assert (
        problems[1].message
        == "rank 1 waiting in a collective (DDP's gradient all-reduce in backward) for the hung rank"
    )
    alone = list(hangs(RunView(Observed(_roll(stack), Layout(1, 2)), Criteria())))
    assert [p.kind for p in alone] == [HUNG]  # without the GPU's reading: named hung in backward, as before
