"""A GPU's own hang told from outside the rank, on a lent GPU: the time to verdict and the story line.

One rank (1 node x 1 rank, cuda) runs under the real node monitor (``python -m
rollcall_workload.node.monitor``, NVML read for real), its watchdog writing the heartbeat and arming
faulthandler as in a run. After a few steps of matmuls it queues a kernel that spins for days
(``torch.cuda._sleep``, as ``ROLLCALL_GPU_HANG_RANK`` does) and then, by case:

- ``gil``: waits for the GPU through ``cuCtxSynchronize`` called by ``ctypes.PyDLL``, which keeps the GIL:
  no Python thread of the rank runs again, its watchdog neither; only the monitor can tell the GPU's state;
- ``queue``: goes on training, queuing matmuls behind the kernel until CUDA's launch queue is full, as a
  training loop that runs ahead of its GPU does;
- ``sync``: waits with ``torch.cuda.synchronize()`` (the GIL released): the watchdog's own probe speaks.

This script stands in for the suite: it reads the monitor's stdout (the node's log) into the suite's parser,
asks the suite's ``stop_reason`` a few times a second, and once it says to end the job judges the roll call
(``rollcall.judge.assess``); it keeps reading for a few seconds more, as a run's clean-up does, and judges
again. Each case's lines, the monitor's stderr, the rank's faulthandler dumps and the script's own NVML reads
of the GPU go to ``--out``; a table is printed last.

    PYTHONPATH=src python3 bench/gpu_hang_gil.py --out /tmp/gpu-hang --hang-after 10
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CASES = ("gil", "queue", "sync")
#: Seconds the script reads on after the suite would have ended the job (a run's clean-up).
TAIL_S = 8.0


def rank_main(case: str, hang_after: float) -> None:
    """The rank: a few steps, then the fault of ``case`` (see the module)."""
    import torch

    from rollcall_workload.contract import MONITOR_DIR_ENV, RollcallLog
    from rollcall_workload.rank import gpu_progress
    from rollcall_workload.rank.watchdog import Watchdog

    log = RollcallLog(0, 1)
    gpu = gpu_progress.for_device(0)
    dog = Watchdog(
        log, hang_after, hang_after, join=hang_after, monitor_dir=os.environ[MONITOR_DIR_ENV], gpu=gpu
    ).start()
    dog.joined()
    a = torch.randn(4096, 4096, device="cuda")
    step = 0
    for step in range(1, 7):
        dog.beat(f"epoch 1 step {step}", step=True)
        for _ in range(20):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
        dog.step_time(0.05)
    print(f"bench: uuid {gpu.uuid if gpu else None}; fault {case} at {time.time():.3f}", flush=True)
    torch.cuda._sleep(1 << 50)  # a kernel spinning for about 2**50 clock cycles: days
    if case == "gil":
        libcuda = ctypes.PyDLL("libcuda.so.1")  # PyDLL: the call keeps the GIL
        libcuda.cuCtxSynchronize()
    elif case == "sync":
        torch.cuda.synchronize()
    else:
        while True:  # training on, ahead of the GPU, until a launch blocks
            step += 1
            dog.beat(f"epoch 1 step {step}", step=True)
            for _ in range(20):
                a = torch.tanh(a @ a)
    raise SystemExit("the wait returned")


def nvml_reader() -> Any:
    """A function reading GPU 0's utilisation and compute processes, or one saying why it cannot."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:
        why = f"no NVML: {type(exc).__name__}: {exc}"
        return lambda: {"error": why}

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {"time": round(time.time(), 3)}
        try:
            out["util"] = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception as exc:
            out["util_error"] = f"{type(exc).__name__}: {exc}"
        try:
            out["processes"] = len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except Exception as exc:
            out["processes_error"] = f"{type(exc).__name__}: {exc}"
        return out

    return read


def run_case(case: str, hang_after: float, out: Path, nvml: Any) -> dict[str, Any]:
    """One case under the real monitor, judged as the suite would; what it found."""
    from rollcall.evidence.hangs import stop_reason
    from rollcall.judge import assess
    from rollcall.ranklog import RollCall
    from rollcall.verdict import Layout

    directory = tempfile.mkdtemp(prefix=f"gpu-hang-{case}-")
    here = Path(__file__).resolve()
    command = [sys.executable, "-m", "rollcall_workload.node.monitor", "--dir", directory, "--"]
    command += [sys.executable, str(here), "--rank", case, "--hang-after", str(hang_after)]
    started = time.time()
    err = open(out / f"{case}.stderr.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    roll = RollCall()
    parser = roll.parser("node-0")
    lock = threading.Lock()
    lines: list[tuple[float, str]] = []
    fault: list[float] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            now = time.time()
            text = raw.decode(errors="replace").rstrip("\n")
            with lock:
                lines.append((now, text))
                parser.feed(raw)
                if " fault " in text and text.startswith("bench:"):
                    fault.append(float(text.rsplit(" at ", 1)[1]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reads: list[dict[str, Any]] = []
    result: dict[str, Any] = {"case": case, "hang_after": hang_after}
    verdict_at = None
    deadline = started + 120 + 2 * hang_after
    next_read = 0.0
    while time.time() < deadline:
        now = time.time()
        if fault and now >= next_read:
            reads.append(nvml())
            next_read = now + 1.0
        with lock:
            reason = stop_reason(roll, 1)
            if reason is not None and verdict_at is None:
                verdict_at = now
                verdict = assess(roll, Layout(1, 1))
                first = verdict.first_failure
                result["stop_reason"] = reason
                result["at_stop"] = {
                    "first_failure": first.summary if first else None,
                    "owner": first.owner if first else None,
                    "problems": [p.message for p in verdict.findings],
                }
        if verdict_at is not None and now >= verdict_at + TAIL_S:
            break
        if proc.poll() is not None and verdict_at is None:
            result["ended_early"] = proc.returncode
            break
        time.sleep(0.25)
    with contextlib.suppress(OSError):  # the process group may be gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=5)
    err.close()
    with lock:
        verdict = assess(roll, Layout(1, 1))
        first = verdict.first_failure
        result["after_tail"] = {
            "first_failure": first.summary if first else None,
            "owner": first.owner if first else None,
            "problems": [p.message for p in verdict.findings],
        }
        events = [(t, x) for t, x in lines]
    result["fault_at"] = fault[0] if fault else None
    result["verdict_s"] = round(verdict_at - fault[0], 2) if verdict_at and fault else None
    result["nvml_reads"] = reads
    for name in ("rank-0.stacks",):
        path = Path(directory) / name
        result[name] = path.read_text(errors="replace")[-6000:] if path.exists() else None
    (out / f"{case}.log").write_text("".join(f"{t:.3f} {x}\n" for t, x in events))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("artifacts/gpu-hang"))
    parser.add_argument("--hang-after", type=float, default=10.0)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rank", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args.rank, args.hang_after)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    nvml = nvml_reader()
    print(f"python {sys.version.split()[0]}; NVML read before the cases: {nvml()}", flush=True)
    results = [run_case(c, args.hang_after, args.out, nvml) for c in args.cases.split(",")]
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n--hang-after {args.hang_after:g}s; seconds from the fault to the suite's stop")
    for r in results:
        at = r.get("at_stop") or {}
        print(f"== {r['case']}: verdict {r['verdict_s']} s after the fault; stop: {r.get('stop_reason')}")
        print(f"   at stop: owner {at.get('owner')}: {at.get('first_failure')}")
        print(f"   {TAIL_S:g}s later: {(r.get('after_tail') or {}).get('first_failure')}")
        busy = [x.get("util") for x in r["nvml_reads"]]
        procs = {x.get("processes", x.get("processes_error")) for x in r["nvml_reads"]}
        print(f"   NVML reads from the fault on: util {busy}; processes {procs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
