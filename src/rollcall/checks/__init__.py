"""The verdict's checks: each a named predicate over the run (:class:`~rollcall.checks.runview.RunView`).

One module per check, named after it, holds the predicate ``name(run) -> Iterable[Problem]`` and declares the
check once (``CHECK``, a :class:`~rollcall.checks.runview.Check`: what it detects, what it reads, the kinds of
problem it declares, each with the state of a rank it names and its owner). :data:`rollcall.judge.ORDER`
places the checks in the order their problems are shown; ``docs/checks.md`` is generated from their
declarations (``python -m rollcall.checks --markdown``), and each has its own tests under
``tests/unit/checks/``. What several checks share is derived once in :mod:`.runview`, and what they read
beyond the events lies in :mod:`rollcall.evidence`. :mod:`.blame` is not a check: it places the problems
whose kind has no one owner.
"""
