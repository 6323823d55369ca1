"""``nodes.json``: one verdict per node, for whoever schedules the next job, on every backend.

Each node a run checked, or was given and never reached, gets a :class:`NodeVerdict`: where it is (instance
type, zone, cloud instance, capacity reservation, where the node says them), each GPU with a verdict of its
own, what ran on it, when it was checked and until when the result holds (``--verdict-ttl``). The records
are declared as the rank-log contract's are, each field with its description, and ``docs/nodes.md`` is
generated from them (``python -m rollcall.nodeverdicts --markdown``; a unit test holds it).

A node's verdict (:data:`NodeState`):

- ``unfit``: a device of it broke a fitness rule that fails the run (:attr:`Verdict.unfit_nodes`), or one of
  its GPUs raised a hardware-class event (an Xid of the catalog's hardware class, a double-bit ECC error, a
  GPU lost), whether a rank of the run used that GPU or not (the cluster's); or a fact it reported is not as
  the golden configuration says (``--expect``: the platform's). Only an unfit node is tainted or drained.
- ``undetermined``: the run failed and a problem names a rank of it (its own or an echo of another's): not
  cleared, not blamed.
- ``fit``: every rank of it answered without a problem, and no device of it broke a rule.
- ``unchecked``: the run was given the node and no rank of it reported its facts (a pod never started there).

A node several tests checked in one session takes the worst of their verdicts (unfit, undetermined, fit,
unchecked), every reason, and the latest time.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from rollcall.collect import write_whole
from rollcall.evidence.drift import Mismatch
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
#: Its schema's version: a reader refuses another.
SCHEMA = 1
NodeState = Literal["fit", "unfit", "undetermined", "unchecked"]
GpuState = Literal["fit", "unfit", "unchecked"]
#: The worst first: a node checked by several tests takes the first of its verdicts in this order.
SEVERITY: tuple[NodeState, ...] = ("unfit", "undetermined", "fit", "unchecked")
#: The node facts (:data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`) that say where a node is.
WHERE_KEYS = ("instance_type", "zone", "instance_id", "capacity_reservation")


@dataclass(frozen=True, kw_only=True)
class GpuVerdict:
    """One GPU of a node: what names it, whose rank used it, and its own verdict."""

    index: int | None = required("NVML's index of the GPU on its node")
    uuid: str | None = optional("its UUID (`GPU-...`)")
    serial: str | None = optional("its board's serial number")
    model: str | None = optional("its model, as NVML names it")
    rank: int | None = optional("the rank that used it; null for a GPU no rank of the run used")
    verdict: GpuState = required(
        "`unfit`: it broke a fitness rule, or raised a hardware-class event (used or not); `fit`: its rank "
        "read it and it broke none; `unchecked`: no rank used it and nothing of it was unfit"
    )
    reasons: tuple[str, ...] = optional("why, a line each", ())
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
    reasons: tuple[str, ...] = optional("why, a line each (none for a fit node)", ())
    owner: str | None = optional(
        "whose the verdict's cause is where it is not fit: `cluster`, `platform`, `workload`, `undetermined`"
    )
    action: str | None = optional("NVIDIA's recommended action for an unfit GPU's event, where one applies")
    instance_type: str | None = optional("its instance type, where the node says it")
    zone: str | None = optional("its zone (`topology.kubernetes.io/zone`), where the node says it")
    instance_id: str | None = optional("its cloud instance's ID (from `spec.providerID`), where known")
    capacity_reservation: str | None = optional("the capacity reservation it runs in, where its labels say")
    gpus: tuple[GpuVerdict, ...] = optional("each GPU the run used or heard of, with its own verdict", ())
    ran: tuple[Ran, ...] = optional("what ran on it: each test's deciding attempt", ())
    checked_at: str | None = optional("when it was checked (the verdict's time, UTC, ISO 8601)")
    valid_until: str | None = optional("until when the result holds: `checked_at` + `--verdict-ttl`")


@dataclass(frozen=True, kw_only=True)
class NodesFile:
    """``nodes.json``: every node of the session's runs."""

    schema: int = required("the schema's version (1)")
    written_at: str = required("when the file was written (UTC, ISO 8601)")
    verdict_ttl_s: float = required("`--verdict-ttl` in seconds")
    nodes: tuple[NodeVerdict, ...] = optional("each node, by name", ())


_RECORDS: tuple[type, ...] = (NodesFile, NodeVerdict, GpuVerdict, Ran)


def iso(epoch: float) -> str:
    """``2026-12-06T17:00:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _gpus(facts: NodeFacts, unfit: Sequence[Unfit], events: Sequence[GpuEventSeen]) -> tuple[GpuVerdict, ...]:
    """The node's GPUs: its ranks' own, then any other an event named; each with its verdict."""
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
        reasons = [str(u) for u in unfit if not u.device.whole_node and u.device.index == index]
        bad = [ev for ev in events if ev.heard.gpu == index and ev.klass == "hardware"]
        reasons += [] if reasons else [str(ev) for ev in bad]  # a rule's line names the event already
        state: GpuState = "unfit" if reasons else ("fit" if about.get("rank") is not None else "unchecked")
        action = next((ev.advice for ev in bad if ev.advice), None)
        out.append(GpuVerdict(index=index, verdict=state, reasons=tuple(reasons), action=action, **about))
    return tuple(sorted(out, key=lambda g: (g.index is None, g.index)))


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

    A node given whose ranks never reported is ``unchecked``.
    """
    failing = [u for u in verdict.unfit if u.severity == "fail"]
    unfit_names = set(verdict.unfit_nodes)
    at, until = iso(checked_at), iso(checked_at + ttl_s)
    out: list[NodeVerdict] = []
    names = [f.name for f in verdict.nodes_detail]
    for facts in verdict.nodes_detail:
        # nodes of one host (the local backend's simulated nodes) are told apart by their index
        name = facts.name if names.count(facts.name) == 1 else f"{facts.name} node {facts.node}"
        mine = [u for u in failing if u.device.node == facts.node]
        events = [ev for ev in verdict.gpu_events if ev.node == facts.node]
        gpus = _gpus(facts, mine, events)
        ranks = tuple(r for r, res in sorted(verdict.ranks.items()) if res.node == facts.node)
        troubled = [(r, verdict.ranks[r]) for r in ranks if verdict.ranks[r].problems]
        reasons: list[str] = [str(u) for u in mine if u.device.whole_node]
        reasons += [line for g in gpus if g.verdict == "unfit" for line in g.reasons]
        unmet = [
            p for p in verdict.findings if isinstance(p.detail, Mismatch) and p.detail.node == facts.node
        ]
        owner: str | None = None
        state: NodeState
        if facts.name in unfit_names or reasons:  # (unfit_nodes names nodes by their own name)
            state, owner = "unfit", "cluster"
        elif known := [p for p in unmet if p.detail.value is not None]:
            state, reasons = "unfit", [str(p.detail) for p in known]
            owner = known[0].blame.owner.value if known[0].blame is not None else "platform"
        elif troubled or (not passed and not ranks):
            state = "undetermined"
            reasons = [f"rank {r}: {'; '.join(res.notes)}" for r, res in troubled[:3]]
            first = next((p for _, res in troubled for p in res.problems if p.blame is not None), None)
            owner = first.blame.owner.value if first is not None and first.blame is not None else None
            if owner is None and verdict.first_failure is not None:
                owner = verdict.first_failure.owner
        else:
            state = "fit"
        where = {k: str(facts.facts[k]) for k in WHERE_KEYS if facts.facts.get(k)}
        out.append(
            NodeVerdict(
                name=name,
                verdict=state,
                reasons=tuple(reasons),
                owner=owner,
                action=next((g.action for g in gpus if g.verdict == "unfit" and g.action), None),
                gpus=gpus,
                ran=(Ran(test=test, backend=backend, ranks=ranks, passed=passed),),
                checked_at=at,
                valid_until=until,
                **where,
            )
        )
    reached = {n.name for n in out}
    for name in dict.fromkeys(given):
        if name not in reached:
            out.append(
                NodeVerdict(
                    name=name,
                    verdict="unchecked",
                    reasons=("no rank of the run reported its facts from it",),
                    ran=(Ran(test=test, backend=backend, passed=passed),),
                    checked_at=at,
                )
            )
    return out


def merged(verdicts: Iterable[NodeVerdict]) -> list[NodeVerdict]:
    """One verdict per node name: the worst state, every reason and run, the latest check; by name."""
    by_name: dict[str, NodeVerdict] = {}
    for v in verdicts:
        old = by_name.get(v.name)
        if old is None:
            by_name[v.name] = v
            continue
        worst = min(old, v, key=lambda n: SEVERITY.index(n.verdict))
        later = max(old, v, key=lambda n: n.checked_at or "")
        by_name[v.name] = replace(
            worst,
            reasons=tuple(dict.fromkeys((*worst.reasons, *old.reasons, *v.reasons))),
            ran=(*old.ran, *v.ran),
            checked_at=later.checked_at,
            valid_until=later.valid_until,
            gpus=worst.gpus or later.gpus,
        )
    return [by_name[name] for name in sorted(by_name)]


def of_records(records: Sequence[TestRecord], ttl_s: float) -> list[NodeVerdict]:
    """Every node of the session's tests, each test's deciding attempt judged, merged by node name."""
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
    return merged(found)


def document(nodes: Sequence[NodeVerdict], ttl_s: float, written_at: float) -> dict[str, Any]:
    """``nodes.json``'s object."""
    doc = NodesFile(schema=SCHEMA, written_at=iso(written_at), verdict_ttl_s=ttl_s, nodes=tuple(nodes))
    return cast(dict[str, Any], json_ready(_plain(doc)))


def write(path: Path, records: Sequence[TestRecord], ttl_s: float) -> None:
    """Write ``nodes.json`` of the session's ``records`` to ``path``, whole."""
    doc = document(of_records(records, ttl_s), ttl_s, time.time())
    write_whole(path, json.dumps(doc, indent=2) + "\n")


def merge_worker_files(directory: Path, since: float) -> None:
    """Merge the ``nodes.<worker>.json`` files xdist workers wrote since ``since`` into ``nodes.json``."""
    parts = sorted(p for p in directory.glob("nodes.gw*.json") if p.stat().st_mtime >= since)
    if not parts:
        return
    docs = [json.loads(p.read_text()) for p in parts]
    by_name: dict[str, dict[str, Any]] = {}
    for node in (n for d in docs for n in d.get("nodes", [])):
        old = by_name.setdefault(node["name"], node)
        if old is node:
            continue
        worst = min(old, node, key=lambda n: SEVERITY.index(n["verdict"]))
        later = max(old, node, key=lambda n: n.get("checked_at") or "")
        by_name[node["name"]] = {
            **worst,
            "reasons": list(dict.fromkeys([*worst["reasons"], *old["reasons"], *node["reasons"]])),
            "ran": [*old["ran"], *node["ran"]],
            "checked_at": later.get("checked_at"),
            "valid_until": later.get("valid_until"),
        }
    merged_doc = {**docs[-1], "nodes": [by_name[n] for n in sorted(by_name)]}
    write_whole(directory / NODES_FILE, json.dumps(merged_doc, indent=2) + "\n")


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
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m rollcall.nodeverdicts --markdown > docs/nodes.md")
    sys.stdout.write(markdown())
