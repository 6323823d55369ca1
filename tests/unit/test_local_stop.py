"""The local backend's wait ends early when its stop test gives a reason, and ends every process of the run."""

from __future__ import annotations

import os
import sys

import pytest

from rollcall import procs
from rollcall.backends import JobState
from rollcall.backends.local import LocalJob
from rollcall.collect import Collector
from rollcall.jobspec import JobSpec
from tests.waiting import wait_until


@pytest.mark.timeout(120)  # ignoring the stop test, the wait would last its 600 s
def test_a_stop_reason_ends_the_job_as_stopped_and_leaves_no_process(tmp_path):
    run_id = f"stop-test-{os.getpid()}"
    job = LocalJob(spec=JobSpec(name="stop", nodes=2, procs_per_node=1, accelerator="cpu"), run_id=run_id)
    collector = Collector(tmp_path)
    env = {**os.environ, procs.RUN_ID_ENV: run_id}
    sleeper = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]
    for node in range(2):
        job.start(node, sleeper, env, collector.sink(f"node-{node}"))
    wait_until(
        "both nodes up",
        lambda: (
            all(b"up" in p.read_bytes() for p in tmp_path.glob("node-*.log"))
            and len(list(tmp_path.glob("node-*.log"))) == 2
        ),
    )
    asked: list[int] = []

    def stop() -> str | None:
        asked.append(1)
        return "rank(s) 1 hung" if len(asked) >= 2 else None

    try:
        status = job.wait(600, stop=stop)
    finally:
        job.cleanup()
        collector.close()
    assert status.state is JobState.STOPPED and status.reason == "rank(s) 1 hung; nodes 0-1 were stopped"
    assert status.owns_nodes is False  # a shared machine: a GPU no rank used may be anyone's
    assert len(asked) == 2
    assert procs.find_run(run_id) == []
