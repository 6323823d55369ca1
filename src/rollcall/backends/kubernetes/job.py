"""One run on the cluster: its namespace, Service and Indexed Job, from creation to deletion.

provision
    Creates the namespace (written to the session's :class:`~.reaper.Ledger` first), then, after a
    server-side dry run, the headless Service and the Indexed Job, and starts watching the Job and its pods
    (selected by the Job's controller uid). In an existing namespace (``--namespace``) no namespace is
    created: the ledger holds the run's claim on its own objects there (by run-id label). With
    ``--job-kind jobset`` the JobSet is created instead, and watched too (:mod:`.jobsets`).
wait
    Fails at once, naming the pod, its index and its node, on a Failed Job, a pod Unschedulable past the
    grace period (with the scheduler's message), an image that cannot be pulled, an OOMKilled or non-zero
    container, a pod stuck creating past its bound (its volumes, its sandbox), or the job timeout
    (:mod:`.pod_state`). A pod the infrastructure took away (evicted, preempted, its node deleted, lost,
    drained or reclaimed) is judged first, as a disruption (:attr:`~rollcall.backends.JobStatus.disruption`),
    not as a failed rank; a node's ``Ready`` other than True counts once it has held (:mod:`.holds`).
    Progress goes to the terminal meanwhile.
    Until every pod is scheduled the run is bounded by ``--capacity-timeout`` instead: a Job suspended by
    Kueue waits for quota, pods wait for nodes that a provisioner brings (the Unschedulable grace does not
    apply; NodeClaims or scale-up events are shown), and past the bound the run ends ``NO_CAPACITY``,
    naming what it waited for (:mod:`.scheduling`). The job timeout counts from when every pod is
    scheduled; image pulls are shown and timed apart (:class:`~rollcall.backends.Waits`).
collect
    Every container's log is followed from the moment it starts into ``<artifacts>/<pod>.log`` and parsed
    as it arrives (:mod:`.podlogs`). With EFA requested, what each pod's NCCL said of it is reported
    (:mod:`.efa`); the judge, not the job, decides whether that fails the run. On failure the
    pods, the Job and the namespace's events are saved as YAML next to the logs (:mod:`.snapshot`).
clean up
    The run's namespace, or its own objects in an existing one, deleted and awaited within a bound
    (:class:`.deletion.Cleanup`); one someone else deletes while the run waits is a disruption
    (:class:`.deletion.UnderRun`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from rollcall.backends import JobState, JobStatus, StopTest, Waits
from rollcall.backends.kubernetes import efa, jobsets, snapshot, waits
from rollcall.backends.kubernetes.capacity import Lookup
from rollcall.backends.kubernetes.deletion import Cleanup, UnderRun
from rollcall.backends.kubernetes.discovery import node_info, owns_nodes
from rollcall.backends.kubernetes.efa import EfaEvidence
from rollcall.backends.kubernetes.holds import Bounds, Holds
from rollcall.backends.kubernetes.kube import Kube, call, create
from rollcall.backends.kubernetes.manifests import CONTAINER, Names, Rendered
from rollcall.backends.kubernetes.nodeviews import Node
from rollcall.backends.kubernetes.pod_state import (
    disruption,
    duplicate_indexes,
    index_of,
    job_disruption,
    job_result,
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
from rollcall.backends.kubernetes.scheduling import Scheduling
from rollcall.backends.kubernetes.views import Job, Obj, Pod
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
        bounds: how long a node's ``Ready`` not True and a pod creating must hold before they count.
    """

    kube: Kube
    unschedulable_grace_s: float
    ledger: Ledger | None = None
    cleanup_timeout_s: float = CLEANUP_TIMEOUT_S
    drain_s: float = DRAIN_S
    progress: Callable[[str], None] | None = None
    capacity_timeout_s: float = KubernetesOptions.capacity_timeout
    arriving: Lookup | None = None
    bounds: Bounds = field(default_factory=Bounds)


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
    #: The run's JobSet (``--job-kind jobset``), else None.
    jobsets: Informer | None = None
    #: Whether the run's Job has been seen (a JobSet's controller makes it after the JobSet).
    job_seen: bool = False
    nodes: Informer | None = None
    followers: dict[tuple[str, str], LogFollower] = field(default_factory=dict)
    evidence: dict[str, EfaEvidence] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _unschedulable_since: dict[str, float] = field(default_factory=dict)
    #: What of the run's objects someone else deletes while it runs.
    under_run: UnderRun = field(init=False)
    #: The wait for every pod to be scheduled, and what the pods wait for.
    scheduling: Scheduling = field(init=False)
    #: What must hold before it counts: each node's Ready not True, each pod creating.
    holds: Holds = field(init=False)
    _timeout_s: float = 0.0
    _stop_test: StopTest | None = None
    _shown: tuple[tuple[tuple[str, int], ...], str] = ((), "")
    _shown_at: float = 0.0
    _confirming: Future[None] | None = None
    _assessed: dict[str, tuple[tuple[str, str, bool, bool], Assessment]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        settings = self.settings
        self.under_run = UnderRun(settings.kube, self.names, DEADLINE_SLACK_S)
        self.scheduling = Scheduling(
            settings.kube, self.namespace, self.spec.nodes, settings.capacity_timeout_s, settings.arriving
        )
        self.holds = Holds(settings.kube, self.namespace, settings.bounds)

    @property
    def namespace(self) -> str:
        """The run's namespace."""
        return self.names.namespace

    @property
    def claim(self) -> Claim:
        """What clean-up deletes: the run's namespace, or its own objects in one it does not own."""
        return self._cleanup.claim

    @property
    def _cleanup(self) -> Cleanup:
        settings = self.settings
        return Cleanup(settings.kube, self.names, settings.cleanup_timeout_s, settings.ledger)

    # -- provision ----------------------------------------------------------------------------------------

    def provision(self) -> None:
        """Create the namespace (unless it exists), then (after a server-side dry run) the Service and Job."""
        kube, ns = self.settings.kube, self.namespace
        if self.settings.ledger is not None:
            self.settings.ledger.add(self.claim)
        if self.rendered.namespace is not None:
            create(kube.core.create_namespace, body=self.rendered.namespace)
            self._await_default_service_account()
        if self.rendered.secret is not None:  # before the pods that name it (rollcall.secrets)
            create(kube.core.create_namespaced_secret, ns, body=self.rendered.secret)
        selector = self._create_jobset() if self.rendered.jobset is not None else self._create_job()
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
            label_selector=selector,
        ).start()
        # The nodes' Ready conditions: a node lost mid-run fails the run at once, naming it.
        self.nodes = Informer(kube.core.list_node, "nodes").start()
        self.started = time.monotonic()
        self._say(
            f"created {ns}/{self.names.run}{' (a JobSet)' if self.names.jobset else ''}: "
            f"{self.spec.nodes} pod(s) x {self.spec.procs_per_node} ranks"
        )

    def _create_job(self) -> str:
        """Create the Service and the Job (after a dry run of each); the label selector of its pods."""
        kube, ns = self.settings.kube, self.namespace
        assert self.rendered.service is not None
        create(kube.core.create_namespaced_service, ns, body=self.rendered.service, dry_run="All")
        create(kube.batch.create_namespaced_job, ns, body=self.rendered.job, dry_run="All")
        create(kube.core.create_namespaced_service, ns, body=self.rendered.service)
        job = create(kube.batch.create_namespaced_job, ns, body=self.rendered.job)
        if not Job(job).uid:
            job = call(kube.batch.read_namespaced_job, self.names.job, ns)
        self.uid = Job(job).uid
        self.scheduling.created_at = Job(job).created
        return f"batch.kubernetes.io/controller-uid={self.uid}"

    def _create_jobset(self) -> str:
        """Create the JobSet and watch it (:func:`.jobsets.start`); the label selector of its pods."""
        assert self.rendered.jobset is not None
        self.jobsets, self.scheduling.created_at = jobsets.start(
            self.settings.kube, self.names, self.rendered.jobset
        )
        return jobsets.pod_selector(self.names)

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
            for informer in (self.jobs, self.pods, self.nodes, self.jobsets):
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
                *([self.jobsets] if self.jobsets is not None else []),
                timeout_s=self.settings.capacity_timeout_s + timeout_s + 2 * DEADLINE_SLACK_S,
                what=f"job {self.namespace}/{self.names.job}",
                describe=self._describe,
            )
        except WaitTimeout:
            status = JobStatus(
                JobState.TIMED_OUT,
                f"job {self.namespace}/{self.names.job} did not finish within {timeout_s:g}s "
                f"(--job-timeout); pods: {self._describe()}{self._still_pulling()}",
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
        node_of = self.nodes.get if self.nodes else lambda _: None
        status.node_info = node_info(self.pods.objects(), node_of)
        status.owns_nodes = owns_nodes(self.pods.objects(), node_of)
        status.waits = self.waited()
        if status.waits.scheduled_s is not None and (status.waits.waited_for or status.waits.image_pull_s):
            self._say(status.waits.line())
        if status.state is not JobState.SUCCEEDED:
            job = self.jobs.get(self.names.job)
            jobset = self._jobset()
            snapshot.save(
                self.settings.kube,
                self.names,
                self.pods.objects(),
                job,
                self.collector.directory,
                jobset=jobset[1] if jobset is not None else None,
            )
        return status

    def _verdict(self) -> JobStatus | None:
        """The condition :func:`wait_for` re-tests: a status once the run has ended, else None."""
        assert self.jobs is not None and self.pods is not None
        self._observe()
        now = time.monotonic()
        job = self.jobs.get(self.names.job)
        self.job_seen = self.job_seen or job is not None
        if not self.job_seen and self.jobsets is not None:
            return self._before_the_job(now)
        ended = self._scheduling(job, now)
        if ended is not None:
            return ended
        pods = self.pods.objects()
        self.collector.on_the_way(waits.on_the_way(pods, self.spec.nodes))
        node_of = self.nodes.get if self.nodes is not None and self.nodes.synced.is_set() else lambda _: None
        for line in self.holds.look(pods, node_of, self._heard, now):
            self._say(line)
        found = self._disruption(pods) or self.under_run.find(job, pods, now, self._jobset())
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
        stuck = self.holds.stuck(pods)
        if stuck:
            return JobStatus(JobState.FAILED, stuck)
        if job is None:
            return JobStatus(JobState.FAILED, f"Job {self.namespace}/{self.names.job} was deleted")
        result = job_result(job)
        reason = self._stop_test() if self._stop_test is not None and result is None else None
        if reason:
            kind = "jobset" if self.names.jobset else "job"
            deleted = f"{kind} {self.namespace}/{self.names.run} is deleted"
            return JobStatus(JobState.STOPPED, f"{reason}; {deleted}")
        if result is None:
            scheduled = self.scheduling.at
            if scheduled is not None and now - scheduled >= self._timeout_s + DEADLINE_SLACK_S:
                return JobStatus(
                    JobState.TIMED_OUT,
                    f"job {self.namespace}/{self.names.job} did not finish within {self._timeout_s:g}s "
                    f"(--job-timeout) of its pods being scheduled; pods: {self._describe()}"
                    f"{self._still_pulling()}",
                )
            return None
        kind, why = result
        if kind == "complete":
            return JobStatus(JobState.SUCCEEDED)
        found = job_disruption(job, pods)
        if found is not None:
            return JobStatus.disrupted(found)
        return JobStatus(JobState.TIMED_OUT if kind == "timed_out" else JobState.FAILED, why)

    def _jobset(self) -> tuple[str, Obj | None] | None:
        """The run's JobSet's name and its copy (None: gone), or None where the run is a Job."""
        return jobsets.copy_of(self.jobsets, self.names) if self.jobsets is not None else None

    def _before_the_job(self, now: float) -> JobStatus | None:
        """Before the Job is made: a JobSet deleted is a disruption, else :func:`.jobsets.before_the_job`."""
        found = self._jobset()
        assert found is not None
        pods = self.pods.objects() if self.pods is not None else []
        gone = self.under_run.find(None, pods, now, found, job_made=False)
        if gone is not None:
            return JobStatus.disrupted(gone)
        return jobsets.before_the_job(self.settings.kube, self.names, found[1], now - self.started)

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
        version, ready = view.resource_version, self.holds.node(view.node_name or "")
        key = (
            version,
            Node(node).resource_version if node is not None else "",
            known,
            bool(ready and ready.counts),
        )
        cached = self._assessed.get(view.name)
        if cached is not None and version and cached[0] == key:
            return cached[1]
        found = (disruption(pod, node, nodes_known=known, ready=ready), pod_fault(pod), unschedulable(pod))
        self._assessed[view.name] = (key, found)
        return found

    def _scheduling(self, job: dict[str, Any] | None, now: float) -> JobStatus | None:
        """Until every pod is scheduled: note what they wait for; past ``--capacity-timeout``, the verdict."""
        scheduling = self.scheduling
        if scheduling.at is not None or job is None:
            return None
        assert self.pods is not None
        pods = self.pods.objects()
        if scheduling.update(job, pods, now, self.started):
            if scheduling.waited_for:
                after, waited = scheduling.after_s, scheduling.waited_for
                self._say(
                    f"every pod scheduled after {after:.0f}s (waited for {waited}); "
                    f"--job-timeout {self._timeout_s:g}s counts from now"
                )
            return None
        missing = scheduling.past_bound(pods, now - self.started, self._describe)
        return JobStatus(JobState.NO_CAPACITY, missing) if missing else None

    def _waiting_note(self) -> str:
        """What the pods wait for now, for progress (:meth:`.scheduling.Scheduling.note`)."""
        if self.pods is None or self.jobs is None:
            return ""
        return self.scheduling.note(self.jobs.get(self.names.job), self.pods.objects())

    def waited(self) -> Waits:
        """What the run waited for, so far."""
        return self.scheduling.waited(self.pods.objects() if self.pods else [])

    def _still_pulling(self) -> str:
        """``; node 1 still pulling image ... after 340s: late, not hung``: a late node named as such."""
        return "".join(f"; {p.line()}" for p in self.waited().pulling())

    def _heard(self, pod: str) -> float | None:
        """When bytes of the pod's logs (any container's) last arrived (monotonic), None before any."""
        return max((f.last_data for (name, _), f in self.followers.items() if name == pod), default=None)

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

    # -- clean up -----------------------------------------------------------------------------------------

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
        cleanup = self._cleanup
        try:
            watches = self._ask_deletion(cleanup)
        except BaseException as exc:
            confirming.set_exception(exc)
            raise
        threading.Thread(
            target=cleanup.confirm,
            args=(watches, confirming),
            daemon=True,
            name=f"rollcall-cleanup {self.namespace}",
        ).start()
        return confirming

    def _ask_deletion(self, cleanup: Cleanup) -> list[Informer]:
        """Stop reading and watching, ask for the run's objects to be deleted; the watches of what must go."""
        for f in self.followers.values():
            f.close()
        for informer in (self.jobs, self.pods, self.nodes, self.jobsets):
            if informer is not None:
                informer.stop()
        cleanup.delete(self.pods.objects() if self.pods is not None else [], self.nodes)
        for f in self.followers.values():
            f.join(2)
        return cleanup.watches()
