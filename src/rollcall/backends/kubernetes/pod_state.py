"""What a Job's and its pods' status say: finished, broken (and how), or still going.

Pure functions over the objects as the API returns them (JSON dicts, read through :mod:`.views`), so
every rule is unit-tested without a cluster. A fault names the pod, its completion index (the node rank)
and its node.

A pod is broken when:

- it has been ``Unschedulable`` for longer than the grace period (the scheduler's message says why);
- a container cannot start: its image cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``,
  ``InvalidImageName``, ...) or its configuration is unusable (``CreateContainerConfigError``, ...);
- a container terminated ``OOMKilled`` or with a non-zero exit code;
- the pod itself failed (rejected by the kubelet, ...).

Pods being deleted are left to the Job's own verdict: a deleted pod's containers exit non-zero too.

A pod is *disrupted* (:func:`disruption`, a :class:`~rollcall.evidence.endings.Disruption`: the
infrastructure took it away, no rank failed) when, judged before any fault of any pod:

- it has the ``DisruptionTarget`` condition (``True``): evicted through the Eviction API (``kubectl drain``,
  Karpenter, the AWS Node Termination Handler), preempted, deleted by the taint manager or pod GC, or
  terminated by the kubelet (node pressure, graceful node shutdown; without the condition, the failed
  pod's reason of :data:`KUBELET_DISRUPTIONS` says so);
- its node was lost (:func:`node_lost`): deleted (at once), or its ``Ready`` condition other than ``True``
  (the node controller marks it ``Unknown`` once the kubelet has not renewed its lease for the node-monitor
  grace period), held past its bound while the node's pods were not heard (:mod:`.holds`);
- it is being deleted on a node that is cordoned (a drain without the Eviction API), or is being deleted or
  has failed on a node with a taint of :data:`GOING_AWAY` (a spot interruption, Karpenter's disruption, a
  scale-down).

The node's taints of :data:`GOING_AWAY` name why in the disruption's message. A Job failed by its
``podFailurePolicy`` for a pod's ``DisruptionTarget`` condition reads the same (:func:`job_disruption`).

:func:`terminations` reads every container that ended badly as a typed
:class:`~rollcall.evidence.endings.Termination`: the root cause of a run whose pod was killed without a
word.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rollcall.backends.held import Holding
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.backends.kubernetes.views import Condition, Job, Obj, Pod, View, epoch
from rollcall.evidence.endings import DELETED_UNDER_RUN, Disruption, Termination

#: Waiting reasons from which a container will not recover without someone changing something.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
#: Job conditions that end it.
JOB_SUCCESS = ("Complete", "SuccessCriteriaMet")
JOB_FAILURE = ("Failed", "FailureTarget")
#: The pod condition the API server, scheduler, taint manager, pod GC and kubelet set on a pod they take away.
DISRUPTION_TARGET = "DisruptionTarget"
#: A failed pod's reason when its kubelet took it away, for clusters that set no ``DisruptionTarget``: node
#: pressure, a critical pod's admission, a graceful node shutdown.
KUBELET_DISRUPTIONS = frozenset({"Evicted", "Preempting", "Terminated"})
#: The Job's ``Failed`` reason when a rule of its ``podFailurePolicy`` ended it (manifests/job.yaml).
POD_FAILURE_POLICY = "PodFailurePolicy"
#: Node taints that say the node is going away, and why (set before its pods are evicted).
GOING_AWAY: dict[str, str] = {
    "karpenter.sh/disrupted": "Karpenter is disrupting the node (consolidation, drift, expiry, interruption)",
    "karpenter.sh/disruption": "Karpenter is disrupting the node",  # before Karpenter v1
    "aws-node-termination-handler/spot-itn": "spot interruption notice",
    "aws-node-termination-handler/rebalance-recommendation": "spot rebalance recommendation",
    "aws-node-termination-handler/scheduled-maintenance": "scheduled maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination": "Auto Scaling group termination",
    "ToBeDeletedByClusterAutoscaler": "scale-down by the cluster autoscaler",
    "cloud.google.com/impending-node-termination": "impending node termination",
}


def index_of(pod: Obj) -> str:
    """The pod's completion index (its node rank), or ``?``."""
    return Pod(pod).index


def where(pod: Obj) -> str:
    """``pod <name> (index <i>) on node <node>``."""
    p = Pod(pod)
    return f"pod {p.name} (index {p.index}) on node {p.node_name or 'no node yet'}"


def _holding(obj: View, kind: str) -> Condition | None:
    """The condition ``kind`` when it holds (``True``), else None."""
    cond = obj.condition(kind)
    return cond if cond is not None and cond.true else None


def job_result(job: Obj) -> tuple[str, str] | None:
    """``("complete", "")``, ``("failed", why)``, ``("timed_out", why)``, or None while the Job runs."""
    j = Job(job)
    if any(j.holds(kind) for kind in JOB_SUCCESS):
        return "complete", ""
    for kind in JOB_FAILURE:
        cond = _holding(j, kind)
        if cond is not None:
            reason, message = cond.reason or kind, cond.message
            text = f"Job {j.name} {kind}: {reason}" + (f": {message}" if message else "")
            return ("timed_out" if reason == "DeadlineExceeded" else "failed"), text
    return None


def unschedulable(pod: Obj) -> str | None:
    """The scheduler's message while the pod is ``Unschedulable``, else None."""
    cond = Pod(pod).condition("PodScheduled")
    if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
        return cond.message or "no message from the scheduler"
    return None


def pod_fault(pod: Obj) -> str | None:
    """Why the pod is broken for good, naming where, or None (unschedulable pods are judged by the caller)."""
    p = Pod(pod)
    if p.deleting:
        return None
    for cs in p.all_containers:
        waiting = cs.waiting
        if waiting is not None and waiting[0] in FATAL_WAITING:
            reason, message = waiting
            return (
                f"{where(pod)}: container {cs.name} cannot start: {reason}"
                + (f" ({cs.image})" if cs.image else "")
                + (f": {message}" if message else "")
            )
        term = cs.terminated
        if term is not None and term.failed:
            text = f"{where(pod)}: container {cs.name} "
            if term.reason == "OOMKilled":
                text += f"was OOMKilled (exit code {term.exit_code}): it ran out of memory"
            else:
                text += f"exited with code {term.exit_code} ({term.reason or 'Error'})"
            if term.message:
                text += f": {term.message.strip()}"
            return text
    if p.phase == "Failed":
        return f"{where(pod)} failed: {p.reason or 'Failed'}" + (f": {p.message}" if p.message else "")
    return None


def started(pod: Obj) -> list[str]:
    """Names of the pod's containers that have started (running or terminated): their logs can be read.

    Its init containers too: the node's monitor is one (a sidecar).
    """
    return [cs.name for cs in Pod(pod).all_containers if cs.started]


def terminated(pod: Obj, container: str) -> bool:
    """Whether ``container`` of the pod has terminated (or the pod is finished or gone)."""
    p = Pod(pod)
    if p.finished:
        return True
    cs = p.container(container)
    return cs is not None and cs.terminated is not None


def phases(pods: Iterable[Obj]) -> Counter[str]:
    """How many pods are in each phase (Pending, Running, Succeeded, Failed, Unknown)."""
    return Counter(Pod(p).phase for p in pods)


def duplicate_indexes(pods: Iterable[Obj]) -> dict[str, list[str]]:
    """Completion indexes that more than one pod ran under, with those pods' names."""
    by_index: dict[str, list[str]] = {}
    for pod in map(Pod, pods):
        by_index.setdefault(pod.index, []).append(pod.name)
    return {i: sorted(names) for i, names in by_index.items() if len(names) > 1}


def not_ready(node: Obj) -> str | None:
    """The node's ``Ready`` when not ``True``: ``False``, ``Unknown`` (or what else it says), ``missing``."""
    ready = Node(node).condition("Ready")
    if ready is None:
        return "missing"
    return None if ready.true else ready.status or "missing"


def node_lost(pod: Obj, node: Obj | None, held: Holding | None = None) -> Disruption | None:
    """The pod's node is gone, or not Ready and ``held`` so past its bound (:mod:`.holds`); else None.

    ``node`` is the Node as the API returns it, None when it was deleted (which counts at once). A pod with no
    node yet, or that has finished or is being deleted, needs no node.
    """
    p = Pod(pod)
    name = p.node_name
    if not name or p.finished or p.deleting:
        return None
    if node is None:
        return _disruption(pod, "NodeDeleted", f"node {name} was deleted while the pod ran")
    if not_ready(node) is None or held is None or not held.counts:
        return None
    ready = Node(node).condition("Ready")
    how = f"not Ready for {held.held_s:.0f}s, past {held.bound_s:g}s, its pods unheard"
    if ready is None:
        return _disruption(pod, "NodeLost", f"node {name} has no Ready condition ({how})", node)
    reason, message = ready.reason or "NotReady", ready.message
    text = f"node {name} was lost (Ready={ready.status or None}, {reason}" + (
        f": {message}" if message else ""
    )
    return _disruption(pod, "NodeLost", f"{text}; {how})", node, ready.last_transition)


def disruption(
    pod: Obj, node: Obj | None, *, nodes_known: bool = True, ready: Holding | None = None
) -> Disruption | None:
    """Why the infrastructure took the pod away (see the module docstring), or None.

    ``node`` is the pod's Node (None when deleted); with ``nodes_known`` False (the nodes not listed yet)
    only the pod's own condition is read. ``ready``: the node's ``Ready`` other than True as held so far.
    """
    p = Pod(pod)
    cond = _holding(p, DISRUPTION_TARGET)
    if cond is not None:
        return _disruption(pod, cond.reason or DISRUPTION_TARGET, cond.message, node, cond.last_transition)
    if p.phase == "Failed" and p.reason in KUBELET_DISRUPTIONS:
        return _disruption(pod, p.reason, p.message, node)
    if not nodes_known:
        return None
    lost = node_lost(pod, node, ready)
    if lost is not None or node is None:
        return lost
    deleted, failed = p.deleting, p.phase == "Failed"
    cordoned = Node(node).cordoned
    leaving = going_away(node)
    if (deleted and (cordoned or leaving)) or (failed and leaving):
        reason = "NodeGoingAway" if leaving else "NodeDrained"
        return _disruption(pod, reason, "the pod was deleted" if deleted else "the pod failed", node)
    return None


def going_away(node: Obj) -> list[str]:
    """What the node's taints of :data:`GOING_AWAY` say: ``spot interruption notice (taint ...)``."""
    keys = [str(t.get("key")) for t in Node(node).taints]
    return [f"{GOING_AWAY[k]} (taint {k})" for k in keys if k in GOING_AWAY]


def job_disruption(job: Obj, pods: Iterable[Obj]) -> Disruption | None:
    """The disruption that made the Job's ``podFailurePolicy`` fail it, when it did; else None.

    The Job controller's message names the pod (``Pod ns/p has condition DisruptionTarget matching FailJob
    rule at index 0``); the pod, when still seen, gives its index, node and the condition's reason.
    """
    j = Job(job)
    cond = j.condition("Failed") or j.condition("FailureTarget")
    if cond is None or not cond.true or cond.reason != POD_FAILURE_POLICY:
        return None
    message = cond.message
    if f"condition {DISRUPTION_TARGET}" not in message:
        return None
    named = message.split()[1].rpartition("/")[2] if message.startswith("Pod ") else ""
    for pod in pods:
        if Pod(pod).name == named:
            found = disruption(pod, None, nodes_known=False)
            if found is not None:
                return found
    return Disruption(named or "?", None, None, DISRUPTION_TARGET, f"the Job's podFailurePolicy: {message}")


def _disruption(
    pod: Obj, reason: str, message: str, node: Obj | None = None, stamp: object = None
) -> Disruption:
    """The pod's disruption, the node's going-away taints and cordon added to ``message``."""
    p = Pod(pod)
    notes = going_away(node) if node is not None else []
    if node is not None and Node(node).cordoned:
        notes.append(f"node {p.node_name} is cordoned")
    return Disruption(
        pod=p.name,
        node=p.node_rank,
        host=p.node_name,
        reason=reason,
        message="; ".join(m for m in (message, *notes) if m),
        time=epoch(stamp),
    )


def terminations(pods: Iterable[Obj]) -> list[Termination]:
    """Every container that ended badly (non-zero exit or OOMKilled), as its pod's status recorded it."""
    found = []
    for p in map(Pod, pods):
        for cs in p.all_containers:
            term = cs.terminated if cs.terminated is not None and cs.terminated.obj else cs.last_terminated
            if term is None or not term.failed:
                continue
            found.append(
                Termination(
                    pod=p.name,
                    node=p.node_rank,
                    host=p.node_name,
                    reason=term.reason or "Error",
                    exit_code=term.exit_code,
                    time=epoch(term.finished_at),
                )
            )
    return found


def deleted_under_run(
    namespace: Obj | None,
    job: Obj | None,
    service: Obj | None,
    pods: Iterable[Obj],
    *,
    names: tuple[str, str, str],
    job_ended: bool,
    jobset: tuple[str, Obj | None] | None = None,
    job_made: bool = True,
) -> Disruption | None:
    """The run's object that someone else is deleting while it runs (the suite deletes only after the wait).

    ``namespace``, ``job`` and ``service`` are the run's objects as last read (None: gone); ``names`` their
    names (namespace, Job, Service); ``jobset`` the run's JobSet's name and copy (``--job-kind jobset``). A
    namespace going away is named first (it takes everything with it), then the JobSet (it takes its Job and
    Service), the Job, the Service, and a pod being deleted while the Job still runs (a Job that has ended
    deletes its own pods). Until ``job_made`` (a JobSet's controller makes them) a missing Job or Service is
    not missed. Disruptions (evictions, drains) are judged before this, by :func:`disruption`.
    """
    ns_name, job_name, service_name = names
    found: list[tuple[str, str, Obj | None]] = [("namespace", ns_name, namespace)]
    if jobset is not None:
        found.append(("JobSet", *jobset))
    if job_made:
        found += [("Job", job_name, job), ("Service", service_name, service)]
    for kind, name, obj in found:
        if obj is None or View(obj).deleting:
            when = View(obj).deletion_timestamp if obj is not None else ""
            said = f"its deletion was asked for at {when}" if when else "it is gone"
            return Disruption(
                pod=name,
                node=None,
                host=None,
                reason=DELETED_UNDER_RUN,
                message=f"{said}, while the run trained, and not by rollcall",
                time=epoch(when),
                kind=kind,
            )
    if job_ended:
        return None
    for pod in sorted(pods, key=index_of):
        p = Pod(pod)
        if p.deleting and p.phase not in ("Succeeded", "Failed"):
            return _disruption(
                pod,
                DELETED_UNDER_RUN,
                f"its deletion was asked for at {p.deletion_timestamp}, while the run trained, and not by "
                "rollcall or the Job",
                stamp=p.deletion_timestamp,
            )
    return None
