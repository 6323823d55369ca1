"""Each node marked with its verdict (``--label-nodes``, ``--taint-unfit``), keeping all else it holds.

:func:`node_change` is the change, pure: from a node and its :class:`~rollcall.backends.NodeMark`, the labels
of its verdict (``rollcall/verdict``, ``rollcall/checked-at``, ``rollcall/valid-until``), rollcall's taint
added to an unfit node with the reasons in an annotation, or lifted from a node found fit (never another's
taint: a taint of the same key and effect has its value replaced, as ``kubectl taint --overwrite`` does, every
other is kept). :func:`mark_node` reads the node and writes the change with a JSON merge patch carrying the
``resourceVersion`` it read: the API server refuses it (409) when the node changed in between, and the node is
read again, so a taint another writer added meanwhile is never dropped. :func:`mark_nodes` does so for each
node and says what it did (:class:`Marked`, ``results.json``'s ``node_marks``). The rights it needs, ``get``
and ``patch`` of nodes, are in ``manifests/rbac/clusterrole.yaml``; ``admission-policy.yaml`` lets the suite's
patches of a node change rollcall's own keys only (:data:`rollcall.jobspec.NODE_DOMAIN`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from rollcall.backends import Marking, NodeMark
from rollcall.backends.kubernetes.kube import Kube, Obj, call, message_of
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.jobspec import CHECKED_LABEL, EXPIRES_LABEL, REASON_ANNOTATION, VERDICT_LABEL, Taint

log = logging.getLogger(__name__)

#: How often a node that changed between its read and its patch is read and patched again.
CONFLICT_ATTEMPTS = 5
#: The field manager of the suite's node patches (``kubectl get node -o yaml --show-managed-fields``).
FIELD_MANAGER = "rollcall"
MERGE_PATCH = "application/merge-patch+json"
#: An annotation's reasons are cut to this many characters (a node object is read by every scheduler pass).
REASON_CHARS = 1000
#: The verdicts a node is labelled with (an unchecked node keeps the labels of its last check).
LABELLED = ("fit", "unfit", "undetermined")


def label_time(epoch: float) -> str:
    """A time as a label value holds it (no ``:``): ``20261206T170000Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


def with_taint(taints: Sequence[Mapping[str, Any]], taint: Taint) -> list[Obj] | None:
    """``taints`` (a node's ``spec.taints``) holding ``taint``, every other kept; None when already held."""
    wanted = taint.manifest()
    same = [t for t in taints if t.get("key") == taint.key and t.get("effect") == taint.effect]
    if any((t.get("value") or "") == taint.value for t in same):
        return None
    kept = [dict(t) for t in taints if not (t.get("key") == taint.key and t.get("effect") == taint.effect)]
    return [*kept, wanted]


def without_taint(taints: Sequence[Mapping[str, Any]], taint: Taint) -> list[Obj] | None:
    """``taints`` less ``taint`` (by key and effect, whatever its value); None where the node lacks it."""
    kept = [dict(t) for t in taints if not (t.get("key") == taint.key and t.get("effect") == taint.effect)]
    return kept if len(kept) < len(taints) else None


@dataclass(frozen=True)
class Change:
    """What marking one node changes: the merge patch's body (None: nothing) and what it does to the taint."""

    body: Obj | None
    taint: str = ""  # "tainted", "untainted", "already" (held it, unfit), or "" (nothing done to it)


def node_change(node: Mapping[str, Any], mark: NodeMark, how: Marking) -> Change:
    """What ``how`` changes on ``node`` for ``mark``: labels, rollcall's taint and its annotation."""
    view = Node(dict(node))
    meta: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    if how.label and mark.verdict in LABELLED and mark.checked_at is not None:
        labels: dict[str, str | None] = {
            VERDICT_LABEL: mark.verdict,
            CHECKED_LABEL: label_time(mark.checked_at),
        }
        labels[EXPIRES_LABEL] = label_time(mark.valid_until) if mark.valid_until is not None else None
        if any(view.labels.get(k) != v for k, v in labels.items()):
            meta["labels"] = labels
    done = ""
    if how.taint is not None and mark.verdict == "unfit":
        taints = with_taint(view.taints, how.taint)
        done = "already" if taints is None else "tainted"
        if taints is not None:
            spec["taints"] = taints
        reason = mark.reason[:REASON_CHARS]
        if view.annotations.get(REASON_ANNOTATION) != reason:
            meta["annotations"] = {REASON_ANNOTATION: reason}
    elif how.taint is not None and mark.verdict == "fit":
        taints = without_taint(view.taints, how.taint)
        if taints is not None:
            spec["taints"], done = taints, "untainted"
        if REASON_ANNOTATION in view.annotations:
            meta["annotations"] = {REASON_ANNOTATION: None}
    if not meta and not spec:
        return Change(None, done)
    body: Obj = {"metadata": {**meta, "resourceVersion": view.resource_version}}
    if spec:
        body["spec"] = spec
    return Change(body, done)


def mark_node(kube: Kube, mark: NodeMark, how: Marking, attempts: int = CONFLICT_ATTEMPTS) -> Change:
    """Mark node ``mark.name`` as ``how`` says; what it changed.

    Raises:
        ApiException: the server refused the read or the patch (e.g. 403 without the rights, 404: no such
            node), or the node kept changing under ``attempts`` patches.
    """
    for attempt in range(1, attempts + 1):
        change = node_change(call(kube.core.read_node, mark.name), mark, how)
        if change.body is None:
            return change
        try:
            body, name = change.body, mark.name
            call(kube.core.patch_node, name, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 409 or attempt == attempts:
                raise
            log.info("node %s changed while it was marked (attempt %d); reading it again", mark.name, attempt)
            continue
        return change
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class Marked:
    """What marking the nodes did after one verdict.

    Attributes:
        taint: the taint of ``--taint-unfit`` (None without it).
        labelled: each node labelled, with its verdict.
        tainted: the unfit nodes tainted now; already: those that held the taint; untainted: the nodes found
            fit that rollcall's taint was lifted from.
        failed: each node that could not be marked, with the server's answer.
    """

    taint: Taint | None = None
    labelled: dict[str, str] = field(default_factory=dict)
    tainted: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    untainted: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """``tainted unfit node(s) n1 with rollcall/unfit=true:NoSchedule; ...``, for the terminal."""
        parts = []
        if self.labelled:
            parts.append("labelled " + ", ".join(f"{n} {v}" for n, v in self.labelled.items()))
        if self.tainted:
            parts.append(f"tainted unfit node(s) {', '.join(self.tainted)} with {self.taint}")
        if self.already:
            parts.append(f"node(s) {', '.join(self.already)} held {self.taint} already")
        if self.untainted:
            parts.append(f"lifted {self.taint} from node(s) {', '.join(self.untainted)}, found fit")
        for name, why in self.failed.items():
            parts.append(f"could not mark node {name}: {why}")
        return "; ".join(parts) or "no node to mark"

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        return {
            "line": self.line(),
            "taint": str(self.taint) if self.taint is not None else None,
            "labelled": dict(self.labelled),
            "tainted": list(self.tainted),
            "already": list(self.already),
            "untainted": list(self.untainted),
            "failed": dict(self.failed),
        }


def mark_nodes(kube: Kube, marks: Iterable[NodeMark], how: Marking) -> Marked:
    """Mark every node of ``marks``; a node that cannot be marked is listed, not raised."""
    done: dict[str, list[str]] = {"tainted": [], "already": [], "untainted": []}
    labelled: dict[str, str] = {}
    failed: dict[str, str] = {}
    for mark in {m.name: m for m in marks}.values():
        try:
            change = mark_node(kube, mark, how)
        except (ApiException, HTTPError) as exc:  # the verdict stands; the node is listed as not marked
            failed[mark.name] = message_of(exc)
            log.error("marking node %s: %s", mark.name, failed[mark.name])
            continue
        if change.taint:
            done[change.taint].append(mark.name)
        if how.label and mark.verdict in LABELLED:
            labelled[mark.name] = mark.verdict
    tainted, already, untainted = (tuple(done[k]) for k in ("tainted", "already", "untainted"))
    return Marked(how.taint, labelled, tainted, already, untainted, failed)


__all__ = [
    "Change",
    "Marked",
    "label_time",
    "mark_node",
    "mark_nodes",
    "node_change",
    "with_taint",
    "without_taint",
]
