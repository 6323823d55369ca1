"""Where a rank that never joined the process group is detected: the others waited for it to join.

Every rank's watchdog dumps its stacks once it has spent its join bound (``--join-hang-after``) inside
``init_process_group`` without joining, or the start skew and the join bound (S + J) in its imports and
device setup before it; the ranks waiting in ``init_process_group`` wait for the ones stalled or silent before
the join, which are named here (:func:`rollcall.evidence.hangs.never_joined`), ahead of the hang and the
silence they also are.

A rank still importing and setting up its device past the start skew, while ranks of other nodes got past
theirs with the same image and code and wait for it, is its node's (the cluster's): what differs is the node,
its device (CUDA's context, the Neuron runtime), the driver under it, or the storage its imports read.
Any other rank that never joined is undetermined.
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
#: Still importing and setting up its device past the start skew while the others waited for it to join.
STUCK_IN_SETUP = Kind(
    "stuck_in_setup",
    RankState.MISSING,
    Blame(
        Owner.CLUSTER,
        "a node did not import and set up its device within the start skew and the join bound, where the "
        "others did with the same image (its device, driver or storage)",
    ),
)


def never_joined(run: RunView) -> Iterable[Problem]:
    """Every rank must join the process group: the ones that never did, and who waited how long for them."""
    found = find_never_joined(run.roll, run.layout.world_size, run.bounds)
    if found is None:
        return
    setup = [r for r in found.missing if r in found.setting_up]
    others = [r for r in found.missing if r not in found.setting_up]
    if setup:
        yield Problem(
            STUCK_IN_SETUP,
            found.line(run.node, setup),
            dict.fromkeys(setup, "still importing and setting up its device past the start skew"),
            detail=found,
        )
    if others:
        yield Problem(
            NEVER_JOINED,
            found.line(run.node, others),
            dict.fromkeys(others, "never joined the process group"),
            detail=found,
        )


CHECK = Check(
    never_joined,
    detects=(
        "a rank that never joined the process group while the others waited in `init_process_group`, or "
        "that was still importing and setting up its device past the start skew"
    ),
    reads="`evidence/hangs.py` (`never_joined`: the dumps and silences before the join)",
    kinds=(NEVER_JOINED, STUCK_IN_SETUP),
    in_trials=True,
)


__all__ = ["CHECK", "NEVER_JOINED", "STUCK_IN_SETUP", "never_joined"]
