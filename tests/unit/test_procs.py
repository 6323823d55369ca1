"""A run's processes end whatever ends the suite: the parent-death signal, and the reaper of orphaned runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from rollcall import procs

#: A process that starts ``argv[1:]`` through :func:`procs.die_with_parent`, says its child's pid, and waits.
PARENT = """
import subprocess, sys
from rollcall import procs
child = subprocess.Popen(procs.die_with_parent(sys.argv[1:]))
print(child.pid, flush=True)
child.wait()
"""
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def marked_env(run_id: str, owner: str | None = None) -> dict[str, str]:
    env = {**os.environ, procs.RUN_ID_ENV: run_id}
    if owner is not None:
        env[procs.OWNER_ENV] = owner
    return env


def test_a_child_started_to_die_with_its_parent_ends_when_the_parent_is_killed(tmp_path):
    run_id = f"pdeathsig-{os.getpid()}"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *SLEEPER],
        env={**marked_env(run_id), "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert procs.find_run(run_id) == sorted([parent.pid, child])
        parent.kill()  # SIGKILL: the parent runs no clean-up of its own
        parent.wait()
        assert procs.wait_gone([child], 30) == []
    finally:
        procs.end_run(run_id)
    assert procs.find_run(run_id) == []


def test_a_run_whose_processes_exec_without_end_is_found_whole_at_every_look(tmp_path):
    """Processes caught inside execve (their environment reads empty a moment) are still the run's.

    Eight processes marked by their environment exec themselves without end; a marked shell holds four more
    that cleared their environment (``env -i``), the run's only by descent. A clean-clone CI once missed such
    a process: the reaper would leave it behind.
    """
    run_id = f"exec-race-{os.getpid()}"
    again = tmp_path / "again.sh"
    again.write_text('#!/bin/sh\nexec "$0"\n')
    again.chmod(0o755)
    holder = f"for i in 1 2 3 4; do env -i {again} & done; echo started; wait"
    started = [subprocess.Popen([str(again)], env=marked_env(run_id)) for _ in range(8)]
    started.append(
        subprocess.Popen(["/bin/sh", "-c", holder], env=marked_env(run_id), stdout=subprocess.PIPE)
    )
    try:
        assert started[-1].stdout is not None and started[-1].stdout.readline() == b"started\n"
        expected = sorted([*(p.pid for p in started), *procs.procfs.children(started[-1].pid)])
        assert len(expected) == 13
        for _ in range(100):
            assert procs.find_run(run_id) == expected
    finally:
        assert procs.end_run(run_id) == []
        for p in started:
            p.wait()


def test_the_child_is_the_command_itself_with_the_signal_set():
    """The wrapper executes the command in place (the same pid), which finds its parent-death signal set."""
    probe = (
        "import ctypes, os; sig = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); "  # PR_GET_PDEATHSIG
        "print(os.getpid(), sig.value)"
    )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        child = subprocess.Popen(
            procs.die_with_parent([sys.executable, "-c", probe], sig), stdout=subprocess.PIPE, text=True
        )
        out, _ = child.communicate()
        assert child.returncode == 0 and out.split() == [str(child.pid), str(int(sig))]


def test_the_owner_mark_names_a_live_process_and_not_a_dead_one():
    assert procs.owner_alive(procs.owner_mark())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    mark = procs.owner_mark(gone.pid)
    gone.wait()
    assert mark.startswith(f"{gone.pid}:") and not procs.owner_alive(mark)
    # a mark that cannot be read is never taken for a dead owner: nothing is reaped on it
    assert procs.owner_alive("not-a-mark") and procs.owner_alive("12:") and procs.owner_alive(":")


def test_the_reaper_ends_the_runs_whose_suite_is_gone_and_only_those():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_mark = procs.owner_mark(dead.pid)
    dead.wait()
    orphaned = f"orphaned-{os.getpid()}"
    owned = f"owned-{os.getpid()}"
    unowned = f"unowned-{os.getpid()}"
    started = [
        subprocess.Popen(SLEEPER, env=marked_env(orphaned, dead_mark)),
        subprocess.Popen(SLEEPER, env=marked_env(orphaned, dead_mark)),
        subprocess.Popen(SLEEPER, env=marked_env(owned, procs.owner_mark())),
        subprocess.Popen(SLEEPER, env=marked_env(unowned)),
    ]
    try:
        assert procs.orphans().get((orphaned, dead_mark)) == sorted(p.pid for p in started[:2])
        # the runs of this test only: another session's orphans on this machine are its own to find
        assert procs.orphans({owned, unowned}) == {}
        reaped = procs.reap_orphans(runs={orphaned, owned, unowned})
        assert reaped == [procs.Reaped(orphaned, dead_mark, tuple(sorted(p.pid for p in started[:2])))]
        assert reaped[0].line() == (
            f"rollcall: ended 2 process(es) of run {orphaned} left behind by a suite that is gone "
            f"(pid {dead.pid}): {', '.join(str(p.pid) for p in sorted(started[:2], key=lambda p: p.pid))}"
        )
        assert procs.find_run(orphaned) == []
        assert procs.find_run(owned) == [started[2].pid] and procs.find_run(unowned) == [started[3].pid]
    finally:
        for p in started:
            p.send_signal(signal.SIGKILL)
            p.wait()


def test_signals_held_are_recorded_not_acted_on_and_redelivered_when_asked():
    acted: list[str] = []

    def handler(signum: int, frame: object) -> None:
        acted.append(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with procs.signals_held() as held:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            assert acted == []
        assert held.signals == [signal.SIGTERM, signal.SIGINT] and acted == []  # the caller decides
        assert signal.getsignal(signal.SIGTERM) is handler and signal.getsignal(signal.SIGINT) is handler

        with procs.signals_held(redeliver=True) as held:
            for _ in range(2):
                os.kill(os.getpid(), signal.SIGTERM)
            assert acted == []
        assert held.signals == [signal.SIGTERM, signal.SIGTERM] and acted == ["SIGTERM"]  # once each
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def test_outside_the_main_thread_nothing_is_held():
    import threading

    seen: list[object] = []

    def hold() -> None:
        before = signal.getsignal(signal.SIGTERM)
        with procs.signals_held() as held:
            seen.append(signal.getsignal(signal.SIGTERM) is before)
        seen.append(held.signals)

    thread = threading.Thread(target=hold)
    thread.start()
    thread.join()
    assert seen == [True, []]
