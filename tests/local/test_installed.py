"""rollcall installed from its wheel, without a checkout: a fresh venv, the plugins CI loads beside it.

The wheel is built from a copy of the tracked files (so nothing is written into the checkout), installed with
its workload extra into a new venv (uv's cache holds torch) beside pytest-xdist, pytest-timeout,
pytest-rerunfailures, pytest-retry and pytest-html, and the roll call runs from a directory outside any
checkout: the test, the manifests and the workload's entry all come from the installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import uv

from tests.tree import checkout_copy

ROOT = Path(__file__).resolve().parents[2]
BESIDE = Path(__file__).with_name("beside.txt")


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd}: {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding rollcall's wheel, its workload extra and the plugins of beside.txt."""
    base = tmp_path_factory.mktemp("installed")
    source = checkout_copy(base / "source")
    uv_bin = uv.find_uv_bin()
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    _run(
        [
            uv_bin,
            "build",
            "--wheel",
            "--no-build-isolation",
            "--python",
            sys.executable,
            "--out-dir",
            str(base / "dist"),
            str(source),
        ],
        env=env,
    )
    (wheel,) = (base / "dist").glob("rollcall-*.whl")
    venv = base / "venv"
    _run([uv_bin, "venv", "-q", "-p", sys.executable, str(venv)], env=env)
    _run(
        [
            uv_bin,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            f"{wheel}[workload]",
            "-r",
            str(BESIDE),
            "-c",
            str(ROOT / "requirements.lock"),
        ],
        env=env,
    )
    return venv


def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROLLCALL_", "PYTEST_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return env


def test_the_wheel_holds_the_test_the_manifests_and_the_command_with_one_version(installed: Path):
    python = str(installed / "bin" / "python")
    probe = (
        "import importlib.metadata as m, rollcall, rollcall.e2e.test_roll_call as t; "
        "from rollcall.jobspec import manifests_dir; d = manifests_dir(); "
        "print(m.version('rollcall'), rollcall.__version__, d.is_relative_to(rollcall.__path__[0]), "
        "sorted(p.name for p in d.iterdir()))"
    )
    out = _run([python, "-c", probe], cwd=installed.parent, env=_clean_env(installed)).stdout.split(" ", 3)
    assert out[0] == out[1], out
    assert out[2] == "True", out
    for name in ("job.yaml", "service.yaml", "namespace.yaml", "rbac", "slurm", "nightly"):
        assert name in out[3], out


def test_the_plugins_ci_uses_load_beside_rollcall_and_none_clashes(installed: Path, tmp_path: Path):
    help_text = _run(
        [str(installed / "bin" / "rollcall"), "run", "--help"], cwd=tmp_path, env=_clean_env(installed)
    ).stdout
    for flag in (
        "--job-retries",
        "--nodes",
        "--retries",
        "--reruns",
        "--html",
        "--timeout",
        "--numprocesses",
    ):
        assert flag in help_text, flag
    # --retries is pytest-retry's here: rollcall says where its own went, and the run goes on
    proc = subprocess.run(
        [str(installed / "bin" / "rollcall"), "run", "--retries", "1", "--collect-only"],
        cwd=tmp_path,
        env=_clean_env(installed),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--retries is another plugin's here; rollcall's is --job-retries" in proc.stdout


@pytest.mark.slow
def test_the_installed_roll_call_runs_to_a_verdict_from_outside_any_checkout(installed: Path, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    artifacts = tmp_path / "artifacts"
    cmd = [
        str(installed / "bin" / "rollcall"),
        "run",
        "--backend",
        "local",
        "--nodes",
        "2",
        "--procs-per-node",
        "1",
        "--accelerator",
        "cpu",
        "--artifacts-dir",
        str(artifacts),
        "--job-timeout",
        "600",
        "--workload-args",
        "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2 --impl compact",
        "--straggler-ratio",
        "0",
        "--busbw-ratio",
        "0",
        "--html",
        str(tmp_path / "pytest.html"),
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(
        cmd, cwd=elsewhere, env=_clean_env(installed), capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (test,) = json.loads((artifacts / "results.json").read_text())["tests"]
    assert test["outcome"] == "passed", test
    # the ranks ran the installed workload, not a checkout's
    logs = "".join(p.read_text() for p in (artifacts).rglob("*.log"))
    assert str(ROOT) not in logs
    assert (tmp_path / "pytest.html").is_file()
