"""Where a silent data corruption is detected: every replica holds the same parameters after each epoch."""

from __future__ import annotations

from collections.abc import Iterable

from rollcall.checks.runview import RunView
from rollcall.evidence.proofs import find_divergence
from rollcall.verdict import Kind, Problem


def replica_divergence(run: RunView) -> Iterable[Problem]:
    """Every rank's parameters must equal the other replicas' after each epoch and at completion.

    A replica that diverged is a silent data corruption: its problem is the first one listed.
    """
    found = find_divergence(run.reports, run.node)
    if not found:
        return
    named = "; ".join(f"rank {d.rank} (node {d.node}) {d.when}" for d in found)
    ref = found[0]
    yield Problem(
        Kind.REPLICA_DIVERGENCE,
        f"replica divergence (silent data corruption): {named}: parameters unlike the replicas' "
        f"(param_digest {ref.digest} where {ref.agreeing} rank(s) hold {ref.reference})",
        {d.rank: d.note() for d in found},
        detail=tuple(found),
    )


__all__ = ["replica_divergence"]
