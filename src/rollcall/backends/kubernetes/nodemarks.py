"""``rollcall nodes`` on a cluster: what rollcall left on its nodes, read back, and cleared.

:func:`current_marks` lists every node holding a verdict label of rollcall's (``rollcall/verdict``,
``rollcall/checked-at``, ``rollcall/valid-until``), a taint of rollcall's own domain (``rollcall/...``: the
only taints ``--taint-unfit`` may write) or its reason annotation. :func:`clear_marks` removes them, node by
node, with the JSON merge patch and ``resourceVersion`` of :func:`~.taints.patch_node`, keeping every other
label, taint and annotation. Both need only what marking needs: ``list``, ``get`` and ``patch`` of nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from rollcall.backends import BackendError
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.backends.kubernetes.taints import VERDICT_LABELS, Change, lost, patch_node, read_label_time
from rollcall.backends.kubernetes.views import items
from rollcall.backends.marks import NodeMarks
from rollcall.jobspec import CHECKED_LABEL, EXPIRES_LABEL, NODE_DOMAIN, REASON_ANNOTATION, VERDICT_LABEL

log = logging.getLogger(__name__)


def _ours(taint: Mapping[str, Any]) -> bool:
    """A taint of rollcall's own domain (``rollcall/unfit``)."""
    return str(taint.get("key", "")).startswith(f"{NODE_DOMAIN}/")


def marks_of(node: Mapping[str, Any]) -> NodeMarks | None:
    """What rollcall left on ``node`` (a Node's JSON), or None where it left nothing."""
    view = Node(dict(node))
    labels, notes = view.labels, view.annotations
    held = (
        *(("label",) if any(k in labels for k in VERDICT_LABELS) else ()),
        *(("taint",) if any(_ours(t) for t in view.taints) or REASON_ANNOTATION in notes else ()),
    )
    if not held:
        return None
    return NodeMarks(
        view.name,
        labels.get(VERDICT_LABEL),
        read_label_time(labels.get(CHECKED_LABEL, "")),
        read_label_time(labels.get(EXPIRES_LABEL, "")),
        held,
        notes.get(REASON_ANNOTATION, ""),
    )


def clear_change(node: Mapping[str, Any]) -> Change:
    """The change removing rollcall's labels, annotation and taints from ``node``, keeping all else."""
    view = Node(dict(node))
    meta: dict[str, Any] = {}
    if gone := {k: None for k in VERDICT_LABELS if k in view.labels}:
        meta["labels"] = gone
    if REASON_ANNOTATION in view.annotations:
        meta["annotations"] = {REASON_ANNOTATION: None}
    kept = [dict(t) for t in view.taints if not _ours(t)]
    if not meta and len(kept) == len(view.taints):
        return Change(None)
    body: dict[str, Any] = {"metadata": {**meta, "resourceVersion": view.resource_version}}
    if len(kept) < len(view.taints):
        body["spec"] = {"taints": kept}
    return Change(body, "untainted" if "spec" in body else "")


def current_marks(kube: Kube) -> list[NodeMarks]:
    """Every node holding a mark of rollcall's, by name.

    Raises:
        BackendError: the nodes could not be listed (the server's answer: a 403 names the right).
    """
    try:
        nodes = items(call(kube.core.list_node))
    except (ApiException, HTTPError) as exc:
        raise BackendError(f"cannot list the nodes (needs list nodes): {message_of(exc)}") from None
    found = [m for node in nodes if (m := marks_of(node)) is not None]
    return sorted(found, key=lambda m: m.name)


@dataclass(frozen=True)
class Unmarked:
    """What ``rollcall nodes --clear`` did: the nodes cleared, those holding nothing of rollcall's, failed."""

    cleared: tuple[str, ...] = ()
    unmarked: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """``cleared rollcall's marks from node(s) n1; ...``, for the terminal."""
        parts = [f"cleared rollcall's marks from node(s) {', '.join(self.cleared)}"] if self.cleared else []
        if self.unmarked:
            parts.append(f"node(s) {', '.join(self.unmarked)} held no mark of rollcall's")
        parts += [f"could not clear node {name}: {why}" for name, why in self.failed.items()]
        return "; ".join(parts) or "no node holds a mark of rollcall's"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        cleared, unmarked, failed = list(self.cleared), list(self.unmarked), dict(self.failed)
        return {"line": self.line(), "cleared": cleared, "unmarked": unmarked, "failed": failed}


def clear_marks(kube: Kube, names: Sequence[str]) -> Unmarked:
    """Remove rollcall's marks from the nodes ``names`` (every node holding one, where empty).

    A node the server refuses is listed, never raised; once the API server is lost, the rest are not tried.
    """
    wanted = list(dict.fromkeys(names)) or [m.name for m in current_marks(kube)]
    cleared: list[str] = []
    unmarked: list[str] = []
    failed: dict[str, str] = {}
    gone = ""
    for name in wanted:
        if gone:
            failed[name] = f"not tried: the API server was lost ({gone})"
            continue
        try:
            change = patch_node(kube, name, clear_change)
        except (ApiException, HTTPError) as exc:
            failed[name] = message_of(exc)
            gone = failed[name] if lost(exc) else ""
            log.error("clearing node %s: %s", name, failed[name])
            continue
        (cleared if change.body is not None else unmarked).append(name)
    return Unmarked(tuple(cleared), tuple(unmarked), failed)


__all__ = ["Unmarked", "clear_change", "clear_marks", "current_marks", "marks_of"]
