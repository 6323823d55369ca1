"""The node's monitor as the unit tests start it: never with the real NVML of the machine they run on.

A unit test that starts the monitor (``python -m rollcall_workload.node.monitor``) gives it
:func:`monitor_env`: the workload's source on its path, after a ``pynvml`` of the tests' own (:data:`NO_NVML`,
NVML without a driver, unless the test brings a fake of its own), so that an NVML event of a GPU runner (an
Xid, a GPU lost) never reaches a unit test. ``tests/unit/test_no_real_nvml.py`` holds every unit test to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The suite's and the workload's source.
SRC = Path(__file__).resolve().parents[2] / "src"
#: Where the tests' ``pynvml`` lies: NVML as on a machine without a driver.
NO_NVML = Path(__file__).resolve().parent / "no_nvml"


def monitor_env(
    base: Mapping[str, str] | None = None, *, nvml: Path = NO_NVML, **extra: str
) -> dict[str, str]:
    """``base`` (this process's environment when None) and ``extra``, the monitor's path set.

    First on it ``nvml``, then the workload's source: the monitor imports the ``pynvml`` of ``nvml``, never
    the one installed.
    """
    env = dict(os.environ if base is None else base)
    return {**env, "PYTHONPATH": os.pathsep.join([str(nvml), str(SRC)]), **extra}
