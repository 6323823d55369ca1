"""The ``slurm`` fixture: a real Slurm on this machine (``hack/slurm.sh``), up once for the package, down after
its last test.

The cluster gets a state directory and ports of its own (not the ``.slurm/`` a developer may have up), and
``SLURM_CONF`` points this process and its children at it while it is up. When Slurm's packages are missing
its tests fail under ``CI=true`` and are skipped elsewhere. Its ports are fixed (:data:`PORT`): under
pytest-xdist every test here runs on one worker (:mod:`tests.groups`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import children
from tests.ci import ci
from tests.groups import pytest_xdist_make_scheduler  # noqa: F401 (the groups, tests/groups.py)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "slurm.sh"
#: slurmctld's port for the tests' cluster (nodes listen on the next ports, srun above +100).
PORT = os.environ.get("ROLLCALL_TEST_SLURM_PORT", "26817")


@dataclass(frozen=True)
class Slurm:
    """The running test cluster."""

    state: Path
    conf: Path
    env: dict[str, str]

    def run(self, *argv: str) -> str:
        """A Slurm command's stdout against this cluster."""
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=True).stdout

    def queue(self) -> list[str]:
        """Every job squeue still lists."""
        return self.run("squeue", "-h", "-o", "%i %T %j").splitlines()


def _script(action: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return children.run([str(SCRIPT), action], env=env, timeout=180)


@pytest.fixture(scope="package")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slurm]:
    missing = [
        b
        for b in ("munged", "slurmctld", "slurmd", "sbatch")
        if not shutil.which(b, path="/usr/sbin:/usr/bin")
    ]
    if missing:
        message = f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurm-wlm munge"
        if ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    state = tmp_path_factory.mktemp("slurm", numbered=True)
    env = {
        **os.environ,
        "ROLLCALL_SLURM_STATE": str(state / "c"),
        "ROLLCALL_SLURM_PORT": PORT,
        "SLURM_NODES": "2",
    }
    conf = state / "c" / "etc" / "slurm.conf"
    saved = os.environ.get("SLURM_CONF")
    try:  # `up` inside: an interrupted or failed start is taken down too
        up = _script("up", env)
        if up.returncode != 0:
            pytest.fail(f"hack/slurm.sh up failed:\n{up.stderr}", pytrace=False)
        os.environ["SLURM_CONF"] = str(conf)
        yield Slurm(state / "c", conf, {**env, "SLURM_CONF": str(conf)})
    finally:
        started = time.monotonic()
        down = _script("down", env)
        print(f"hack/slurm.sh down: {time.monotonic() - started:.1f}s\n{down.stderr}")
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        assert down.returncode == 0, down.stderr
