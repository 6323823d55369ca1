"""``--isolate``: after the deciding attempt failed naming no node, bisect the nodes with short runs.

:func:`reason_to_skip` decides from the deciding verdict whether a search is needed: only when the run failed
and no problem names a node apart from the others (a hang or a wait of every rank, a world below its bandwidth
floor, a rendezvous that never completed, errors on every rank). :func:`isolate` then runs the search of
:mod:`rollcall.isolation.bisect`: each trial is the deciding job's :class:`~rollcall.jobspec.JobSpec` on fewer
nodes, naming each one's index in the world (:attr:`~rollcall.jobspec.JobSpec.node_ids`, which the workload
reads, so a fault injected by node index follows its node), with the workload's ``--bandwidth-only``:
rendezvous and the bandwidth phase, no training. Where the deciding run's ranks said which machine each node
ran on (``start``'s ``node``, the Kubernetes or Slurm node), a trial is pinned to its nodes' machines
(:attr:`~rollcall.jobspec.JobSpec.machines`); the local backend's simulated nodes have none. Each trial is
judged once, against the session's criteria, by the checks that declare they judge a run without training
(:data:`TRIAL_CHECKS`: ``in_trials``, each in the judge's order, in its trial form where it has one), and
ends early where one of their early stops says so, as any run. :func:`with_isolation` adds what the search
found to the deciding verdict as one ``ISOLATED`` problem naming the suspects' ranks, with every trial's
evidence; the trials are in ``results.json``'s ``isolation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rollcall.backends import Backend, JobState
from rollcall.checks import SLOW_LINK, WAITING
from rollcall.evidence.floors import size_label
from rollcall.isolation.bisect import Isolation, Trial, bisect
from rollcall.jobspec import JobSpec
from rollcall.judge import CHECKS, Check
from rollcall.ranges import ranges
from rollcall.runner import Attempt, run_once
from rollcall.verdict import Blame, Criteria, Kind, Owner, Problem, RankState, Verdict

#: What the workload runs in a trial: rendezvous and the bandwidth phase only.
TRIAL_ARGS = ("--bandwidth-only",)
#: The longest a trial may run unless told otherwise (``--isolate-timeout``; the job's own timeout when
#: shorter). A trial of a few nodes that only meet and all-reduce ends in seconds once they started; one
#: still running then (a node that never reached rendezvous) fails, as the group it ran.
TRIAL_TIMEOUT_S = 120.0
#: Characters of a trial's first problem kept as its evidence.
EVIDENCE_CHARS = 300
#: The node(s) ``--isolate`` found failing alone, or in every group holding them (no check raises it).
ISOLATED = Kind("isolated", RankState.SLOW, Blame(Owner.CLUSTER, "the node(s) failing alone"))


#: The checks a trial is judged by, as each declares (``in_trials``): how it started and ended, its ranks'
#: errors, its bandwidth, no training; each in its trial form (``missing_events`` asks only ``complete``).
TRIAL_CHECKS: tuple[Check, ...] = tuple(c.for_trials() for c in CHECKS if c.in_trials)


#: Problems whose ranks are victims of another's fault, never its cause: ranks waiting in a collective or at
#: rendezvous for a rank that does not come (which may be one that says nothing at all).
VICTIMS = frozenset({WAITING})


def named_nodes(verdict: Verdict) -> set[int]:
    """The nodes that some problem of ``verdict`` names apart from the others (its victims aside).

    Problems that between them name every node name none apart (ranks of some nodes never heard from by the
    job's timeout, the others' only missing their events): the search tells them apart.
    """
    every = {result.node for result in verdict.ranks.values()}
    named: set[int] = set()
    for p in verdict.findings:
        if p.kind in VICTIMS:
            continue
        if p.kind is SLOW_LINK and isinstance(p.detail, int):  # the node in every slow pair
            named.add(p.detail)
        nodes = {verdict.ranks[r].node for r in p.ranks if r in verdict.ranks}
        if nodes and nodes != every:
            named |= nodes
    return set() if named == every else named


def reason_to_skip(verdict: Verdict) -> str | None:
    """Why no search is needed for ``verdict`` (None: search)."""
    if verdict.passed:
        return "the run passed"
    if verdict.layout.nodes < 2:
        return "the run had one node"
    named = named_nodes(verdict)
    if named:
        return f"the verdict already names node(s) {ranges(named)}"
    return None


def machines_of(verdict: Verdict) -> dict[int, str]:
    """The machine each node of ``verdict`` said it ran on (its ranks' ``start`` events), where one did."""
    return dict(verdict.perf.machines)


def trial_spec(
    spec: JobSpec,
    nodes: tuple[int, ...],
    number: int,
    machines: Mapping[int, str] | None = None,
    timeout_s: float = TRIAL_TIMEOUT_S,
) -> JobSpec:
    """The job of one trial: ``spec`` on ``nodes`` (indices of its world), the bandwidth phase only.

    When ``machines`` names the machine of every one of ``nodes``, the trial is pinned to those machines.
    The trial may run ``timeout_s`` seconds (``spec``'s own timeout when shorter).
    """
    world = spec.node_ids or tuple(range(spec.nodes))
    machines = machines or {}
    pinned = tuple(machines[n] for n in nodes) if all(n in machines for n in nodes) else ()
    return replace(
        spec,
        name=f"{spec.name}-i{number}",
        nodes=len(nodes),
        node_ids=tuple(world[n] for n in nodes),
        machines=pinned,
        workload_args=(*spec.workload_args, *TRIAL_ARGS),
        job_timeout_s=min(spec.job_timeout_s, timeout_s),
    )


def evidence(attempt: Attempt) -> str:
    """What a trial showed: its first problem, else its world's bus bandwidth."""
    verdict = attempt.verdict
    if attempt.status.state is JobState.TIMED_OUT:  # its own reason names the trial's renumbered nodes
        answered = sum(1 for r in verdict.ranks.values() if "start" in r.reported)
        return (
            f"hung: still running at its {attempt.spec.job_timeout_s:g}s bound (--isolate-timeout), "
            f"{answered} of {attempt.spec.world_size} rank(s) past rendezvous; ended"
        )
    if not attempt.passed:
        first = verdict.problems[0] if verdict.problems else attempt.status.reason or "the job failed"
        return first if len(first) <= EVIDENCE_CHARS else first[: EVIDENCE_CHARS - 3] + "..."
    world = verdict.perf.scope("world")
    if world:
        return f"world bus bandwidth {world[0].busbw_gbps:.4g} GB/s at {size_label(world[0].bytes)}"
    return "every rank completed (nothing measured)"


@dataclass(frozen=True)
class IsolationReport:
    """Whether a search ran, why (not), and what it found."""

    ran: bool
    why: str
    isolation: Isolation | None = None
    #: Whether every trial was pinned to its nodes' machines (the run's ranks named them all).
    pinned: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        found = self.isolation.as_dict() if self.isolation is not None else {}
        return {"ran": self.ran, "why": self.why, "pinned": self.pinned, **found}


def isolate(
    backend: Backend,
    attempt: Attempt,
    artifacts: Path,
    *,
    criteria: Criteria | None = None,
    keep: bool = False,
    timeout_s: float = TRIAL_TIMEOUT_S,
) -> IsolationReport:
    """Search the nodes of the failed ``attempt`` for the bad one(s), when its verdict names none.

    Each trial may run ``timeout_s`` seconds (``--isolate-timeout``): one that runs longer (a node hung
    before rendezvous holds the others there) is ended and counts as its group failing.
    """
    skip = reason_to_skip(attempt.verdict)
    if skip is not None:
        return IsolationReport(False, skip)
    spec = attempt.spec
    machines = machines_of(attempt.verdict)

    def trial(nodes: tuple[int, ...], padding: tuple[int, ...]) -> Trial:
        number = len(found) + 1
        job = trial_spec(spec, nodes, number, machines, timeout_s)
        where = artifacts / f"run-{number}-nodes-{'-'.join(map(str, nodes))}"
        ran = run_once(backend, job, where, criteria=criteria, keep=keep, checks=TRIAL_CHECKS)
        result = Trial(nodes, not ran.passed, evidence(ran), padding, job.name, ran.duration_s, job.machines)
        found.append(result)
        return result

    found: list[Trial] = []
    # a trial needs two ranks to measure a bandwidth: with one rank per node, two nodes
    min_nodes = 2 if spec.procs_per_node == 1 else 1
    searched = bisect(range(spec.nodes), trial, min_nodes=min_nodes)
    why = "the run failed naming no node"
    return IsolationReport(True, why, searched, pinned=set(machines) >= set(range(spec.nodes)))


def with_isolation(verdict: Verdict, isolation: Isolation) -> Verdict:
    """``verdict`` with one ``ISOLATED`` problem naming the suspects' ranks and every trial's evidence."""
    if not isolation.suspects:
        return verdict
    named = ", ".join(
        f"node{'s' if len(s.nodes) > 1 else ''} {ranges(s.nodes)} ({s.why})" for s in isolation.suspects
    )
    runs = "; ".join(t.line() for t in isolation.trials)
    message = f"isolated in {len(isolation.trials)} bandwidth-only run(s): {named}; runs: {runs}"
    suspects = set(isolation.suspect_nodes)
    notes = {
        r: f"isolated: node {result.node} is a suspect"
        for r, result in verdict.ranks.items()
        if result.node in suspects
    }
    problem = Problem(ISOLATED, message, notes, detail=isolation)
    ranks = {
        r: replace(result, problems=(*result.problems, problem)) if r in notes else result
        for r, result in verdict.ranks.items()
    }
    return replace(verdict, findings=(*verdict.findings, problem), ranks=ranks)


__all__ = [
    "ISOLATED",
    "TRIAL_ARGS",
    "TRIAL_CHECKS",
    "TRIAL_TIMEOUT_S",
    "VICTIMS",
    "IsolationReport",
    "isolate",
    "machines_of",
    "named_nodes",
    "reason_to_skip",
    "trial_spec",
    "with_isolation",
]
