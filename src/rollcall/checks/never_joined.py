"""Where a rank that never joined the process group is detected: the others waited for it to join.

Every rank's watchdog dumps its stacks once it has spent its join bound (``--join-hang-after``) without
joining; the ranks waiting in ``init_process_group`` wait for the ones stalled or silent before it, which are
named here (:func:`rollcall.evidence.hangs.never_joined`), ahead of the hang and the silence they also are.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.hangs import never_joined as find_never_joined
from rollcall.verdict import Kind, Problem


def never_joined(run: RunView) -> Iterable[Problem]:
    """Every rank must join the process group: the ones that never did, and who waited how long for them."""
    found = find_never_joined(run.reports, run.layout.world_size)
    if found is None:
        return
    yield Problem(
        Kind.NEVER_JOINED,
        found.line(run.node),
        {r: "never joined the process group" for r in found.missing},
        detail=found,
    )


__all__ = ["never_joined"]
