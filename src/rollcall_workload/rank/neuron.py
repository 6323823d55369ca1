"""The Neuron devices' hardware error counters, from neuron-monitor: ``facts``' ``neuron_hw_counters``.

neuron-monitor (the ``aws-neuron-tools`` package) streams one JSON report per period to stdout; its
``system_data.neuron_hw_counters`` metric group holds, for every Neuron device of the instance, the ECC events
it counted in the device's DRAM (``mem_ecc_corrected``, ``mem_ecc_uncorrected``) and SRAM
(``sram_ecc_corrected``, ``sram_ecc_uncorrected``). The format is AWS's: the Neuron Monitor User Guide,
aws-neuron/aws-neuron-sdk ``tools/neuron-sys-tools/neuron-monitor-user-guide.rst`` ("neuron_hw_counters").

:func:`hw_counters` runs neuron-monitor once, with only that metric group, takes its first report and ends it;
:func:`parse_hw_counters` reads a report. One rank per node reads them (local rank 0): the counters are the
whole instance's.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Where the Neuron tools install, searched after ``PATH``.
NEURON_BIN = "/opt/aws/neuron/bin"
#: neuron-monitor's configuration: nothing but the hardware counters, every second.
MONITOR_CONFIG: dict[str, Any] = {"period": "1s", "system_metrics": [{"type": "neuron_hw_counters"}]}
#: The longest wait for neuron-monitor's first report, seconds.
MONITOR_TIMEOUT_S = 20.0


def find_monitor(env: Mapping[str, str], bin_dir: str = NEURON_BIN) -> str | None:
    """neuron-monitor's path: on ``PATH``, else in the Neuron tools' directory; None where there is none."""
    return shutil.which("neuron-monitor", path=env.get("PATH")) or shutil.which(
        "neuron-monitor", path=bin_dir
    )


def parse_hw_counters(report: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Each Neuron device's counters (by its index, as text) in one neuron-monitor report.

    Raises:
        LookupError: naming what is missing when the report holds no counters, or the error neuron-monitor
            said it met collecting them.
    """
    group = (report.get("system_data") or {}).get("neuron_hw_counters")
    if not isinstance(group, Mapping):
        raise LookupError("neuron-monitor's report holds no neuron_hw_counters")
    if group.get("error"):
        raise LookupError(f"neuron-monitor: {group['error']}")
    found: dict[str, dict[str, int]] = {}
    for device in group.get("neuron_devices") or []:
        index = device.get("neuron_device_index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        found[str(index)] = {
            k: v for k, v in device.items() if k != "neuron_device_index" and isinstance(v, int) and v >= 0
        }
    if not found:
        raise LookupError("neuron-monitor's neuron_hw_counters lists no Neuron device")
    return found


def first_report(command: Sequence[str], timeout_s: float = MONITOR_TIMEOUT_S) -> dict[str, Any]:
    """The first JSON line ``command`` (neuron-monitor, streaming) writes, within ``timeout_s``; then it ends.

    Raises:
        TimeoutError: when no line came in time; ``LookupError`` when it ended without one.
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                if not sel.select(left):
                    continue
                line = proc.stdout.readline()
                if not line:
                    raise LookupError(f"{command[0]} ended (status {proc.wait()}) without a report")
                if line.lstrip().startswith("{"):
                    report = json.loads(line)
                    if isinstance(report, dict):
                        return report
        raise TimeoutError(f"{command[0]} wrote no report within {timeout_s:g} s")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()


def hw_counters(
    env: Mapping[str, str] | None = None, timeout_s: float = MONITOR_TIMEOUT_S, bin_dir: str = NEURON_BIN
) -> dict[str, dict[str, int]]:
    """Every Neuron device's hardware error counters, from one run of neuron-monitor.

    Raises:
        LookupError: where no neuron-monitor is installed (naming where it looked), or its report holds none.
    """
    env = os.environ if env is None else env
    found = find_monitor(env, bin_dir)
    if found is None:
        raise LookupError(f"no neuron-monitor on PATH or in {bin_dir}")
    with tempfile.TemporaryDirectory(prefix="rollcall-neuron-monitor-") as tmp:
        config = Path(tmp) / "monitor.conf"
        config.write_text(json.dumps(MONITOR_CONFIG))
        return parse_hw_counters(first_report([found, "-c", str(config)], timeout_s))


__all__ = [
    "MONITOR_CONFIG",
    "NEURON_BIN",
    "find_monitor",
    "first_report",
    "hw_counters",
    "parse_hw_counters",
]
