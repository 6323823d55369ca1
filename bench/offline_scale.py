"""Where the suite's seconds go after the logs arrive, at scale, without a cluster: N nodes x 32 ranks.

Usage: python bench/offline_scale.py [--nodes 64 256] [--procs-per-node 32] [--bandwidth] [--runs 3] [--profile 15]

For each size it synthesizes every pod's log as trn1.32xlarge nodes print it (torchrun's ``[rank]:`` prefix;
each rank's ``start``, ``facts``, one ``epoch_time`` per epoch, ``throughput`` and ``complete``, written by
the workload's own line formatter, ``rollcall_workload.contract.encode_event``; the NCCL and progress lines
between them), then times the suite's pure-Python path from the first byte on, phase by phase, as the plugin
runs it:

- collect: every pod's log through its :class:`~rollcall.collect.LogSink` (the artifact file and the parser);
- live: one live roll call of the whole world (the wait draws one every second);
- judge: the one :func:`~rollcall.judge.judge` of the attempt, against the options' default criteria;
- results.json, ranks.junit.xml, report.html and the Prometheus text file, as the session's end writes them.

Each phase's wall and CPU seconds (medians of ``--runs``; CPU time is the steadier figure on a shared
machine) and the process's peak RSS after it (the high-water mark, so
it only grows; the highest of the runs; each size runs in a process of its own) are printed in a table; ``--profile N`` also runs each phase under cProfile and prints its N costliest functions (own
time). ``--bandwidth`` adds the ``bandwidth`` events a cuda or cpu run reports (world, node and ring pairs).
bench/scale.py measures the whole suite on kwok (a cluster); this one needs none.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rollcall.backends import JobState, JobStatus  # noqa: E402
from rollcall.collect import RANKS_JUNIT_FILE, REPORT_FILE, RESULTS_FILE, Collector  # noqa: E402
from rollcall.gate import GateReport, criteria_of  # noqa: E402
from rollcall.jobspec import JobSpec  # noqa: E402
from rollcall.judge import judge  # noqa: E402
from rollcall.live.view import LiveRollCall  # noqa: E402
from rollcall.metrics.prometheus import write_textfile  # noqa: E402
from rollcall.options import DEFAULTS  # noqa: E402
from rollcall.page.report import write_report  # noqa: E402
from rollcall.reports import TestRecord, write_rank_junit, write_results  # noqa: E402
from rollcall.runner import Attempt, RunResult  # noqa: E402
from rollcall.verdict import Layout, Observed  # noqa: E402
from rollcall_workload.contract import encode_event  # noqa: E402

TRN1 = "trn1.32xlarge"
#: A phase's name, wall seconds, CPU seconds of this process and peak RSS (MiB) after it.
Row = tuple[str, float, float, float]
EPOCHS = 3
#: Bytes per write into a pod's sink, as a log stream hands them over.
CHUNK = 1 << 16
FACTS = {
    "kernel": "6.1.0-31-cloud-amd64",
    "os": "Debian GNU/Linux 12 (bookworm)",
    "python": "3.11.7",
    "torch": "2.5.1",
    "transformers": "4.46.3",
    "neuron_driver": "2.19.64.0",
    "neuron_runtime": "2.22.14.0",
    "neuron_compiler": "2.15.128.0",
    "neuron_devices": 16,
    "neuron_cores": 32,
}


def rank_events(rank: int, nodes: int, ppn: int, bandwidth: bool) -> Iterator[bytes]:
    """One rank's roll-call lines, encoded by the workload itself."""
    world = nodes * ppn
    node, local = divmod(rank, ppn)
    t = 1_796_000_000.0 + rank * 1e-3

    def event(name: str, **fields: Any) -> bytes:
        nonlocal t
        t += 1.0
        line: bytes = encode_event(name, rank, world, time=round(t, 6), **fields)
        return line

    host = f"ip-10-0-{node // 250}-{node % 250}"
    yield event(
        "start",
        local_rank=local,
        node_rank=node,
        local_world_size=ppn,
        host=host,
        node=f"{host}.ec2.internal",
        device=f"xla:{local}",
        device_name="NEURON",
        model="base",
        seq_len=128,
        batch_size=32,
        precision="bf16-autocast",
        node_id=node,
    )
    yield event("facts", host=host, **FACTS, unknown={"nvml": "no NVML: device is xla"})
    for epoch in range(1, EPOCHS + 1):
        yield event(
            "epoch_time",
            epoch=epoch,
            seconds=round(2.0 + (rank % 7) * 1e-3, 6),
            steps=50,
            samples=1600,
            loss=round(9.0 - epoch * 0.1, 4),
            param_digest=None,
        )
    yield event(
        "throughput",
        samples_per_sec=round(800.0 + (rank % 13) * 0.1, 3),
        tflops=round(50.1 + (rank % 13) * 0.01, 4),
        mfu=None,
        flops_per_sample=66_000_000_000.0,
        model="base",
        seq_len=128,
        batch_size=32,
        mlm_head="masked",
        compiled=False,
        compile_mode=None,
        impl="hf",
        precision="bf16-autocast",
        epochs=EPOCHS,
        steps_per_epoch=50,
        compute_ms=round(38.0 + (rank % 5) * 0.1, 3),
        compute_ms_p90=round(39.0 + (rank % 5) * 0.1, 3),
        compute_steps=5,
        startup_s=20.0,
        compile_s=60.0,
        compile_cache="off",
        warmup_s=5.0,
        warmup_steps=10,
        timed_s=6.0,
        digest_s=0.0,
    )
    if bandwidth:
        groups = [("world", f"0-{world - 1}", f"0-{nodes - 1}", world)]
        groups.append(("node", f"{node * ppn}-{node * ppn + ppn - 1}", str(node), ppn))
        if nodes >= 3:
            for a in (node - 1) % nodes, node:
                b = (a + 1) % nodes
                lo, hi = sorted((a, b))
                members = f"{lo * ppn}-{lo * ppn + ppn - 1},{hi * ppn}-{hi * ppn + ppn - 1}"
                groups.append(("pair", members, f"{lo},{hi}", 2 * ppn))
        for scope, ranks, group_nodes, n in groups:
            seconds = 0.0004
            algbw = 67108864 / seconds / 1e9
            yield event(
                "bandwidth",
                scope=scope,
                ranks=ranks,
                nodes=group_nodes,
                bytes=67108864,
                iters=20,
                seconds=seconds,
                algbw_gbps=round(algbw, 3),
                busbw_gbps=round(algbw * 2 * (n - 1) / n, 3),
                checked=20,
                mismatch=None,
            )
    yield event("complete", param_digest=None)


def pod_log(node: int, nodes: int, ppn: int, bandwidth: bool) -> bytes:
    """One pod's log: its ranks' lines interleaved round-robin, prefixed, with NCCL and progress lines."""
    streams = [
        [b"[%d]:" % r + line for line in rank_events(r, nodes, ppn, bandwidth)]
        for r in range(node * ppn, (node + 1) * ppn)
    ]
    out = [b"INFO torchrun: starting %d workers\n" % ppn]
    for i in range(max(len(s) for s in streams)):
        for local, lines in enumerate(streams):
            rank = node * ppn + local
            out.append(b"[%d]:rollcall: rank %d progress step %d of the warm-up\n" % (rank, rank, i))
            if i < len(lines):
                out.append(lines[i])
    return b"".join(out)


def measure(name: str, work: Callable[[], Any], profile: int, rows: list[Row]) -> Any:
    """Run ``work`` (under cProfile when ``profile``), append its row, print its costliest functions."""
    profiler = cProfile.Profile() if profile else None
    started, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    result = work()
    if profiler is not None:
        profiler.disable()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    rows.append((name, seconds, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile)
        body = text.getvalue()
        print(f"--- {name}: {seconds:.2f} s (profiled) ---")
        print(body[body.find("   ncalls") :].rstrip() + "\n")
    return result


def run(nodes: int, ppn: int, bandwidth: bool, profile: int, tmp: Path) -> list[Row]:
    """Synthesize one size's logs, then time each phase; the rows of its table."""
    world = nodes * ppn
    logs = [pod_log(n, nodes, ppn, bandwidth) for n in range(nodes)]
    spec = JobSpec(f"scale-{nodes}", nodes, ppn, accelerator="neuron", instance_type=TRN1)
    artifacts = tmp / f"run-{nodes}"
    rows: list[Row] = [
        ("synthesized logs (not timed)", 0.0, 0.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    ]

    def collect() -> Collector:
        collector = Collector(artifacts)
        for n, data in enumerate(logs):
            sink = collector.sink(f"{spec.name}-{n}-x7k2p")
            for at in range(0, len(data), CHUNK):  # as the log stream hands it over
                sink.write(data[at : at + CHUNK])
        collector.close()
        return collector

    collector = measure("collect (log files + parse)", collect, profile, rows)
    roll = collector.roll
    live = measure("live roll call (one)", lambda: LiveRollCall.of(roll, world), profile, rows)
    assert live.complete == world, f"{live.complete}/{world} complete: the synthesized logs are wrong"
    criteria = criteria_of(DEFAULTS)
    observed = Observed(roll, Layout(nodes, ppn), JobStatus(JobState.SUCCEEDED), spec, "pod")
    verdict = measure("judge", lambda: judge(observed, criteria), profile, rows)
    assert verdict.passed, verdict.message()
    attempt = Attempt(spec, JobStatus(JobState.SUCCEEDED), verdict, artifacts, 10.0)
    record = TestRecord(
        "tests/e2e/test_roll_call.py::test_every_rank", RunResult("kubernetes", [attempt]), "neuron"
    )
    record.gate = GateReport.of(record.test_id, attempt)
    meta = {"backend": "kubernetes", "started": 0.0, "finished": 1.0, "argv": ["pytest"]}
    records = [record]
    measure(RESULTS_FILE, lambda: write_results(tmp / RESULTS_FILE, records, meta), profile, rows)
    measure(RANKS_JUNIT_FILE, lambda: write_rank_junit(tmp / RANKS_JUNIT_FILE, records), profile, rows)
    measure(REPORT_FILE, lambda: write_report(tmp / REPORT_FILE, records, meta), profile, rows)
    measure("metrics (.prom)", lambda: write_textfile(tmp / "rollcall.prom", records, 1.0), profile, rows)
    size = sum(len(d) for d in logs)
    print(f"{nodes} nodes x {ppn} ranks = {world} ranks; logs {size / 2**20:.1f} MiB, {roll.records} records")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--procs-per-node", type=int, default=32)
    ap.add_argument("--bandwidth", action="store_true", help="add the bandwidth events of a cuda/cpu run")
    ap.add_argument("--runs", type=int, default=3, help="runs per size; the table holds their medians")
    ap.add_argument(
        "--profile", type=int, default=0, metavar="N", help="cProfile each phase: N top functions"
    )
    args = ap.parse_args()
    if len(args.nodes) > 1:  # each size in a process of its own, so that each peak RSS is that size's
        for nodes in args.nodes:
            argv = [
                "--nodes",
                str(nodes),
                "--procs-per-node",
                str(args.procs_per_node),
                "--runs",
                str(args.runs),
            ]
            argv += ["--profile", str(args.profile), *(["--bandwidth"] if args.bandwidth else [])]
            subprocess.run([sys.executable, __file__, *argv], check=True)
        return
    for nodes in args.nodes:
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="rollcall-offline-scale-") as tmp:
                runs.append(run(nodes, args.procs_per_node, args.bandwidth, args.profile, Path(tmp)))
        # each phase's median seconds over the runs, and the highest peak
        rows = [
            (
                phases[0][0],
                statistics.median(p[1] for p in phases),
                statistics.median(p[2] for p in phases),
                max(p[3] for p in phases),
            )
            for phases in zip(*runs, strict=True)
        ]
        print(f"median of {args.runs} run(s)")
        print(f"{'phase':<32}{'seconds':>9}{'CPU s':>8}{'peak RSS MiB':>14}")
        for name, seconds, cpu, rss in rows:
            print(f"{name:<32}{seconds:>9.2f}{cpu:>8.2f}{rss:>14.0f}")
        total, total_cpu, peak = sum(r[1] for r in rows), sum(r[2] for r in rows), max(r[3] for r in rows)
        print(f"{'total (timed phases)':<32}{total:>9.2f}{total_cpu:>8.2f}{peak:>14.0f}\n")


if __name__ == "__main__":
    main()
