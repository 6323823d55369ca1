"""Never fail a healthy cluster: simulated fleets through the suite's real decisions, and what it got wrong.

Usage: python bench/blame.py [--runs 10000] [--seed 1] [--jobs 2] [--bug NAME]

Each run is a :class:`tests.sim.fleet.Plan` (2 to 2,048 ranks, nodes heard up to the start skew apart, slow
launchers and imports, long first steps, pauses in Python and in C, brief ``D`` states, events on GPUs no rank
uses: node reboots, GPU resets, Xids NVIDIA ignores or answers by restarting the application; an
administrator's power cap, an old remapped ECC error, and a throttle reason and a PCIe link down in one reading
that the samples under load do not hold, in a GPU's facts; node clocks apart and logs late), half of them with
one fault of every class in turn. Each runs under a backend's own looks (``tests/sim/wings.py``): local;
Kubernetes, where a node's pod may pull its image for minutes (the wing tells the collector the nodes on their
way, as the Job's wait does) and a node's ``Ready`` may turn ``False`` or ``Unknown`` for a while well under
its bound, fed each second to the real ``holds``/``pod_state``; or Slurm, where a node's task may begin
minutes into the roll call's step while pyxis imports its image (the real ``arrivals`` reads the batch log and
each node's output as the suite reads it). The shapes beside them: a stall past the hang bound that recovers
before it is one (the ranks that dumped write a flight record with the real ``FlightRecorder``, and another
at the next stall), imports and device setup up to S + J, and an Xid on a crashing rank's GPU more than a
minute before its error. Three faults of the wings' own: a node whose ``Ready`` stays turned past its bound
(``ready_lost``: disrupted, the node named, the cluster's), a Slurm node whose task never begins
(``never_began``: named at the start bound, the platform's), a rank stuck in its setup
(``stuck_in_setup``: named past S + J, the cluster's). Each goes through the real watchdogs, flight
recorders, launcher watches, monitor, parser, the backends' holds and arrivals, the runner's decisions and the
judge (``tests/sim/fleet.py``). It prints the matrix: per class, runs, false failures, false names, faults
missed, verdicts late, wrong owners, the nodes marked unfit that should not be (false marks: ``nodes.json``'s
verdicts, the breaker's over them, as the session would mark them) and those not marked that should be (missed
marks), and the time from the fault to the verdict (median, p99); then how many runs drew a value within 5% of
each bound, and each shape. It exits 1 when any run went wrong, and says how many of those drew the suite's
known false name (``fleet.slow_setup_named``: a rank that sets up past S, within the S + J its watchdog gives
it, beside a peer that keeps the group from forming, is named S + J + m after it was seen, before the dump
its join bound would bring).

``--bug NAME`` puts a known bug back into the suite's code for the run (each a change of the predicate's own
source, undone when the bench ends) and must then exit 1: ``one-bound`` (the launchers' wait counted from the
first launcher heard, not the last), ``first-dump`` (a rank never heard from counted as never joined at the
waiting ranks' first dump, as before 25de2c8), ``any-for-all`` (a GPU unfit only when every event on it fails,
turned into when any does), ``hardware-class`` (every Xid of the hardware class takes its node out, whatever
NVIDIA's action: 92 and 94 too), ``unused-marks`` (a GPU reset on a GPU no rank used marks its node),
``no-breaker`` (a cause every node shares marks every node), ``flicker-held`` (a throttle reason active in one
sample of twenty counted as held), ``once-per-process`` (the flight recorder writes once per process: a rank
that recovered and stalled again writes no record, and is taken for one whose Python could not run),
``one-look-ready`` (a state counts on one look, whatever its bound: a node's ``Ready`` that flickered ends the
run), ``slurm-arrival`` (the Slurm wing sees no node on its way: a node still importing its image is held to
the start skew, and one whose task never begins is not named by the wing).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.sim import fleet
from tests.sim.bugs import BUGS, bug


def one(
    args: tuple[int, int, str | None],
) -> tuple[str, list[str], float | None, dict[str, int], float, bool]:
    seed, index, bug_name = args
    plan = next(fleet.plans(seed * 1_000_003 + index, 1, faulty=0.5, start=index))
    with bug(bug_name):
        started = time.perf_counter()
        outcome = fleet.simulate(plan)
        spent = time.perf_counter() - started
    drawn = {**fleet.edges(plan), **{f"shape: {k}": v for k, v in fleet.shapes(plan).items()}}
    known = fleet.slow_setup_named(plan)
    return plan.fault or "healthy", fleet.wrongs(outcome), outcome.to_verdict, drawn, spent, known


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--bug", choices=sorted(BUGS))
    opts = parser.parse_args()
    started = time.time()
    work = [(opts.seed, i, opts.bug) for i in range(opts.runs)]
    with multiprocessing.get_context("fork").Pool(opts.jobs) as pool:
        results = pool.map(one, work, chunksize=max(1, opts.runs // (opts.jobs * 20)))
    by_class: dict[str, list[tuple[list[str], float | None]]] = defaultdict(list)
    edges: Counter[str] = Counter()
    for klass, wrong, to_verdict, near, _, _ in results:
        by_class[klass].append((wrong, to_verdict))
        edges.update(near)
    print(f"{opts.runs} runs, seed {opts.seed}{f', bug {opts.bug}' if opts.bug else ''}: "
          f"{time.time() - started:.0f} s on {opts.jobs} processes")  # fmt: skip
    print(f"{'class':<14} {'runs':>6} {'false fail':>10} {'false name':>10} {'missed':>7} {'late':>5} "
          f"{'owner':>5} {'false mark':>10} {'missed mark':>11} {'verdict s (median, p99)':>24}")  # fmt: skip
    bad = 0
    marks: Counter[str] = Counter()
    for klass in ("healthy", *fleet.FAULTS):
        rows = by_class.get(klass, [])
        count = Counter(w for wrong, _ in rows for w in set(wrong))
        times = sorted(t for _, t in rows if t is not None and math.isfinite(t))
        median = statistics.median(times) if times else math.nan
        p99 = times[min(len(times) - 1, int(0.99 * len(times)))] if times else math.nan
        missed = count["missed"] + count["missed culprit"] + count["GPU not named unfit"]
        print(f"{klass:<14} {len(rows):>6} {count['false failure']:>10} {count['false name']:>10} {missed:>7} "
              f"{count['late']:>5} {count['wrong owner']:>5} {count['false mark']:>10} {count['missed mark']:>11} "
              f"{median:>11.1f} {p99:>11.1f}")  # fmt: skip
        marks.update({k: count[k] for k in ("false mark", "missed mark")})
        bad += sum(1 for wrong, _ in rows if wrong)
    print(f"false marks: {marks['false mark']}")
    print(f"missed marks: {marks['missed mark']}")
    near = {k: v for k, v in edges.items() if not k.startswith("shape: ")}
    print(
        "runs within 5% of a bound: "
        + ", ".join(f"{k} {v} ({v / opts.runs:.0%})" for k, v in sorted(near.items()))
    )
    shapes = {k.removeprefix("shape: "): v for k, v in edges.items() if k.startswith("shape: ")}
    print(
        "runs that drew each shape: "
        + ", ".join(f"{k} {v} ({v / opts.runs:.0%})" for k, v in sorted(shapes.items()))
    )
    if bad:
        known = sum(1 for _, wrong, _, _, _, slow in results if wrong and slow)
        print(
            f"{bad} run(s) went wrong; {known} of them drew the suite's known false name (a rank slow to set up "
            f"beside a peer that keeps the group from forming: fleet.slow_setup_named), {bad - known} others"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
