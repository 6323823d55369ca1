"""A disk that fills while the reports are written: each report is whole or absent, and the session says so.

The disk is real: a tmpfs of 1 MiB mounted on the artifacts directory in a mount namespace of the pytest
session's own (``unshare``: a user namespace maps this user to root there, so no privilege is needed
outside it). The session runs a scripted backend's job (tests/unit/scripted.py), which passes; a conftest
hook that runs just before the reports are written fills that disk, leaving 8 KiB in whole pages free, after
writing a ``results.json`` of an earlier session there, which must not stand as this session's.

Where the kernel or a sandbox refuses an unprivileged user namespace (Docker's default seccomp profile,
Ubuntu 24.04's AppArmor, a sysctl), the test fails first, naming what refused it and how to allow it
(:func:`why_no_namespace`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rollcall.collect import write_whole
from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
#: The size of a page of memory, tmpfs's block: a file takes whole pages of the disk.
PAGE = os.sysconf("SC_PAGE_SIZE")
#: Bytes left free on the full disk: 8 KiB in whole pages (two of 4 KiB, one of 16 or 64 KiB), room for the
#: junit file of four ranks, never for the page as well.
LEFT_FREE = -(-8192 // PAGE) * PAGE

FILL_BEFORE_THE_REPORTS = f"""
import errno, os, pathlib

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    artifacts = pathlib.Path(__file__).parent / "artifacts"
    (artifacts / "results.json").write_text('{{"tests": [], "from": "an earlier session"}}')
    filler = os.open(artifacts / "filler", os.O_WRONLY | os.O_CREAT)
    written = 0
    try:
        while True:
            written += os.write(filler, b"x" * {PAGE})
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    os.ftruncate(filler, max(0, written - {LEFT_FREE}))
    os.close(filler)
"""

#: The reports every session writes.
REPORTS = ("results.json", "ranks.junit.xml", "report.html")

PASSING = """
def test_passes(rollcall):
    rollcall()
"""


#: The kernel settings that can refuse an unprivileged user namespace: each file under /proc/sys, the value
#: that refuses it, and how to allow it.
USERNS_SETTINGS: tuple[tuple[str, str, str], ...] = (
    (
        "kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "AppArmor restricts unprivileged user namespaces (Ubuntu 24.04's default): allow them with "
        "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
    ),
    (
        "kernel/unprivileged_userns_clone",
        "0",
        "the kernel refuses unprivileged user namespaces: allow them with "
        "sysctl -w kernel.unprivileged_userns_clone=1",
    ),
    (
        "user/max_user_namespaces",
        "0",
        "no user namespace may be made: allow them with sysctl -w user.max_user_namespaces=15000",
    ),
)


def why_no_namespace(said: str, proc: Path = Path("/proc")) -> str:
    """Why ``unshare --user --map-root-user --mount`` failed (it ``said`` so), and how to allow it.

    Names each setting of ``proc`` (:data:`USERNS_SETTINGS`) that refuses it, and a seccomp filter on this
    process (Docker's default profile refuses ``unshare(CLONE_NEWUSER)``).
    """
    found = []
    for name, refuses, fix in USERNS_SETTINGS:
        try:
            value = (proc / "sys" / name).read_text().strip()
        except OSError:
            continue
        if value == refuses:
            found.append(f"{name.replace('/', '.')}={value}: {fix}")
    try:
        status = (proc / "self" / "status").read_text()
    except OSError:
        status = ""
    if any(line.split() == ["Seccomp:", "2"] for line in status.splitlines()):
        found.append(
            "a seccomp filter is on this process (Seccomp: 2), as Docker's default profile, which refuses "
            "unshare(CLONE_NEWUSER): run the container with --security-opt seccomp=unconfined, or a profile "
            "that allows unshare and mount"
        )
    why = "; ".join(found) or (
        "no setting of /proc/sys/kernel or /proc/sys/user and no seccomp filter explains it: check the "
        "container's or the sandbox's policy on unshare(CLONE_NEWUSER) and mount"
    )
    return (
        "this test's disk needs an unprivileged user namespace with a mount namespace and a tmpfs mounted in "
        f"it (unshare --user --map-root-user --mount, then mount -t tmpfs), which this machine refused "
        f"({said.strip() or 'no message'}): {why}"
    )


def namespace_refused(unshare: str, where: Path) -> str | None:
    """Why no tmpfs can be mounted on ``where`` in a user and mount namespace of ours; None if one can."""
    probe = subprocess.run(
        [
            unshare,
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            'mount -t tmpfs -o size=1m probe "$0"',
            where,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if probe.returncode == 0 else why_no_namespace(probe.stderr)


def test_a_full_disk_leaves_each_report_whole_or_absent_names_each_missing_one_and_fails_the_session(
    pytester,
):
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) is needed for this test's disk: install util-linux"
    refused = namespace_refused(unshare, pytester.path)
    if refused is not None:
        pytest.fail(refused, pytrace=False)
    pytester.makeconftest(SCRIPTED_CONFTEST + FILL_BEFORE_THE_REPORTS)
    pytester.makepyfile(test_roll=PASSING)
    artifacts, kept = pytester.path / "artifacts", pytester.path / "kept"
    artifacts.mkdir()
    kept.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("PYTEST_CURRENT_TEST", None)
    env = {k: v for k, v in env.items() if not k.startswith(("ROLLCALL_", "PYTEST_ADDOPTS"))}
    pytest_cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--artifacts-dir", str(artifacts)]
    # The session on the small disk; then, still inside the namespace, what that disk holds is copied out.
    script = (
        'mount -t tmpfs -o size=1m rollcall-full-disk "$0" || exit 99; '
        'kept=$1; shift; "$@"; rc=$?; cp -a "$0"/. "$kept"/; exit $rc'
    )
    namespace = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script]
    done = subprocess.run(
        [*namespace, str(artifacts), str(kept), *pytest_cmd],
        cwd=pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = done.stdout + done.stderr
    assert "1 passed" in text, text  # the roll call passed ...
    assert done.returncode == 1, text  # ... and the session fails: its reports are incomplete
    assert "rollcall: the reports above are incomplete" in text, text

    left = {p.name for p in kept.iterdir()}
    assert not [n for n in left if n.endswith(".tmp")], left  # no temporary file left behind
    missing = {n for n in REPORTS if f"rollcall: report not written: {artifacts / n}: No space left" in text}
    assert "report.html" in missing, text  # the largest never fits in two pages
    assert "ranks.junit.xml" not in missing, text  # the smallest always does
    for name in REPORTS:  # each report whole or absent, and named when absent
        assert (name in missing) == (name not in left), (name, left, text)
    if "report.html" in missing:
        assert f"html report: {artifacts / 'report.html'}" not in text, text  # no link to a missing page
    if "results.json" in left:  # this session's, whole: never the earlier session's
        assert json.loads((kept / "results.json").read_text())["tests"][0]["verdict"] == "passed"
    suite = ET.parse(kept / "ranks.junit.xml").getroot().find("testsuite")  # whole: well-formed, or it raises
    assert suite is not None and len(list(suite.iter("testcase"))) == 4


def test_a_report_written_whole_replaces_the_earlier_one_and_leaves_nothing_else(tmp_path):
    report = tmp_path / "results.json"
    report.write_text("an earlier session's")
    write_whole(report, '{"tests": []}\n')
    assert report.read_text() == '{"tests": []}\n' and sorted(tmp_path.iterdir()) == [report]


def _proc(root: Path, settings: dict[str, str], seccomp: str = "0") -> Path:
    for name, value in settings.items():
        (root / "sys" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "sys" / name).write_text(f"{value}\n")
    (root / "self").mkdir(parents=True)
    (root / "self" / "status").write_text(f"Name:\tpython\nSeccomp:\t{seccomp}\nSeccomp_filters:\t1\n")
    return root


def test_a_refused_namespace_is_named_with_what_refused_it_and_how_to_allow_it(tmp_path):
    said = "unshare: unshare failed: Operation not permitted\n"
    apparmor = why_no_namespace(
        said,
        _proc(
            tmp_path / "a",
            {"kernel/apparmor_restrict_unprivileged_userns": "1", "user/max_user_namespaces": "9"},
        ),
    )
    assert (
        "(unshare: unshare failed: Operation not permitted): kernel.apparmor_restrict_unprivileged_userns=1"
        in apparmor
    )
    assert apparmor.endswith("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
    docker = why_no_namespace(
        said, _proc(tmp_path / "d", {"kernel/apparmor_restrict_unprivileged_userns": "0"}, "2")
    )
    assert (
        "seccomp filter" in docker
        and "--security-opt seccomp=unconfined" in docker
        and "apparmor" not in docker
    )
    sysctls = why_no_namespace(
        said,
        _proc(tmp_path / "s", {"kernel/unprivileged_userns_clone": "0", "user/max_user_namespaces": "0"}),
    )
    assert "kernel.unprivileged_userns_clone=0" in sysctls and "user.max_user_namespaces=0" in sysctls
    unknown = why_no_namespace("", _proc(tmp_path / "u", {}))
    assert "(no message)" in unknown and "no setting of /proc/sys/kernel or /proc/sys/user" in unknown
