"""The GPU's own hang told from the host's: a stalled rank's dump says whether its GPU finished its work.

No CUDA device is here: the events are fed at the CUDA boundary (:class:`Marker`s whose ``query`` the test
decides, as ``torch.cuda.Event.query`` would answer), and the clock is the test's. On a GPU the fault
``ROLLCALL_GPU_HANG_RANK`` (a kernel that spins for days) makes the same dump for real (bench/gpu_checks.sh, case gpu-hang).
"""

from __future__ import annotations

from rollcall.checks.hangs import HUNG, hangs
from rollcall.checks.runview import RunView
from rollcall.evidence.hangs import gpu_line
from rollcall.ranklog import RollCall, StackDump
from rollcall.verdict import Criteria, Layout, Observed
from rollcall_workload.rank import watchdog as workload_watchdog
from rollcall_workload.rank.gpu_progress import KEEP, GpuProgress, Probe
from tests.unit.helpers import LineLog, event, node_log, roll_of_lines


class Event:
    """A CUDA event as the test drives it: ``done`` is whether the GPU has reached it."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu
        self.done = False

    def record(self) -> None:
        self.done = self.gpu.idle  # an idle GPU reaches an event as soon as it is recorded
        self.gpu.queued.append(self)

    def query(self) -> bool:
        if self.gpu.lost:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.done


class Gpu:
    """The events queued on one GPU, in order; :meth:`finish` lets it reach the first ``n``."""

    def __init__(self) -> None:
        self.queued: list[Event] = []
        self.lost = False
        self.idle = False

    def event(self) -> Event:
        return Event(self)

    def finish(self, n: int | None = None) -> None:
        for e in self.queued[:n]:
            e.done = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def progress(gpu: Gpu, clock: Clock) -> GpuProgress:
    return GpuProgress(3, gpu.event, clock=clock, sleep=clock.sleep, probe_s=1.0)


def test_a_gpu_that_finished_all_its_work_says_the_wait_is_not_its_own():
    gpu, clock = Gpu(), Clock()
    p = progress(gpu, clock)
    p.mark()
    clock.now += 90
    gpu.finish()
    gpu.idle = True  # it finished everything: the probe, recorded now, is reached at once
    assert p.probe() == Probe(3, 0.0)


def test_a_kernel_that_never_ends_after_the_last_step_is_pending_since_that_step():
    gpu, clock = Gpu(), Clock()
    p = progress(gpu, clock)
    p.mark()  # step 1 done at t=1000
    clock.now += 5
    p.mark()  # step 2 done at t=1005; then a kernel that never ends is queued, and the host waits on it
    gpu.finish()  # the GPU reached both marks ...
    clock.now += 63
    probe = p.probe()  # ... but never the probe behind the kernel
    assert probe is not None and probe.gpu == 3
    assert 64.0 <= probe.pending_s < 64.1  # since the last mark (1005), and the probe's own second


def test_the_oldest_unfinished_mark_is_when_the_pending_work_was_queued():
    gpu, clock = Gpu(), Clock()
    p = progress(gpu, clock)
    for _ in range(3):  # marks at 1000, 1010, 1020; the GPU reached only the first
        p.mark()
        clock.now += 10
    gpu.finish(1)
    clock.now += 30  # now 1060
    probe = p.probe()
    assert probe is not None and 51.0 <= probe.pending_s < 51.1  # queued at 1010, asked until 1061


def test_many_marks_keep_the_oldest_unfinished_one():
    gpu, clock = Gpu(), Clock()
    p = progress(gpu, clock)
    for _ in range(KEEP * 3):
        p.mark()
        clock.now += 1
    probe = p.probe()
    assert probe is not None and KEEP * 3 + 1.0 <= probe.pending_s < KEEP * 3 + 1.1  # from the first mark


def test_a_cuda_error_is_unknown_never_a_finding():
    gpu, clock = Gpu(), Clock()
    p = progress(gpu, clock)
    p.mark()
    gpu.lost = True
    assert p.probe() is None
    p.mark()  # marking a lost GPU raises nothing either


def test_the_watchdogs_dump_carries_the_gpu_and_what_it_has_not_finished():
    gpu, clock = Gpu(), Clock()
    log = LineLog(2, 4)
    p = progress(gpu, clock)
    dog = workload_watchdog.Watchdog(log, hang_after=60.0, first_step=120.0, clock=clock, gpu=p)
    dog.first_step_done()
    dog.beat("epoch 1 end", step=True)  # marks the GPU's work
    assert len(gpu.queued) == 1
    gpu.finish()
    clock.now += 61
    assert dog.check()
    stall = roll_of_lines(log.lines, "node-1").ranks[2].stall
    assert stall is not None and stall.gpu == 3
    assert stall.gpu_pending_s is not None and 62.0 <= stall.gpu_pending_s < 62.1


def _hung_with_gpu(pending: float | None, facts: dict[str, object] | None = None) -> str:
    """The hung problem's message for rank 3 (node 1 of 2 x 2), its dump saying ``pending`` of GPU 1."""
    done = node_log(0, 2, 2) + node_log(1, 2, 2, skip={3: ("throughput", "complete")})
    frames = [["run.py", 373, "_maybe_inject_fault", "torch.cuda.synchronize()", True]]
    extra = {} if pending is None else {"gpu": 1, "gpu_pending_s": pending}
    stack = workload_watchdog.encode_stack(
        3, 4, frames, dump=1, thread="MainThread", main=True, threads=1, phase="epoch 2 step 1",
        stalled_s=63.0, hang_after=60.0, **extra,
    ).decode()  # fmt: skip
    lines = done + "[1]:" + stack
    if facts:
        lines += "[1]:" + event("facts", 3, 4, **facts) + "\n"
    roll = RollCall()
    parser = roll.parser("node-1")
    parser.feed(lines.encode())
    parser.close()
    (problem,) = [p for p in hangs(RunView(Observed(roll, Layout(2, 2)), Criteria())) if p.kind is HUNG]
    return problem.message + " | " + problem.ranks[3]


def test_a_hung_rank_whose_gpu_has_not_finished_says_it_is_the_gpus_beside_the_host_frame():
    message = _hung_with_gpu(63.4, {"device_index": 5, "gpu_uuid": "GPU-abc"})
    assert "hung in its own compute" in message and "torch.cuda.synchronize()" in message
    assert "GPU 5 of node 1 (UUID GPU-abc) has not finished work queued 63s ago" in message
    assert message.count("the host waits on the GPU") == 2  # in the finding and in the rank's note
    without_facts = _hung_with_gpu(63.4)
    assert "GPU 1 of node 1 has not finished work queued 63s ago" in without_facts  # the CUDA device


def test_a_gpu_that_finished_says_the_wait_is_the_hosts_and_young_work_or_none_says_nothing():
    assert "GPU 1 of node 1 had finished all the work queued before the dump" in _hung_with_gpu(0.0)
    young = _hung_with_gpu(2.0)  # queued after the stall began: busy, not stuck
    assert "GPU" not in young
    assert "GPU" not in _hung_with_gpu(None)  # a dump that says nothing of a GPU (cpu, xla)


def test_the_line_needs_the_bound():
    dump = StackDump(1, "x", 61.0, 60.0, gpu=0, gpu_pending_s=59.9)
    assert gpu_line(dump, 0) is None
    assert gpu_line(StackDump(1, "x", 61.0, 60.0, gpu=0, gpu_pending_s=60.0), 0) == (
        "GPU 0 of node 0 has not finished work queued 60s ago: the host waits on the GPU"
    )
