"""What a run waited for before training: quota, nodes, image pulls (pure functions over API JSON).

A Kubernetes run may wait first for quota (a Job that Kueue keeps suspended), then for its pods to be
scheduled (on nodes that a Karpenter NodePool or cluster-autoscaler provisions), then for each pod's
images to be pulled and its container to start. :class:`Waits` records how long, for progress, the
results and the report; the job timeout counts from when every pod is scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from rollcall.backends import Pull
from rollcall.backends.kubernetes.manifests import CONTAINER, MONITOR_CONTAINER
from rollcall.backends.kubernetes.nodeviews import INSTANCE_TYPE_LABEL
from rollcall.backends.kubernetes.views import Event, Job, Obj, Pod, View

QUOTA = "quota (Kueue)"
#: Events that say capacity is on its way: cluster-autoscaler's and Karpenter's.
SCALE_UP_REASONS = ("TriggeredScaleUp", "NotTriggerScaleUp", "Nominated")
_CLAIM_CONDITIONS = ("Launched", "Registered", "Initialized")


def suspended(job: Obj | None) -> bool:
    """Whether a Job is suspended (``spec.suspend``: Kueue holds it until its queue admits it)."""
    return job is not None and Job(job).suspended


def all_scheduled(pods: Iterable[Obj], nodes: int) -> bool:
    """Whether a pod of every completion index is bound to a node."""
    indexes = {p.index for p in map(Pod, pods) if p.node_name}
    return len(indexes) >= nodes


def pulling(pods: Iterable[Obj]) -> list[str]:
    """Pods bound to a node whose container has not started yet (pulling images, creating containers)."""
    return sorted(
        p.name for p in map(Pod, pods) if p.node_name and p.started_at is None and p.phase == "Pending"
    )


#: rollcall's own containers, whose start is a node's arrival: its monitor (a native sidecar) and training.
OWN_CONTAINERS = (MONITOR_CONTAINER, CONTAINER)


def on_the_way(pods: Iterable[Obj], nodes: int) -> list[int]:
    """The node ranks ``0..nodes-1`` none of whose pods has started a container of rollcall's yet, in order.

    Such a node is on its way: its pod not yet created, waiting for capacity, pulling its image or creating
    its container. Nothing of it can be heard until a container of rollcall's starts (the monitor sidecar
    first): an init container the cluster injects (a mesh's, a policy agent's) that starts or ends is no
    arrival. The capacity timeout, an image pull's error and the job timeout bound it meanwhile.
    """
    arrived = {
        p.node_rank
        for p in map(Pod, pods)
        if p.finished or any(c.started for c in p.all_containers if c.name in OWN_CONTAINERS)
    }
    return [n for n in range(nodes) if n not in arrived]


def image_pull_s(pods: Iterable[Obj]) -> float | None:
    """The longest scheduled-to-started time over the pods (None when no pod has both)."""
    spans = []
    for pod in map(Pod, pods):
        scheduled, started = pod.scheduled_at, pod.started_at
        if scheduled is not None and started is not None:
            spans.append(max(0.0, (started - scheduled).total_seconds()))
    return max(spans) if spans else None


def pulls(pods: Iterable[Obj], now: datetime) -> tuple[Pull, ...]:
    """Each scheduled pod's wait for its first container, by node: done, or still waiting at ``now``."""
    found = []
    for pod in map(Pod, pods):
        scheduled, started, node = pod.scheduled_at, pod.started_at, pod.node_rank
        if scheduled is None or node is None or (started is None and pod.finished):
            continue
        seconds = max(0.0, ((started or now) - scheduled).total_seconds())
        found.append(Pull(node, pod.name, pod.node_name or "", pod.image, seconds, started is not None))
    return tuple(sorted(found, key=lambda p: (p.node, p.pod)))


def claim_line(claim: Obj) -> str:
    """A NodeClaim in one phrase: ``name (instance type: Launched, Registered)``."""
    view = View(claim)
    kind = view.labels.get(INSTANCE_TYPE_LABEL) or "instance type not chosen yet"
    done = [c for c in _CLAIM_CONDITIONS if view.holds(c)]
    return f"{view.name} ({kind}: {', '.join(done) or 'launching'})"


def claims_since(claims: Sequence[Obj], since: datetime | None) -> list[str]:
    """The NodeClaims created at or after ``since`` (a run's own), as :func:`claim_line` phrases."""
    shown = []
    for claim in sorted(map(View, claims), key=lambda c: c.creation_timestamp):
        created = claim.created
        if since is None or (created is not None and created >= since):
            shown.append(claim_line(claim.obj))
    return shown


def scale_up_events(events: Iterable[Obj]) -> list[str]:
    """The newest message of each scale-up reason among a namespace's events."""
    newest: dict[str, tuple[str, str]] = {}
    for event in map(Event, events):
        reason = event.reason
        if reason not in SCALE_UP_REASONS:
            continue
        when = event.last_seen
        if reason not in newest or when >= newest[reason][0]:
            newest[reason] = (when, event.message)
    return [f"{reason}: {message}" for reason, (_, message) in sorted(newest.items())]
