"""torchrun's failure report read as termination records: a worker killed outright is still named."""

from datetime import datetime

from rollcall.rootcause import Failure, Termination, analyse, summary
from rollcall.torchrun import read_terminations, worker_terminations

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
