"""torchrun's records of its workers read as termination records: a worker killed outright is still named."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from rollcall.backends.local import free_port
from rollcall.evidence.endings import Termination
from rollcall.evidence.rootcause import Failure, analyse, summary
from rollcall.jobspec import AGENT_ERROR_FILE, JobSpec
from rollcall.torchrun import (
    FAILED_EVENT,
    SUCCEEDED_EVENT,
    ErrorRecord,
    error_record,
    read_error_file,
    read_terminations,
    terminations,
    worker_events,
    worker_terminations,
)

REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/workspace/train.py FAILED
------------------------------------------------------------
Failures:
  time      : 2025-12-01_08:10:15
  host      : ip-10-0-1-7
  rank      : 4 (local_rank: 0)
  exitcode  : -15 (pid: 21164)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 21164
  time      : 2025-12-01_08:10:15
  host      : ip-10-0-1-7
  rank      : 7 (local_rank: 3)
  exitcode  : 1 (pid: 21176)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-12-01_08:10:14
  host      : ip-10-0-1-7
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 21173)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 21173
============================================================
"""


def test_each_failed_worker_is_read_with_how_it_ended():
    found = worker_terminations("[1]:noise\n" + REPORT, "job-1-abcde")
    assert [(t.rank, t.reason, t.exit_code, t.host) for t in found] == [
        (4, "SIGTERM", -15, "ip-10-0-1-7"),
        (5, "SIGKILL", -9, "ip-10-0-1-7"),
        (7, "Error", 1, "ip-10-0-1-7"),
    ]
    assert found[1].time == datetime(2025, 12, 1, 8, 10, 14).timestamp()
    assert [t.silent_kill for t in found] == [False, True, False]  # SIGTERM is the launcher's own
    assert worker_terminations("no report here\n", "p") == []


def test_the_end_of_a_log_file_is_read(tmp_path):
    path = tmp_path / "node-1.log"
    path.write_text("x" * 100 + "\n" + REPORT)
    assert [t.rank for t in read_terminations(path, "node-1")] == [4, 5, 7]
    assert read_terminations(tmp_path / "missing.log", "node-1") == []


def test_a_worker_killed_without_a_word_is_the_root_cause_of_its_peers_echoes():
    gloo = "RuntimeError: [pair.cc:547] Connection closed by peer [127.0.0.1]:{}"
    echoes = [Failure(r, 0, "job-0", gloo.format(40000 + r), 1_764_576_020.0) for r in range(4)]
    killed = Termination("job-1-abcde", 1, "ip-10-0-1-7", "SIGKILL", -9, 1_764_576_015.0, rank=5)
    terminated = Termination("job-1-abcde", 1, "ip-10-0-1-7", "SIGTERM", -15, 1_764_576_015.0, rank=4)
    analysis = analyse(echoes, [terminated, killed])
    assert analysis.termination == killed
    assert summary(analysis)[0] == (
        "first failure: rank 5 (pod job-1-abcde (index 1) on node ip-10-0-1-7) was ended by SIGKILL "
        "(exit code -9) at 08:00:15.000 UTC, and it reported no error"
    )


def test_a_local_or_slurm_nodes_worker_is_a_process_of_that_node_not_a_pod(tmp_path):
    path = tmp_path / "node-1.log"
    path.write_text(REPORT)
    found = read_terminations(path, "node-1", "node")
    assert {t.unit for t in found} == {"node"}
    killed = replace(found[1], node=1, host="localhost")
    text = killed.describe()
    assert text.startswith("rank 5's process (node 1, log node-1, host localhost) was ended by SIGKILL")
    assert "pod" not in text and "index" not in text
    answered = replace(killed, answered=True).describe()
    assert (
        answered
        == "rank 5's process (node 1, log node-1, host localhost) was killed by SIGKILL after answering the roll call"
    )
    agent = replace(killed, rank=None, reason="Error", exit_code=1, time=None).describe()
    assert agent == "the torchrun agent (node 1, log node-1, host localhost) ended Error (exit code 1)"


# What a real torchrun writes: the very command the backends start (events on, an error file for the agent),
# of a tiny worker under torchelastic's ``record``, in one of three ways to end.
WORKER = """\
import os, signal, sys, time
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank, how = int(os.environ["RANK"]), os.environ["END_HOW"]
    if rank == int(os.environ["END_RANK"]):
        if how == "raise":
            raise RuntimeError(f"worker {rank} failed on purpose")
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how == "0":
            with open(os.environ["LEFT_FILE"] + ".new", "w") as f:
                f.write(str(os.getpid()))
            os.rename(os.environ["LEFT_FILE"] + ".new", os.environ["LEFT_FILE"])
        sys.exit(int(how))
    if how == "0":  # the others fail once the worker that left has ended (gone, or a zombie for its agent)
        while not os.path.exists(os.environ["LEFT_FILE"]):
            time.sleep(0.05)
        with open(os.environ["LEFT_FILE"]) as f:
            pid = f.read()
        while True:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
            time.sleep(0.05)
        raise RuntimeError("a peer left")
    while True:  # the other worker lives until the agent stops it
        time.sleep(1)


main()
"""


def torchrun(tmp_path: Path, end_rank: int, how: str) -> tuple[str, Path]:
    """Run 2 workers under torchrun as the backends do; the agent's output and its log directory."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    spec = JobSpec(name="tiny", nodes=1, procs_per_node=2, rdzv_timeout_s=60)
    log_dir = tmp_path / "ranks"
    cmd = spec.torchrun_command(
        node_rank="0",
        master_addr="127.0.0.1",
        master_port=free_port(),
        launcher=(sys.executable, "-m", "torch.distributed.run"),
        entry=(str(script),),
        log_dir=str(log_dir),
    )
    env = {**os.environ, **spec.workload_env(str(log_dir)), "END_RANK": str(end_rank), "END_HOW": how}
    env["LEFT_FILE"] = str(tmp_path / "left")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr, log_dir


def test_a_real_agents_events_name_each_failed_worker_with_its_code_and_record(tmp_path):
    output, log_dir = torchrun(tmp_path, 0, "raise")
    ended = worker_events(output, "node-0")
    assert [(t.rank, t.exit_code, t.reason, t.pod) for t in ended] == [
        (0, 1, "Error", "node-0"),
        (1, -15, "SIGTERM", "node-0"),  # stopped by the agent once worker 0 failed
    ]
    assert ended[0].message == "RuntimeError: worker 0 failed on purpose"
    assert ended[0].time is not None and ended[1].message is None
    assert terminations(output, "node-0") == ended  # the events win over the printed table
    # the worker's own error file and the agent's copy of it, with the exit code the agent added
    (own,) = log_dir.glob("*/attempt_0/0/error.json")
    worker = read_error_file(own)
    assert worker is not None and worker.message == ended[0].message and worker.exit_code is None
    assert worker.traceback is not None and "failed on purpose" in worker.traceback
    agent = read_error_file(log_dir / AGENT_ERROR_FILE)
    assert agent is not None and (agent.message, agent.exit_code) == (worker.message, 1)
    assert list(log_dir.glob("*/attempt_0/1/error.json")) == []  # a stopped worker records nothing


def test_a_real_agents_printed_table_is_the_fallback_and_agrees_with_its_events(tmp_path):
    output, log_dir = torchrun(tmp_path, 1, "kill")
    events = worker_events(output, "node-0")
    assert [(t.rank, t.exit_code, t.reason) for t in events] == [(0, -15, "SIGTERM"), (1, -9, "SIGKILL")]
    assert events[1].silent_kill and events[1].signal == "SIGKILL"
    without_events = "\n".join(line for line in output.splitlines() if FAILED_EVENT not in line)
    table = terminations(without_events, "node-0")
    assert [(t.rank, t.exit_code, t.reason) for t in table] == [(0, -15, "SIGTERM"), (1, -9, "SIGKILL")]
    assert read_error_file(log_dir / AGENT_ERROR_FILE) is None  # a killed worker leaves no record to copy


def test_a_real_worker_that_exits_with_a_status_is_named_by_it_without_a_record(tmp_path):
    output, _ = torchrun(tmp_path, 1, "3")
    (ended,) = [t for t in worker_events(output, "node-0") if t.rank == 1]
    assert (ended.exit_code, ended.reason, ended.message) == (3, "Error", None)


def test_a_real_worker_that_exits_0_while_its_peer_fails_is_not_on_the_agents_record(tmp_path):
    # torchrun records it TERMINATED, without a status, as one it stopped: the rank's exit event must say it
    output, _ = torchrun(tmp_path, 1, "0")
    assert [(t.rank, t.exit_code) for t in worker_events(output, "node-0")] == [(0, 1)]
    assert "torchelastic.worker.status.TERMINATED" in output


def test_workers_of_a_node_that_all_exited_0_are_read_with_code_0():
    line = (
        '{"name": "%s", "source": "WORKER", "timestamp": 0, "metadata": {"global_rank": %d, '
        '"hostname": "h", "raw_error": null, "metadata": "{\\"exit_code\\": [null]}"}}'
    )
    agent = json.dumps({"name": SUCCEEDED_EVENT, "source": "AGENT", "metadata": {"global_rank": None}})
    text = "\n".join([line % (SUCCEEDED_EVENT, 3), line % (SUCCEEDED_EVENT, 2), agent])
    ended = worker_events(text, "node-1", "node")
    assert [(t.rank, t.exit_code, t.reason, t.signal, t.silent_kill) for t in ended] == [
        (2, 0, "Exited", None, False),
        (3, 0, "Exited", None, False),
    ]


def test_error_records_in_either_form_and_what_is_not_one(tmp_path):
    nested = {"message": {"message": "E: x", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}}}
    assert error_record(nested) == ErrorRecord("E: x", "tb", 17.0)
    assert error_record({"message": "E: y", "timestamp": 5}) == ErrorRecord("E: y", time=5.0)
    assert error_record({"message": "<NONE>"}) is None
    assert error_record(["not", "a", "record"]) is None
    bad = tmp_path / "error.json"
    bad.write_text("{not json")
    assert read_error_file(bad) is None
    assert read_error_file(tmp_path / "missing.json") is None
