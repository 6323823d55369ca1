"""``nodes.json``: one verdict per node, for whoever schedules the next job, on every backend.

Each node a run checked, or was given and never reached, gets a :class:`NodeVerdict`: where it is (instance
type, zone, cloud instance, capacity reservation, where the node says them), each GPU with a verdict of its
own, what ran on it, when it was checked and until when the result holds (``--verdict-ttl``). The records
are declared as the rank-log contract's are, each field with its description, and ``docs/nodes.md`` is
generated from them (``python -m rollcall.nodeverdicts --markdown``; a unit test holds it).

A node's verdict (:data:`NodeState`) follows one predicate, the one the run's own ``unfit_nodes`` follows
(:meth:`Verdict.out_of_service <rollcall.verdict.Verdict.out_of_service>`):

- ``unfit``: a fault of the node's own (the cluster's) under the rules the user set: a fitness rule that is on
  and fails on a device of it (``--fitness-warn`` and ``--fitness-off`` govern it as they govern the run); a
  GPU event whose immediate action in NVIDIA's catalog takes the node out (a node reboot, ``RESTART_BM``, or a
  GPU lost: whoever used the GPU, the run that did not passing with a warning) or takes out a GPU a rank of
  the run used (a GPU reset, ``RESET_GPU``, the double-bit ECC and NVLink workflows); or a fact of the node's
  own that ``--expect`` does not match (its driver, kernel, GPUs, instance type: docs/fitness.md lists whose
  each key is). Only an unfit node is marked (tainted, drained, listed in ``unfit-nodes.txt``).
- ``undetermined``: the run failed and a problem names a rank of it, or a fact the run brought (its image,
  torch...) is not as ``--expect`` says, or the breaker tripped: not cleared, not blamed, the owner said.
- ``fit``: every rank of it answered without a problem, and nothing of it is unfit. A GPU-scoped event on a
  GPU no rank of the run used makes that GPU ``unfit`` on its line, and leaves the node fit. An event that
  takes nothing out (an Xid NVIDIA ignores or answers by restarting the application: 92, 94) stays on the
  GPU's line as a fact. ``whole`` says whether the run checked every GPU of the node: a fit verdict of part
  of a node lifts no taint and resumes no drain ("not re-checked whole").
- ``unchecked``: the run was given the node and no rank of it reported its facts (a pod never started there).

A node several tests checked in one session takes the worst of their verdicts (unfit, undetermined, fit,
unchecked), every reason, and the latest time; the marks are decided once, at the session's end, from those.

**The breaker**: when the session finds more nodes unfit than ``--max-unfit`` (auto: 10% of the nodes checked,
rounded up, at least 1), the cause looks shared, not each node's own: every one of them is ``undetermined``
instead, keeping its reasons, the file's ``breaker`` names the reason most of them share, and no node is
marked. The run still fails.

Times are epoch seconds (``checked_at``, ``valid_until``, ``written_at``), as ``results.json``'s, and as the
integer labels a scheduler compares.

How each mark is made and undone: :mod:`rollcall.backends.marks` (docs/nodes.md's last section).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args, get_origin

from rollcall.backends import marks as marks_guide
from rollcall.collect import write_whole
from rollcall.evidence.drift import Mismatch
from rollcall.evidence.fitness import EVENT_RULES, count_of
from rollcall_workload.contract.schema import (
    Event,
    FieldSpec,
    fields_of,
    json_ready,
    optional,
    required,
    type_name,
)

if TYPE_CHECKING:
    from rollcall.evidence.fitness import Unfit
    from rollcall.evidence.gpu_events import GpuEventSeen
    from rollcall.evidence.nodefacts import NodeFacts
    from rollcall.reports import TestRecord
    from rollcall.verdict import Verdict

#: The file, beside ``results.json``.
NODES_FILE = "nodes.json"
#: Its schema's version: a reader refuses another. 2: ``schema_version``, epoch times, ``whole``, ``events``,
#: ``breaker`` and ``marks``.
SCHEMA = 2
NodeState = Literal["fit", "unfit", "undetermined", "unchecked"]
GpuState = Literal["fit", "unfit", "unchecked"]
#: The worst first: a node checked by several tests takes the first of its verdicts in this order.
SEVERITY: tuple[NodeState, ...] = ("unfit", "undetermined", "fit", "unchecked")
#: The node facts (:data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`) that say where a node is.
WHERE_KEYS = ("instance_type", "zone", "instance_id", "capacity_reservation")
#: ``--max-unfit auto``: this share of the nodes checked, rounded up, at least 1.
BREAKER_SHARE = 0.10


@dataclass(frozen=True, kw_only=True)
class GpuVerdict:
    """One GPU of a node: what names it, whose rank used it, and its own verdict."""

    index: int | None = required("NVML's index of the GPU on its node")
    uuid: str | None = optional("its UUID (`GPU-...`)")
    serial: str | None = optional("its board's serial number")
    model: str | None = optional("its model, as NVML names it")
    rank: int | None = optional("the rank that used it; null for a GPU no rank of the run used")
    verdict: GpuState = required(
        "`unfit`: a finding takes it out of service (a fitness rule on, an event whose NVIDIA action resets "
        "it or reboots its node), used or not; `fit`: its rank read it and nothing takes it out; "
        "`unchecked`: no rank used it and nothing takes it out"
    )
    reasons: tuple[str, ...] = optional("why it is unfit, a line each", ())
    events: tuple[str, ...] = optional(
        "what else it said or broke that takes nothing out (an Xid NVIDIA ignores, a rule that warns): facts",
        (),
    )
    action: str | None = optional("NVIDIA's recommended action for its event, where one applies")


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What ran on a node: a test's deciding attempt."""

    test: str = required("the test's id")
    backend: str = required("the backend it ran on (`kubernetes`, `slurm`, `local`)")
    ranks: tuple[int, ...] = optional("the ranks of the world placed on the node", ())
    passed: bool = required("whether the test passed")


@dataclass(frozen=True, kw_only=True)
class NodeVerdict:
    """One node: where it is, its verdict and why, its GPUs, what ran on it, and how long the result holds."""

    name: str = required("the node's name (the Kubernetes node, the Slurm node's host, the local node)")
    verdict: NodeState = required("`fit`, `unfit`, `undetermined` or `unchecked` (docs/nodes.md says each)")
    reasons: tuple[str, ...] = optional("why, a line each (none for a fit node checked whole)", ())
    owner: str | None = optional(
        "whose the verdict's cause is where it is not fit: `cluster`, `platform`, `workload`, `undetermined`"
    )
    action: str | None = optional("NVIDIA's recommended action for an unfit GPU's event, where one applies")
    whole: bool = optional(
        "the run checked every GPU of the node (true for a node of no GPU): only then does a fit verdict "
        "lift rollcall's taint or resume its drain",
        True,
    )
    instance_type: str | None = optional("its instance type, where the node says it")
    zone: str | None = optional("its zone (`topology.kubernetes.io/zone`), where the node says it")
    instance_id: str | None = optional("its cloud instance's ID (from `spec.providerID`), where known")
    capacity_reservation: str | None = optional("the capacity reservation it runs in, where its labels say")
    gpus: tuple[GpuVerdict, ...] = optional("each GPU the run used or heard of, with its own verdict", ())
    ran: tuple[Ran, ...] = optional("what ran on it: each test's deciding attempt", ())
    checked_at: float | None = optional("when it was checked (the verdict's time, epoch seconds)")
    valid_until: float | None = optional("until when the result holds: `checked_at` + `--verdict-ttl`")


@dataclass(frozen=True, kw_only=True)
class Breaker:
    """The breaker: more nodes unfit in a session than `--max-unfit` mark none (the cause looks shared)."""

    bound: int = required("the most nodes one session may mark unfit (`--max-unfit`, or auto's figure)")
    unfit: tuple[str, ...] = optional("the nodes the predicate found unfit, by name", ())
    tripped: bool = required("more nodes than `bound` were unfit: none is marked, each is `undetermined`")
    common: str | None = optional("the reason most of them share (a rule, a fact), where it tripped")

    def as_dict(self) -> dict[str, Any]:
        """``results.json``'s ``breaker`` (as ``nodes.json``'s)."""
        return cast(dict[str, Any], _plain(self))

    def line(self) -> str:
        """The terminal's line of a tripped breaker."""
        return (
            f"breaker: {len(self.unfit)} nodes found unfit ({', '.join(self.unfit)}), more than --max-unfit "
            f"{self.bound}: the cause looks shared ({self.common}); no node marked (nodes.json)"
        )


@dataclass(frozen=True, kw_only=True)
class NodesFile:
    """``nodes.json``: every node of the session's runs."""

    schema_version: int = required("the schema's version (2)")
    written_at: float = required("when the file was written (epoch seconds)")
    verdict_ttl_s: float = required("`--verdict-ttl` in seconds")
    breaker: Breaker | None = optional("the breaker over the session's unfit nodes")
    marks: dict[str, Any] | None = optional(
        "what the session's marks did (`--label-nodes`, `--taint-unfit`, `--drain-unfit`), as the backend "
        "says it"
    )
    nodes: tuple[NodeVerdict, ...] = optional("each node, by name", ())


_RECORDS: tuple[type, ...] = (NodesFile, NodeVerdict, GpuVerdict, Ran, Breaker)


def _gpus(facts: NodeFacts, unfit: Sequence[Unfit], events: Sequence[GpuEventSeen]) -> tuple[GpuVerdict, ...]:
    """The node's GPUs: its ranks' own, then any other an event named; each with its verdict.

    ``unfit``: the node's findings, failing and warning (:attr:`Unfit.out` says what each takes out).
    """
    named: dict[Any, dict[str, Any]] = {}
    for d in facts.devices:
        if d.index is None and "gpu_uuid" not in d.facts:
            continue  # a rank without a GPU (cpu, or NVML unread)
        f = d.facts
        named.setdefault(d.index, {"uuid": f.get("gpu_uuid"), "serial": f.get("gpu_serial")})
        named[d.index].update(model=f.get("gpu_name"), rank=d.rank if d.on_rank else None)
    for ev in events:
        h = ev.heard
        named.setdefault(h.gpu, {"uuid": h.uuid, "serial": h.serial, "rank": None})
    out = []
    for index, about in named.items():
        on = [u for u in unfit if not u.device.whole_node and u.device.index == index]
        reasons = [str(u) for u in on if u.out is not None]
        mine = [ev for ev in events if ev.heard.gpu == index]
        said = [str(u) for u in on if u.out is None and u.rule not in _EVENT_RULES]
        said += [str(ev) for ev in mine if ev.klass != "info" and (ev.takes_out is None or not reasons)]
        state: GpuState = "unfit" if reasons else ("fit" if about.get("rank") is not None else "unchecked")
        taking = [ev for ev in mine if ev.takes_out is not None] if reasons else []
        action = next((ev.advice for ev in taking if ev.advice), None)
        events_said = tuple(dict.fromkeys(line for line in said if line not in reasons))
        out.append(
            GpuVerdict(
                index=index, verdict=state, reasons=tuple(reasons), events=events_said, action=action, **about
            )
        )
    return tuple(sorted(out, key=lambda g: (g.index is None, g.index)))


def _whole(facts: NodeFacts, gpus: Sequence[GpuVerdict]) -> tuple[bool, str]:
    """Whether the run checked every GPU of the node, and if not, why (``2 of 8 GPUs checked``)."""
    used = sum(1 for g in gpus if g.rank is not None)
    count = count_of(facts.facts.get("gpus"), max)  # ranks that disagree: the most, for none unchecked
    if count is None:
        return (True, "") if not used else (False, f"{used} GPU(s) checked, the node's count unread")
    return (True, "") if used >= count else (False, f"{used} of {count} GPUs checked")


def of_verdict(
    verdict: Verdict,
    *,
    test: str,
    backend: str,
    passed: bool,
    checked_at: float,
    ttl_s: float,
    given: Iterable[str] = (),
) -> list[NodeVerdict]:
    """Each node of one deciding attempt's ``verdict``; ``given``: nodes the run was given (by name).

    Each node whose ranks reported facts has its verdict (:func:`_checked`); a node the findings take out
    whose ranks said no facts is unfit (:func:`_unheard`); a node given whose ranks never reported is
    ``unchecked``.
    """
    ran = Ran(test=test, backend=backend, passed=passed)
    until = checked_at + ttl_s
    out = _checked(verdict, ran, checked_at, until) + _unheard(verdict, ran, checked_at, until)
    reached = {n.name for n in out}
    return out + [
        NodeVerdict(
            name=name,
            verdict="unchecked",
            reasons=("no rank of the run reported its facts from it",),
            whole=False,
            ran=(ran,),
            checked_at=checked_at,
        )
        for name in dict.fromkeys(given)
        if name not in reached
    ]


def _checked(verdict: Verdict, ran: Ran, checked_at: float, until: float) -> list[NodeVerdict]:
    """The verdict of each node whose ranks reported facts: its GPUs', where it is, what ran on it."""
    out_of_service = verdict.out_of_service()
    names = [f.name for f in verdict.nodes_detail]
    out: list[NodeVerdict] = []
    for facts in verdict.nodes_detail:
        # nodes of one host (the local backend's simulated nodes) are told apart by their index
        name = facts.name if names.count(facts.name) == 1 else f"{facts.name} node {facts.node}"
        mine = [u for u in verdict.unfit if u.device.node == facts.node]
        events = [ev for ev in verdict.gpu_events if ev.node == facts.node]
        gpus = _gpus(facts, mine, events)
        ranks = tuple(r for r, res in sorted(verdict.ranks.items()) if res.node == facts.node)
        whole, partly = _whole(facts, gpus)
        state, owner, reasons = _state(
            verdict, facts.node, ranks, out_of_service.get(facts.node, ()), ran.passed
        )
        if state == "fit" and not whole:
            reasons = [f"not re-checked whole: {partly}"]
        where = {k: str(facts.facts[k]) for k in WHERE_KEYS if facts.facts.get(k)}
        out.append(
            NodeVerdict(
                name=name,
                verdict=state,
                reasons=tuple(reasons),
                owner=owner,
                action=next((g.action for g in gpus if g.verdict == "unfit" and g.action), None),
                whole=whole,
                gpus=gpus,
                ran=(replace(ran, ranks=ranks),),
                checked_at=checked_at,
                valid_until=until,
                **where,
            )
        )
    return out


def _state(
    verdict: Verdict, node: int, ranks: tuple[int, ...], out: Iterable[str], passed: bool
) -> tuple[NodeState, str | None, list[str]]:
    """A checked node's state, whose its cause is, and why: ``out``, what takes it out of service, first.

    A node is undetermined where a drift finding names it (the platform's), one of its ranks had a problem
    (its first blamed problem's owner, else the run's first failure's), or the run failed and it had no rank.
    """
    if reasons := list(out):
        return "unfit", "cluster", reasons
    troubled = [(r, verdict.ranks[r]) for r in ranks if verdict.ranks[r].problems]
    theirs = [
        p.detail
        for p in verdict.findings
        if isinstance(p.detail, Mismatch) and p.detail.node == node and p.detail.out is None
    ]
    if not (theirs or troubled or (not passed and not ranks)):
        return "fit", None, []
    reasons = [str(m) for m in theirs]
    reasons += [f"rank {r}: {'; '.join(res.notes)}" for r, res in troubled[:3]]
    first = next((p for _, res in troubled for p in res.problems if p.blame is not None), None)
    owner = "platform" if theirs else None
    if owner is None and first is not None and first.blame is not None:
        owner = first.blame.owner.value
    if owner is None and verdict.first_failure is not None:
        owner = verdict.first_failure.owner
    return "undetermined", owner, reasons


def _unheard(verdict: Verdict, ran: Ran, checked_at: float, until: float) -> list[NodeVerdict]:
    """Each node the findings take out whose ranks said no facts: unfit, by its name."""
    known = {f.node for f in verdict.nodes_detail}
    unknown: dict[str, list[str]] = {}
    for u in verdict.unfit:
        if u.out == "node" and u.device.node not in known:
            unknown.setdefault(u.device.name, []).append(str(u))
    return [
        NodeVerdict(
            name=named,
            verdict="unfit",
            reasons=tuple(why),
            owner="cluster",
            whole=False,
            ran=(ran,),
            checked_at=checked_at,
            valid_until=until,
        )
        for named, why in sorted(unknown.items())
    ]


def merged(verdicts: Iterable[NodeVerdict]) -> list[NodeVerdict]:
    """One verdict per node name: the worst state, every reason and run, the latest check; by name.

    A fit node is whole where any of its checks was (one of them covered every GPU).
    """
    by_name: dict[str, NodeVerdict] = {}
    for v in verdicts:
        old = by_name.get(v.name)
        if old is None:
            by_name[v.name] = v
            continue
        worst = min(old, v, key=lambda n: SEVERITY.index(n.verdict))
        later = max(old, v, key=lambda n: n.checked_at or 0.0)
        whole = worst.whole or (worst.verdict == old.verdict == v.verdict and (old.whole or v.whole))
        reasons = (*worst.reasons, *old.reasons, *v.reasons)
        if whole and worst.verdict == "fit":
            reasons = tuple(r for r in reasons if not r.startswith("not re-checked whole"))
        by_name[v.name] = replace(
            worst,
            reasons=tuple(dict.fromkeys(reasons)),
            ran=(*old.ran, *v.ran),
            whole=whole,
            checked_at=later.checked_at,
            valid_until=later.valid_until,
            gpus=worst.gpus or later.gpus,
        )
    return [by_name[name] for name in sorted(by_name)]


def bound_of(max_unfit: int | None, checked: int) -> int:
    """The breaker's bound: ``--max-unfit``, or :data:`BREAKER_SHARE` of ``checked`` nodes (at least 1)."""
    return max_unfit if max_unfit is not None else max(1, math.ceil(BREAKER_SHARE * checked))


def _causes(node: NodeVerdict) -> set[str]:
    """What a node's reasons name, shared between nodes: ``rule pcie_gen``, ``--expect driver``."""
    found = set()
    for reason in node.reasons:
        found |= {f"rule {m}" for m in re.findall(r"\(rule (\w+)\)", reason)}
        found |= {f"--expect {m}" for m in re.findall(r"expected (\w+)=", reason)}
    return found or {"; ".join(node.reasons)[:200]}


def with_breaker(nodes: Sequence[NodeVerdict], max_unfit: int | None) -> tuple[list[NodeVerdict], Breaker]:
    """The session's nodes with the breaker over them (:class:`Breaker`), and the breaker.

    Tripped, each unfit node is ``undetermined`` instead (owner undetermined), its reasons kept after the
    breaker's own line, so that no mark follows; the common reason is the cause most of them share.
    """
    unfit = [n for n in nodes if n.verdict == "unfit"]
    checked = sum(1 for n in nodes if n.verdict != "unchecked")
    bound = bound_of(max_unfit, checked)
    names = tuple(n.name for n in unfit)
    if len(unfit) <= bound:
        return list(nodes), Breaker(bound=bound, unfit=names, tripped=False)
    counts = Counter(c for n in unfit for c in _causes(n))
    cause, held = max(sorted(counts.items()), key=lambda kv: kv[1])
    common = f"{cause}, on {held} of the {len(unfit)}"
    line = (
        f"breaker: {len(unfit)} of {checked} nodes found unfit, more than --max-unfit {bound}: the cause "
        f"looks shared, not each node's own ({common}); no node is marked"
    )
    tripped = [
        replace(n, verdict="undetermined", owner="undetermined", reasons=(line, *n.reasons))
        if n.verdict == "unfit"
        else n
        for n in nodes
    ]
    return tripped, Breaker(bound=bound, unfit=names, tripped=True, common=common)


def of_records(
    records: Sequence[TestRecord], ttl_s: float, max_unfit: int | None = None
) -> tuple[list[NodeVerdict], Breaker]:
    """Every node of the session's tests, merged by node name, and the breaker over them.

    Each test's deciding attempt is judged; the breaker counts the session's unfit nodes.
    """
    found: list[NodeVerdict] = []
    for record in records:
        last = record.result.last
        when = last.judged_at or time.time()
        given = record.extra.get("nodes_given", ())
        found += of_verdict(
            last.verdict,
            test=record.test_id,
            backend=record.result.backend,
            passed=record.result.passed,
            checked_at=when,
            ttl_s=ttl_s,
            given=(*last.status.node_info, *given),
        )
    return with_breaker(merged(found), max_unfit)


def document(
    nodes: Sequence[NodeVerdict],
    ttl_s: float,
    written_at: float,
    breaker: Breaker | None = None,
    marks: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``nodes.json``'s object."""
    doc = NodesFile(
        schema_version=SCHEMA,
        written_at=written_at,
        verdict_ttl_s=ttl_s,
        breaker=breaker,
        marks=marks,
        nodes=tuple(nodes),
    )
    return cast(dict[str, Any], json_ready(_plain(doc)))


def write_nodes(
    path: Path,
    nodes: Sequence[NodeVerdict],
    ttl_s: float,
    breaker: Breaker | None = None,
    marks: dict[str, Any] | None = None,
) -> None:
    """Write ``nodes.json`` of the session's ``nodes`` to ``path``, whole."""
    doc = document(nodes, ttl_s, time.time(), breaker, marks)
    write_whole(path, json.dumps(doc, indent=2) + "\n")


def read_nodes(path: Path) -> tuple[list[NodeVerdict], float]:
    """The nodes of a ``nodes.json`` and its ``verdict_ttl_s``; ValueError for another schema."""
    doc = json.loads(path.read_text())
    if doc.get("schema_version") != SCHEMA:
        raise ValueError(f"{path}: schema_version {doc.get('schema_version')!r}, not {SCHEMA}")
    return [_load(NodeVerdict, n) for n in doc.get("nodes", [])], float(doc["verdict_ttl_s"])


def _load(record: type[_R], data: dict[str, Any]) -> _R:
    """A record of ``data`` (its fields, nested records of :data:`_NESTED`, lists as tuples)."""
    kwargs: dict[str, Any] = {}
    for spec in _specs(record):
        if spec.name not in data:
            continue
        value = data[spec.name]
        inner = _NESTED.get((record, spec.name))
        if inner is not None:
            value = tuple(_load(inner, v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[spec.name] = value
    return record(**kwargs)


_R = TypeVar("_R")
_NESTED: dict[tuple[type, str], type] = {(NodeVerdict, "gpus"): GpuVerdict, (NodeVerdict, "ran"): Ran}
_EVENT_RULES = frozenset(name for name, _ in EVENT_RULES)


def merge_worker_files(
    directory: Path, since: float, max_unfit: int | None = None
) -> tuple[list[NodeVerdict], Breaker, float] | None:
    """The session's nodes of the ``nodes.<worker>.json`` files xdist workers wrote since ``since``.

    Merged by name, the breaker over the whole session (each worker's saw part of it), with the files'
    ``verdict_ttl_s``: for the controller to mark and write ``nodes.json``; None where no worker wrote one.
    """
    parts = sorted(p for p in directory.glob("nodes.gw*.json") if p.stat().st_mtime >= since)
    if not parts:
        return None
    found: list[NodeVerdict] = []
    ttl = 0.0
    for part in parts:
        nodes, ttl = read_nodes(part)
        found += nodes
    # each worker's breaker had made its unfit nodes undetermined: judge the session's whole again
    nodes, breaker = with_breaker(merged(_unbroken(n) for n in found), max_unfit)
    return nodes, breaker, ttl


def write_unfit_nodes(path: Path, nodes: Sequence[NodeVerdict]) -> bool:
    """Write the session's unfit nodes (the breaker's over them) to ``path``, one a line, when there are any.

    For a script to cordon: the same nodes every mark takes. Returns whether the file was written.
    """
    names = [n.name for n in nodes if n.verdict == "unfit"]
    if not names:
        return False
    write_whole(path, "".join(f"{n}\n" for n in names))
    return True


def _unbroken(node: NodeVerdict) -> NodeVerdict:
    """A node as it was before a worker's breaker made it undetermined (its reasons after the breaker's)."""
    if node.verdict == "undetermined" and node.reasons and node.reasons[0].startswith("breaker: "):
        return replace(node, verdict="unfit", owner="cluster", reasons=node.reasons[1:])
    return node


def _plain(value: Any) -> Any:
    """A record as plain data, field by field (nested records, tuples)."""
    if type(value) in _RECORDS:
        return {s.name: _plain(getattr(value, s.name)) for s in _specs(type(value))}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _specs(record: type) -> tuple[FieldSpec, ...]:
    return fields_of(cast(type[Event], record))


def _type(hint: Any) -> str:
    """A field's type as docs/nodes.md names it: JSON's words, a record by its name."""
    if isinstance(hint, type) and hint in _RECORDS:
        return f"`{hint.__name__}`"
    args = get_args(hint)
    if args and args[-1] is Ellipsis and args[0] in _RECORDS:
        return f"array of `{args[0].__name__}`"
    if get_origin(hint) is dict:
        return "object"
    if args and type(None) in args:  # optional: a record or an object, or null
        return " \\| ".join([*(_type(a) for a in args if a is not type(None)), "null"])
    return type_name(hint)


def markdown() -> str:
    """``docs/nodes.md``: the file's reference, from the records' declarations."""
    intro = (__doc__ or "").strip().split("\n\n", 1)[1]
    intro = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", intro).replace("``", "`")
    made = "Generated from `src/rollcall/nodeverdicts.py` by `python -m rollcall.nodeverdicts --markdown`."
    out = ["# nodes.json", "", made, "", intro, ""]
    for record in _RECORDS:
        doc = (record.__doc__ or "").strip().splitlines()[0]
        out += [f"## `{record.__name__}`", "", doc, "", "| field | type | required | description |"]
        out.append("| --- | --- | --- | --- |")
        for f in _specs(record):
            out.append(f"| `{f.name}` | {_type(f.hint)} | {'yes' if f.required else 'no'} | {f.doc} |")
        out.append("")
    guide = (marks_guide.__doc__ or "").strip().split("\n\n", 1)[1]  # how each mark is made and undone
    return "\n".join([*out, re.sub(r":\w+:`~?([^`]+)`", r"`\1`", guide).replace("``", "`"), ""])


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m rollcall.nodeverdicts --markdown > docs/nodes.md")
    sys.stdout.write(markdown())
