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
from rollcall_workload.node import monitor, ranks
from rollcall_workload.node.launcher import LauncherFinder, is_launcher
from rollcall_workload.node.states import Held
from rollcall_workload.rank.watchdog import FAULTHANDLER_MARGIN_S, WORKLOAD_DIR
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


def test_a_sidecar_finds_its_pods_launcher_among_the_pods_processes_and_watches_it_from_then(tmp_path):
    """On Kubernetes the monitor is a sidecar: it did not start the launcher, so it looks for torchrun among
    the processes the pod shares at each look; the look that finds it says ``started`` (the node is heard),
    the later ones wait and spawn as the launcher's own watch does."""
    procs: dict[int, list[str]] = {7: ["python3", "-m", "rollcall_workload.node.monitor"], 9: ["/pause"]}
    clock = Clock(t=500.0)
    finder = LauncherFinder(
        node_rank=1, bound=10.0, ranks=monitor.RankFiles(str(tmp_path)), pids=lambda: sorted(procs),
        cmdline=lambda pid: procs.get(pid, []), mono=clock,
    )  # fmt: skip
    assert finder.poll(0.0) == [] and finder.watch is None  # the training container has not started
    procs[12] = ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes=2", "--node-rank=1"]
    clock.t = 503.0
    (started,) = _launcher_lines(finder.poll(0.0))
    assert (started["state"], started["node_rank"], started["pid"], started["waited_s"]) == (
        "started",
        1,
        12,
        0,
    )
    assert finder.watch is not None and finder.watch.started == 503.0
    clock.t = 513.5
    (waiting,) = _launcher_lines(finder.poll(0.0))
    assert waiting["state"] == "waiting" and waiting["waited_s"] == 10.5
    assert is_launcher(["python", "-m", "torch.distributed.run", "--nnodes=2"])
    assert is_launcher(["torchrun", "--nnodes=2"])
    assert not is_launcher(["python", "-u", "/workspace/train.py", "--device", "cpu"])
    assert not is_launcher(["python3", "-m", "rollcall_workload.node.monitor", "--node-rank=1"])


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


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def _events(lines: list[bytes]) -> list[dict]:
    return [json.loads(line.split(b" ", 1)[1]) for line in lines]


def test_a_reading_holds_across_a_gap_of_max_gap_between_looks_and_starts_again_past_it():
    held = Held(max_gap=3.0)
    assert held.see("D", 100.0) == 0.0
    assert held.see("D", 103.0) == 3.0  # a gap of exactly max_gap: the monitor was running
    assert held.see("D", 106.5) == 0.0  # longer: it was paused, the count starts again
    assert held.see("S", 107.0) == 0.0 and held.changed


def test_the_launchers_own_children_say_it_spawned_and_its_waits_follow_any_bound():
    clock = Clock()
    kids = {4242: [4300]}
    spawned = monitor.LauncherWatch(4242, 0, 1000.0, 10.0, None, lambda pid: kids.get(pid, []), mono=clock)
    assert _events(spawned.poll(0.0))[0]["state"] == "spawned"
    others = monitor.LauncherWatch(4243, 0, 1000.0, 10.0, None, lambda pid: kids.get(pid, []), mono=clock)
    assert others.poll(0.0) == []  # another process's children are not the launcher's
    half = monitor.LauncherWatch(4243, 0, 1000.0, 0.5, None, lambda pid: [], mono=clock)
    clock.t = 1000.5
    assert [e["state"] for e in _events(half.poll(0.0))] == ["waiting"]  # a bound below a second waits too
    unbounded = monitor.LauncherWatch(4243, 0, 1000.0, 0.0, None, lambda pid: kids.get(pid, []), mono=clock)
    clock.t = 1100.0
    assert unbounded.poll(0.0) == []  # no bound: it never says waiting
    kids[4243] = [4301]
    assert _events(unbounded.poll(0.0))[0]["state"] == "spawned"


def _stacks_text(dump: int | None, dumps: int, frame: str = "/opt/x/train.py") -> str:
    header = {"phase": "epoch 1 end", "since": 100.0, "armed": 100.0, "timeout": 10.0, "hang_after": 5.0,
              "main": 0x7F00} | ({"dump": dump} if dump is not None else {})  # fmt: skip
    one = f'Timeout (0:00:10)!\nThread 0x00007f00 (most recent call first):\n  File "{frame}", line 7 in f\n'
    return f"{STACKS_HEADER}{json.dumps(header)}\n" + one * dumps


def test_a_dump_is_read_once_it_reads_the_same_at_two_looks_and_each_sections_dumps_are_said_once(tmp_path):
    """faulthandler writes a dump thread by thread: a file is taken only once unchanged across a look. Each
    section (an arming of the timer, by its dump number, 1 where its header says none) is said once per
    dump written into it, as events of its rank and world."""
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), margin=600.0, mono=clock)
    _beat(tmp_path, 2, pid=os.getpid(), time_=time.time(), progress=time.time())
    stacks = Path(stacks_path(str(tmp_path), 2))

    def look(text: str | None = None) -> list[dict]:
        if text is not None:
            stacks.write_text(text)
        clock.t += 1.0
        return [e for e in _events(files.poll(time.time())) if e["event"] == "stack"]

    assert look(_stacks_text(None, 1)) == []  # read once: it may be half-written
    (first,) = look()
    assert (first["rank"], first["world_size"], first["dump"], first["stalled_s"]) == (2, 4, 1, 10.0)
    assert first["frames"][0][:3] == ["/opt/x/train.py", 7, "f"]
    assert look() == []  # said once
    assert look(_stacks_text(None, 2)) == []  # a second dump: read again before it is said
    assert [e["stalled_s"] for e in look()] == [20.0]
    two_sections = _stacks_text(None, 2) + _stacks_text(2, 1) + _stacks_text(3, 1)
    assert look(two_sections) == []
    assert sorted(e["dump"] for e in look()) == [2, 3]  # both new sections, at one look
    assert look() == [] and look() == []
    assert Path(stacks_path(str(tmp_path), 3)).exists() is False  # no other rank's file was read


def test_a_rank_whose_heartbeat_changes_is_never_silent_and_its_lines_say_its_rank_world_and_times(tmp_path):
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), margin=5.0, mono=clock)
    now = 1_700_000_000.123456
    for t in range(20):  # a live rank: a new heartbeat at each look
        _beat(tmp_path, 1, pid=os.getpid(), time_=now + t, progress=now + t)
        assert clock.looks(files, 1000.0 + t + 1, now + t) == []
    # stale from now on: silent past the bound (5) plus the margin (5), on the monitor's own clock
    said = _events(clock.looks(files, 1031.25, now + 19.75, step=0.25))
    (silent,) = said
    assert (silent["event"], silent["rank"], silent["world_size"], silent["phase"], silent["steps"]) == (
        "silent",
        1,
        4,
        "epoch 1 end",
        7,
    )
    assert (silent["held_s"], silent["stalled_s"], silent["heartbeat_s"], silent["pid"]) == (
        10.25,
        0.75,
        0.75,
        os.getpid(),
    )
    _beat(tmp_path, 1, pid=os.getpid(), time_=now + 40, progress=now + 40)
    (back,) = _events(clock.looks(files, 1032.0, now + 40))
    assert (back["event"], back["rank"], back["world_size"], back["dump"], back["phase"]) == (
        "resumed",
        1,
        4,
        0,
        "epoch 1 end",
    )


def _fake_proc(root: Path, uptime: float = 1000.0) -> Path:
    root.mkdir()
    (root / "uptime").write_text(f"{uptime} 10.0\n")
    return root


def _process(proc: Path, pid: int, ppid: int, ticks: int, env: dict[str, str]) -> None:
    """A process in a ``/proc`` of the test's own: its ``stat`` and its ``environ``."""
    (proc / str(pid)).mkdir(exist_ok=True)
    zeros = " ".join(["0"] * 12)
    (proc / str(pid) / "stat").write_text(f"{pid} (python) S {ppid} 1 1 0 0 0 {zeros} {ticks} 0 0\n")
    (proc / str(pid) / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def test_each_rank_process_is_seen_once_the_first_of_its_rank_and_no_child_of_one(tmp_path):
    """Ranks 0 and 1 of this node, a child of rank 0 (compile workers carry its variables; one with its own
    RANK too), a second process of rank 1 that is no child of it, and the monitor itself; a parent whose
    pid is above its child's (pids wrap) is still seen before it."""
    proc, d = _fake_proc(tmp_path / "proc"), str(tmp_path / "m")
    env = {MONITOR_DIR_ENV: d, "WORLD_SIZE": "4"}
    _process(proc, 900, 1, 1000, {**env, "RANK": "0", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0"})
    _process(proc, 800, 900, 2000, {**env, "RANK": "0"})  # rank 0's child, a lower pid
    _process(proc, 801, 900, 2001, {**env, "RANK": "5"})  # a child given its own RANK
    _process(proc, 950, 1, 3000, {**env, "RANK": "1", "LOCAL_RANK": "1"})
    _process(proc, 960, 1, 4000, {**env, "RANK": "1"})  # a second of rank 1
    _process(proc, 970, 1, 5000, {MONITOR_DIR_ENV: d, "RANK": "2"})  # no world size, no local rank
    _process(proc, os.getpid(), 1, 500, {**env, "RANK": "3"})  # the monitor's own environment says so
    watch = monitor.RankProcesses(d, node_rank=1, node="n1", proc=str(proc))
    seen = _events(watch.poll(1000.0))
    assert [(e["pid"], e["rank"], e["world_size"], e["local_rank"]) for e in seen] == [
        (900, 0, 4, 0),
        (950, 1, 4, 1),
        (970, 2, -1, None),
    ]
    assert {(e["state"], e["node_rank"], e["node"]) for e in seen} == {("seen", 1, "n1")}
    assert seen[0]["visible_devices"] == "0"


def test_a_rank_process_gone_is_said_once_with_the_interval_it_left_in_and_one_alive_never(tmp_path):
    proc, d = _fake_proc(tmp_path / "proc"), str(tmp_path / "m")
    env = {MONITOR_DIR_ENV: d, "WORLD_SIZE": "4"}
    for pid, rank in ((900, 0), (950, 1), (960, 2)):
        _process(proc, pid, 1, 1000 + pid, {**env, "RANK": str(rank)})
    watch = monitor.RankProcesses(d, node_rank=1, node="n1", proc=str(proc))
    assert len(watch.poll(1000.0)) == 3
    assert watch.poll(1001.1234567) == [] and watch.poll(1002.0) == []  # alive at every look
    for pid in (950, 960):
        (proc / str(pid) / "stat").unlink()
    gone = _events(watch.poll(1003.7654321))
    assert [(e["state"], e["rank"], e["world_size"], e["node_rank"], e["node"]) for e in gone] == [
        ("gone", 1, 4, 1, "n1"),
        ("gone", 2, 4, 1, "n1"),
    ]
    assert (gone[0]["alive_at"], gone[0]["gone_at"]) == (1002.0, 1003.765432)
    # seen, then gone at the next look: alive when it was first seen
    _process(proc, 990, 1, 5000, {**env, "RANK": "3"})
    assert len(watch.poll(1004.1234567)) == 1
    (proc / "990" / "stat").unlink()
    (left,) = _events(watch.poll(1005.0))
    assert (left["rank"], left["alive_at"]) == (3, 1004.123457)
    # the pid taken by another process (another start): the rank's is gone
    _process(proc, 900, 1, 99999, {"OTHER": "1"})
    assert [e["rank"] for e in _events(watch.poll(1006.0))] == [0]


def test_an_old_process_of_no_rank_is_settled_and_a_young_one_read_again_at_each_look(tmp_path):
    """A process younger than YOUNG_S may still be between fork and exec (its environment its parent's):
    it is read again; one older is settled as no rank and never read again."""
    proc, d = _fake_proc(tmp_path / "proc", uptime=1000.0), str(tmp_path / "m")
    old, young = int((1000.0 - 30.0) * ranks._TICKS), int((1000.0 - ranks.YOUNG_S) * ranks._TICKS)
    _process(proc, 700, 1, old, {"PATH": "/bin"})
    _process(proc, 710, 1, young, {"PATH": "/bin"})  # exactly YOUNG_S old: still young
    watch = monitor.RankProcesses(d, proc=str(proc))
    assert watch.poll(1000.0) == []
    for pid in (700, 710):
        _process(proc, pid, 1, old if pid == 700 else young, {MONITOR_DIR_ENV: d, "RANK": str(pid - 700)})
    assert [e["pid"] for e in _events(watch.poll(1001.0))] == [710]


def test_a_wait_is_said_no_sooner_than_its_multiple_of_the_bound_to_the_last_bit():
    """0.5 s is below five bounds of 0.1 s in floating point (0.1 is 0.1000000000000000055...): the waiting
    line at 0.5 s is the fourth, and the fifth comes at the next look past it."""
    clock = Clock(0.0)
    watch = monitor.LauncherWatch(4242, 0, 0.0, 0.1, None, lambda pid: [], mono=clock)
    said = []
    for t in (0.5, 0.55):
        clock.t = t
        said += [e["waited_s"] for e in _events(watch.poll(0.0))]
    assert said == [0.5, 0.55]


def test_a_silent_line_says_its_times_to_the_millisecond(tmp_path):
    clock = Clock(1000.0)
    files = monitor.RankFiles(str(tmp_path), margin=5.0, mono=clock)
    wall = 2000.0
    _beat(tmp_path, 1, pid=os.getpid(), time_=wall - 1.23456, progress=wall - 2.34567)  # its bound: 5 s
    (silent,) = _events(clock.looks(files, 1000.0 + 84 * 0.12345, wall, step=0.12345))
    assert (silent["held_s"], silent["stalled_s"], silent["heartbeat_s"]) == (10.123, 2.346, 1.235)


def test_a_rank_held_in_c_is_dumped_and_its_dump_said_before_it_could_be_silent(tmp_path):
    """A rank whose interpreter is held in C (its process sleeping, no Python running) stops its heartbeat
    and, ``--hang-after`` plus faulthandler's margin later, faulthandler dumps its stacks: the monitor says
    that dump, read whole, before the rank could be silent (the node's fault), at every order of looks."""
    assert monitor.SILENT_MARGIN_S >= FAULTHANDLER_MARGIN_S + 3 * monitor.POLL_S
    me = os.getpid()
    for phase in (0.0, 0.3, 0.7):  # where the monitor's looks fall against the rank's last beat
        directory = tmp_path / f"at-{phase}"
        directory.mkdir()
        clock = Clock(1000.0 + phase)
        files = monitor.RankFiles(str(directory), mono=clock)
        _beat(directory, 1, pid=me, time_=time.time(), progress=time.time())
        looks = [[e["event"] for e in _events(files.poll(time.time()))]]
        dumped = False
        while clock.t < 1000.0 + 5.0 + monitor.SILENT_MARGIN_S + 5.0:
            clock.t += monitor.POLL_S
            if not dumped and clock.t >= 1000.0 + 5.0 + FAULTHANDLER_MARGIN_S:  # faulthandler's timer fired
                Path(stacks_path(str(directory), 1)).write_text(_stacks_text(None, 1))
                dumped = True
            looks.append([e["event"] for e in _events(files.poll(time.time()))])
        at = {event: n for n, said in reversed(list(enumerate(looks))) for event in said}
        assert at["stack"] < at["silent"], (phase, looks)  # said at an earlier look, not beside it
    # a dump being written at every look (a file that changed since the last) holds the silence back
    clock = Clock()
    files = monitor.RankFiles(str(tmp_path), margin=1.0, mono=clock)
    _beat(tmp_path, 1, pid=me, time_=time.time(), progress=time.time())
    stacks = Path(stacks_path(str(tmp_path), 1))
    for n in range(1, 12):
        stacks.write_text(_stacks_text(None, n))
        clock.t += 1.0
        assert files.poll(time.time()) == []
    clock.t += 1.0
    assert sorted(e["event"] for e in _events(files.poll(time.time()))) == ["silent", "stack"]
