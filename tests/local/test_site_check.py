"""A site's own check, installed as a site would install it, fails a local roll call in every report.

``examples/site-check`` is built and installed (no dependencies, no build isolation) into a directory of the
test's own, which the roll call's ``PYTHONPATH`` names: pytest loads it through its ``pytest11`` entry point,
as from a site's environment, and the checkout's ``.venv`` is left as it was. Real torchrun, gloo and BERT
tiny on the CPU, 2 nodes x 1 rank, short; the dataset mount is a 10-byte file, under the 1000 bytes asked for.
"""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path

import pytest
import uv

from tests.local import e2e

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"


def install_example(tmp_path: Path) -> Path:
    """``examples/site-check`` installed into a directory of its own (built from a copy: the checkout stays clean)."""
    source = shutil.copytree(ROOT / "examples" / "site-check", tmp_path / "site-check-source")
    target = tmp_path / "site-packages"
    cmd = [uv.find_uv_bin(), "pip", "install", "--no-deps", "--no-build-isolation", "--no-cache", "--offline"]
    cmd += ["--python", sys.executable, "--target", str(target), str(source)]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "rollcall_site_check.py").is_file(), sorted(p.name for p in target.iterdir())
    return target


@pytest.mark.slow
def test_an_installed_site_check_fails_the_run_with_its_own_reason_and_owner_in_every_report(
    tmp_path, monkeypatch
):
    target = install_example(tmp_path)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, (str(target), os.environ.get("PYTHONPATH"))))
    )
    dataset = tmp_path / "dataset"
    dataset.write_bytes(b"0123456789")
    proc = e2e.roll_call(
        tmp_path, SHORT, "--site-dataset", str(dataset), "--site-dataset-min-bytes", "1000", procs_per_node=1
    )
    artifacts, output = proc.artifacts, proc.output
    said = f"dataset mount {dataset} holds 10 bytes, under the 1000 the site requires"
    assert proc.returncode == 1, output
    assert f"first failure: {said}" in output, output
    assert "whose: the cluster's: the site's dataset mount is missing or short" in output

    test = json.loads((artifacts / "results.json").read_text())["tests"][0]
    assert [(f["kind"], f["owner"], f["ranks"]) for f in test["findings"]] == [
        ("dataset_too_small", "cluster", [])
    ]
    assert (
        test["root_cause"]["summary"] == f"first failure: {said}" and test["root_cause"]["owner"] == "cluster"
    )
    assert test["failed_ranks"] == {}  # every rank answered: the mount is the site's, no rank's

    suite = ET.parse(artifacts / "ranks.junit.xml").getroot().find("testsuite")
    assert suite is not None
    failing = {
        c.get("name"): c.find("failure") for c in suite.iter("testcase") if c.find("failure") is not None
    }
    assert list(failing) == ["run"], failing
    assert failing["run"].get("message") == f"first failure: {said}"

    assert said in unescape((artifacts / "report.html").read_text())
    nodes = json.loads((artifacts / "nodes.json").read_text())["nodes"]
    assert [n["verdict"] for n in nodes] == ["fit", "fit"], (
        nodes
    )  # a site problem naming no rank blames no node
    # the plugin's own report, written from the verdict it was given
    lines = (artifacts / "site-check.txt").read_text().splitlines()
    assert lines == [
        f"tests/e2e/test_bert_training.py::test_every_rank_answers_the_roll_call: failed: {said}"
    ]
