"""The last-resort ledger of claims, and the watcher process that deletes what a dead session left."""

import os
import subprocess
import sys

from rollcall.backends.kubernetes import kube, reaper
from rollcall.backends.kubernetes.reaper import Claim, Ledger, pending, release, watch
from tests.waiting import wait_until


def test_pending_lists_what_was_added_and_not_crossed_out(tmp_path):
    state = tmp_path / "state"
    state.write_text("+a\n+b\n-a\n+c\n+c\n-x\n+team/0a1b\n")
    assert pending(state) == [Claim("b"), Claim("c"), Claim("team", "0a1b")]
    assert pending(tmp_path / "missing") == []


def test_a_claim_is_a_namespace_or_a_runs_objects_in_one():
    assert str(Claim("rollcall-0a1b")) == "rollcall-0a1b" and Claim.parse("rollcall-0a1b").run_id is None
    claim = Claim("team-ml", "0a1b")
    assert str(claim) == "team-ml/0a1b" and Claim.parse(str(claim)) == claim


def test_release_deletes_a_namespace_only_when_the_run_owns_it(monkeypatch):
    done = []
    monkeypatch.setattr(kube, "delete_namespace", lambda k, ns: done.append(("namespace", ns)))
    monkeypatch.setattr(
        kube, "delete_labelled", lambda k, ns, sel, secret: done.append(("labelled", ns, sel, secret))
    )
    release(None, Claim("rollcall-0a1b"))
    release(None, Claim("team-ml", "0a1b"))
    assert done == [
        ("namespace", "rollcall-0a1b"),
        ("labelled", "team-ml", "rollcall/run-id=0a1b", "rollcall-env-0a1b"),  # the run's Secret, by name
    ]


def test_ledger_records_and_deletes_at_exit(tmp_path):
    deleted = []
    ledger = Ledger(deleted.append, watcher=False)
    try:
        ledger.add(Claim("ns-1"))
        ledger.add(Claim("ns-2"))
        ledger.add(Claim("team", "0a1b"))
        ledger.remove(Claim("ns-1"))
        assert ledger.pending() == [Claim("ns-2"), Claim("team", "0a1b")]
        ledger.delete_pending()
        assert deleted == [Claim("ns-2"), Claim("team", "0a1b")] and ledger.pending() == []
    finally:
        ledger.state.unlink()


def test_a_failed_delete_at_exit_is_logged_and_kept(caplog):
    def refuse(claim):
        raise RuntimeError("API server gone")

    ledger = Ledger(refuse, watcher=False)
    try:
        ledger.add(Claim("ns-1"))
        ledger.add(Claim("team", "0a1b"))
        ledger.delete_pending()
        assert ledger.pending() == [Claim("ns-1"), Claim("team", "0a1b")]
        assert "could not delete namespace ns-1 at exit: API server gone" in caplog.text
        assert "could not delete the objects of run team/0a1b at exit" in caplog.text
    finally:
        ledger.state.unlink()


def test_watch_deletes_what_is_pending_once_the_parent_is_gone(tmp_path):
    state = tmp_path / "state"
    state.write_text("+left-1\n+done\n-done\n+team/0a1b\n")
    deleted = []
    assert watch(parent=-1, state=state, delete=deleted.append) == [Claim("left-1"), Claim("team", "0a1b")]
    assert deleted == [Claim("left-1"), Claim("team", "0a1b")] and not state.exists()


def test_the_watcher_outlives_a_parent_killed_outright(tmp_path, monkeypatch):
    """A parent that dies by os._exit (as under pytest-timeout's thread method) still gets its watcher's turn."""
    out, state = tmp_path / "deleted", tmp_path / "state"
    script = f"""
import os, sys
sys.argv = ["x"]
from rollcall.backends.kubernetes import reaper
reaper.POLL_S = 0.05
def fake_delete(ns):
    with open({str(out)!r}, "a") as f:
        f.write(str(ns) + "\\n")
ready_r, ready_w = os.pipe()
if os.fork() == 0:  # the watcher, as Ledger would start it, but with a fake delete
    parent = os.getppid()
    os.write(ready_w, b"w")  # the handshake: it knows its parent, which may die now
    reaper.watch(parent, __import__("pathlib").Path({str(state)!r}), fake_delete)
    os._exit(0)
with open({str(state)!r}, "w") as f:
    f.write("+rollcall-1\\n+rollcall-2\\n-rollcall-2\\n")
assert os.read(ready_r, 1) == b"w"
os._exit(1)
"""
    subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
    # the watcher removes the state file once it has deleted everything it lists
    wait_until("the watcher to delete what its dead parent left", lambda: not state.exists(), timeout=30)
    assert out.read_text() == "rollcall-1\n"


def test_the_watcher_process_is_started_once_in_its_own_session(monkeypatch):
    started = []

    class Popen:
        def __init__(self, cmd, **kw):
            started.append((cmd, kw))

    monkeypatch.setattr(reaper.subprocess, "Popen", Popen)
    ledger = Ledger(lambda claim: None, ["--kubeconfig", "/k"])
    try:
        ledger.add(Claim("a"))
        ledger.add(Claim("b"))
    finally:
        ledger.state.unlink()
    ((cmd, kw),) = started
    assert cmd[1:5] == ["-m", "rollcall.backends.kubernetes.reaper", "--parent", str(os.getpid())]
    assert cmd[-2:] == ["--kubeconfig", "/k"]
    assert kw["start_new_session"] is True
