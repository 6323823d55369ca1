"""``--taint-unfit``: taint the nodes a verdict names unfit, keeping every other taint they hold.

:func:`with_taint` is the change, pure: a node's ``spec.taints`` with the taint among them (a taint of the
same key and effect has its value replaced, as ``kubectl taint --overwrite`` does; every other taint is
kept), or None when the node holds it already, so tainting again changes nothing. :func:`taint_node` reads
the node and writes its new taints with a JSON merge patch that carries the ``resourceVersion`` it read: the
API server refuses it (409) when the node changed in between, and the node is read again, so a taint that
another writer added meanwhile is never dropped. :func:`taint_nodes` does so for each unfit node and says
what it did (:class:`Tainted`, ``results.json``'s ``taint_unfit``). The rights it needs, ``get`` and
``patch`` of nodes, are in ``manifests/rbac/clusterrole.yaml``; ``admission-policy.yaml`` lets the
suite's patches of a node change its taints only, keeping every taint it held.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from rollcall.backends.kubernetes.kube import Kube, Obj, call, message_of
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.jobspec import Taint

log = logging.getLogger(__name__)

#: How often a node that changed between its read and its patch is read and patched again.
CONFLICT_ATTEMPTS = 5
#: The field manager of the suite's node patches (``kubectl get node -o yaml --show-managed-fields``).
FIELD_MANAGER = "rollcall"
MERGE_PATCH = "application/merge-patch+json"


def with_taint(taints: Sequence[Mapping[str, Any]], taint: Taint) -> list[Obj] | None:
    """``taints`` (a node's ``spec.taints``) holding ``taint``, every other kept; None when already held."""
    wanted = taint.manifest()
    same = [t for t in taints if t.get("key") == taint.key and t.get("effect") == taint.effect]
    if any((t.get("value") or "") == taint.value for t in same):
        return None
    kept = [dict(t) for t in taints if not (t.get("key") == taint.key and t.get("effect") == taint.effect)]
    return [*kept, wanted]


def taint_node(kube: Kube, name: str, taint: Taint, attempts: int = CONFLICT_ATTEMPTS) -> bool:
    """Taint node ``name`` with ``taint``; whether it changed (False: it held the taint already).

    Raises:
        ApiException: the server refused the read or the patch (e.g. 403 without the rights, 404: no such
            node), or the node kept changing under ``attempts`` patches.
    """
    for attempt in range(1, attempts + 1):
        node = call(kube.core.read_node, name)
        taints = with_taint(Node(node).taints, taint)
        if taints is None:
            return False
        version = Node(node).resource_version  # the server refuses the patch once it changed
        body = {"metadata": {"resourceVersion": version}, "spec": {"taints": taints}}
        try:
            call(kube.core.patch_node, name, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 409 or attempt == attempts:
                raise
            log.info("node %s changed while it was tainted (attempt %d); reading it again", name, attempt)
            continue
        return True
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class Tainted:
    """What ``--taint-unfit`` did after one verdict.

    Attributes:
        taint: the taint asked for.
        applied: the nodes it was added to now.
        already: the nodes that held it already.
        failed: each node it could not be added to, with the server's answer.
    """

    taint: Taint
    applied: tuple[str, ...] = ()
    already: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes that hold the taint now (added or already there)."""
        return (*self.applied, *self.already)

    def line(self) -> str:
        """``tainted node(s) n1 with rollcall/unfit=true:NoSchedule (unfit) ...``, for the terminal."""
        parts = []
        if self.applied:
            parts.append(f"tainted unfit node(s) {', '.join(self.applied)} with {self.taint}")
        if self.already:
            parts.append(f"node(s) {', '.join(self.already)} held {self.taint} already")
        for name, why in self.failed.items():
            parts.append(f"could not taint node {name} with {self.taint}: {why}")
        return "; ".join(parts) or f"no unfit node to taint with {self.taint}"

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        return {
            "taint": str(self.taint),
            **self.taint.manifest(),
            "applied": list(self.applied),
            "already": list(self.already),
            "failed": dict(self.failed),
        }


def taint_nodes(kube: Kube, names: Iterable[str], taint: Taint) -> Tainted:
    """Taint every node of ``names`` with ``taint``; a node that cannot be tainted is listed, not raised."""
    applied: list[str] = []
    already: list[str] = []
    failed: dict[str, str] = {}
    for name in dict.fromkeys(names):
        try:
            (applied if taint_node(kube, name, taint) else already).append(name)
        except (ApiException, HTTPError) as exc:  # the verdict stands; the node is listed as not tainted
            failed[name] = message_of(exc)
            log.error("--taint-unfit: node %s: %s", name, failed[name])
    return Tainted(taint, tuple(applied), tuple(already), failed)


__all__ = ["Tainted", "taint_node", "taint_nodes", "with_taint"]
