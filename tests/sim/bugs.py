"""Known bugs the simulated fleets must catch, put back into the suite's code for a while.

Each is a change of one predicate's own source (:data:`BUGS`): :func:`bug` compiles the changed function (a
module's, or a method of one of its classes: ``Class.method``) in its module's namespace, swaps its code into
the real one, so that every reference to it runs the bug, and puts the real code back after.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any

#: Each known bug: the module, the function, and the text of its source it changes.
BUGS: dict[str, tuple[str, str, str, str]] = {
    "one-bound": (
        "rollcall.evidence.launchers",
        "never_started",
        'latest = max(h for n in range(nodes) if (h := heard(roll, ("node", n))) is not None)',
        "latest = first",
    ),
    "first-dump": (
        "rollcall.evidence.hangs",
        "never_joined",
        "if first is None or moment < due:",
        "if False:",
    ),
    "any-for-all": (
        "rollcall.checks.gpu_events",
        "gpu_events",
        'warn = all(u.severity == "warn"',
        'warn = any(u.severity == "warn"',
    ),
    # every event of the hardware class takes its node out, whatever NVIDIA's action (as before issue 62)
    "hardware-class": (
        "rollcall.checks.gpu_events",
        "gpu_events",
        "rule, scope = seen.rule, seen.takes_out",
        'rule, scope = seen.rule or ("hardware_event" if seen.klass == "hardware" else None), '
        '"node" if seen.klass == "hardware" or seen.takes_out else None',
    ),
    # a GPU reset on a GPU no rank used marks its node
    "unused-marks": (
        "rollcall.checks.gpu_events",
        "gpu_events",
        "used=seen.rank is not None",
        "used=True",
    ),
    # a throttle reason counted when it flickered once, not held over the samples; the link's least, not most
    "flicker-held": (
        "rollcall.evidence.nodefacts",
        "sampled_facts",
        "if s >= HELD_SHARE]",
        "if s > 0]",
    ),
    # no breaker: a cause every node shares marks every node
    "no-breaker": (
        "rollcall.nodeverdicts",
        "with_breaker",
        "if len(unfit) <= bound:",
        "if True:",
    ),
    # the flight recorder writes once per process: a stall after a recovery writes no record of its own (as
    # before issue 63), so a rank that recovered and stalled again is taken for one whose Python could not run
    "once-per-process": (
        "rollcall_workload.rank.flight",
        "FlightRecorder.record",
        "if dump <= self.ended or self.written > self.ended:",
        "if dump <= self.ended or self.written:",
    ),
    # a state counts on one look, whatever its bound: a node's Ready that flickered ends the run
    "one-look-ready": (
        "rollcall.backends.held",
        "has_held",
        "return holding.looks > 1 and holding.held_s >= holding.bound_s",
        "return holding.looks >= 1",
    ),
    # the Slurm wing sees no node on its way: a node still importing its image is held to the start skew,
    # and one whose task never begins is never named by the wing
    "slurm-arrival": (
        "rollcall.backends.slurm.arrivals",
        "Arrivals.on_the_way",
        "return [n for n in range(self.nodes) if n not in self.began]",
        "return []",
    ),
}


@contextlib.contextmanager
def bug(name: str | None) -> Iterator[None]:
    """The suite with the known bug ``name`` put back into one function (none: as it is).

    The function's code is swapped in place, so every reference to it (a check's declaration, a name imported
    elsewhere) runs the bug; its own code is back after.
    """
    if name is None:
        yield
        return
    module_name, function, old, new = BUGS[name]
    module = importlib.import_module(module_name)
    real: Any = module
    for part in function.split("."):  # a function of the module, or a method of one of its classes
        real = getattr(real, part)
    source = textwrap.dedent(inspect.getsource(real))
    if old not in source:
        raise SystemExit(f"bug {name}: {module_name}.{function} no longer holds {old!r}: update BUGS")
    namespace = dict(vars(module))
    exec(compile(source.replace(old, new), inspect.getsourcefile(real) or name, "exec"), namespace)
    code = real.__code__
    real.__code__ = namespace[function.rsplit(".", 1)[-1]].__code__
    try:
        yield
    finally:
        real.__code__ = code


__all__ = ["BUGS", "bug"]
