"""The recovery options: retries, isolating a bad node, tainting unfit ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rollcall.jobspec import Taint
from rollcall.options.declare import DURATION, GroupName, Section, option
from rollcall.options.kubernetes import taint
from rollcall.options.values import positive_duration, switch, whole


@dataclass(frozen=True, kw_only=True)
class RecoveryOptions(Section):
    """What the session does after a failed run: run it again, search for the bad node, taint unfit nodes."""

    GROUP: ClassVar[GroupName] = "recovery"

    retries: int = option(
        "--job-retries",
        whole(0),
        0,
        "re-run a failed job this many times (a pass after a retry is flaky; after infrastructure "
        "disruptions only, it is passed after a disruption)",
        "N",
        doc=(
            "re-run a failed job; a pass after a retry is reported as flaky, a pass after infrastructure "
            "disruptions only as passed after a disruption; `--retries` until 0.2, renamed for "
            "pytest-retry's `--retries` (which re-runs a failed test in place)"
        ),
        formerly="--retries",
    )
    isolate: bool = option(
        "--isolate",
        switch,
        False,
        "when a run fails naming no node (a hang of the world, a slow world, a rendezvous that never "
        "completes), re-run the bandwidth phase alone on halves of the nodes until the bad node is named",
        switch=True,
        doc=(
            "when the deciding attempt fails naming no node (every rank hung or waiting, a slow world, a "
            "rendezvous that never completed), re-run the bandwidth phase alone (`train.py "
            "--bandwidth-only`) on halves of the nodes, recursively, until the node(s) failing alone or "
            "in every group holding them are named: about 2 log2(N) short runs, listed in "
            "`results.json`'s `isolation`"
        ),
    )
    isolate_timeout: float = option(
        "--isolate-timeout",
        positive_duration,
        120.0,
        "the longest one --isolate run may take (the job timeout when shorter): a group of nodes still "
        "running then (a node hung before rendezvous) counts as failing",
        DURATION,
        doc=(
            "the longest one `--isolate` run may take (the job timeout when shorter): a group still "
            "running then (a node hung before rendezvous holds the others there) is ended and counts as "
            "failing, its evidence `hung: still running at its Ns bound`"
        ),
    )
    taint_unfit: Taint | None = option(
        "--taint-unfit",
        taint,
        None,
        "kubernetes: after the verdict, taint each node it names unfit with this taint (kubectl's syntax, "
        "e.g. rollcall/unfit=true:NoSchedule), keeping the node's other taints",
        "KEY=VALUE:EFFECT",
        doc=(
            "kubernetes only (exit 4 on other backends): after the verdict, taint each node it names "
            "unfit (`unfit_nodes`, `unfit-nodes.txt`) with this taint, in kubectl's syntax "
            "(`rollcall/unfit=true:NoSchedule`; `KEY:EFFECT` has no value), keeping the node's other "
            "taints; tainting again changes nothing; what it did is printed and in `results.json`'s "
            "`taint_unfit`; needs `patch nodes` (`manifests/rbac/`), asked at session start only with the"
            " option"
        ),
    )
