"""``pytest tests/e2e`` with a cluster's option and no cluster found: a usage error, never a run on this CPU.

A CI runner whose credentials step failed has no kubeconfig; the README's EKS command gives no ``--backend``.
``--backend auto`` then refuses (exit 4) before anything is created, naming the option that asked for a
cluster, what was not found and the fix. Nothing trains: the run is a pytest start.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.local.e2e import ROOT


def test_auto_with_no_cluster_found_refuses_an_option_that_asks_for_one(tmp_path):
    home, artifacts = tmp_path / "home", tmp_path / "artifacts"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home)}  # clean: no kubeconfig, no ROLLCALL_*
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "e2e"), "--instance-type", "p5.48xlarge"]
    cmd += ["--artifacts-dir", str(artifacts), "-p", "no:cacheprovider", "-q"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4, output
    assert (
        "ERROR: --backend auto found no cluster (no kubeconfig or in-cluster config found), but --instance-type "
        "p5.48xlarge (the kubernetes backend's option) asks for one; set KUBECONFIG / --kubeconfig, or "
        "--backend local to run here on purpose"
    ) in output
    assert "Traceback" not in output and "backend=local" not in output, output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"], "nothing of a run: no artifacts, no job"
