"""Every marker the suite's tests use is registered, and markers are strict: a typo is an error, not a no-op."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: Every directory of tests, as make test and the e2e targets run them.
DIRS = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
#: pytest's own markers, which pytest registers itself.
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}


def used_markers() -> dict[str, list[str]]:
    """Each ``pytest.mark.NAME`` under tests/ (and the root conftest), with the files using it."""
    used: dict[str, list[str]] = {}
    for path in sorted([*TESTS.rglob("*.py"), ROOT / "conftest.py"]):
        for name in set(re.findall(r"\bpytest\.mark\.([a-z_]\w*)", path.read_text())):
            used.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return used


def registered_markers() -> set[str]:
    """The markers ``pytest --markers`` lists, with every tests directory's conftest loaded."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--markers",
            "-p",
            "no:cacheprovider",
            *(f"tests/{d}" for d in DIRS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return set(re.findall(r"^@pytest\.mark\.(\w+)", out.stdout, re.M))


def test_markers_are_strict():
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--strict-markers" in addopts.split()


def test_every_marker_used_in_the_tests_is_registered():
    assert {"unit", "e2e", "local", "k8s", "slurm", "cluster", "real", "browser"} <= set(DIRS)
    used = used_markers()
    assert {"slow", "control_plane", "rollcall", "timeout"} <= used.keys()
    registered = registered_markers()
    unregistered = {name: files for name, files in used.items() if name not in registered | BUILTIN}
    assert unregistered == {}, (
        f"markers used but registered nowhere (pyproject.toml or a conftest): {unregistered}"
    )


def test_real_nodes_is_no_marker_any_more():
    # It was registered and never read: tests/real's fixtures already need the real nodes.
    assert "real_nodes" not in used_markers()
