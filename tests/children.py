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
import sys
from collections.abc import Iterator, Mapping, Sequence

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


#: Execs its arguments with Ctrl-C (SIGINT) and SIGQUIT at their defaults (see :func:`interruptible`).
_AT_DEFAULT = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGQUIT):\n"
    "    signal.signal(sig, signal.SIG_DFL)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


def interruptible(args: Sequence[str]) -> list[str]:
    """``args`` run with Ctrl-C (SIGINT) and SIGQUIT at their defaults, as from a terminal.

    A non-interactive shell starts what it runs in the background (``&``) with both ignored, and an ignored
    signal stays ignored across exec: a test session started so (``make test`` runs its unit session beside
    the integration one) would give a child a Ctrl-C that never arrives. The command is executed through a
    Python that sets both to their defaults first (an exec keeps them); the Python of a pytest session then
    installs its Ctrl-C handler, as it does when started from a terminal. (Not ``preexec_fn``: it is unsafe
    in a process with threads.)
    """
    return [sys.executable, "-c", _AT_DEFAULT, *args]


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """While the block runs, Ctrl-C (SIGINT) raises KeyboardInterrupt in this process's main thread, whether
    or not this session was started with it ignored (see :func:`interruptible`)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
