"""A secret given to the workload is in no artifact of the run: every file the roll call leaves, binary too.

Real torchrun, gloo and BERT tiny on the CPU, 2 nodes x 1 rank, rank 1 failing on purpose so that the failure's
reports are written too (its error, the logs' excerpts, the page, JUnit, the metrics).
"""

from pathlib import Path

from tests.local import e2e

SHORT = "--seq-len 32 --batch-size 4 --warmup-steps 1 --epochs 1 --steps-per-epoch 2"
PLANTED = b"planted-value"
DECLARED = b"planted-by-reference"


def holding(root: Path, value: bytes) -> list[str]:
    """Every file under ``root`` whose bytes hold ``value``."""
    return [
        str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file() and value in p.read_bytes()
    ]


def test_no_artifact_of_a_run_holds_a_secrets_value(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", DECLARED.decode())  # a name that does not look secret, declared so
    artifacts = tmp_path / "artifacts"
    run = e2e.roll_call(
        tmp_path,
        SHORT,
        *("--workload-secret", "DATABASE_URL"),
        *("--junitxml", str(artifacts / "junit.xml"), "--metrics-file", str(artifacts / "metrics.prom")),
        workload_env=(f"HF_TOKEN={PLANTED.decode()}", "ROLLCALL_FAIL_RANK=1"),
        nodes=2,
        procs_per_node=1,
        artifacts=artifacts,
    )
    assert run.returncode == 1, run.output  # rank 1 failed as asked: the run's failure reports are there
    written = [p for p in artifacts.rglob("*") if p.is_file()]
    names = {p.name for p in written}
    assert {"results.json", "ranks.junit.xml", "junit.xml", "report.html", "metrics.prom"} <= names, names
    assert len(written) > 10, written  # the nodes' logs, the ranks' own, the monitors' files
    assert holding(artifacts, PLANTED) == [] and holding(artifacts, DECLARED) == []
    assert PLANTED.decode() not in run.output and DECLARED.decode() not in run.output
    assert b"HF_TOKEN=<redacted>" in (artifacts / "results.json").read_bytes()  # the command line, redacted
