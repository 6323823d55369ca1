"""What a run waited for before training: quota, nodes, image pulls (pure functions over API JSON).

A Kubernetes run may wait first for quota (a Job that Kueue keeps suspended), then for its pods to be
scheduled (on nodes that a Karpenter NodePool or cluster-autoscaler provisions), then for each pod's
images to be pulled and its container to start. :class:`Waits` records how long, for progress, the
results and the report; the job timeout counts from when every pod is scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rollcall.backends.kubernetes.faults import index_of

Obj = dict[str, Any]
QUOTA = "quota (Kueue)"
#: Events that say capacity is on its way: cluster-autoscaler's and Karpenter's.
SCALE_UP_REASONS = ("TriggeredScaleUp", "NotTriggerScaleUp", "Nominated")
_CLAIM_CONDITIONS = ("Launched", "Registered", "Initialized")


def parse_time(text: object) -> datetime | None:
    """An API timestamp (``2026-12-01T10:00:00Z``) as a datetime; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def suspended(job: Obj | None) -> bool:
    """Whether a Job is suspended (``spec.suspend``: Kueue holds it until its queue admits it)."""
    return bool(((job or {}).get("spec") or {}).get("suspend"))


def scheduled_at(pod: Obj) -> datetime | None:
    """When the pod was bound to a node (its PodScheduled condition turned True)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def started_at(pod: Obj) -> datetime | None:
    """When the pod's first container started (running or already ended)."""
    times = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        for key in ("running", "terminated"):
            found = parse_time((state.get(key) or {}).get("startedAt"))
            if found is not None:
                times.append(found)
    return min(times) if times else None


def all_scheduled(pods: Iterable[Obj], nodes: int) -> bool:
    """Whether a pod of every completion index is bound to a node."""
    indexes = {index_of(p) for p in pods if (p.get("spec") or {}).get("nodeName")}
    return len(indexes) >= nodes


def pulling(pods: Iterable[Obj]) -> list[str]:
    """Pods bound to a node whose container has not started yet (pulling images, creating containers)."""
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if (p.get("spec") or {}).get("nodeName")
        and started_at(p) is None
        and (p.get("status") or {}).get("phase") == "Pending"
    )


def image_pull_s(pods: Iterable[Obj]) -> float | None:
    """The longest scheduled-to-started time over the pods (None when no pod has both)."""
    spans = []
    for pod in pods:
        scheduled, started = scheduled_at(pod), started_at(pod)
        if scheduled is not None and started is not None:
            spans.append(max(0.0, (started - scheduled).total_seconds()))
    return max(spans) if spans else None


def claim_line(claim: Obj) -> str:
    """A NodeClaim in one phrase: ``name (instance type: Launched, Registered)``."""
    meta = claim.get("metadata") or {}
    labels = meta.get("labels") or {}
    kind = labels.get("node.kubernetes.io/instance-type") or "instance type not chosen yet"
    true = {
        c.get("type")
        for c in (claim.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    done = [c for c in _CLAIM_CONDITIONS if c in true]
    return f"{meta.get('name')} ({kind}: {', '.join(done) or 'launching'})"


def claims_since(claims: Sequence[Obj], since: datetime | None) -> list[str]:
    """The NodeClaims created at or after ``since`` (a run's own), as :func:`claim_line` phrases."""
    shown = []
    for claim in sorted(claims, key=lambda c: c["metadata"].get("creationTimestamp") or ""):
        created = parse_time(claim["metadata"].get("creationTimestamp"))
        if since is None or (created is not None and created >= since):
            shown.append(claim_line(claim))
    return shown


def scale_up_events(events: Iterable[Obj]) -> list[str]:
    """The newest message of each scale-up reason among a namespace's events."""
    newest: dict[str, tuple[str, str]] = {}
    for event in events:
        reason = event.get("reason") or ""
        if reason not in SCALE_UP_REASONS:
            continue
        when = event.get("lastTimestamp") or event.get("eventTime") or ""
        if reason not in newest or when >= newest[reason][0]:
            newest[reason] = (when, event.get("message") or "")
    return [f"{reason}: {message}" for reason, (_, message) in sorted(newest.items())]
