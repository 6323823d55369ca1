"""``python -m rollcall.checks --markdown > docs/checks.md``: the checks and kinds, from their declarations.

Each check module declares itself once (its ``CHECK``, :class:`~rollcall.checks.runview.Check`); the judge
keeps their order (:data:`rollcall.judge.ORDER`). This program writes the docs' table of checks and of the
kinds of problem they declare from those declarations, and from :data:`OTHER_KINDS`, the kinds no check
raises; ``tests/unit/checks/test_layout_of_checks.py`` fails when ``docs/checks.md`` drifts from them.
"""

from __future__ import annotations

import sys

from rollcall.isolation.probe import ISOLATED
from rollcall.judge import CHECKS, SITE_CHECK_ERROR, Check
from rollcall.verdict import Kind

#: What regenerates ``docs/checks.md``.
REGENERATE = "python -m rollcall.checks --markdown > docs/checks.md"

#: The kinds of problem no check raises, each with what raises it.
OTHER_KINDS: tuple[tuple[Kind, str], ...] = (
    (ISOLATED, "`--isolate` (`isolation/probe.py`)"),
    (SITE_CHECK_ERROR, "a site check that broke its contract (`judge.py`, [extending.md](extending.md))"),
)

#: What the table says of a kind whose owner is placed problem by problem.
PER_PROBLEM = "placed problem by problem (`checks/blame.py`)"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _whose(kind: Kind) -> str:
    return kind.owner.line if kind.owner is not None else PER_PROBLEM


def _stops(check: Check) -> str:
    """The cell of a check's early stop: when, and the kinds it is judged as beyond the check's own."""
    if check.stops is None:
        by = [c.name for c in CHECKS if c is not check and set(check.kinds) & set(c.stop_kinds)]
        return f"through {', '.join(f'`{n}`' for n in by)}'s early stop" if by else ""
    also = [k for k in check.stop_kinds if k not in check.kinds]
    named = f" (judged as {', '.join(f'`{k.value}`' for k in also)} too)" if also else ""
    return f"{check.stops.when}{named}"


def _retried(check: Check) -> str:
    if not check.retried:
        return "no: the same job would fail the same way"
    return "only beside another failure" if check.gate_only else "yes"


def _trials(check: Check) -> str:
    if not check.in_trials:
        return ""
    return f"as `{check.for_trials().name}`" if check.in_trials_as is not None else "yes"


def markdown() -> str:
    """``docs/checks.md``: the checks in the judge's order, then every kind of problem and who declares it."""
    lines = [
        "# Checks",
        "",
        "<!-- Generated from each check's declaration (CHECK in src/rollcall/checks/<check>.py) and the "
        f"judge's ORDER; do not edit. Regenerate: {REGENERATE} (make checks-docs) -->",
        "",
        "Every check of the verdict, in the order their problems are listed (`rollcall.judge.ORDER`). "
        "A check is one module of `src/rollcall/checks/`, named after what it detects, that declares it "
        "once (`CHECK`: its predicate, what it detects, what it reads, the kinds of problem it declares), "
        "with its tests in `tests/unit/checks/test_<check>.py` "
        "(`tests/unit/checks/test_layout_of_checks.py` holds every check to that). What a check reads "
        "beyond the ranks' events lies in `src/rollcall/evidence/`. `rollcall check-logs` holds saved logs "
        "to the checks that need only logs.",
        "",
        _row("check", "what it detects", "kinds it declares", "what it reads", "logs only"),
        _row(*["---"] * 5),
        *(
            _row(
                f"`{c.name}`",
                c.detects,
                ", ".join(f"`{k.value}`" for k in c.kinds),
                c.reads,
                "yes" if c.logs_only else "",
            )
            for c in CHECKS
        ),
        "",
        "## How each check acts on a run",
        "",
        "Beyond its problems, each check declares how it acts on a run, and the runner, the isolation probe "
        "and the release gate read those declarations: whether it ends the run before its job does, and when "
        "(the runner asks each such check about every second over the live run, in the order above, and the "
        "judge reads the roll call as it stood then: the check, or the kinds it says, names the problem); "
        "whether a run it failed is run again under `--job-retries`; whether only the release gate finds its "
        "problems (a run failed by such checks alone is not run again: a retry would hide them); whether it "
        "judges the short bandwidth-only trials of `--isolate`, and in what form.",
        "",
        _row("check", "ends the run early", "retried", "gate only", "in trials"),
        _row(*["---"] * 5),
        *(
            _row(
                f"`{c.name}`",
                _stops(c),
                _retried(c),
                "yes" if c.gate_only else "",
                _trials(c),
            )
            for c in CHECKS
        ),
        "",
        "## Kinds of problem",
        "",
        "Each problem is of one kind, declared once: by the check that raises it, or, for a kind no check "
        "raises, by what does. A kind says the state of a rank it names (a rank is in the worst state of its "
        "problems; `report.html` colours it so), whose its problems are, and whether the ranks it names "
        "answered, only too slowly.",
        "",
        _row("kind", "declared by", "a rank it names is", "whose", "too slow"),
        _row(*["---"] * 5),
        *(
            _row(f"`{k.value}`", by, k.rank_state.value, _whose(k), "yes" if k.too_slow else "")
            for k, by in [*((k, f"`{c.name}`") for c in CHECKS for k in c.kinds), *OTHER_KINDS]
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print ``docs/checks.md``; 2 on any other command line."""
    if argv != ["--markdown"]:
        print(f"usage: {REGENERATE}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


__all__ = ["OTHER_KINDS", "REGENERATE", "main", "markdown"]

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
