"""The workload in the image against the suite: the same rank-log contract, a version no older than its own.

A user's own ``--image`` may hold a workload built from an older checkout than the suite that judges it: its
events may lack what the suite reads, or mean something else, and its defaults and kernels are not the ones
the suite was tested with. Each rank's ``start`` says its ``workload_version`` and ``contract_version``
(:data:`rollcall_workload.contract.WORKLOAD_VERSION`, :data:`~rollcall_workload.contract.CONTRACT_VERSION`);
a workload from before they existed says neither (contract 1). A rank of another contract, or of an older
workload, is refused as soon as its ``start`` arrives (:func:`stop_reason`: the job ends then), naming both
versions; the judge names it first. It is the platform's fault (the image), never the cluster's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from rollcall.ranges import ranges
from rollcall.ranklog import RankReport
from rollcall_workload.contract import CONTRACT_VERSION, WORKLOAD_VERSION

#: What a ``start`` without ``contract_version`` speaks: the contract from before versions were stated.
UNSTATED_CONTRACT = 1


@dataclass(frozen=True)
class VersionMismatch:
    """Ranks whose workload the suite refuses, with what they said and what the suite expects."""

    ranks: tuple[int, ...]
    workload: str | None
    contract: int

    @property
    def message(self) -> str:
        """The line a person reads: both versions, and the fix."""
        theirs = (
            f"workload {self.workload} (rank-log contract {self.contract})"
            if self.workload
            else f"a workload from before versions were stated (rank-log contract {self.contract})"
        )
        which = "newer" if self.contract > CONTRACT_VERSION else "older"
        return (
            f"rank(s) {ranges(self.ranks)} run {theirs}, this suite reads workload {WORKLOAD_VERSION} "
            f"(contract {CONTRACT_VERSION}): the image is {which} than the suite; rebuild it from this "
            "suite's checkout (images/bert-training) or run the suite of the image's version"
        )


@functools.lru_cache(maxsize=64)
def _release(text: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of ``0.2.0`` (``0.2`` is ``0.2.0``); None when not a dotted number."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    major, minor, patch = (*map(int, parts), 0, 0)[:3]
    return major, minor, patch


def refused(start: Mapping[str, object]) -> tuple[str | None, int] | None:
    """``(workload_version, contract_version)`` of a ``start`` the suite refuses, or None when it accepts it.

    Refused: another contract, or a workload version older than the suite's (or not a dotted number).
    """
    contract = start.get("contract_version", UNSTATED_CONTRACT)
    workload = start.get("workload_version")
    contract = contract if isinstance(contract, int) and not isinstance(contract, bool) else UNSTATED_CONTRACT
    return _refused(workload if isinstance(workload, str) else None, contract)


@functools.lru_cache(maxsize=64)
def _refused(workload: str | None, contract: int) -> tuple[str | None, int] | None:
    """:func:`refused` of one pair of versions, worked out once (every rank of a run says the same)."""
    theirs = _release(workload) if workload is not None else None
    ours = _release(WORKLOAD_VERSION)
    if contract == CONTRACT_VERSION and theirs is not None and ours is not None and theirs >= ours:
        return None
    return workload, contract


def version_mismatch(reports: Mapping[int, RankReport]) -> VersionMismatch | None:
    """The ranks whose ``start`` the suite refuses (grouped under the lowest one's versions), or None."""
    found = {
        r: v for r, rep in sorted(reports.items()) if rep.start is not None and (v := refused(rep.start))
    }
    if not found:
        return None
    workload, contract = next(iter(found.values()))
    return VersionMismatch(tuple(found), workload, contract)


def stop_reason(reports: Mapping[int, RankReport]) -> str | None:
    """Why to end the job now: a rank runs a workload the suite refuses (it would only fail later)."""
    mismatch = version_mismatch(reports)
    return f"{mismatch.message}: ended at its start" if mismatch else None
