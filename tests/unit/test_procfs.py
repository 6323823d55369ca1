"""What /proc says of a process, read so that a passing state (a process inside execve) is not taken for one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rollcall_workload import procfs

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def fake_stat(pid: int, parent: int, state: str = "S", flags: int = 0, comm: str = "py thon") -> str:
    """A stat line as the kernel writes it: 52 fields, the command in parentheses (spaces and all)."""
    rest = [state, parent, pid, pid, 0, -1, flags, *([0] * 12), 4242, *([0] * 32)]
    return f"{pid} ({comm}) " + " ".join(map(str, rest)) + "\n"


def test_stat_reads_the_fields_the_project_uses_even_from_an_odd_command_name(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text(fake_stat(7, 1, "D", procfs.PF_EXITING, comm="a) b (c"))
    s = procfs.stat(7, str(tmp_path))
    assert s == procfs.Stat(7, "D", 1, 7, 7, procfs.PF_EXITING, 4242)
    assert s.ending and not s.gone and not s.kernel_thread
    assert procfs.stat(8, str(tmp_path)) is None


def test_this_process_reads_as_itself():
    me = procfs.stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.state in "RS" and not me.kernel_thread


def test_a_process_environment_is_read_as_it_was_given_at_exec():
    """/proc/PID/environ is what execve laid out, not what the process set since (pytest's own, xdist's)."""
    given = {"ROLLCALL_RUN_MARK": "a b=c", "PATH": os.environ.get("PATH", "/usr/bin")}
    child = subprocess.Popen(SLEEPER, env=given)
    try:
        assert procfs.environ(child.pid) == given  # read again by procfs while the child is inside execve
    finally:
        child.kill()
        child.wait()


def test_children_are_read_from_proc(tmp_path):
    child = subprocess.Popen(SLEEPER)
    try:
        assert child.pid in procfs.children(os.getpid())
        assert procfs.children(child.pid) == []
    finally:
        child.kill()
        child.wait()
    fake = tmp_path / "proc"  # a kernel without CONFIG_PROC_CHILDREN: every process's stat is read
    for pid, parent in ((7, 1), (8, 7), (9, 7), (10, 8)):
        (fake / str(pid) / "task" / str(pid)).mkdir(parents=True)
        (fake / str(pid) / "stat").write_text(fake_stat(pid, parent))
    assert sorted(procfs.children(7, str(fake))) == [8, 9] and procfs.children(42, str(fake)) == []


def test_an_empty_environment_is_read_again_until_the_process_has_laid_it_out(tmp_path):
    """A process inside execve reads empty; what is there a moment later is what counts."""
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text(fake_stat(7, 1, "R"))
    environ = tmp_path / "7" / "environ"
    environ.write_bytes(b"")
    reads = 0
    real = procfs._read_environ

    def read(pid: int, proc: str) -> bytes | None:
        nonlocal reads
        reads += 1
        if reads == 3:  # the exec finishes between the second read and the third
            environ.write_bytes(b"ROLLCALL_RUN_ID=r1\0PATH=/bin\0")
        return real(pid, proc)

    procfs._read_environ = read  # type: ignore[assignment]
    try:
        assert procfs.environ(7, str(tmp_path)) == {"ROLLCALL_RUN_ID": "r1", "PATH": "/bin"}
    finally:
        procfs._read_environ = real  # type: ignore[assignment]
    assert reads == 3


def test_an_empty_environment_that_stays_empty_is_given_up_on_once_for_every_process(tmp_path):
    for pid in range(10, 30):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(fake_stat(pid, 1, "S"))
        (tmp_path / str(pid) / "environ").write_bytes(b"")
    began = time.monotonic()
    assert procfs.environs(range(10, 30), str(tmp_path), settle_s=0.2) == {}
    assert time.monotonic() - began < 20 * 0.2  # one bound for all of them, not one each


def test_kernel_threads_zombies_and_exiting_processes_are_not_waited_for(tmp_path):
    for pid, state, flags in ((7, "S", procfs.PF_KTHREAD), (8, "Z", 0), (9, "R", procfs.PF_EXITING)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(fake_stat(pid, 2, state, flags))
        (tmp_path / str(pid) / "environ").write_bytes(b"")
    began = time.monotonic()
    assert procfs.environs([7, 8, 9, 10], str(tmp_path), settle_s=60) == {}
    assert time.monotonic() - began < 30


def test_a_process_that_execs_without_end_is_read_whole_every_time(tmp_path: Path):
    """The race of a clean-clone CI: a process read between its old program and its new one."""
    script = tmp_path / "again.sh"
    script.write_text('#!/bin/sh\nexec "$0"\n')
    script.chmod(0o755)
    loopers = [subprocess.Popen([str(script)], env={"MARK": "yes"}) for _ in range(8)]
    try:
        for _ in range(3000):
            envs = procfs.environs(p.pid for p in loopers)
            assert [envs.get(p.pid, {}).get("MARK") for p in loopers] == ["yes"] * len(loopers)
    finally:
        for p in loopers:
            p.kill()
            p.wait()
