"""The workload's own checks of its input, run on the client before anything is created.

``--workload-args`` is parsed by train.py's own parser (``parse_args``, which checks every value), and the
fault-injection variables of ``--workload-env`` by train.py's own parsing functions
(``check_fault_injection``), so a command line or a variable the ranks would refuse is refused before a
job starts, with the workload's own message. train.py imports torch lazily: it is loaded here by path,
without torch. In an installed suite without the checkout the script is absent: then nothing is checked
here (a debug log says so) and the ranks refuse bad input themselves, with an ``error`` event.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import logging
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType

from rollcall.jobspec import REPO_SCRIPT

log = logging.getLogger(__name__)

#: The name train.py is loaded under (dataclasses look their module up in ``sys.modules``).
MODULE_NAME = "rollcall_workload_train"


@functools.cache
def train_module() -> ModuleType | None:
    """The checkout's train.py as a module (without torch), or None when this installation has none."""
    if not REPO_SCRIPT.is_file():
        log.debug(
            "%s not found (a suite installed without its checkout): --workload-args and --workload-env "
            "are not checked before launch",
            REPO_SCRIPT,
        )
        return None
    spec = importlib.util.spec_from_file_location(MODULE_NAME, REPO_SCRIPT)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise ImportError(f"cannot load {REPO_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[MODULE_NAME]
        raise
    return module


def check_args(args: Sequence[str]) -> None:
    """Raise ValueError with train.py's own message when its parser refuses ``args``."""
    train = train_module()
    if train is None:
        return
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # what --help would print
            train.parse_args(list(args))
    except train.CommandLineError as exc:
        raise ValueError(f"train.py refuses it: {exc}") from None
    except SystemExit:  # --help or --version: the parser printed and would end the process
        raise ValueError("train.py prints its help and exits instead of training") from None


def check_env(env: Mapping[str, str]) -> None:
    """Raise ValueError with train.py's own message when a fault-injection variable in ``env`` is bad."""
    train = train_module()
    if train is not None:
        train.check_fault_injection(env)
