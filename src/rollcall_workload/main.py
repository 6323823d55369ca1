"""The process: read torchrun's environment and the command line, run the rank, end with its exit code."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    pass

from rollcall_workload.contract import RollcallLog
from rollcall_workload.faults import EXIT_RANK_ENV, exit_rank
from rollcall_workload.rank.cli import CommandLineError, parse_args
from rollcall_workload.rank.compile_cache import compile_cache_env, keep_bytecode
from rollcall_workload.rank.dist import DistEnv, read_dist_env
from rollcall_workload.rank.run import run
from rollcall_workload.safefs import UnsafePathError, private_dir


def main(argv: list[str] | None = None) -> int:
    """Run one rank; returns the exit code, or ends the process with 1 after an ``error`` event."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub, even by accident
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        env = read_dist_env(os.environ)
    except ValueError as exc:
        env = DistEnv(rank=-1, local_rank=-1, world_size=-1, node_rank=-1, local_world_size=1, launched=False)
        RollcallLog(env.rank, env.world_size).emit("error", message=f"bad torchrun environment: {exc}")
        return 1
    log = RollcallLog(env.rank, env.world_size)
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help
        return 0 if exc.code in (0, None) else 2
    except CommandLineError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        log.emit("error", message=f"invalid command line: {exc}")
        return 2
    try:
        if args.compile_cache:  # before torch is imported, so that inductor and Triton see it
            private_dir(args.compile_cache)  # kept between runs: this user's alone, or refused (safefs)
            os.environ.update(compile_cache_env(args.compile_cache))
            keep_bytecode(args.compile_cache)
        ending = exit_rank(os.environ)
        from torch.distributed.elastic.multiprocessing.errors import record

        record(run)(args, env, log)  # an exception is also written to TORCHELASTIC_ERROR_FILE
    except SystemExit as exc:  # a non-zero sys.exit before complete (record lets only those through)
        left(log, exit_status(exc.code))
        raise
    except UnsafePathError as exc:  # a directory another user could plant: one line says why, no traceback
        print(f"rollcall: rank {env.rank}: {exc}", file=sys.stderr, flush=True)
        log.emit("error", message=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        os._exit(1)
    except (Exception, KeyboardInterrupt) as exc:
        traceback.print_exc()
        log.emit("error", message=f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip process-group teardown and atexit hooks, which can hang after a failure
    if "complete" not in log.said:  # run returned early: a sys.exit(0) inside it, which record swallows
        left(log, 0)
        return 0
    if ending is not None and ending.rank == env.rank:
        print(f"rollcall: rank {env.rank} ends badly as asked by {EXIT_RANK_ENV}", flush=True)
        if ending.signal is not None:
            os.kill(os.getpid(), signal.Signals[ending.signal])
        return ending.code
    return 0


def left(log: RollcallLog, code: int) -> None:
    """Say ``exit``: the rank ends with ``code`` before ``complete``, without an error, in its phase now."""
    if "complete" not in log.said and "error" not in log.said:
        log.emit("exit", code=code, phase=log.phase)


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` ends a process with: None is 0, a number itself, anything else 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) and not isinstance(code, bool) else 1


def end_process(code: int) -> NoReturn:
    """End this process with ``code`` once its output is out, skipping the interpreter's teardown.

    Called after :func:`main` returned: the process group is gone and every event written. Python's
    teardown frees every module's objects and, on cuda, the compiled graphs, the allocator's memory and
    the CUDA context; on one CPU rank it took 0.9 s after the last line (bench/NOTES.md), time the launcher
    and the suite would wait for. Inductor's compile workers are shut down first (they would see their
    parent gone within a second and leave anyway).
    """
    with contextlib.suppress(Exception):
        if "torch._inductor.async_compile" in sys.modules:
            sys.modules["torch._inductor.async_compile"].shutdown_compile_workers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
