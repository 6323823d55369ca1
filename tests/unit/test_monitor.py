"""The node's monitor: faulthandler's text turned into stack events, heartbeats read, silence named.

The GIL-held rank is a real one: a child process whose main thread blocks in C holding the GIL
(``rollcall_workload.faults.hold_the_gil``), its watchdog armed; its own watchdog thread cannot dump, and
faulthandler's timer does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from rollcall.evidence.hangs import stall_of
from rollcall_workload import faults, procfs
from rollcall_workload.contract import MONITOR_DIR_ENV
from rollcall_workload.contract.heartbeat import STACKS_HEADER, Heartbeat, heartbeat_path, stacks_path
from rollcall_workload.node import monitor
from rollcall_workload.rank.watchdog import WORKLOAD_DIR
from tests.unit.helpers import roll_of_lines
from tests.unit.monitors import monitor_env
from tests.waiting import wait_until

SRC = str(Path(__file__).resolve().parents[2] / "src")
FAULTS_PY = os.path.join(WORKLOAD_DIR, "faults.py")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _line_of(path: str, text: str) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


HOLDS_THE_GIL = textwrap.dedent(
    """
    import json, sys, time
    from rollcall_workload.contract import RollcallLog
    from rollcall_workload.faults import hold_the_gil
    from rollcall_workload.rank.watchdog import Watchdog

    dog = Watchdog(RollcallLog(0, 1, fd=1), 0.5, 0.5, join=0.5, monitor_dir=sys.argv[1], fh_margin=0.5)
    dog.start()
    dog.joined()
    dog.beat("held", step=True)
    started = time.time()
    hold_the_gil(3, forever=False)
    ended = time.time()
    dog.stop()
    print(json.dumps({"held": [started, ended]}), flush=True)
    """
)


def test_the_watchdog_cannot_dump_while_the_gil_is_held_and_faulthandler_does(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", HOLDS_THE_GIL, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    held = next(json.loads(line)["held"] for line in proc.stdout.splitlines() if line.startswith('{"held"'))
    own = [json.loads(line[len("ROLLCALL ") :]) for line in proc.stdout.splitlines() if "ROLLCALL " in line]
    # its own watchdog's bound ran out 0.5 s into the hold: it could write nothing until the hold ended
    assert all(e["time"] >= held[1] - 0.05 for e in own if e["event"] == "stack"), (held, own)
    text = Path(stacks_path(str(tmp_path), 0)).read_text()
    assert text.startswith(STACKS_HEADER) and "Timeout (" in text, text
    dumps = next(d for d in monitor.parse_stacks(text) if d.dumps)
    assert len(dumps.dumps) >= 1 and dumps.header["phase"] == "held"

    lines = monitor.stack_lines(dumps, 0, 1)
    stall = stall_of(roll_of_lines(lines).ranks[0])
    assert stall is not None and stall.dump.source == "faulthandler" and stall.dump.phase == "held"
    assert not stall.waiting and stall.dump.main is not None
    inner = stall.dump.main.frames[-1]
    line = _line_of(FAULTS_PY, "libc.sleep(seconds)")
    assert (inner.file, inner.line, inner.function, inner.code, inner.own) == (
        "faults.py",
        line,
        "hold_the_gil",
        "libc.sleep(seconds)",
        True,
    )
    assert all(
        t.thread != "rollcall-watchdog" for t in stall.dump.threads
    )  # the watchdog's thread is left out
    assert len(stall.dump.threads) == 1  # ... so only the main thread is shown


def test_faulthandler_text_is_parsed_into_frames_outermost_first_with_the_workloads_own_source_lines():
    line = _line_of(FAULTS_PY, "def hold_the_gil")
    header = {"dump": 3, "phase": "epoch 1 end", "since": 100.0, "armed": 100.0, "timeout": 10.0,
              "hang_after": 5.0, "main": 0x7F00, "main_name": "MainThread", "skip": [0x7E00]}  # fmt: skip
    text = (
        f"{STACKS_HEADER}{json.dumps(header)}\n"
        "Timeout (0:00:10)!\n"
        "Thread 0x00007e00 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
        "\n"
        "Current thread 0x00007f00 (most recent call first):\n"
        f'  File "{FAULTS_PY}", line {line} in hold_the_gil\n'
        '  File "/opt/x/train.py", line ??? in <module>\n'
        "\n"
        "Thread 0x00007d00 (most recent call first):\n"
        "  <no Python frame>\n"
        "Timeout (0:00:10)!\n"
        "Thread 0x00007f00 (most recent call first):\n"
        f'  File "{FAULTS_PY}", line {line} in hold_the_gil\n'
    )
    (dumps,) = monitor.parse_stacks(text)
    assert len(dumps.dumps) == 2
    first = dumps.dumps[0]
    assert [t.ident for t in first] == [0x7E00, 0x7F00, 0x7D00] and first[2].frames == ()
    assert first[1].frames == ((FAULTS_PY, line, "hold_the_gil"), ("/opt/x/train.py", 0, "<module>"))
    assert monitor.frames_of(first[1]) == [
        ["/opt/x/train.py", 0, "<module>", "", False],
        [
            "faults.py",
            line,
            "hold_the_gil",
            "def hold_the_gil(seconds: int = 3600, forever: bool = True) -> None:",
            True,
        ],
    ]
    roll = roll_of_lines(monitor.stack_lines(dumps, 2, 4))
    dump = roll.ranks[2].stall
    assert dump is not None and (dump.dump, dump.phase, dump.stalled_s, dump.hang_after) == (
        3,
        "epoch 1 end",
        20.0,
        5.0,
    )
    assert [t.thread for t in dump.threads] == ["MainThread"]  # the last dump: the skipped thread left out
    assert monitor.parse_stacks("no header\n") == () and monitor.parse_stacks(f"{STACKS_HEADER}{{}}") == ()
    again = f"{STACKS_HEADER}{json.dumps({**header, 'dump': 4})}\n"  # re-armed after the dumps: they stay
    assert [len(d.dumps) for d in monitor.parse_stacks(text + again)] == [2, 0]


def _beat(directory: Path, rank: int, *, pid: int, time_: float, progress: float, bound: float = 5.0) -> None:
    beat = Heartbeat(event="heartbeat", rank=rank, world_size=4, time=time_, pid=pid, phase="epoch 1 end",
                     steps=7, progress=progress, hang_after=bound, dumps=0, joined=True)  # fmt: skip
    data = json.dumps({f: getattr(beat, f) for f in Heartbeat.__dataclass_fields__ if f.islower()})
    Path(heartbeat_path(str(directory), rank)).write_text(data)


def test_heartbeats_are_read_by_rank_and_a_torn_or_foreign_file_is_not(tmp_path):
    _beat(tmp_path, 1, pid=11, time_=100.0, progress=99.0)
    Path(heartbeat_path(str(tmp_path), 2)).write_text('{"event":"heartbeat","rank":2,"pid"')
    Path(heartbeat_path(str(tmp_path), 3)).write_text('{"event":"start","rank":3}')
    (tmp_path / "rank-x.heartbeat").write_text("{}")
    beats = monitor.RankFiles(str(tmp_path)).heartbeats()
    assert list(beats) == [1] and (beats[1].pid, beats[1].phase, beats[1].progress) == (
        11,
        "epoch 1 end",
        99.0,
    )


def test_the_watchdog_writes_its_heartbeat_at_each_beat_for_the_monitor(tmp_path):
    from rollcall_workload.contract import RollcallLog
    from rollcall_workload.rank.watchdog import Watchdog

    devnull = os.open(os.devnull, os.O_WRONLY)
    dog = Watchdog(RollcallLog(5, 8, fd=devnull), 4.0, 30.0, join=20.0, monitor_dir=str(tmp_path))
    dog.start()
    try:
        files = monitor.RankFiles(str(tmp_path))
        dog.beat("init_process_group")  # the heartbeat says it at once, not at the watchdog's next tick
        beat = files.heartbeats()[5]
        assert (beat.phase, beat.hang_after, beat.joined, beat.pid, beat.world_size) == (
            "init_process_group",
            20.0,
            False,
            os.getpid(),
            8,
        )
        dog.joined()
        dog.beat("warm-up step 1")
        assert files.heartbeats()[5].hang_after == 30.0  # the first step's bound
        dog.first_step_done()
        beat = files.heartbeats()[5]
        assert beat.hang_after == 4.0 and beat.steps == 2 and beat.progress <= beat.time
    finally:
        dog.stop()
        os.close(devnull)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def looks(self, files: monitor.RankFiles, until: float, now: float, step: float = 1.0) -> list[bytes]:
        """What ``files`` says at a look every ``step`` seconds until ``until`` (``now``: the wall clock)."""
        said: list[bytes] = []
        while self.t < until:
            self.t = min(until, self.t + step)
            said += files.poll(now)
        return said


def test_a_stopped_process_is_named_silent_with_its_state_and_withdrawn_once_its_heartbeat_returns(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        state = wait_until(
            "the child to stop",
            lambda: s if (s := monitor.process_state(child.pid)) is not None and s[0] == "T" else None,
            timeout=30,
            every=0.02,
        )
        assert state == ("T", "stopped")
        now, clock = time.time(), Clock()
        files = monitor.RankFiles(str(tmp_path), margin=5.0, mono=clock)
        _beat(tmp_path, 1, pid=child.pid, time_=now - 1.0, progress=now - 2.0)
        assert files.poll(now) == []
        assert (
            clock.looks(files, 1010.0, now + 10) == []
        )  # unchanged for 10 s: the bound (5) plus the margin (5)
        (line,) = clock.looks(files, 1010.5, now + 10.5)
        silent = roll_of_lines([line]).ranks[1].silent
        assert silent is not None and (silent.state, silent.state_name, silent.pid) == (
            "T",
            "stopped",
            child.pid,
        )
        assert (silent.stalled_s, silent.heartbeat_s, silent.hang_after, silent.margin_s) == (
            12.5,
            11.5,
            5.0,
            5.0,
        )
        assert clock.looks(files, 1015.0, now + 15) == []  # said once
        _beat(tmp_path, 1, pid=child.pid, time_=now + 15, progress=now - 2.0)
        (back,) = clock.looks(files, 1016.0, now + 16)
        assert roll_of_lines([line, back]).ranks[1].silent is None
        assert len(clock.looks(files, 1026.5, now + 26.5)) == 1  # silent again
    finally:
        child.kill()
        child.wait()
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), margin=5.0, mono=clock)
    assert clock.looks(files, 1020.0, time.time()) == []  # the process is gone: its launcher sees that
    assert monitor.process_state(os.getpid()) in (("R", "running"), ("S", "sleeping"))


def test_a_heartbeat_is_stale_only_by_the_monitors_own_looks_not_its_stamp_nor_a_pause(tmp_path):
    """A clock step (an old stamp) or a pause of the monitor itself names no rank silent."""
    me = os.getpid()
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), margin=5.0, mono=clock)
    _beat(tmp_path, 1, pid=me, time_=time.time() - 3600.0, progress=time.time() - 3600.0)  # a clock step
    assert files.poll(time.time()) == []  # an hour-old stamp counts for nothing at the first look
    assert clock.looks(files, 1009.0, time.time()) == []
    clock.t = 1030.0  # the monitor itself did not run for 21 s: its looks start again
    assert files.poll(time.time()) == []
    assert clock.looks(files, 1040.0, time.time()) == []  # 10 s since the pause: not past the bound yet
    assert len(clock.looks(files, 1041.0, time.time())) == 1  # held at every look past it: silent


def test_the_monitor_in_front_of_a_command_ends_as_the_command_did(tmp_path):
    def through_monitor(code: str) -> int:
        cmd = [sys.executable, "-m", "rollcall_workload.node.monitor", "--dir", str(tmp_path), "--poll", "0.1", "--",
               sys.executable, "-c", code]  # fmt: skip
        return subprocess.run(cmd, env=monitor_env(), timeout=120).returncode

    assert through_monitor("raise SystemExit(3)") == 3
    assert through_monitor("pass") == 0
    assert through_monitor("import os, signal; os.kill(os.getpid(), signal.SIGKILL)") == -signal.SIGKILL
    mine = f"import os; raise SystemExit(0 if os.environ['ROLLCALL_MONITOR_DIR'] == {str(tmp_path)!r} else 5)"
    assert through_monitor(mine) == 0  # the ranks write where the monitor reads


def test_the_monitor_as_a_sidecar_ends_with_0_when_the_kubelet_sends_sigterm(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        now = time.time()
        _beat(tmp_path, 1, pid=rank.pid, time_=now - 60.0, progress=now - 60.0, bound=0.2)
        cmd = [
            sys.executable,
            "-m",
            "rollcall_workload.node.monitor",
            "--dir",
            str(tmp_path),
            "--poll",
            "0.1",
            "--margin",
            "0",
        ]
        env = monitor_env()
        with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE) as sidecar:
            assert sidecar.stdout is not None
            first = sidecar.stdout.readline()  # a few looks in: its handlers are in place by then
            assert b'"event":"silent"' in first.replace(b" ", b""), first
            sidecar.send_signal(signal.SIGTERM)
            assert sidecar.wait(timeout=60) == 0
    finally:
        rank.kill()
        rank.wait()


def test_the_fault_variables_of_the_monitor_are_parsed_with_the_others():
    env = {faults.GIL_RANK_ENV: "1", faults.STOP_RANK_ENV: "2", faults.NO_JOIN_RANK_ENV: "3"}
    faults.check_fault_injection(env)
    assert [faults.injected_fault(r, env) for r in range(4)] == [None, "gil", "stop", None]
    assert faults.never_joins(3, env) and not faults.never_joins(1, env)
    assert faults.hung_node({faults.NO_LAUNCH_NODE_ENV: "0,2"}, 2, faults.NO_LAUNCH_NODE_ENV) == 2
    assert faults.hung_node({faults.NO_LAUNCH_NODE_ENV: "0,2"}, 1, faults.NO_LAUNCH_NODE_ENV) is None
    for name in (
        faults.GIL_RANK_ENV,
        faults.STOP_RANK_ENV,
        faults.NO_JOIN_RANK_ENV,
        faults.NO_LAUNCH_NODE_ENV,
    ):
        try:
            faults.check_fault_injection({name: "one"})
        except ValueError as exc:
            assert f"{name}='one' is not valid" in str(exc)
        else:
            raise AssertionError(f"{name}=one was accepted")


def _launcher_lines(lines: list[bytes]) -> list[dict]:
    events = [json.loads(line.split(b" ", 1)[1]) for line in lines]
    assert all(e["event"] == "launcher" and e["rank"] == -1 for e in events), events
    return events


def test_the_launcher_is_said_started_then_waiting_at_each_bound_then_spawned_once(tmp_path):
    kids: list[int] = []
    clock = Clock()
    watch = monitor.LauncherWatch(
        pid=4242,
        node_rank=1,
        started=1000.0,
        bound=10.0,
        ranks=monitor.RankFiles(str(tmp_path)),
        children_of=lambda pid: kids,
        state_of=lambda pid: ("S", "sleeping"),
        node="n1",
        mono=clock,
    )

    def at(t: float) -> list[bytes]:
        clock.t = t
        return watch.poll(0.0)  # the wall clock is not read: a step of it ends no wait

    (first,) = _launcher_lines([watch.first()])
    assert (first["state"], first["node_rank"], first["node"], first["pid"]) == ("started", 1, "n1", 4242)
    assert at(1009.0) == []
    (wait,) = _launcher_lines(at(1010.5))
    assert (wait["state"], wait["waited_s"], wait["bound_s"], wait["process_state"]) == (
        "waiting",
        10.5,
        10.0,
        "S",
    )
    assert at(1015.0) == []  # one line per bound
    assert [e["waited_s"] for e in _launcher_lines(at(1020.0))] == [20.0]
    kids.append(4300)
    (spawned,) = _launcher_lines(at(1021.0))
    assert spawned["state"] == "spawned" and spawned["waited_s"] == 21.0
    assert at(1050.0) == []


def test_the_launchers_state_is_said_with_how_long_it_held_at_every_look(tmp_path):
    """One read of D (a page fault, an NFS read) holds 0 s; a state counts once it has held."""
    states = iter("SDDSDDDDDDDDDDDDDDDDDDDD")
    clock = Clock()
    watch = monitor.LauncherWatch(
        4242, 0, 1000.0, 10.0, None, lambda pid: [], lambda pid: (s := next(states), s), node="n0", mono=clock
    )
    held = []
    for t in range(1001, 1024):
        clock.t = float(t)
        held += [(e["process_state"], e["state_held_s"]) for e in _launcher_lines(watch.poll(0.0))]
    assert held == [("D", 5.0), ("D", 15.0)]  # D since 1005 (1002-1003 were two reads): 5 s, then 15 s


def test_a_heartbeat_says_the_launcher_spawned_its_ranks_where_children_cannot_be_read(tmp_path):
    clock = Clock(1011.0)
    watch = monitor.LauncherWatch(
        4242, 0, 1000.0, 10.0, monitor.RankFiles(str(tmp_path)), lambda pid: [], mono=clock
    )
    assert _launcher_lines(watch.poll(0.0))[0]["state"] == "waiting"
    _beat(tmp_path, 0, pid=4300, time_=1011.0, progress=1011.0)
    clock.t = 1012.0
    assert _launcher_lines(watch.poll(0.0))[0]["state"] == "spawned"


def test_a_node_asked_to_start_no_launcher_starts_nothing_and_ends_at_sigterm(tmp_path):
    marker = tmp_path / "ran"
    cmd = [sys.executable, "-m", "rollcall_workload.node.monitor", "--dir", str(tmp_path / "m"), "--node-rank", "1",
           "--poll", "0.1", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]  # fmt: skip
    env = monitor_env(**{faults.NO_LAUNCH_NODE_ENV: "1"})
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as node:
        assert node.stderr is not None and node.stdout is not None
        said = node.stderr.readline()  # said after its signals are blocked? no: before; SIGTERM then waits
        assert said == b"rollcall: node 1 starts no launcher as asked by ROLLCALL_NO_LAUNCH_NODE\n", said
        node.send_signal(signal.SIGTERM)
        assert node.wait(timeout=60) == 128 + signal.SIGTERM
        assert node.stdout.read() == b""  # not a single roll-call line: nothing heard from the node
    assert not marker.exists() and not (tmp_path / "m").exists()


def test_the_monitor_in_front_of_a_launcher_says_when_it_started_and_spawned(tmp_path):
    code = "import subprocess, sys, time; time.sleep(0.5); subprocess.run([sys.executable, '-c', 'import time; time.sleep(1.5)'])"
    cmd = [sys.executable, "-m", "rollcall_workload.node.monitor", "--dir", str(tmp_path), "--node-rank", "0",
           "--join-hang-after", "0.3", "--poll", "0.1", "--", sys.executable, "-c", code]  # fmt: skip
    out = subprocess.run(cmd, env=monitor_env(), stdout=subprocess.PIPE, timeout=120)
    assert out.returncode == 0
    states = [e["state"] for e in _launcher_lines(out.stdout.splitlines(keepends=True))]
    assert states[0] == "started" and states[-1] == "spawned" and set(states[1:-1]) == {"waiting"}, states


def _process_lines(lines: list[bytes]) -> list[dict]:
    events = [json.loads(line.split(b" ", 1)[1]) for line in lines]
    assert all(e["event"] == "rank_process" for e in events), events
    return events


def test_a_ranks_process_is_said_seen_then_gone_with_the_interval_it_left_in(tmp_path):
    """Whoever started it and however it leaves; its own children (compile workers) are not ranks."""
    mine = {**os.environ, MONITOR_DIR_ENV: str(tmp_path), "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
            "CUDA_VISIBLE_DEVICES": "2"}  # fmt: skip
    spawn_child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); print('up', flush=True); time.sleep(600)"
    rank = subprocess.Popen([sys.executable, "-c", spawn_child], env=mine, stdout=subprocess.PIPE)
    other_dir = subprocess.Popen(SLEEPER, env={**mine, MONITOR_DIR_ENV: str(tmp_path / "other"), "RANK": "5"})
    no_rank = subprocess.Popen(SLEEPER, env={k: v for k, v in mine.items() if k != "RANK"})
    try:
        assert rank.stdout is not None and rank.stdout.readline() == b"up\n"
        watch = monitor.RankProcesses(str(tmp_path), node_rank=1)
        (seen,) = _process_lines(watch.poll(1000.0))
        assert (seen["state"], seen["rank"], seen["world_size"], seen["pid"], seen["node_rank"]) == (
            "seen",
            3,
            4,
            rank.pid,
            1,
        )
        assert (seen["local_rank"], seen["visible_devices"]) == (1, "2")
        assert watch.poll(1001.0) == []  # said once
        os.kill(rank.pid, signal.SIGKILL)
        rank.wait()
        (gone,) = _process_lines(watch.poll(1002.5))
        assert (gone["state"], gone["rank"], gone["pid"], gone["alive_at"], gone["gone_at"]) == (
            "gone",
            3,
            rank.pid,
            1001.0,
            1002.5,
        )
        assert watch.poll(1003.0) == []
    finally:
        for p in (rank, other_dir, no_rank):
            p.kill()
            p.wait()
    assert rank.pid not in procfs.children(os.getpid())


def test_a_process_caught_before_it_executes_its_rank_is_seen_once_it_has(tmp_path):
    """A young process is read again at each look: its environment is its parent's until it executes."""
    env = {**os.environ, MONITOR_DIR_ENV: str(tmp_path)}
    later = "import os, sys; os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)'], {**os.environ, 'RANK': '0'})"
    gate = subprocess.Popen([sys.executable, "-c", f"input(); {later}"], env=env, stdin=subprocess.PIPE)
    try:
        watch = monitor.RankProcesses(str(tmp_path))
        assert watch.poll(1000.0) == []  # not a rank yet
        assert gate.stdin is not None
        gate.stdin.write(b"\n")
        gate.stdin.flush()
        (seen,) = wait_until(
            "the rank to be seen", lambda: _process_lines(watch.poll(1001.0)) or None, timeout=60, every=0.05
        )
        assert (seen["rank"], seen["pid"]) == (0, gate.pid)
    finally:
        gate.kill()
        gate.wait()
