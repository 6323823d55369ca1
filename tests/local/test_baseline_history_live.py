"""``--baseline-history`` over five real runs of this machine, and the live roll call in a run's output.

Real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 1 rank, kept short. Five sessions make the history
(each its own artifacts directory and ``results.json``); then two sessions judge against it through the
options: a healthy one passes, one whose every rank is slowed 10x (``ROLLCALL_SLOW_RANK=0:10,1:10``) fails
with the reference, the spread and the count in its message. The healthy run is allowed the most the
gate takes, 99% and 50 spreads (:data:`HEALTHY`). The slowed run's allowance is 75%, wide on purpose: on 2
shared cores a healthy run of this size strays from its history by 10-20% as a rule and by 42% in one CI run
(15.5 -> 22.0 ms compute per step), and a 1.5x slowdown passed a 25% allowance now and then. The slowdown is
10x, not 3x, because the load of the machine changes between the history's runs and the slowed one: in one
CI run (four integration workers on 2 cores) the history was taken while other tests compiled and the
slowed run ran on a quieter machine, and 3x came out at 46.7 ms compute per step, within 1.75x of its
history (so above 26.7 ms, against 15.5 on a quiet machine). 10x stays beyond 1.75x the history unless the
load changes more than 5.7-fold between them.
"""

import json
from pathlib import Path

import pytest

from tests.local import e2e

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"
#: The healthy run's allowance: 99% (a time may double; --max-regression is under 100) and 50 spreads.
#: Slow is not broken: the healthy run is judged on whatever load CI's other sessions put on the 2 cores
#: then, and one CI run's healthy run came out past 1.75x its history. The slowed run is judged at 75% and
#: 3 spreads, its ratio asserted beyond them.
HEALTHY = ("--max-regression", "99", "--baseline-mads", "50")


def session(tmp_path, name, *extra, history=True, allowance=("--max-regression", "75")):
    # 75%: see the module's docstring
    judged = ("--baseline-history", str(tmp_path / "history"), *allowance) if history else ()
    run = e2e.roll_call(
        tmp_path, SHORT, *judged, "--progress-every", "1", *extra, procs_per_node=1, artifacts=tmp_path / name
    )
    artifacts = run.artifacts
    return run, json.loads((artifacts / "results.json").read_text())["tests"][0]


@pytest.mark.timeout(1800)
def test_a_history_of_five_runs_passes_a_healthy_run_and_fails_one_slowed_10x(tmp_path):
    for n in range(5):
        run, test = session(tmp_path, f"history/run-{n}", history=False)
        assert run.returncode == 0 and test["release_gate"]["sound"], run.output[-4000:]

    healthy, test = session(tmp_path, "healthy", allowance=HEALTHY)
    assert healthy.returncode == 0, healthy.output[-4000:]
    gate = test["release_gate"]
    assert gate["gate"] == "passed" and gate["sound"] is True
    assert gate["baseline_file"] == str(tmp_path / "history")
    # the live roll call: at least its final line, every rank accounted for
    assert "roll call: 2/2 started, epochs done 1, throughput 2/2, complete 2/2; slowest so far: rank " in (
        healthy.output
    )

    slowed, test = session(tmp_path, "slowed", "--workload-env", "ROLLCALL_SLOW_RANK=0:10,1:10")
    assert slowed.returncode == 1, slowed.output[-4000:]
    regressed = {r["measure"]: r for r in test["release_gate"]["regressions"]}
    # Every measure of a rank slows 10x, but each fails only beyond both 75% and 3 spreads of its own
    # history, and on 2 shared cores one measure's history can be noisy enough to hold it: at least one of
    # the four must fail, each that does with the reference, the spread and the count.
    slower = {
        "total throughput": -1,
        "per-rank median throughput": -1,
        "mean epoch time": 1,
        "median compute time per step": 1,
    }
    slowed_measures = [m for m in slower if m in regressed]
    assert slowed_measures, test["problems"]
    for measure in slowed_measures:
        ratio = regressed[measure]["ratio"]
        # a time fails above 1.75 x its reference, a throughput below 0.25 x (75% less)
        assert (ratio > 1.75) if slower[measure] > 0 else (ratio < 0.25), regressed[measure]
    median = regressed[slowed_measures[0]]
    assert median["runs"] == 5 and median["spread"] is not None
    assert "the median of the last 5 sound run(s)" in median["message"]
    assert "(1.4826 x MAD)" in median["message"] and "--baseline-mads 3" in median["message"]
    assert median["message"] in slowed.output
