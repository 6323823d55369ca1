"""Where a rank that never joined the process group is detected: the others waited for it to join.

Every rank's watchdog dumps its stacks once it has spent its join bound (``--join-hang-after``) without
joining; the ranks waiting in ``init_process_group`` wait for the ones stalled or silent before it, which are
named here (:func:`rollcall.evidence.hangs.never_joined`), ahead of the hang and the silence they also are.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.hangs import never_joined as find_never_joined
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: Never joined the process group while the others waited for it in init_process_group past their bound.
NEVER_JOINED = Kind(
    "never_joined", RankState.MISSING, Blame(Owner.UNDETERMINED, "a rank never joined the process group")
)


def never_joined(run: RunView) -> Iterable[Problem]:
    """Every rank must join the process group: the ones that never did, and who waited how long for them."""
    found = find_never_joined(run.roll, run.layout.world_size, run.bounds)
    if found is None:
        return
    yield Problem(
        NEVER_JOINED,
        found.line(run.node),
        {r: "never joined the process group" for r in found.missing},
        detail=found,
    )


CHECK = Check(
    never_joined,
    detects="a rank that never joined the process group while the others waited in `init_process_group`",
    reads="`evidence/hangs.py` (`never_joined`: the dumps and silences before the join)",
    kinds=(NEVER_JOINED,),
)


__all__ = ["CHECK", "NEVER_JOINED", "never_joined"]
