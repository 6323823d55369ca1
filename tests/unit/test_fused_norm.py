"""The Triton dropout+residual+LayerNorm of rollcall_workload.kernels, run on the CPU in Triton's interpreter.

The cases are in tests/unit/fused_norm_cases.py; they run in a pytest process of their own because Triton
chooses its interpreter when it is first imported (``TRITON_INTERPRET=1``). Skipped where Triton is absent
(torch's CPU wheels have none).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401
import triton  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("fused_norm_cases.py")


@pytest.mark.slow
def test_kernels_match_pytorch_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(CASES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]
