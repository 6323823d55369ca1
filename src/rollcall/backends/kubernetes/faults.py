"""What a Job's and its pods' status say: finished, broken (and how), or still going.

Pure functions over the objects as the API returns them (JSON dicts), so every rule is unit-tested without a
cluster. A fault names the pod, its completion index (the node rank) and its node.

A pod is broken when:

- it has been ``Unschedulable`` for longer than the grace period (the scheduler's message says why);
- a container cannot start: its image cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``,
  ``InvalidImageName``, ...) or its configuration is unusable (``CreateContainerConfigError``, ...);
- a container terminated ``OOMKilled`` or with a non-zero exit code;
- the pod itself failed (rejected by the kubelet, ...).

Pods being deleted are left to the Job's own verdict: a deleted pod's containers exit non-zero too.

A pod is *disrupted* (:func:`disruption`, a :class:`~rollcall.rootcause.Disruption`: the infrastructure took
it away, no rank failed) when, judged before any fault of any pod:

- it has the ``DisruptionTarget`` condition (``True``): evicted through the Eviction API (``kubectl drain``,
  Karpenter, the AWS Node Termination Handler), preempted, deleted by the taint manager or pod GC, or
  terminated by the kubelet (node pressure, graceful node shutdown; without the condition, the failed
  pod's reason of :data:`KUBELET_DISRUPTIONS` says so);
- its node was lost (:func:`node_lost`): deleted, or its ``Ready`` condition is no longer ``True`` (the node
  controller marks it ``Unknown`` once the kubelet has not renewed its lease for the node-monitor grace
  period);
- it is being deleted on a node that is cordoned (a drain without the Eviction API), or is being deleted or
  has failed on a node with a taint of :data:`GOING_AWAY` (a spot interruption, Karpenter's disruption, a
  scale-down).

The node's taints of :data:`GOING_AWAY` name why in the disruption's message. A Job failed by its
``podFailurePolicy`` for a pod's ``DisruptionTarget`` condition reads the same (:func:`job_disruption`).

:func:`terminations` reads every container that ended badly as a typed
:class:`~rollcall.rootcause.Termination`: the root cause of a run whose pod was killed without a word.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rollcall.rootcause import Disruption, Termination

Obj = dict[str, Any]

INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
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
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return str(labels.get(INDEX_LABEL) or annotations.get(INDEX_LABEL) or "?")


def where(pod: Obj) -> str:
    """``pod <name> (index <i>) on node <node>``."""
    node = (pod.get("spec") or {}).get("nodeName") or "no node yet"
    return f"pod {pod['metadata']['name']} (index {index_of(pod)}) on node {node}"


def _condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def job_result(job: Obj) -> tuple[str, str] | None:
    """``("complete", "")``, ``("failed", why)``, ``("timed_out", why)``, or None while the Job runs."""
    for kind in JOB_SUCCESS:
        cond = _condition(job, kind)
        if cond and cond.get("status") == "True":
            return "complete", ""
    for kind in JOB_FAILURE:
        cond = _condition(job, kind)
        if cond and cond.get("status") == "True":
            reason, message = cond.get("reason") or kind, cond.get("message") or ""
            text = f"Job {job['metadata']['name']} {kind}: {reason}" + (f": {message}" if message else "")
            return ("timed_out" if reason == "DeadlineExceeded" else "failed"), text
    return None


def unschedulable(pod: Obj) -> str | None:
    """The scheduler's message while the pod is ``Unschedulable``, else None."""
    cond = _condition(pod, "PodScheduled")
    if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
        return str(cond.get("message") or "no message from the scheduler")
    return None


def _statuses(pod: Obj) -> Iterable[Obj]:
    status = pod.get("status") or {}
    yield from status.get("initContainerStatuses") or []
    yield from status.get("containerStatuses") or []


def pod_fault(pod: Obj) -> str | None:
    """Why the pod is broken for good, naming where, or None (unschedulable pods are judged by the caller)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    for cs in _statuses(pod):
        state, name = cs.get("state") or {}, cs.get("name")
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            message = waiting.get("message") or ""
            image = cs.get("image") or ""
            return (
                f"{where(pod)}: container {name} cannot start: {waiting['reason']}"
                + (f" ({image})" if image else "")
                + (f": {message}" if message else "")
            )
        term = state.get("terminated")
        if term is not None and (term.get("reason") == "OOMKilled" or term.get("exitCode", 0) != 0):
            reason = term.get("reason") or "Error"
            text = f"{where(pod)}: container {name} "
            if reason == "OOMKilled":
                text += f"was OOMKilled (exit code {term.get('exitCode')}): it ran out of memory"
            else:
                text += f"exited with code {term.get('exitCode')} ({reason})"
            if term.get("message"):
                text += f": {term['message'].strip()}"
            return text
    if status.get("phase") == "Failed":
        reason = status.get("reason") or "Failed"
        message = status.get("message") or ""
        return f"{where(pod)} failed: {reason}" + (f": {message}" if message else "")
    return None


def started(pod: Obj) -> list[str]:
    """Names of the pod's containers that have started (running or terminated): their logs can be read."""
    names = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state or cs.get("started"):
            names.append(str(cs["name"]))
    return names


def terminated(pod: Obj, container: str) -> bool:
    """Whether ``container`` of the pod has terminated (or the pod is finished or gone)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == container:
            return "terminated" in (cs.get("state") or {})
    return False


def phases(pods: Iterable[Obj]) -> Counter[str]:
    """How many pods are in each phase (Pending, Running, Succeeded, Failed, Unknown)."""
    return Counter(str((p.get("status") or {}).get("phase") or "Pending") for p in pods)


def duplicate_indexes(pods: Iterable[Obj]) -> dict[str, list[str]]:
    """Completion indexes that more than one pod ran under, with those pods' names."""
    by_index: dict[str, list[str]] = {}
    for pod in pods:
        by_index.setdefault(index_of(pod), []).append(pod["metadata"]["name"])
    return {i: sorted(names) for i, names in by_index.items() if len(names) > 1}


def node_lost(pod: Obj, node: Obj | None) -> Disruption | None:
    """The pod's node is gone or not Ready; else None.

    ``node`` is the Node as the API returns it, None when it was deleted. A pod with no node yet, or that
    has finished or is being deleted, needs no node.
    """
    name = (pod.get("spec") or {}).get("nodeName")
    if not name or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if node is None:
        return _disruption(pod, "NodeDeleted", f"node {name} was deleted while the pod ran")
    ready = _condition(node, "Ready")
    if ready is not None and ready.get("status") == "True":
        return None
    if ready is None:
        return _disruption(pod, "NodeLost", f"node {name} has no Ready condition", node)
    reason, message = ready.get("reason") or "NotReady", ready.get("message") or ""
    text = f"node {name} was lost (Ready={ready.get('status')}, {reason}" + (
        f": {message})" if message else ")"
    )
    return _disruption(pod, "NodeLost", text, node, ready.get("lastTransitionTime"))


def disruption(pod: Obj, node: Obj | None, *, nodes_known: bool = True) -> Disruption | None:
    """Why the infrastructure took the pod away (see the module docstring), or None.

    ``node`` is the pod's Node (None when deleted); with ``nodes_known`` False (the nodes not listed yet)
    only the pod's own condition is read.
    """
    cond = _condition(pod, DISRUPTION_TARGET)
    if cond is not None and cond.get("status") == "True":
        message = str(cond.get("message") or "")
        return _disruption(
            pod, str(cond.get("reason") or DISRUPTION_TARGET), message, node, cond.get("lastTransitionTime")
        )
    status = pod.get("status") or {}
    if status.get("phase") == "Failed" and status.get("reason") in KUBELET_DISRUPTIONS:
        return _disruption(pod, str(status["reason"]), str(status.get("message") or ""), node)
    if not nodes_known:
        return None
    lost = node_lost(pod, node)
    if lost is not None or node is None:
        return lost
    deleted = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    failed = (pod.get("status") or {}).get("phase") == "Failed"
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    leaving = going_away(node)
    if (deleted and (cordoned or leaving)) or (failed and leaving):
        reason = "NodeGoingAway" if leaving else "NodeDrained"
        return _disruption(pod, reason, "the pod was deleted" if deleted else "the pod failed", node)
    return None


def going_away(node: Obj) -> list[str]:
    """What the node's taints of :data:`GOING_AWAY` say: ``spot interruption notice (taint ...)``."""
    taints = (node.get("spec") or {}).get("taints") or []
    keys = [str(t.get("key")) for t in taints]
    return [f"{GOING_AWAY[k]} (taint {k})" for k in keys if k in GOING_AWAY]


def job_disruption(job: Obj, pods: Iterable[Obj]) -> Disruption | None:
    """The disruption that made the Job's ``podFailurePolicy`` fail it, when it did; else None.

    The Job controller's message names the pod (``Pod ns/p has condition DisruptionTarget matching FailJob
    rule at index 0``); the pod, when still seen, gives its index, node and the condition's reason.
    """
    cond = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if cond is None or cond.get("status") != "True" or cond.get("reason") != POD_FAILURE_POLICY:
        return None
    message = str(cond.get("message") or "")
    if f"condition {DISRUPTION_TARGET}" not in message:
        return None
    named = message.split()[1].rpartition("/")[2] if message.startswith("Pod ") else ""
    for pod in pods:
        if pod["metadata"]["name"] == named:
            found = disruption(pod, None, nodes_known=False)
            if found is not None:
                return found
    return Disruption(named or "?", None, None, DISRUPTION_TARGET, f"the Job's podFailurePolicy: {message}")


def _disruption(
    pod: Obj, reason: str, message: str, node: Obj | None = None, stamp: object = None
) -> Disruption:
    """The pod's disruption, the node's going-away taints and cordon added to ``message``."""
    host = (pod.get("spec") or {}).get("nodeName")
    notes = going_away(node) if node is not None else []
    if node is not None and (node.get("spec") or {}).get("unschedulable"):
        notes.append(f"node {host} is cordoned")
    index = index_of(pod)
    return Disruption(
        pod=str(pod["metadata"]["name"]),
        node=int(index) if index.isdigit() else None,
        host=host,
        reason=reason,
        message="; ".join(m for m in (message, *notes) if m),
        time=_epoch(stamp),
    )


def terminations(pods: Iterable[Obj]) -> list[Termination]:
    """Every container that ended badly (non-zero exit or OOMKilled), as its pod's status recorded it."""
    found = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        index = index_of(pod)
        for cs in _statuses(pod):
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if not term or (term.get("exitCode", 0) == 0 and term.get("reason") != "OOMKilled"):
                continue
            found.append(
                Termination(
                    pod=str(meta.get("name")),
                    node=int(index) if index.isdigit() else None,
                    host=spec.get("nodeName"),
                    reason=str(term.get("reason") or "Error"),
                    exit_code=term.get("exitCode"),
                    time=_epoch(term.get("finishedAt")),
                )
            )
    return found


def _epoch(stamp: object) -> float | None:
    """An RFC 3339 time of the API (``2025-12-01T08:00:01Z``) in seconds since the epoch."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
