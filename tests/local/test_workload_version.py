"""An image older than the suite, through the local backend: refused at its first start, not at the job timeout.

The "old image" is a workload script of this test's own that speaks as every workload did before versions
were stated (a ``start`` without ``workload_version`` or ``contract_version``), then trains for ten minutes.
"""

from __future__ import annotations

import textwrap

import pytest

from rollcall.backends import JobState
from rollcall.backends.local import LocalBackend
from rollcall.checks.workload_version import WORKLOAD_VERSION as WORKLOAD_VERSION_KIND
from rollcall.jobspec import JobSpec
from rollcall.runner import run_once
from rollcall_workload.contract import CONTRACT_VERSION, WORKLOAD_VERSION

OLD_WORKLOAD = textwrap.dedent(
    """
    import json, os, sys, time
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    start = {"event": "start", "rank": rank, "world_size": world, "local_rank": int(os.environ["LOCAL_RANK"]),
             "node_rank": int(os.environ["GROUP_RANK"]), "device": "cpu", "time": time.time()}
    sys.stdout.write("ROLLCALL " + json.dumps(start) + "\\n")
    sys.stdout.flush()
    time.sleep(600)  # a long training run the suite must not wait out
    """
)


@pytest.mark.slow
def test_an_image_older_than_the_suite_is_refused_at_its_start_naming_both_versions(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(OLD_WORKLOAD)
    spec = JobSpec(name="old-image", nodes=2, procs_per_node=1, accelerator="cpu", job_timeout_s=600)
    attempt = run_once(LocalBackend(script=script), spec, tmp_path / "artifacts")
    assert attempt.status.state is not JobState.SUCCEEDED
    assert "ended at its start" in attempt.status.reason, attempt.status  # not at the job's timeout
    first = attempt.verdict.findings[0]
    assert first.kind is WORKLOAD_VERSION_KIND, attempt.verdict.message()
    assert sorted(first.ranks) == [0, 1]
    assert "a workload from before versions were stated (rank-log contract 1)" in first.message
    assert f"this suite reads workload {WORKLOAD_VERSION} (contract {CONTRACT_VERSION})" in first.message
