"""The verdict's checks: each a named predicate over the run (:class:`~rollcall.checks.runview.RunView`).

One module per check, named after it, holds the predicate ``name(run) -> Iterable[Problem]`` and nothing
another check needs; what several checks share is derived once in :mod:`.runview`, and what they read beyond
the events lies in :mod:`rollcall.evidence`. :data:`rollcall.judge.CHECKS` lists them in the order their
problems are shown; ``docs/architecture.md`` says which module detects what, and each has its own tests under
``tests/unit/checks/``. :mod:`.blame` is not a check: its table says whose each problem is.
"""
