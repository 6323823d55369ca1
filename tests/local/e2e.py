"""The suite's roll call as a user runs it: ``pytest tests/e2e --backend local`` in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The workload's own compact BERT (``--impl compact``): the same model as Hugging Face's BertForPreTraining,
#: in the workload's own code, so that no rank imports transformers. That import is about 2.5 s of CPU a
#: rank, a third of what a rank of the tests' short runs costs; the tests judge the roll call, not the
#: model's code. The default model (hf) is the compile cache's tests' (here and on real nodes), the real
#: nodes' roll call's (tests/real) and ``make e2e-slurm``'s.
COMPACT = ("--impl", "compact")


@dataclass(frozen=True)
class RollCall:
    """One run of ``pytest tests/e2e``: its exit code, what it printed, and where its reports are."""

    returncode: int
    output: str
    artifacts: Path


def roll_call(
    tmp_path: Path,
    workload_args: str,
    *args: str,
    workload_env: tuple[str, ...] = (),
    nodes: int = 2,
    procs_per_node: int = 2,
    job_timeout: int = 600,
    artifacts: Path | None = None,
    timeout: float = 900,
    model: tuple[str, ...] = COMPACT,
) -> RollCall:
    """Run the roll call on ``nodes`` local nodes x ``procs_per_node`` ranks with ``workload_args`` and the
    suite's own ``args``, its reports in ``artifacts`` (``tmp_path/artifacts``), the whole run bounded by
    ``timeout`` seconds. ``model``: the workload arguments that choose the model's code (:data:`COMPACT`;
    ``()``: the workload's default).

    The run's environment keeps none of the caller's ``ROLLCALL_*`` variables; ``workload_env`` pairs
    (``NAME=VALUE``) go to the ranks through ``--workload-env``. The relative-speed checks are off unless
    ``args`` sets them (a later option wins): ranks sharing 2 loaded cores stray from their median by more
    than a healthy cluster's ranks do, and the tests of those checks set their own ratios.
    """
    artifacts = artifacts or tmp_path / "artifacts"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "tests" / "e2e"),
        "--backend",
        "local",
        "--nodes",
        str(nodes),
        "--procs-per-node",
        str(procs_per_node),
        "--job-timeout",
        str(job_timeout),
        "--artifacts-dir",
        str(artifacts),
        "--workload-args",
        " ".join((workload_args, *model)),
        *("--straggler-ratio", "0", "--busbw-ratio", "0"),
        *args,
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    for pair in workload_env:
        cmd += ["--workload-env", pair]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLCALL_")}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    return RollCall(proc.returncode, proc.stdout + proc.stderr, artifacts)
