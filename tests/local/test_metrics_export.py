"""``--metrics-file`` and ``--pushgateway`` on a real run: real torchrun on the CPU, a real Pushgateway.

The Pushgateway is built from its Go module once per machine (``hack/pushgateway.sh build``, cached), started
here on 127.0.0.1 and a free port, scraped, and stopped; nothing of it is left.
"""

import json
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.local import e2e
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


@pytest.fixture
def pushgateway(tmp_path):
    """A Pushgateway on 127.0.0.1: its URL; stopped (and checked gone) after the test."""
    built = subprocess.run(
        [str(ROOT / "hack" / "pushgateway.sh"), "build"], capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stderr
    binary = Path(built.stdout.strip()) / "pushgateway"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "pushgateway.log").open("wb")
    proc = subprocess.Popen(
        [str(binary), f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_until(
            lambda: f"the Pushgateway to be ready at {url} (exit {proc.poll()})",
            lambda: proc.poll() is None and fetch(f"{url}/-/ready") is not None,
            timeout=30,
        )
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert fetch(f"{url}/-/ready") is None, "the Pushgateway is still answering"


def test_a_local_run_writes_the_textfile_and_its_metrics_reach_a_real_pushgateway(tmp_path, pushgateway):
    prom = tmp_path / "textfile" / "rollcall.prom"
    run = e2e.roll_call(
        tmp_path,
        SHORT,
        "--metrics-file",
        str(prom),
        "--pushgateway",
        pushgateway,
        "--pushgateway-job",
        "rollcall-test",
    )
    artifacts = run.artifacts
    assert run.returncode == 0, run.output[-6000:]
    assert f"metrics: {prom}" in run.output
    assert f"metrics pushed to {pushgateway} (job=rollcall-test,cluster=local,config=" in run.output

    def throughput(text, **labels):
        return [
            s
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "rollcall_rank_throughput_samples_per_second"
            and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    in_file = throughput(prom.read_text())
    assert sorted(int(s.labels["rank"]) for s in in_file) == [0, 1, 2, 3]
    results = json.loads((artifacts / "results.json").read_text())
    config = results["tests"][0]["release_gate"]["key"]
    assert {s.labels["config"] for s in in_file} == {config}

    scraped = fetch(f"{pushgateway}/metrics")
    assert scraped is not None
    pushed = throughput(scraped, job="rollcall-test", cluster="local", config=config)
    assert sorted(int(s.labels["rank"]) for s in pushed) == [0, 1, 2, 3]
    assert {s.value for s in pushed} == {s.value for s in in_file}
