"""The recovery options: retries, isolating a bad node, each node's verdict, tainting unfit ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rollcall.jobspec import NODE_DOMAIN, Taint
from rollcall.options.declare import DURATION, GroupName, Section, option
from rollcall.options.kubernetes import taint
from rollcall.options.values import (
    OptionError,
    duration_or_auto,
    positive_duration,
    switch,
    whole,
    whole_or_auto,
)


@dataclass(frozen=True, kw_only=True)
class RecoveryOptions(Section):
    """What the session does after a failed run: run it again, search for the bad node, taint unfit nodes."""

    GROUP: ClassVar[GroupName] = "recovery"

    retries: int = option(
        "--job-retries",
        whole(0),
        0,
        "re-run a failed job; a pass after a retry is reported as flaky, a pass after infrastructure "
        "disruptions only as passed after a disruption; `--retries` until 0.2, renamed for "
        "pytest-retry's `--retries` (which re-runs a failed test in place); `ROLLCALL_RETRIES` is still read",
        "N",
        formerly="--retries",
    )
    isolate: bool = option(
        "--isolate",
        switch,
        False,
        "when the deciding attempt fails naming no node (every rank hung or waiting, a slow world, a "
        "rendezvous that never completed), re-run the bandwidth phase alone (`train.py "
        "--bandwidth-only`) on halves of the nodes, recursively, until the node(s) failing alone or "
        "in every group holding them are named: about 2 log2(N) short runs, listed in "
        "`results.json`'s `isolation`",
        switch=True,
    )
    isolate_timeout: float = option(
        "--isolate-timeout",
        positive_duration,
        120.0,
        "the longest one `--isolate` run may take (the job timeout when shorter): a group still "
        "running then (a node hung before rendezvous holds the others there) is ended and counts as "
        "failing, its evidence `hung: still running at its Ns bound`",
        DURATION,
    )
    taint_unfit: Taint | None = option(
        "--taint-unfit",
        taint,
        None,
        (
            "kubernetes only (exit 4 on other backends): after the verdict, taint each node `nodes.json` "
            "names unfit with this taint of rollcall's own, in kubectl's syntax "
            "(`rollcall/unfit=true:NoSchedule`), and lift it from each node found fit. The key is in "
            "rollcall's own domain, `rollcall/` (`KEY:EFFECT` has no value); the reasons go in the "
            "annotation `rollcall/unfit-reason`, keeping the node's other taints; a node found fit loses "
            "this taint (never another); an undetermined or unchecked node is left as it is; tainting "
            "again changes nothing; what it did is printed and in `results.json`'s `node_marks`; needs "
            "`patch nodes` (`manifests/rbac/`), asked at session start only with the option. Undo: "
            "`kubectl taint nodes NODE rollcall/unfit-`"
        ),
        "KEY=VALUE:EFFECT",
    )
    verdict_ttl: float | None = option(
        "--verdict-ttl",
        duration_or_auto,
        None,
        "how long each node's verdict holds from when it was checked: `valid_until` in `nodes.json`, "
        "the expiry label of `--label-nodes`. `auto`: 24 h (a nightly cadence) plus the test's own "
        "deadline (`--capacity-timeout` + the job timeout + clean-up, per attempt), because the next "
        "night's run starts 24 h after this one and may take up to that deadline to judge the node "
        "again; 24 h alone would leave each node without a valid result for as long as that run takes. "
        "Set it to your cadence plus your longest run where you check less often",
        DURATION,
        shown="auto",
    )
    max_unfit: int | None = option(
        "--max-unfit",
        whole_or_auto(0),
        None,
        (
            "the breaker of `--label-nodes`, `--taint-unfit` and `--drain-unfit` (and `unfit-nodes.txt`): "
            "when the session would mark more nodes unfit than this, it marks none of them, says the "
            "cause looks shared, and names the reason most of them share. `nodes.json` still carries each "
            "node's reasons, its verdict `undetermined` and the `breaker`. Counted over the session, from "
            "the worst verdict of each node, once. `auto`: 10% of the nodes the session checked, rounded "
            "up, at least 1, as NVSentinel's circuit breaker holds cordons to a share of the cluster: on "
            "2 to 10 nodes a second unfit node trips it, on 200 the 21st. `0` marks no node unfit"
        ),
        "N",
        shown="auto",
    )
    label_nodes: bool = option(
        "--label-nodes",
        switch,
        False,
        (
            "kubernetes only: once per session, from the worst verdict of each node, label each node "
            "checked with `rollcall/verdict` (`fit`, `unfit`, `undetermined`), `rollcall/checked-at` and "
            "`rollcall/valid-until` (integer epoch seconds, for nodeAffinity's `Gt`; `--verdict-ttl`). An "
            "unchecked node keeps its last labels; expired verdict labels are removed from the nodes it "
            "can see; needs `patch` and `list nodes`. A scheduler or Kueue reads them (`kubectl get nodes "
            "-L rollcall/verdict`; docs/nodes.md). Undo: `kubectl label nodes --all rollcall/verdict- "
            "rollcall/checked-at- rollcall/valid-until-`"
        ),
        switch=True,
    )
    recheck_tainted: bool = option(
        "--recheck-tainted",
        switch,
        False,
        (
            "kubernetes only, with `--taint-unfit`: the run's pods tolerate rollcall's taint and are "
            "pinned to the nodes holding it, so that those found fit lose it. The first `--nodes` of them "
            "by name run (fewer than `--nodes`, or none, is a usage error before anything is created); a "
            "node found fit loses the taint, one still unfit keeps it, one the run never reached is "
            "`unchecked`"
        ),
        switch=True,
    )
    drain_unfit: bool = option(
        "--drain-unfit",
        switch,
        False,
        "slurm only: after the verdict, drain each node `nodes.json` names unfit (`scontrol update "
        'nodename=N state=drain reason="rollcall: ..."`) and resume each node found fit whose drain '
        "reason is rollcall's (never another's drain). A re-check of drained nodes runs in a maintenance "
        "reservation holding them (`--slurm-reservation`): the nodes rollcall drained there are resumed "
        "for the run (the reservation keeps other jobs off them) and drained again if still unfit. Needs "
        "Slurm's operator rights (root, SlurmUser or AdminLevel Operator), checked before the run. "
        "Undo: `scontrol update nodename=N state=resume`",
        switch=True,
    )

    def __post_init__(self) -> None:
        taint = self.taint_unfit
        if taint is not None and not taint.key.startswith(f"{NODE_DOMAIN}/"):
            raise OptionError(
                f"--taint-unfit {taint}: the key must be rollcall's own ({NODE_DOMAIN}/...), so that lifting "
                "it from a node found fit never lifts another's taint; use e.g. "
                f"{NODE_DOMAIN}/unfit=true:NoSchedule"
            )
        if self.recheck_tainted and taint is None:
            raise OptionError(
                "--recheck-tainted runs on the nodes holding rollcall's taint: name it with --taint-unfit "
                "(e.g. --taint-unfit rollcall/unfit=true:NoSchedule)"
            )
