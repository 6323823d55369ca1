"""Each node marked with its verdict (``--label-nodes``, ``--taint-unfit``), keeping all else it holds.

:func:`node_change` is the change, pure: from a node and its :class:`~rollcall.backends.NodeMark`, the labels
of its verdict (``rollcall/verdict``, ``rollcall/checked-at``, ``rollcall/valid-until``: the times in integer
epoch seconds, which a nodeAffinity ``Gt``/``Lt`` term compares), rollcall's taint added to an unfit node with
the reasons in an annotation, or lifted from a node found fit by a check of all its GPUs (never another's
taint: a taint of the same key and effect has its value replaced, as ``kubectl taint --overwrite`` does, every
other is kept; a fit verdict of part of a node keeps rollcall's taint). Labels and taint go in one patch, so
a node never ends with one written and not the other. :func:`mark_node` reads the node and writes the change
with a JSON merge patch carrying the ``resourceVersion`` it read: the API server refuses it (409) when the
node changed in between, and the node is read again, so a taint another writer added meanwhile is never
dropped.

:func:`mark_nodes` does so for each node and says what it did (:class:`Marked`, ``results.json``'s
``node_marks``). With ``--label-nodes`` it first clears the verdicts that have expired
(:func:`clear_expired`): the labels of every node whose ``rollcall/valid-until`` is past (in either form,
epoch seconds or the ``20261206T170000Z`` of older versions) are removed, so that a stale ``fit`` does not
hold forever; a taint is never lifted by expiry, only by a fit verdict. The rights it needs, ``get``,
``list`` and ``patch`` of nodes, are in ``manifests/rbac/clusterrole.yaml``; ``admission-policy.yaml`` lets
the suite's patches of a node change rollcall's own keys only (:data:`rollcall.jobspec.NODE_DOMAIN`).
"""

from __future__ import annotations

import calendar
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from rollcall.backends import Marking, NodeMark
from rollcall.backends.kubernetes.kube import Kube, Obj, call, message_of
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.backends.kubernetes.views import items
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
#: The labels of one verdict, removed together when it expires.
VERDICT_LABELS = (VERDICT_LABEL, CHECKED_LABEL, EXPIRES_LABEL)
#: The form older versions wrote the times in (``20261206T170000Z``), read still so as to clear them.
OLD_LABEL_TIME = "%Y%m%dT%H%M%SZ"
#: Why a fit node keeps rollcall's taint: its check did not cover every GPU (:attr:`NodeMark.whole`).
NOT_WHOLE = "not re-checked whole"


def label_time(epoch: float) -> str:
    """A time as a label value holds it: integer epoch seconds (``1796576400``), as nodeAffinity compares."""
    return str(int(epoch))


def read_label_time(value: str) -> float | None:
    """The epoch seconds of a label's time, in either form (:func:`label_time`'s, or ``20261206T170000Z``).

    None for anything else: such a value is no expiry of rollcall's, and is left as it is.
    """
    if re.fullmatch(r"[0-9]{1,12}", value):
        return float(value)
    try:
        return float(calendar.timegm(time.strptime(value, OLD_LABEL_TIME)))
    except ValueError:
        return None


def has_expired(node: Mapping[str, Any], now: float) -> bool:
    """Whether ``node``'s verdict label holds an expiry before ``now``."""
    until = read_label_time(Node(dict(node)).labels.get(EXPIRES_LABEL, ""))
    return until is not None and until < now


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
    #: "tainted", "untainted", "already" (held it, unfit), "kept" (held it, fit but not checked whole), or ""
    #: (nothing done to it)
    taint: str = ""

    @property
    def labels(self) -> bool:
        """Whether the patch writes labels."""
        return self.body is not None and "labels" in self.body.get("metadata", {})


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
    elif how.taint is not None and mark.verdict == "fit" and not mark.whole:
        # part of the node was found fit: what was found of the rest stands, taint and reason kept
        done = "kept" if without_taint(view.taints, how.taint) is not None else ""
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


def expiry_change(node: Mapping[str, Any], now: float) -> Change:
    """The change clearing ``node``'s verdict labels when they expired before ``now`` (its taint is kept)."""
    view = Node(dict(node))
    gone: dict[str, str | None] = {k: None for k in VERDICT_LABELS if k in view.labels}
    if not has_expired(node, now) or not gone:
        return Change(None)
    return Change({"metadata": {"labels": gone, "resourceVersion": view.resource_version}})


def patch_node(
    kube: Kube, name: str, change_of: Callable[[Obj], Change], attempts: int = CONFLICT_ATTEMPTS
) -> Change:
    """Read node ``name``, patch it with ``change_of(node)``, again when it changed in between; the change.

    Raises:
        ApiException: the server refused the read or the patch (e.g. 403 without the rights, 404: no such
            node), or the node kept changing under ``attempts`` patches.
    """
    for attempt in range(1, attempts + 1):
        change = change_of(call(kube.core.read_node, name))
        if change.body is None:
            return change
        try:
            body = change.body
            call(kube.core.patch_node, name, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 409 or attempt == attempts:
                raise
            log.info("node %s changed while it was patched (attempt %d); reading it again", name, attempt)
            continue
        return change
    raise AssertionError("unreachable")  # pragma: no cover


def mark_node(kube: Kube, mark: NodeMark, how: Marking, attempts: int = CONFLICT_ATTEMPTS) -> Change:
    """Mark node ``mark.name`` as ``how`` says (in one patch); what it changed (see :func:`patch_node`)."""
    return patch_node(kube, mark.name, lambda node: node_change(node, mark, how), attempts)


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the API server is gone (no answer after retries), not that it refused a node."""
    return isinstance(exc, HTTPError) or (isinstance(exc, ApiException) and not exc.status)


@dataclass(frozen=True)
class Cleared:
    """What :func:`clear_expired` did: the nodes cleared, those that failed, and why none were looked for.

    ``lost``: the API server's last answer once it was lost ("": it was not), so that no more is asked of it.
    """

    nodes: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    unlisted: str = ""
    lost: str = ""


def clear_expired(kube: Kube, now: float, skip: Collection[str] = ()) -> Cleared:
    """Remove the verdict labels expired before ``now`` from every node holding one, but those of ``skip``.

    The nodes are listed by the label ``rollcall/valid-until``; each expired one is cleared with a patch
    carrying the ``resourceVersion`` read (:func:`patch_node`), so a verdict written meanwhile by another
    session is kept. ``skip``: the nodes this pass labels anew (their labels are replaced in their own patch).
    Once the API server is lost, the nodes left are listed as not tried.
    """
    try:
        found = items(call(kube.core.list_node, label_selector=EXPIRES_LABEL))
    except (ApiException, HTTPError) as exc:
        why = message_of(exc)
        log.error("listing the nodes' verdict labels: %s", why)
        return Cleared(unlisted=why, lost=why if lost(exc) else "")
    cleared: list[str] = []
    failed: dict[str, str] = {}
    gone = ""
    for node in found:
        name = Node(node).name
        if name in skip or not has_expired(node, now):
            continue
        if gone:
            failed[name] = f"not tried: the API server was lost ({gone})"
            continue
        try:
            change = patch_node(kube, name, lambda n: expiry_change(n, now))
        except (ApiException, HTTPError) as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                continue  # gone since it was listed: nothing to clear
            failed[name] = message_of(exc)
            gone = failed[name] if lost(exc) else ""
            log.error("clearing the expired verdict of node %s: %s", name, failed[name])
            continue
        if change.body is not None:
            cleared.append(name)
    return Cleared(tuple(cleared), failed, lost=gone)


@dataclass(frozen=True)
class Marked:
    """What marking the nodes did after one verdict.

    Attributes:
        taint: the taint of ``--taint-unfit`` (None without it).
        labelled: each node whose labels were written, with its verdict.
        tainted: the unfit nodes tainted now; already: those that held the taint; untainted: the nodes found
            fit that rollcall's taint was lifted from.
        kept: each node found fit that keeps rollcall's taint, and why (its check did not cover every GPU).
        expired: the nodes whose expired verdict labels were removed (``--label-nodes``); their taints stay.
        failed: each node that could not be marked (or cleared), with the server's answer; a node listed here
            was not changed by this pass (labels and taint go in one patch).
        unlisted: why the nodes' expired labels could not be looked for ("": they were).
    """

    taint: Taint | None = None
    labelled: dict[str, str] = field(default_factory=dict)
    tainted: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    untainted: tuple[str, ...] = ()
    kept: dict[str, str] = field(default_factory=dict)
    expired: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    unlisted: str = ""

    def line(self) -> str:
        """``tainted unfit node(s) n1 with rollcall/unfit=true:NoSchedule; ...``, for the terminal."""
        parts = []
        if self.expired:
            parts.append(f"cleared the expired verdict labels of node(s) {', '.join(self.expired)}")
        if self.unlisted:
            parts.append(f"could not look for expired verdict labels: {self.unlisted}")
        if self.labelled:
            parts.append("labelled " + ", ".join(f"{n} {v}" for n, v in self.labelled.items()))
        if self.tainted:
            parts.append(f"tainted unfit node(s) {', '.join(self.tainted)} with {self.taint}")
        if self.already:
            parts.append(f"node(s) {', '.join(self.already)} held {self.taint} already")
        if self.untainted:
            parts.append(f"lifted {self.taint} from node(s) {', '.join(self.untainted)}, found fit")
        for name, why in self.kept.items():
            parts.append(f"node {name} found fit keeps {self.taint}: {why}")
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
            "kept": dict(self.kept),
            "expired": list(self.expired),
            "failed": dict(self.failed),
            "unlisted": self.unlisted,
        }


def mark_nodes(kube: Kube, marks: Iterable[NodeMark], how: Marking, now: float | None = None) -> Marked:
    """Mark every node of ``marks``; a node that cannot be marked is listed, not raised.

    With ``how.label`` the expired verdict labels are cleared first (:func:`clear_expired`, at ``now``, the
    time by default), but on the nodes labelled anew here. Each node is changed by one patch or not at all;
    once the API server is lost (no answer after the retries), the nodes left are listed as not tried.
    """
    by_name = {m.name: m for m in marks}
    cleared = Cleared()
    if how.label:
        relabelled = {n for n, m in by_name.items() if m.verdict in LABELLED and m.checked_at is not None}
        cleared = clear_expired(kube, time.time() if now is None else now, skip=relabelled)
    done: dict[str, list[str]] = {"tainted": [], "already": [], "untainted": []}
    labelled: dict[str, str] = {}
    kept: dict[str, str] = {}
    failed: dict[str, str] = dict(cleared.failed)
    gone = cleared.lost
    for mark in by_name.values():
        if gone:
            failed[mark.name] = f"not tried: the API server was lost ({gone})"
            continue
        try:
            change = mark_node(kube, mark, how)
        except (ApiException, HTTPError) as exc:  # the verdict stands; the node is listed as not marked
            failed[mark.name] = message_of(exc)
            log.error("marking node %s: %s", mark.name, failed[mark.name])
            gone = failed[mark.name] if lost(exc) else ""
            continue
        if change.taint == "kept":
            kept[mark.name] = NOT_WHOLE
        elif change.taint:
            done[change.taint].append(mark.name)
        if change.labels:
            labelled[mark.name] = mark.verdict
    tainted, already, untainted = (tuple(done[k]) for k in ("tainted", "already", "untainted"))
    return Marked(
        how.taint, labelled, tainted, already, untainted, kept, cleared.nodes, failed, cleared.unlisted
    )


__all__ = [
    "Change",
    "Cleared",
    "Marked",
    "clear_expired",
    "expiry_change",
    "has_expired",
    "label_time",
    "mark_node",
    "mark_nodes",
    "node_change",
    "patch_node",
    "read_label_time",
    "with_taint",
    "without_taint",
]
