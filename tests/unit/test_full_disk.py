"""A disk that fills while the reports are written: each report is whole or absent, and the session says so.

The disk is real: a tmpfs of 1 MiB mounted on the artifacts directory in a mount namespace of the pytest
session's own (``unshare``: a user namespace maps this user to root there, so no privilege is needed
outside it). The session runs a scripted backend's job (tests/unit/scripted.py), which passes; a conftest
hook that runs just before the reports are written fills that disk, leaving two pages free, after writing a
``results.json`` of an earlier session there, which must not stand as this session's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from rollcall.collect import write_whole
from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
#: Bytes left free on the full disk: two pages, room for the junit file of four ranks, never for the page.
LEFT_FREE = 8192

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
            written += os.write(filler, b"x" * 4096)
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


def test_a_full_disk_leaves_each_report_whole_or_absent_names_each_missing_one_and_fails_the_session(
    pytester,
):
    unshare = shutil.which("unshare")
    assert unshare is not None, "unshare (util-linux) is needed for this test's disk"
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
