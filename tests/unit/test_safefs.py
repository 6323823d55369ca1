"""Directories and files no other user can plant: the monitor's directory, the flight dumps, the watchdog's
files and the compiler's cache, made fresh and exclusive or refused with a clear error, nothing written
through a planted link.

The tests run as root: "another user" is uid 65534 (nobody), given the directory or link with chown.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rollcall.checks.blame import error_blame
from rollcall.verdict import Owner
from rollcall_workload.contract.heartbeat import STACKS_HEADER, heartbeat_path, stacks_path
from rollcall_workload.node import monitor
from rollcall_workload.rank import flight
from rollcall_workload.rank.watchdog import _MonitorFiles
from rollcall_workload.safefs import UnsafePathError, new_file, open_read, private_dir

SRC = str(Path(__file__).resolve().parents[2] / "src")
NOBODY = 65534


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def planted_link(at: Path, target: Path, uid: int = NOBODY) -> None:
    at.symlink_to(target)
    os.lchown(at, uid, uid)


def test_a_directory_is_made_fresh_with_its_parents_for_this_user_alone(tmp_path):
    path = tmp_path / "job-5" / "node-0-monitor"
    assert private_dir(path) == str(path)
    for made in (path, path.parent):
        assert mode(made) == 0o700 and os.lstat(made).st_uid == os.geteuid()
    assert private_dir(path) == str(path)  # the monitor's, joined by its ranks


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ("owned by nobody", f"is owned by uid {NOBODY}, not by this process's user (uid 0)"),
        ("open to all", "may be written by others (mode 0777)"),
        ("a file", "exists and is not a directory"),
    ],
)
def test_a_directory_that_is_not_this_users_alone_is_refused_naming_it_and_the_fix(tmp_path, shape, why):
    path = tmp_path / "node-0-monitor"
    if shape == "a file":
        path.write_text("")
    else:
        path.mkdir()
        if shape == "owned by nobody":
            os.chown(path, NOBODY, NOBODY)
        else:
            path.chmod(0o777)
    with pytest.raises(UnsafePathError) as caught:
        private_dir(path)
    assert caught.value.path == str(path)
    assert why in str(caught.value)
    assert str(caught.value).startswith(f"Permission denied: {path} ")
    assert "run again" in str(caught.value)  # the fix


def test_a_link_planted_where_the_directory_goes_is_refused_and_nothing_goes_through_it(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for uid in (NOBODY, 0):  # a link is refused whoever made it: the directory must be one
        link = tmp_path / f"node-{uid}-monitor"
        planted_link(link, theirs, uid)
        with pytest.raises(UnsafePathError, match="is a symbolic link"):
            private_dir(link)
        with pytest.raises(UnsafePathError):
            _MonitorFiles(str(link), 0)
    assert list(theirs.iterdir()) == []


def test_a_job_directory_another_user_made_first_in_tmp_is_refused(tmp_path):
    shared = tmp_path / "tmp"  # as /tmp: anyone may write it, sticky
    shared.mkdir()
    shared.chmod(0o1777)
    job = shared / "rollcall-monitor-5"
    job.mkdir(mode=0o755)
    os.chown(job, NOBODY, NOBODY)
    with pytest.raises(UnsafePathError, match=f"is a directory owned by uid {NOBODY}, neither root's nor"):
        private_dir(job / "node-0-monitor")
    assert list(job.iterdir()) == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    linked = shared / "rollcall-monitor-6"
    planted_link(linked, elsewhere)
    with pytest.raises(UnsafePathError, match="is a symbolic link owned by uid"):
        private_dir(linked / "node-0-monitor")
    assert list(elsewhere.iterdir()) == []
    # made by this user, it is taken (the second step of one job); the node's directory is made in it
    mine = shared / "rollcall-monitor-7"
    mine.mkdir(mode=0o700)
    assert private_dir(mine / "node-0-monitor")


def test_a_parent_outside_a_directory_open_to_all_is_taken_as_its_owner_placed_it(tmp_path):
    """A project's directory on a shared file system, another user's: its own parent is no one else's."""
    project = tmp_path / "project"
    project.mkdir(mode=0o775)
    os.chown(project, NOBODY, NOBODY)
    os.chown(tmp_path, 0, 0)
    assert private_dir(project / "artifacts" / "node-0-monitor")


def test_a_pods_empty_dir_open_to_all_is_a_parent_the_directory_is_made_in(tmp_path):
    mount = tmp_path / "rollcall-monitor"
    mount.mkdir()
    mount.chmod(0o777)  # as the kubelet makes an emptyDir
    assert mode(Path(private_dir(mount / "node"))) == 0o700


def test_the_watchdogs_files_are_new_and_a_link_planted_in_their_place_is_not_followed(tmp_path):
    directory = tmp_path / "monitor"
    private_dir(directory)
    target = tmp_path / "target"
    target.write_text("kept")
    for path in (heartbeat_path(str(directory), 0), stacks_path(str(directory), 0)):
        Path(path).symlink_to(target)
    files = _MonitorFiles(str(directory), 0)
    files.arm(5.0, dump=1)
    files.disarm()
    assert target.read_text() == "kept"
    for path in (heartbeat_path(str(directory), 0), stacks_path(str(directory), 0)):
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert Path(stacks_path(str(directory), 0)).read_text().startswith(STACKS_HEADER)


def test_a_flight_dump_goes_to_a_directory_of_this_users_alone_never_through_a_link(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    monitor_dir = tmp_path / "monitor"
    private_dir(monitor_dir)
    planted_link(monitor_dir / "flight", theirs)
    path = str(monitor_dir / flight.FILE.format(stall=1, rank=0))
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        flight.write(path, {"entries": []})
    assert list(theirs.iterdir()) == []
    (monitor_dir / "flight").unlink()
    flight.write(path, {"entries": []})
    assert mode(monitor_dir / "flight") == 0o700 and mode(Path(path)) == 0o600


def test_a_file_is_read_without_following_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("theirs")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        open_read(tmp_path / "link")
    fd = new_file(tmp_path / "mine")
    os.close(fd)
    os.close(open_read(tmp_path / "mine"))


def test_the_monitor_refuses_another_users_directory_in_one_line_and_runs_nothing(tmp_path, capfd):
    directory = tmp_path / "node-0-monitor"
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    ran = tmp_path / "ran"
    code = monitor.main(["--dir", str(directory), "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"])
    assert code == monitor.REFUSED_EXIT
    assert not ran.exists()
    out, err = capfd.readouterr()
    assert err.strip() == f"rollcall monitor: Permission denied: {directory} is owned by uid {NOBODY}, " + (
        "not by this process's user (uid 0): another user could plant files there; remove it (or have its "
        "owner remove it), or choose a directory of this user's (uid 0) that no one else may write, then run "
        "again"
    )
    (line,) = out.splitlines()
    event = json.loads(line.removeprefix("ROLLCALL "))
    assert event["event"] == "error" and event["rank"] == -1
    assert event["message"].startswith(f"UnsafePathError: Permission denied: {directory} is owned by uid")
    assert (
        error_blame(event["message"]).owner is Owner.CLUSTER
    )  # the host's shared directory, not the workload


def test_a_rank_refuses_a_compile_cache_another_user_may_write_in_one_line_without_a_traceback(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    env = {**os.environ, "PYTHONPATH": SRC, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "rollcall_workload", "--device", "cpu", "--compile-cache", str(cache)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"rollcall: rank 0: Permission denied: {cache} may be written by others (mode 0777)" in proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("ROLLCALL ")]
    event = json.loads(line.removeprefix("ROLLCALL "))
    assert event["event"] == "error" and "chmod go-w" in event["message"]
    assert list(cache.iterdir()) == []
