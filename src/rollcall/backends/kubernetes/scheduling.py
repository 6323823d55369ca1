"""Until every pod of a run is scheduled: what the pods wait for, what progress says of it, and its bound.

A Job suspended by Kueue waits for quota; its pods wait for nodes that a provisioner brings
(:class:`~.capacity.Lookup`: the Unschedulable grace does not apply meanwhile). The wait is bounded by
``--capacity-timeout``: past it the run ends ``NO_CAPACITY``, naming what it waited for, what was last seen
of it and what the scheduler says. The job timeout counts from when every pod is scheduled. Progress names
what the pods wait for: quota, the provisioner's NodeClaims and scale-up events (read every
:data:`CAPACITY_POLL_S` seconds), then image pulls. Pure over the API's JSON (:mod:`.waits`) but for those
reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rollcall.backends import Waits
from rollcall.backends.kubernetes import waits
from rollcall.backends.kubernetes.capacity import Lookup
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.pod_state import unschedulable
from rollcall.backends.kubernetes.views import Event, Obj, Pod, items

log = logging.getLogger(__name__)

#: How often NodeClaims and scale-up events are read while the pods wait for capacity.
CAPACITY_POLL_S = 5.0


@dataclass
class Scheduling:
    """One run's wait for its pods to be scheduled (see the module docstring).

    Attributes:
        kube: the API client.
        namespace: the run's namespace (its events say what scaled up).
        nodes: how many pods the run has, one per completion index.
        bound_s: how long the pods may wait (``--capacity-timeout``).
        arriving: the provisioners expected to bring the missing nodes (None: the nodes exist).
        created_at: when the Job was created (NodeClaims made since are the run's).
        at: when every pod was scheduled (``time.monotonic``), None before.
        after_s: how long after the run's start that was.
        waited_for: what the pods waited for (quota, a provisioner), empty when nothing.
        waiting: what was last seen of the capacity on its way.
    """

    kube: Kube
    namespace: str
    nodes: int
    bound_s: float
    arriving: Lookup | None = None
    created_at: datetime | None = None
    at: float | None = None
    after_s: float | None = None
    waited_for: str = ""
    waiting: str = ""
    _read_at: float = -CAPACITY_POLL_S

    def update(self, job: Obj, pods: list[Obj], now: float, started: float) -> bool:
        """Note what the pods wait for; True when every pod has just been scheduled (at ``now``)."""
        if waits.suspended(job):
            self.waited_for = waits.QUOTA
        elif self.arriving is not None:
            self.waited_for = self.arriving.describe()
        if waits.suspended(job) or not waits.all_scheduled(pods, self.nodes):
            return False
        self.at, self.after_s, self.waiting = now, now - started, ""
        return True

    def past_bound(self, pods: list[Obj], elapsed_s: float, describe: Callable[[], str]) -> str | None:
        """Past ``bound_s`` without every pod scheduled: why the run ends, with the pods' ``describe()``."""
        if elapsed_s < self.bound_s:
            return None
        what = self.waited_for or "nodes to schedule them on"
        seen = f"; last seen: {self.waiting}" if self.waiting else ""
        unscheduled = [p for p in pods if not Pod(p).node_name]
        message = next((m for m in map(unschedulable, unscheduled) if m), None)
        scheduler = f"; the scheduler says: {message}" if message else ""
        bound = f"within {self.bound_s:g}s (--capacity-timeout)"
        return f"{what} did not arrive {bound}: {describe()}{seen}{scheduler}"

    def note(self, job: Obj | None, pods: list[Obj]) -> str:
        """What the pods wait for now, for progress: quota, NodeClaims or scale-up events, image pulls."""
        if self.at is not None:
            pulling = waits.pulling(pods)
            return f"pulling images: {len(pulling)} pod(s)" if pulling else ""
        if waits.suspended(job):
            return f"waiting for {waits.QUOTA}: the Job is suspended"
        if self.arriving is None:
            return ""
        now = time.monotonic()
        if now - self._read_at >= CAPACITY_POLL_S:
            self._read_at = now
            self.waiting = f"waiting for capacity from {self.arriving.describe()}"
            seen = self._capacity_seen()
            if seen:
                self.waiting += ": " + "; ".join(seen)
        return self.waiting

    def _capacity_seen(self) -> list[str]:
        """The run's NodeClaims (Karpenter) and scale-up events, best effort."""
        kube, seen = self.kube, []
        try:
            if self.arriving is not None and self.arriving.karpenter:
                claims = call(
                    kube.custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims", retry_s=5
                )
                lines = waits.claims_since(items(claims), self.created_at)
                if lines:
                    seen.append("NodeClaims " + ", ".join(lines))
            events = items(call(kube.core.list_namespaced_event, self.namespace, retry_s=5))
            seen += waits.scale_up_events(events)
        except Exception as exc:  # progress only
            log.debug("could not read the capacity's progress: %s", message_of(exc))
        return seen

    def waited(self, pods: list[Obj]) -> Waits:
        """What the run waited for, so far."""
        now = datetime.now(UTC)
        return Waits(self.waited_for, self.after_s, waits.image_pull_s(pods), waits.pulls(pods, now))


def warning_events(kube: Kube, namespace: str, kind: str, name: str) -> list[str]:
    """The newest message of each reason among the warning events of ``kind`` ``name``, best effort."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name},type=Warning"
    try:
        events = items(call(kube.core.list_namespaced_event, namespace, field_selector=selector, retry_s=5))
    except Exception as exc:  # a message's detail only
        log.debug("could not read the events of %s %s: %s", kind, name, message_of(exc))
        return []
    newest: dict[str, tuple[str, str]] = {}
    for event in map(Event, events):
        when = event.last_seen
        if event.reason not in newest or when >= newest[event.reason][0]:
            newest[event.reason] = (when, event.message)
    return [f"{reason}: {message}" for reason, (_, message) in sorted(newest.items())]
