"""Running the fixtures' own scripts so that an interrupt lets them clean up after themselves.

``subprocess.run`` kills its child with SIGKILL on any exception, KeyboardInterrupt included: a script killed
so never runs its EXIT trap, and leaves half of what it started behind (a cluster's processes, a bridge, a
network namespace, a Slurm daemon). :func:`run` gives an interrupted child SIGTERM and
:data:`INTERRUPTED_CHILD_S` to finish its clean-up first.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping, Sequence

#: How long an interrupted child may take to run its own clean-up (a script's EXIT trap).
INTERRUPTED_CHILD_S = 120


def run(
    args: Sequence[str], *, input: str | None = None, env: Mapping[str, str] | None = None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to its end, its output captured; on a timeout it is killed and TimeoutExpired raised."""
    proc = subprocess.Popen(
        list(args),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    except BaseException:  # interrupted: the child got the signal too, or gets SIGTERM now; it cleans up
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=INTERRUPTED_CHILD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
