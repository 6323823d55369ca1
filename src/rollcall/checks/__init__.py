"""The verdict's checks: each a named predicate over the run (:class:`~rollcall.checks.runview.RunView`).

One module per check, named after it, holds the predicate ``name(run) -> Iterable[Problem]`` and declares the
check once (``CHECK``, a :class:`~rollcall.checks.runview.Check`: what it detects, what it reads, the kinds of
problem it declares, each with the state of a rank it names and its owner, and how it acts on a run: its early
stop, whether its failure is retried, whether only the release gate finds it, whether it judges a trial of
``--isolate``). :data:`rollcall.judge.ORDER` places the checks in the order their problems are shown;
``docs/checks.md`` is generated from their declarations (``python -m rollcall.checks --markdown``), and each
has its own tests under ``tests/unit/checks/``. What several checks share is derived once in :mod:`.runview`,
and what they read beyond the events lies in :mod:`rollcall.evidence`. :mod:`.blame` is not a check: it
places the problems whose kind has no one owner.

Outside this package and the judge, no module imports a single check's module: the runner, the isolation
probe and the release gate read the checks' declarations (:data:`rollcall.judge.CHECKS`), and the few kinds
of problem (and the one detail) that a report or the gate reads by name are exported here.
"""

from rollcall.checks.hangs import WAITING
from rollcall.checks.interrupted import INTERRUPTED
from rollcall.checks.regressions import REGRESSION
from rollcall.checks.slow_links import SLOW_LINK
from rollcall.checks.stragglers import STRAGGLER, Straggler

__all__ = ["INTERRUPTED", "REGRESSION", "SLOW_LINK", "STRAGGLER", "WAITING", "Straggler"]
