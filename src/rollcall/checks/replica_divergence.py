"""Where a silent data corruption is detected: every replica holds the same parameters after each epoch."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.evidence.proofs import find_divergence
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A rank's parameters differ from the other replicas' (a silent data corruption), named first.
REPLICA_DIVERGENCE = Kind(
    "replica_divergence",
    RankState.WRONG,
    Blame(Owner.CLUSTER, "a replica computed wrong (silent data corruption)"),
)


def replica_divergence(run: RunView) -> Iterable[Problem]:
    """Every rank's parameters must equal the other replicas' after each epoch and at completion.

    A replica that diverged is a silent data corruption: its problem is the first one listed.
    """
    found = find_divergence(run.reports, run.node)
    if not found:
        return
    named = "; ".join(f"rank {d.rank} (node {d.node}) {d.when}" for d in found)
    ref = found[0]
    if ref.tied:
        digests = ", ".join(sorted({d.digest for d in found}))
        message = (
            f"replica divergence (silent data corruption): {named}: the replicas disagree and no digest is "
            f"held by more ranks than another (param_digest {digests}): which replica is wrong cannot be told"
        )
    else:
        message = (
            f"replica divergence (silent data corruption): {named}: parameters unlike the replicas' "
            f"(param_digest {ref.digest} where {ref.agreeing} rank(s) hold {ref.reference})"
        )
    yield Problem(REPLICA_DIVERGENCE, message, {d.rank: d.note() for d in found}, detail=tuple(found))


CHECK = Check(
    replica_divergence,
    detects="a replica whose parameters differ (silent data corruption)",
    reads="`evidence/proofs.py`",
    kinds=(REPLICA_DIVERGENCE,),
)


__all__ = ["CHECK", "REPLICA_DIVERGENCE", "replica_divergence"]
