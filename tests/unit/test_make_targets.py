"""The README's make targets on a fresh machine: each installs the Debian packages it needs, or names them.

Each target runs in a copy of the checkout with a new HOME and empty caches, every command of hack/deps.sh's
packages off PATH, and an ``apt-get`` that records what it was asked and cannot fetch (this machine's
packages stay as they are): the target must ask for exactly its packages before it does anything else, and
fail naming them and the command that installs them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.tree import ROOT, checkout_copy

DEPS = ROOT / "hack" / "deps.sh"
GROUPS = ("browser", "nodes", "slurm")


def provides(group: str) -> dict[str, str]:
    """hack/deps.sh's table for ``group``: package -> the command (or file) that shows it is there."""
    out = subprocess.run(
        ["bash", str(DEPS), "--list", group], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split() for line in out.splitlines())


def bare_path(bin_dir: Path, hidden: set[str]) -> str:
    """A PATH of one directory: every command of this PATH but ``hidden``, and a recording apt-get."""
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(":"):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            path = Path(directory) / name
            if (
                name in hidden
                or name == "apt-get"
                or (bin_dir / name).exists()
                or not os.access(path, os.X_OK)
            ):
                continue
            (bin_dir / name).symlink_to(path)
    apt = bin_dir / "apt-get"
    apt.write_text(
        '#!/bin/sh\necho "$*" >> "$APT_LOG"\n'
        'case "$1" in update) exit 0 ;; esac\necho "E: Unable to fetch some archives (no network here)" >&2\nexit 100\n'
    )
    apt.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize(
    ("target", "groups"),
    [
        (("cluster-up", "REAL=2", "NODES=1"), ("nodes",)),
        (("e2e-real",), ("nodes",)),
        (("e2e-slurm",), ("slurm",)),
        (("test",), GROUPS),
    ],
    ids=["cluster-up REAL=2", "e2e-real", "e2e-slurm", "test"],
)
def test_a_readme_target_on_a_fresh_machine_asks_for_its_packages_first(tmp_path, target, groups):
    tables = {g: provides(g) for g in GROUPS}
    commands = {c for table in tables.values() for c in table.values() if not c.startswith("/")}
    checkout = checkout_copy(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    apt_log = tmp_path / "apt.log"
    env = {
        "PATH": bare_path(tmp_path / "bin", commands),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "APT_LOG": str(apt_log),
        "UV_OFFLINE": "1",
        "PIP_NO_INDEX": "1",
        "LANG": "C.UTF-8",
    }
    proc = subprocess.run(
        ["make", "-C", str(checkout), *target],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    wanted = sorted(
        {p for g in groups for p, c in tables[g].items() if not (c.startswith("/") and os.path.exists(c))}
    )
    assert wanted, "hack/deps.sh names no package for this target"
    for package in wanted:
        assert package in out, f"{' '.join(target)} did not name {package}:\n{out}"
    if os.geteuid() == 0:
        asked = apt_log.read_text().splitlines()
        assert asked[0].split()[0] == "update" and asked[1].split()[:3] == ["install", "-y", "-qq"], asked
        assert sorted(asked[1].split()[3:]) == wanted, asked
        assert f"apt-get install -y {' '.join(wanted)}" in out
    else:
        assert f"run as root: apt-get install -y {' '.join(wanted)}" in out
    # it failed there, before anything else: no venv, no cluster, no download into the fresh HOME
    assert not (checkout / ".venv").exists() and not (checkout / ".cluster").exists()
    assert not any(home.iterdir()), sorted(home.rglob("*"))[:10]
