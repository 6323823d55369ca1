"""One run on the cluster: its namespace, Service and Indexed Job, from creation to deletion.

provision
    Creates the namespace (written to the session's :class:`~.reaper.Ledger` first), then, after a
    server-side dry run, the headless Service and the Indexed Job, and starts watching the Job and its pods
    (selected by the Job's controller uid). In an existing namespace (``--namespace``) no namespace is
    created: the ledger holds the run's claim on its own objects there (by run-id label).
wait
    Fails at once, naming the pod, its index and its node, on a Failed Job, a pod Unschedulable past the
    grace period (with the scheduler's message), an image that cannot be pulled, an OOMKilled or non-zero
    container, or the job timeout (:mod:`.pod_state`). A pod the infrastructure took away (evicted,
    preempted, its node deleted, lost, drained or reclaimed) is judged first, as a disruption
    (:attr:`~rollcall.backends.JobStatus.disruption`), not as a failed rank. Progress goes to the
    terminal meanwhile.
    Until every pod is scheduled the run is bounded by ``--capacity-timeout`` instead: a Job suspended by
    Kueue waits for quota, pods wait for nodes that a provisioner brings (the Unschedulable grace does not
    apply; NodeClaims or scale-up events are shown), and past the bound the run ends ``NO_CAPACITY``,
    naming what it waited for. The job timeout counts from when every pod is scheduled; image pulls are
    shown and timed apart (:class:`~.waits.Waits`).
collect
    Every container's log is followed from the moment it starts into ``<artifacts>/<pod>.log`` and parsed
    as it arrives (:mod:`.podlogs`). With EFA requested, what each pod's NCCL said of it is reported
    (:mod:`.efa`); the judge, not the job, decides whether that fails the run. On failure the
    pods, the Job and the namespace's events are saved as YAML next to the logs.
clean up
    The namespace is deleted with foreground propagation, its Jobs first
    (:func:`.kube.delete_namespace`), and awaited within a bound (a warning otherwise).
    In an existing namespace, the run's Job (foreground, so its pods go first), Service and pods (in one
    request: :func:`.kube.delete_labelled`) are deleted instead, and awaited likewise; the namespace stays.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from rollcall.backends import CleanupError, JobState, JobStatus, StopTest, Waits
from rollcall.backends.kubernetes import efa, waits
from rollcall.backends.kubernetes.capacity import Lookup
from rollcall.backends.kubernetes.efa import EfaEvidence
from rollcall.backends.kubernetes.instances import advertised_counts, count_facts, expected_devices
from rollcall.backends.kubernetes.kube import (
    CONNECT_TIMEOUT_S,
    Kube,
    call,
    create,
    delete_labelled,
    delete_namespace,
    message_of,
)
from rollcall.backends.kubernetes.manifests import CONTAINER, Names, Rendered
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.backends.kubernetes.pod_state import (
    deleted_under_run,
    disruption,
    duplicate_indexes,
    index_of,
    job_disruption,
    job_result,
    node_lost,
    phases,
    pod_fault,
    started,
    terminated,
    terminations,
    unschedulable,
    where,
)
from rollcall.backends.kubernetes.podlogs import LogFollower
from rollcall.backends.kubernetes.reaper import Claim, Ledger
from rollcall.backends.kubernetes.views import Event, Job, Pod, items
from rollcall.backends.kubernetes.watch import Informer, WaitTimeout, WatchLost, wait_for
from rollcall.collect import Collector
from rollcall.evidence.endings import Disruption
from rollcall.jobspec import JobSpec
from rollcall.options.kubernetes import KubernetesOptions

log = logging.getLogger(__name__)

#: A container that has ended is read until its log has been quiet this long (kubelets end the stream
#: themselves; this bounds servers that keep it open).
DRAIN_IDLE_S = 1.0
#: Seconds past the Job's own activeDeadlineSeconds before the suite's own deadline fires.
DEADLINE_SLACK_S = 10.0
#: How long clean-up waits for a namespace to be gone, and how long logs are read after the job has ended.
CLEANUP_TIMEOUT_S = 120.0
DRAIN_S = 60.0
#: How often NodeClaims and scale-up events are read while the pods wait for capacity.
CAPACITY_POLL_S = 5.0
_PHASES = ("Pending", "Running", "Succeeded", "Failed")
#: One pod's :func:`.pod_state.disruption`, :func:`.pod_state.pod_fault` and :func:`.pod_state.unschedulable`.
Assessment = tuple[Disruption | None, str | None, str | None]


class RollcallWarning(UserWarning):
    """Something the suite could not finish (e.g. a namespace still terminating)."""


@dataclass(frozen=True)
class JobSettings:
    """What a run needs of the session, fixed when it is launched.

    Attributes:
        kube: the API client.
        ledger: where the run's namespace is recorded for deletion should the session die (None: ``--keep``).
        unschedulable_grace_s: how long a pod may stay Unschedulable before the run fails.
        cleanup_timeout_s: how long to wait for the namespace to be gone.
        drain_s: how long to keep reading logs after the job has ended.
        progress: where progress lines go (None for silence).
        capacity_timeout_s: how long pods may wait to be scheduled (quota, capacity that arrives).
        arriving: the provisioners expected to bring the missing nodes (None: the nodes exist).
    """

    kube: Kube
    unschedulable_grace_s: float
    ledger: Ledger | None = None
    cleanup_timeout_s: float = CLEANUP_TIMEOUT_S
    drain_s: float = DRAIN_S
    progress: Callable[[str], None] | None = None
    capacity_timeout_s: float = KubernetesOptions.capacity_timeout
    arriving: Lookup | None = None


@dataclass
class KubernetesJob:
    """One run on the cluster: its objects, its watches and its log followers."""

    settings: JobSettings
    spec: JobSpec
    names: Names
    rendered: Rendered
    collector: Collector
    uid: str = ""
    jobs: Informer | None = None
    pods: Informer | None = None
    nodes: Informer | None = None
    followers: dict[tuple[str, str], LogFollower] = field(default_factory=dict)
    evidence: dict[str, EfaEvidence] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _unschedulable_since: dict[str, float] = field(default_factory=dict)
    _owned_checked: float = 0.0
    _created_at: datetime | None = None
    _scheduled_at: float | None = None
    _scheduled_s: float | None = None
    _waited_for: str = ""
    _timeout_s: float = 0.0
    _stop_test: StopTest | None = None
    _waiting: str = ""
    _waiting_read_at: float = -CAPACITY_POLL_S
    _shown: tuple[tuple[tuple[str, int], ...], str] = ((), "")
    _shown_at: float = 0.0
    _confirming: Future[None] | None = None
    _assessed: dict[str, tuple[tuple[str, str, bool], Assessment]] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        """The run's namespace."""
        return self.names.namespace

    @property
    def claim(self) -> Claim:
        """What clean-up deletes: the run's namespace, or its own objects in one it does not own."""
        return Claim(self.namespace) if self.names.own_namespace else Claim(self.namespace, self.names.run_id)

    @property
    def _owned(self) -> str:
        """What clean-up deletes, for messages."""
        if self.names.own_namespace:
            return f"namespace {self.namespace}"
        return f"the Job and Service of run {self.names.run_id} in namespace {self.namespace}"

    # -- provision ----------------------------------------------------------------------------------------

    def provision(self) -> None:
        """Create the namespace (unless it exists), then (after a server-side dry run) the Service and Job."""
        kube, ns = self.settings.kube, self.namespace
        if self.settings.ledger is not None:
            self.settings.ledger.add(self.claim)
        if self.rendered.namespace is not None:
            create(kube.core.create_namespace, body=self.rendered.namespace)
            self._await_default_service_account()
        create(kube.core.create_namespaced_service, ns, body=self.rendered.service, dry_run="All")
        create(kube.batch.create_namespaced_job, ns, body=self.rendered.job, dry_run="All")
        create(kube.core.create_namespaced_service, ns, body=self.rendered.service)
        job = create(kube.batch.create_namespaced_job, ns, body=self.rendered.job)
        if not Job(job).uid:
            job = call(kube.batch.read_namespaced_job, self.names.job, ns)
        self.uid = Job(job).uid
        self._created_at = Job(job).created
        self.jobs = Informer(
            kube.batch.list_namespaced_job,
            f"job {ns}/{self.names.job}",
            namespace=ns,
            field_selector=f"metadata.name={self.names.job}",
        ).start()
        self.pods = Informer(
            kube.core.list_namespaced_pod,
            f"pods of job {ns}/{self.names.job}",
            namespace=ns,
            label_selector=f"batch.kubernetes.io/controller-uid={self.uid}",
        ).start()
        # The nodes' Ready conditions: a node lost mid-run fails the run at once, naming it.
        self.nodes = Informer(kube.core.list_node, "nodes").start()
        self.started = time.monotonic()
        self._say(
            f"created {ns}/{self.names.job}: {self.spec.nodes} pod(s) x {self.spec.procs_per_node} ranks"
        )

    def _await_default_service_account(self) -> None:
        """Pods cannot be created before the namespace's ``default`` ServiceAccount exists (usually <1 s)."""
        accounts = Informer(
            self.settings.kube.core.list_namespaced_service_account,
            f"service accounts of {self.namespace}",
            namespace=self.namespace,
            field_selector="metadata.name=default",
        ).start()
        try:
            wait_for(lambda: accounts.get("default"), accounts, timeout_s=30, what="default ServiceAccount")
        except (WaitTimeout, WatchLost) as exc:
            log.warning("%s; creating the Job anyway (its controller retries)", exc)
        finally:
            accounts.stop()

    # -- wait ---------------------------------------------------------------------------------------------

    def wait(self, timeout_s: float, stop: StopTest | None = None) -> JobStatus:
        """Wait for the Job to complete; fail fast on the first broken pod; see the module docstring.

        ``stop`` is re-tested with every other condition (each change and every second); a reason it gives
        ends the wait as ``STOPPED``, and :meth:`cleanup` deleting the run's objects ends the pods.
        """
        assert self.jobs is not None and self.pods is not None, "provision() first"
        self._stop_test = stop
        try:
            return self._wait(timeout_s)
        finally:
            for informer in (self.jobs, self.pods, self.nodes):
                if informer is not None:
                    informer.stop()

    def _wait(self, timeout_s: float) -> JobStatus:
        assert self.jobs is not None and self.pods is not None
        self._timeout_s = timeout_s
        try:
            # A backstop: _verdict ends the wait for capacity and the job timeout itself.
            status = wait_for(
                self._verdict,
                self.jobs,
                self.pods,
                timeout_s=self.settings.capacity_timeout_s + timeout_s + 2 * DEADLINE_SLACK_S,
                what=f"job {self.namespace}/{self.names.job}",
                describe=self._describe,
            )
        except WaitTimeout:
            status = JobStatus(
                JobState.TIMED_OUT,
                f"job {self.namespace}/{self.names.job} did not finish within {timeout_s:g}s "
                f"(--job-timeout); pods: {self._describe()}",
            )
        except WatchLost as exc:
            status = JobStatus(JobState.FAILED, f"{exc}; the job's outcome is unknown")
        self._observe()
        self._drain(close_running=status.state is not JobState.SUCCEEDED)
        self._progress(force=True)
        status.details += self._details()
        if status.state is JobState.SUCCEEDED and self.rendered.efa:
            self._report_efa(status)
        status.terminations = terminations(self.pods.objects())
        status.node_info = self._node_info()
        status.waits = self.waited()
        if status.waits.scheduled_s is not None and (status.waits.waited_for or status.waits.image_pull_s):
            self._say(status.waits.line())
        if status.state is not JobState.SUCCEEDED:
            self._save_state()
        return status

    def _node_info(self) -> dict[str, dict[str, str]]:
        """What each node the pods ran on says of itself (:attr:`.nodeviews.Node.facts`), by node name.

        With its own health as the platform reports it (:attr:`.nodeviews.Node.health`), and what it
        advertises of its accelerators and EFA beside what its instance type has
        (:func:`.instances.count_facts`), and the devices its pod must see where the pod was given all its
        instance type has (:func:`.instances.expected_devices`).
        """
        assert self.pods is not None
        found = {}
        for pod in self.pods.objects():
            name = Pod(pod).node_name
            node = self.nodes.get(name) if self.nodes is not None and name else None
            if name and node is not None:
                seen = Node(node)
                found[name] = {
                    **seen.facts,
                    **seen.health.facts,
                    **count_facts(seen.instance_type, advertised_counts(seen.advertised)),
                    **expected_devices(seen.instance_type, Pod(pod).limits),
                }
        return found

    def _verdict(self) -> JobStatus | None:
        """The condition :func:`wait_for` re-tests: a status once the run has ended, else None."""
        assert self.jobs is not None and self.pods is not None
        self._observe()
        now = time.monotonic()
        job = self.jobs.get(self.names.job)
        ended = self._scheduling(job, now)
        if ended is not None:
            return ended
        pods = self.pods.objects()
        found = self._disruption(pods) or self._deleted_under_run(job, pods, now)
        if found is not None:  # before any fault: ranks dying because a peer was taken away are consequences
            return JobStatus.disrupted(found)
        for pod in pods:
            _, fault, message = self._assess(pod)
            if fault:
                return JobStatus(JobState.FAILED, fault)
            name = Pod(pod).name
            if message is None or self.settings.arriving is not None:  # capacity is coming: not a fault
                self._unschedulable_since.pop(name, None)
                continue
            since = self._unschedulable_since.setdefault(name, now)
            if now - since >= self.settings.unschedulable_grace_s:
                return JobStatus(
                    JobState.FAILED, f"{where(pod)} is Unschedulable after {now - since:.0f}s: {message}"
                )
        if job is None:
            return JobStatus(JobState.FAILED, f"Job {self.namespace}/{self.names.job} was deleted")
        result = job_result(job)
        reason = self._stop_test() if self._stop_test is not None and result is None else None
        if reason:
            return JobStatus(JobState.STOPPED, f"{reason}; job {self.namespace}/{self.names.job} is deleted")
        if result is None:
            if (
                self._scheduled_at is not None
                and now - self._scheduled_at >= self._timeout_s + DEADLINE_SLACK_S
            ):
                return JobStatus(
                    JobState.TIMED_OUT,
                    f"job {self.namespace}/{self.names.job} did not finish within {self._timeout_s:g}s "
                    f"(--job-timeout) of its pods being scheduled; pods: {self._describe()}",
                )
            return None
        kind, why = result
        if kind == "complete":
            return JobStatus(JobState.SUCCEEDED)
        found = job_disruption(job, pods)
        if found is not None:
            return JobStatus.disrupted(found)
        return JobStatus(JobState.TIMED_OUT if kind == "timed_out" else JobState.FAILED, why)

    def _disruption(self, pods: list[dict[str, Any]]) -> Disruption | None:
        """The first pod the infrastructure took away (:func:`.pod_state.disruption`), if any.

        The nodes' watch never holds the verdict up: until it has listed, only the pods' own conditions count.
        """
        for pod in sorted(pods, key=index_of):
            found = self._assess(pod)[0]
            if found is not None:
                return found
        return None

    def _assess(self, pod: dict[str, Any]) -> Assessment:
        """What this copy of ``pod`` says: its :func:`.pod_state.disruption`, fault, and the scheduler's word.

        Worked out once per version of the pod and of its node (the wait re-tests every pod on each change of
        any, so at a few hundred pods this is most of its work); the functions are pure.
        """
        view = Pod(pod)
        node = self.nodes.get(view.node_name or "") if self.nodes else None
        known = self.nodes is not None and self.nodes.synced.is_set()
        version = view.resource_version
        key = (version, Node(node).resource_version if node is not None else "", known)
        cached = self._assessed.get(view.name)
        if cached is not None and version and cached[0] == key:
            return cached[1]
        found = (disruption(pod, node, nodes_known=known), pod_fault(pod), unschedulable(pod))
        self._assessed[view.name] = (key, found)
        return found

    def _deleted_under_run(
        self, job: dict[str, Any] | None, pods: list[dict[str, Any]], now: float
    ) -> Disruption | None:
        """The run's object someone else deletes (:func:`.pod_state.deleted_under_run`), if any.

        The Job and pods come from their informers; the namespace and the Service are read every
        :data:`OWNED_CHECK_S` seconds, and at once when the Job or a pod is seen going away.
        """
        seen = job is None or Job(job).deleting or any(Pod(p).deleting for p in pods)
        if not seen and now - self._owned_checked < OWNED_CHECK_S:
            return None
        self._owned_checked = now
        core = self.settings.kube.core
        namespace = _read_or_none(core.read_namespace, self.namespace)
        service = _read_or_none(core.read_namespaced_service, self.names.service, self.namespace)
        if job is not None and any(Pod(p).deleting for p in pods) and not _ended(job):
            # The Job controller deletes its own pods once the Job has failed (deadline, pod failure policy)
            # and marks the Job first; the pods' watch can show that before the Jobs' watch does.
            job = _read_or_none(self.settings.kube.batch.read_namespaced_job, self.names.job, self.namespace)
        ended = job is not None and _ended(job)
        return deleted_under_run(
            namespace,
            job,
            service,
            pods,
            names=(self.namespace, self.names.job, self.names.service),
            job_ended=ended,
        )

    def _scheduling(self, job: dict[str, Any] | None, now: float) -> JobStatus | None:
        """Until every pod is scheduled: note what they wait for; past ``--capacity-timeout``, the verdict."""
        if self._scheduled_at is not None or job is None:
            return None
        assert self.pods is not None
        pods = self.pods.objects()
        if waits.suspended(job):
            self._waited_for = waits.QUOTA
        elif self.settings.arriving is not None:
            self._waited_for = self.settings.arriving.describe()
        if not waits.suspended(job) and waits.all_scheduled(pods, self.spec.nodes):
            self._scheduled_at = now
            self._scheduled_s = now - self.started
            self._waiting = ""
            if self._waited_for:
                self._say(
                    f"every pod scheduled after {self._scheduled_s:.0f}s (waited for {self._waited_for}); "
                    f"--job-timeout {self._timeout_s:g}s counts from now"
                )
            return None
        bound = self.settings.capacity_timeout_s
        if now - self.started < bound:
            return None
        what = self._waited_for or "nodes to schedule them on"
        seen = f"; last seen: {self._waiting}" if self._waiting else ""
        unscheduled = [p for p in pods if not Pod(p).node_name]
        message = next((m for m in map(unschedulable, unscheduled) if m), None)
        scheduler = f"; the scheduler says: {message}" if message else ""
        return JobStatus(
            JobState.NO_CAPACITY,
            f"{what} did not arrive within {bound:g}s (--capacity-timeout): "
            f"{self._describe()}{seen}{scheduler}",
        )

    def _waiting_note(self) -> str:
        """What the pods wait for now, for progress: quota, NodeClaims or scale-up events, image pulls."""
        if self.pods is None or self.jobs is None:
            return ""
        pods = self.pods.objects()
        if self._scheduled_at is not None:
            pulling = waits.pulling(pods)
            return f"pulling images: {len(pulling)} pod(s)" if pulling else ""
        if waits.suspended(self.jobs.get(self.names.job)):
            return f"waiting for {waits.QUOTA}: the Job is suspended"
        if self.settings.arriving is None:
            return ""
        now = time.monotonic()
        if now - self._waiting_read_at >= CAPACITY_POLL_S:
            self._waiting_read_at = now
            self._waiting = f"waiting for capacity from {self.settings.arriving.describe()}"
            seen = self._capacity_seen()
            if seen:
                self._waiting += ": " + "; ".join(seen)
        return self._waiting

    def _capacity_seen(self) -> list[str]:
        """The run's NodeClaims (Karpenter) and scale-up events, best effort."""
        kube, seen = self.settings.kube, []
        try:
            if self.settings.arriving is not None and self.settings.arriving.karpenter:
                claims = call(
                    kube.custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims", retry_s=5
                )
                lines = waits.claims_since(items(claims), self._created_at)
                if lines:
                    seen.append("NodeClaims " + ", ".join(lines))
            events = items(call(kube.core.list_namespaced_event, self.namespace, retry_s=5))
            seen += waits.scale_up_events(events)
        except Exception as exc:  # progress only
            log.debug("could not read the capacity's progress: %s", message_of(exc))
        return seen

    def waited(self) -> Waits:
        """What the run waited for, so far."""
        pods = self.pods.objects() if self.pods else []
        return Waits(self._waited_for, self._scheduled_s, waits.image_pull_s(pods))

    def _observe(self) -> None:
        """Start following the log of every container that has started; show progress."""
        assert self.pods is not None
        for pod in self.pods.objects():
            name = Pod(pod).name
            for container in started(pod):
                if (name, container) in self.followers:
                    continue
                # the monitor sidecar's log (its stack and silent events) is its pod's too: one node
                sink = self.collector.sink(name if container == CONTAINER else f"{name}.{container}", name)
                evidence = self.evidence.setdefault(name, EfaEvidence())
                self.followers[(name, container)] = LogFollower(
                    self.settings.kube.core, self.namespace, name, container, sink, scan=evidence.scan
                ).start()
        self._progress()

    def _drain(self, *, close_running: bool) -> None:
        """Read the logs to their end: until each stream ends, or its container has ended and it is quiet.

        After a failure, logs of containers still running are read for a moment, then closed.
        """
        bound = self.settings.drain_s if not close_running else min(self.settings.drain_s, 10.0)
        deadline = time.monotonic() + bound
        while True:
            live = [f for f in self.followers.values() if not f.done]
            now = time.monotonic()
            if not live:
                break
            for f in live:
                pod = self.pods.get(f.pod) if self.pods else None
                ended = pod is None or terminated(pod, f.container) or close_running
                if ended and now - f.last_data >= DRAIN_IDLE_S:
                    f.close()
            if now > deadline:
                for f in live:
                    f.error = f.error or f"still streaming {bound:g}s after the job ended; stopped reading"
                    f.close()
                break
            time.sleep(0.05)
        for f in self.followers.values():
            f.join(5)

    def _report_efa(self, status: JobStatus) -> None:
        """Into ``status``: what the pods' NCCL lines showed of the EFA requested (:func:`.efa.check`).

        The job's state stays as it is: whether that fails the run is :func:`rollcall.judge.efa`'s.
        """
        status.efa = efa.check(self.evidence, required=self.spec.accelerator == "nvidia")
        status.details += efa.details(status.efa)

    def _details(self) -> list[str]:
        assert self.pods is not None
        details = []
        for index, pods in sorted(duplicate_indexes(self.pods.objects()).items()):
            details.append(f"index {index} ran in {len(pods)} pods ({', '.join(pods)}); all logs are kept")
        for (pod, _container), f in sorted(self.followers.items()):
            if f.error:
                details.append(f"log of {pod}: {f.error}")
        never = sorted(p.name for p in map(Pod, self.pods.objects()) if not started(p.obj) and p.name)
        if never:
            details.append(f"pod(s) that never started, so left no log: {', '.join(never)}")
        return details

    def _describe(self) -> str:
        pods = self.pods.objects() if self.pods else []
        counts = phases(pods)
        text = ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())) or "no pods yet"
        return f"{text} (of {self.spec.nodes})"

    def _progress(self, force: bool = False) -> None:
        if self.settings.progress is None or self.pods is None:
            return
        counts = phases(self.pods.objects())
        note = self._waiting_note()
        key = (tuple(sorted(counts.items())), note)
        now = time.monotonic()
        changed = key != self._shown
        if (force and changed) or (changed and now - self._shown_at >= 2.0) or now - self._shown_at >= 30.0:
            self._shown, self._shown_at = key, now
            shown = ", ".join(f"{k.lower()} {counts.get(k, 0)}" for k in _PHASES)
            elapsed = now - self.started
            note = f"; {note}" if note else ""
            self._say(
                f"{self.namespace}/{self.names.job} {elapsed:5.0f}s: {shown} of {self.spec.nodes}{note}"
            )

    def _say(self, line: str) -> None:
        if self.settings.progress is not None:
            self.settings.progress(f"[rollcall] {line}")

    def _save_state(self) -> None:
        """Save the pods, the Job and the namespace's events as YAML next to the logs."""
        kube, out = self.settings.kube, self.collector.directory
        try:
            pods = sorted(self.pods.objects() if self.pods else [], key=index_of)
            job = self.jobs.get(self.names.job) if self.jobs else None
            events = items(call(kube.core.list_namespaced_event, self.namespace, retry_s=10))
            if not self.names.own_namespace:  # only the run's own, of all in a shared namespace
                own = {self.names.job, self.names.service, *(Pod(p).name for p in pods)}
                events = [e for e in events if _involved(e) in own]
            events.sort(key=lambda e: Event(e).last_seen)
            for name, data in (("pods.yaml", pods), ("job.yaml", job), ("events.yaml", events)):
                if data is not None:
                    (out / name).write_text(yaml.safe_dump(_trim(data), sort_keys=False))
        except Exception as exc:  # evidence is best effort; the verdict stands
            log.warning("could not save the state of %s: %s", self.namespace, message_of(exc))

    # -- clean up -----------------------------------------------------------------------------------------

    def _force_delete_pods_on_lost_nodes(self) -> None:
        """Delete at once (grace 0) the pods of a lost node, as ``kubectl delete --force`` would.

        No kubelet confirms their deletion, so the namespace would wait for them until the node returns. A
        kubelet that returns ends their containers itself, since their pods are gone.
        """
        if self.pods is None or self.nodes is None or not self.nodes.synced.is_set():
            return
        for name in _lost_node_pods(self.pods.objects(), self.nodes):
            try:
                call(
                    self.settings.kube.core.delete_namespaced_pod,
                    name,
                    self.namespace,
                    body={"gracePeriodSeconds": 0},
                    grace_period_seconds=0,
                )
                log.warning("force-deleted pod %s/%s: its node was lost", self.namespace, name)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("could not force-delete pod %s/%s: %s", self.namespace, name, message_of(exc))

    def cleanup(self) -> None:
        """Stop reading, delete the namespace (foreground) and wait until it is gone; safe to call twice.

        In an existing namespace, the run's Job (foreground) and Service go instead, and the namespace stays.
        A second call (or one after :meth:`cleanup_later`) does nothing.
        """
        if self._confirming is None:
            self.cleanup_later().result()

    def cleanup_later(self) -> Future[None]:
        """:meth:`cleanup`, its wait in a thread of its own: the deletion is asked for before this returns.

        The future's :class:`CleanupError` names what is not gone within ``cleanup_timeout_s``; called
        again, the same future (:class:`~rollcall.backends.ConfirmsLater`).
        """
        if self._confirming is not None:
            return self._confirming
        confirming: Future[None] = Future()
        self._confirming = confirming
        confirming.set_running_or_notify_cancel()
        try:
            watches = self._ask_deletion()
        except BaseException as exc:
            confirming.set_exception(exc)
            raise
        threading.Thread(
            target=self._confirm,
            args=(watches, confirming),
            daemon=True,
            name=f"rollcall-cleanup {self.namespace}",
        ).start()
        return confirming

    def _ask_deletion(self) -> list[Informer]:
        """Stop reading and watching, ask for the run's objects to be deleted; the watches of what must go."""
        kube, ns = self.settings.kube, self.namespace
        for f in self.followers.values():
            f.close()
        for informer in (self.jobs, self.pods, self.nodes):
            if informer is not None:
                informer.stop()
        self._force_delete_pods_on_lost_nodes()
        try:
            if self.names.own_namespace:
                delete_namespace(kube, ns)
            else:
                delete_labelled(kube, ns, self.names.selector)
        except Exception as exc:
            raise CleanupError(f"could not delete {self._owned}: {message_of(exc)}", [self._owned]) from exc
        for f in self.followers.values():
            f.join(2)
        return [w.start() for w in self._leftovers()]

    def _confirm(self, watches: list[Informer], confirming: Future[None]) -> None:
        """Wait until nothing ``watches`` sees is left, within the bound; settle ``confirming``."""
        try:
            wait_for(
                lambda: True if not any(w.objects() for w in watches) else None,
                *watches,
                timeout_s=self.settings.cleanup_timeout_s,
                what=f"deletion of {self._owned}",
            )
            if self.settings.ledger is not None:
                self.settings.ledger.remove(self.claim)
            confirming.set_result(None)
        except (WaitTimeout, WatchLost) as exc:
            message = f"{self._owned} is not gone yet ({exc}); the sweep or the session's reaper will retry"
            log.warning(message)
            confirming.set_exception(CleanupError(message, [self._owned]))
        except BaseException as exc:
            confirming.set_exception(exc)
        finally:
            for w in watches:
                w.stop()

    def _leftovers(self) -> list[Informer]:
        """Watches of what clean-up waits to see gone: the namespace, or the run's own objects in it."""
        kube, ns = self.settings.kube, self.namespace
        if self.names.own_namespace:
            return [
                Informer(
                    kube.core.list_namespace,
                    f"namespace {ns}",
                    field_selector=f"metadata.name={ns}",
                    retry_s=30,
                )
            ]
        lists = (
            ("jobs", kube.batch.list_namespaced_job),
            ("services", kube.core.list_namespaced_service),
            ("pods", kube.core.list_namespaced_pod),
        )
        return [
            Informer(
                fn,
                f"{kind} of run {self.names.run_id}",
                namespace=ns,
                label_selector=self.names.selector,
                retry_s=30,
            )
            for kind, fn in lists
        ]


def _lost_node_pods(pods: list[dict[str, Any]], nodes: Informer) -> list[str]:
    """Pods whose node is gone or not Ready: no kubelet will confirm their deletion."""
    return [Pod(p).name for p in pods if node_lost(p, nodes.get(Pod(p).node_name or "")) is not None]


def _involved(event: dict[str, Any]) -> str | None:
    """The name of the object an event is about."""
    return Event(event).involved


def _trim(data: Any) -> Any:
    """Objects without their managedFields (noise in a report)."""
    if isinstance(data, list):
        return [_trim(item) for item in data]
    if isinstance(data, dict):
        meta = data.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            data = {**data, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return data


def _ended(job: dict[str, Any]) -> bool:
    """The Job has ended, its controller has marked it failing, or its deadline has passed.

    In each case the controller deletes the Job's own pods (clusters before 1.31 mark the Job afterwards).
    """
    if job_result(job) is not None or Job(job).holds("FailureTarget"):
        return True
    deadline, started = Job(job).active_deadline_s, Job(job).start_time
    if deadline is None or started is None:
        return False
    return (datetime.now(UTC) - started).total_seconds() >= deadline - DEADLINE_SLACK_S


#: How often the wait reads the run's namespace and Service to see whether someone else deletes them.
OWNED_CHECK_S = 5.0


def _read_or_none(fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """The object ``fn`` reads now, once, without retries (the wait reads it again soon); None when gone.

    A read that fails otherwise gives an object of just its name, so that a flaky read names nothing.
    """
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, CONNECT_TIMEOUT_S))
        body: dict[str, Any] = json.loads(resp.data) if resp.data else {}
        return body
    except ApiException as exc:
        if exc.status == 404:
            return None
        log.debug("reading %s failed: %s", args[0], message_of(exc))
    except Exception as exc:  # a transport error: not evidence of a deletion
        log.debug("reading %s failed: %s", args[0], exc)
    return {"metadata": {"name": args[0]}}
