"""The kubernetes backend: each run an Indexed Job and its headless Service in a namespace of their own.

The backend is the session's part: it connects (kubeconfig or in-cluster config), sweeps namespaces left by
runs killed outright (``--sweep-older-than``), places the run once, and launches runs. Placement is one
pipeline (:mod:`.placement`): which nodes are usable and what each pod gets (:mod:`.discovery`); when too
few are usable, capacity that can arrive (:mod:`.capacity`: Karpenter or EKS Auto Mode NodePools, a
cluster-autoscaler); with
some, the run is created and waits for its nodes under ``--capacity-timeout``, else discovery fails before
anything is created, naming what it looked for. Pods of such a run plan their resources from the instance
type (:mod:`.instances`) or ``--procs-per-node``; ``--efa auto`` requests EFA only from
nodes that exist, so ask with ``--efa on``. The Job's own ``activeDeadlineSeconds`` then counts the
capacity wait too (``--job-timeout`` plus ``--capacity-timeout``): it starts with the Job, while the
suite's own deadline, ``--job-timeout`` from when every pod is scheduled, stays in charge. (A Job that
Kueue suspends needs no such allowance: resuming a Job resets its start time, and so its deadline.)

A run renders ``manifests/`` from the JobSpec, validated offline (:mod:`.manifests`), in a
namespace ``<prefix>-<random>``; its lifecycle (provision, wait, collect, clean up) is
:class:`~.job.KubernetesJob`.

With ``--namespace`` every run lives in that existing namespace, checked at connection (with the
``--service-account`` it names); the namespace is never created, swept nor deleted, only the runs' own
Jobs and Services in it (by their run-id label).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from kubernetes.client.exceptions import ApiException

from rollcall.backends import (
    BackendError,
    BackendSettings,
    DiscoveryError,
    Marking,
    NodeMark,
    Placement,
    PlacementRequest,
    unusable_nodes,
)
from rollcall.backends.kubernetes import nodemarks
from rollcall.backends.kubernetes.access import check as check_access
from rollcall.backends.kubernetes.access import check_jobset_api
from rollcall.backends.kubernetes.capacity import Lookup
from rollcall.backends.kubernetes.discovery import Discovery, requested_resource
from rollcall.backends.kubernetes.holds import Bounds
from rollcall.backends.kubernetes.job import (
    CLEANUP_TIMEOUT_S,
    DRAIN_S,
    JobSettings,
    KubernetesJob,
    RollcallWarning,
)
from rollcall.backends.kubernetes.kube import (
    Kube,
    call,
    connect,
    delete_labelled,
    delete_namespace,
    message_of,
)
from rollcall.backends.kubernetes.manifests import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    Names,
    PodExtras,
    render,
    secret_name,
)
from rollcall.backends.kubernetes.placement import ApiCluster, place
from rollcall.backends.kubernetes.reaper import Claim, Ledger, release
from rollcall.backends.kubernetes.secretrefs import read_values
from rollcall.backends.kubernetes.taints import Marked, mark_nodes
from rollcall.backends.kubernetes.views import View, items
from rollcall.backends.marks import NodeMarks
from rollcall.collect import Collector
from rollcall.jobspec import COMPILE_CACHE_DIR, JobSpec
from rollcall.options.kubernetes import KubernetesOptions
from rollcall.options.values import OptionError

__all__ = ["JobSettings", "KubernetesBackend", "KubernetesJob", "RollcallWarning"]

log = logging.getLogger(__name__)


@dataclass
class KubernetesBackend:
    """Runs jobs on the cluster of a kubeconfig or in-cluster config.

    Attributes:
        options: its section of the options.
        session: what every backend is given of the session (the image, ``--keep``, ...).
        extras: labels and annotations added to the pods (tests use them to steer fake nodes).
        unschedulable_grace_s: how long a pod may stay Unschedulable before the run fails.
        cleanup_timeout_s: how long to wait for a namespace to be gone.
        drain_s: how long to keep reading logs after the job has ended.
        bounds: how long a node's ``Ready`` not True and a pod creating must hold before they count.
        progress: where progress lines go (the terminal, through the plugin); None for silence.
    """

    kube: Kube
    options: KubernetesOptions
    session: BackendSettings = field(default_factory=BackendSettings)
    name: str = "kubernetes"
    unit: str = "pod"
    #: The marks it makes on nodes (:class:`~rollcall.backends.MarksNodes`): labels and rollcall's taint.
    MARKS: ClassVar[tuple[str, ...]] = ("label", "taint")
    extras: PodExtras = field(default_factory=PodExtras)
    unschedulable_grace_s: float = BackendSettings.unschedulable_grace_s
    cleanup_timeout_s: float = CLEANUP_TIMEOUT_S
    drain_s: float = DRAIN_S
    bounds: Bounds = field(default_factory=Bounds)
    progress: Callable[[str], None] | None = None
    discovery: Discovery | None = None
    #: Capacity that can arrive, when too few nodes exist (set by :meth:`discover`).
    arriving: Lookup | None = None
    _ledger: Ledger | None = None

    @staticmethod
    def check(options: KubernetesOptions, session: BackendSettings) -> Kube:
        """Connect and check access, before anything is created; the client.

        A missing ``--image``, a bad kubeconfig or context, an unreachable API server and a right the server
        refuses each raise :class:`~rollcall.options.OptionError` naming the option and the fix
        (:mod:`.kubeconfig`, :mod:`.access`).
        """
        if not session.image:
            raise OptionError(
                "the kubernetes backend needs --image IMAGE, the training image (see images/bert-training/); "
                "or choose another with --backend"
            )
        kube = connect(options.kubeconfig, options.context, flag=_flag(options))
        check_access(
            kube,
            options.namespace or Names.new(options.namespace_prefix, "check").namespace,
            needs(options, session),
        )
        if options.job_kind == "jobset":
            check_jobset_api(kube)
        return kube

    @classmethod
    def from_options(cls, options: KubernetesOptions, session: BackendSettings) -> KubernetesBackend:
        """Connect and check access (:meth:`check`), check ``--namespace``, sweep (``--sweep-older-than``).

        Raises :class:`OptionError` on bad input, and when ``--namespace`` (or its ``--service-account``)
        does not exist.
        """
        kube = cls.check(options, session)
        backend = cls(
            kube,
            options,
            session,
            progress=session.progress,
            unschedulable_grace_s=session.unschedulable_grace_s,
        )
        backend.check_namespace()
        if options.sweep_older_than is not None:
            backend.sweep(options.sweep_older_than)
        return backend

    #: Where NFS ``--compile-cache`` is mounted in the pods (:class:`~rollcall.backends.MountsSharedCache`).
    shared_cache_dir: ClassVar[str] = COMPILE_CACHE_DIR

    @classmethod
    def check_config(cls, options: KubernetesOptions, session: BackendSettings) -> None:
        """Connect and check access (:meth:`check`), then let go: the session's first check."""
        cls.check(options, session).close()

    @classmethod
    def render_run(
        cls,
        options: KubernetesOptions,
        session: BackendSettings,
        request: PlacementRequest,
        spec_of: Callable[[Placement], JobSpec],
        workdir: Path,
    ) -> str:
        """The run's Namespace (none with ``--namespace``), Service and Job as YAML, as kubectl prints them.

        With the layout given (``--accelerator`` and ``--procs-per-node``, or ``--accelerator cpu``) no
        cluster is contacted (and no EFA device requested: ``--efa on`` needs discovery); else the nodes of
        the kubeconfig's cluster are discovered (and ``--namespace`` checked). A cluster that cannot be read
        is a :class:`BackendError` saying why.
        """
        import yaml
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config import ConfigException
        from urllib3.exceptions import HTTPError

        from rollcall.backends.kubernetes import kube as client

        placement, arrival_s = _layout(request), 0.0
        if placement is not None and request.efa == "on":
            raise ValueError(
                "--efa on: the nodes' EFA devices are counted by discovery; leave --procs-per-node out to "
                "discover them on the cluster, or pass --efa off"
            )
        if placement is None:
            try:
                backend = cls(client.connect(options.kubeconfig, options.context), options, session)
                try:
                    backend.check_namespace()
                    placement = backend.discover(request)
                    arrival_s = backend.arrival_s
                finally:
                    backend.kube.close()
            except ConfigException as exc:
                raise ValueError(str(exc)) from None
            except (client.KubeError, ApiException, HTTPError, OSError) as exc:
                raise BackendError(f"cannot read the cluster's nodes: {message_of(exc)}") from None
        spec = spec_of(placement).outwaiting(arrival_s)  # as launch() renders it
        names = Names.new(options.namespace_prefix, spec.name, options.namespace, kind=options.job_kind)
        rendered = render(spec, names)
        return yaml.safe_dump_all(rendered.shown(), sort_keys=False)  # no secret's value (rollcall.secrets)

    @classmethod
    def render_schedule(
        cls, schedule: str, suite_image: str, given: Mapping[str, str], results_claim: str | None
    ) -> str:
        """The suite as a CronJob of the cluster, with its RBAC (:mod:`.nightly`); no cluster is contacted."""
        from rollcall.backends.kubernetes.nightly import Nightly, check_schedule, render_text, suite_env

        return render_text(Nightly(check_schedule(schedule), suite_image, suite_env(given), results_claim))

    def mark_nodes(self, marks: Sequence[NodeMark], how: Marking) -> Marked:
        """``--label-nodes``, ``--taint-unfit``: mark each node, keeping all else (:mod:`.taints`)."""
        return mark_nodes(self.kube, marks, how)

    @classmethod
    def current_marks(cls, options: KubernetesOptions, session: BackendSettings) -> list[NodeMarks]:
        """``rollcall nodes``: what rollcall left on the cluster's nodes (:mod:`.nodemarks`).

        It needs the rights of nodes only, none of a run's: the client connects without the run's checks.
        """
        kube = connect(options.kubeconfig, options.context, flag=_flag(options))
        try:
            return nodemarks.current_marks(kube)
        finally:
            kube.close()

    @classmethod
    def clear_marks(
        cls, options: KubernetesOptions, session: BackendSettings, names: Sequence[str]
    ) -> nodemarks.Unmarked:
        """``rollcall nodes --clear``: remove rollcall's labels, annotation and taints, never another's."""
        kube = connect(options.kubeconfig, options.context, flag=_flag(options))
        try:
            return nodemarks.clear_marks(kube, names)
        finally:
            kube.close()

    @property
    def ledger(self) -> Ledger:
        """The session's record of namespaces to delete should it die (created on first use)."""
        if self._ledger is None:
            args = []
            if self.options.kubeconfig:
                args += ["--kubeconfig", str(Path(self.options.kubeconfig).resolve())]
            if self.options.context:
                args += ["--context", self.options.context]
            self._ledger = Ledger(lambda claim: release(self.kube, claim), args)
        return self._ledger

    def check_namespace(self) -> None:
        """With ``--namespace``: it exists, and so does the ``--service-account`` the pods run as."""
        ns, account = self.options.namespace, self.options.service_account
        if ns is None:
            return
        if not _exists(self.kube.core.read_namespace, ns):
            raise OptionError(
                f"--namespace {ns}: there is no such namespace ({self.kube.source}); create it first, or "
                "leave --namespace out to give each run a namespace of its own"
            )
        if account is not None and not _exists(self.kube.core.read_namespaced_service_account, account, ns):
            raise OptionError(
                f"--service-account {account}: there is no such ServiceAccount in namespace {ns} "
                f"({self.kube.source}); create it first"
            )

    # -- discovery --------------------------------------------------------------------------------------

    def discover(self, request: PlacementRequest) -> Placement:
        """Place the run (:func:`.placement.place`); :class:`DiscoveryError` when nothing can run."""
        planned = place(request, ApiCluster(self.kube), self._say)
        self.discovery, self.arriving = planned.discovery, planned.arriving
        return planned.placement

    @property
    def arrival_s(self) -> float:
        """How long a node may take to arrive after the run starts: the capacity timeout, or none.

        The capacity timeout where capacity is on its way (the job timeout counts from when every pod is
        scheduled).
        """
        return self.options.capacity_timeout if self.arriving is not None else 0.0

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(f"[rollcall] {line}")

    # -- runs -------------------------------------------------------------------------------------------

    def settings(self) -> JobSettings:
        """What a run launched now needs of the session."""
        return JobSettings(
            kube=self.kube,
            unschedulable_grace_s=self.unschedulable_grace_s,
            ledger=None if self.session.keep else self.ledger,
            capacity_timeout_s=self.options.capacity_timeout,
            arriving=self.arriving,
            cleanup_timeout_s=self.cleanup_timeout_s,
            drain_s=self.drain_s,
            bounds=self.bounds,
            progress=self.progress,
        )

    def launch(self, spec: JobSpec, collector: Collector) -> KubernetesJob:
        """Create the run's namespace, Service and Job, and start watching them."""
        found = self.discovery
        if found is not None and spec.nodes > len(found.usable) and self.arriving is None:
            raise DiscoveryError("nothing was created: " + _too_few(found, spec.nodes))
        # The pods start apart (capacity arriving, images pulling), each held by this backend's bounds:
        # torchrun's rendezvous outwaits them.
        spec = spec.outwaiting(self.arrival_s)
        options = self.options
        names = Names.new(options.namespace_prefix, spec.name, options.namespace, kind=options.job_kind)
        rendered = render(spec, names, extras=self.extras)
        if rendered.sources:  # read now, into the run's own Secret (rollcall.secrets)
            rendered.fill(read_values(self.kube, rendered.sources, os.environ))
        if self.arriving is not None:  # the Job's deadline starts with it, before the nodes arrive
            rendered.extend_deadline(self.options.capacity_timeout)
        job = KubernetesJob(self.settings(), spec, names, rendered, collector)
        try:
            self._provision(job)
        except ApiException as exc:
            if exc.status != 403:
                raise
            # RBAC or an admission policy refused what the run creates (a cache outside the pods' profile):
            # the server's message names what and, for rollcall's own policies, the fix
            raise BackendError(f"nothing was run: the API server refused it: {message_of(exc)}") from None
        return job

    def _provision(self, job: KubernetesJob) -> None:
        """Create the run's objects; after a failure, delete what was created (unless ``--keep``)."""
        try:
            job.provision()
        except BaseException:
            if self.session.keep:
                log.warning("--keep: leaving %s after a failed launch", job.claim)
            else:
                try:
                    job.cleanup()
                except Exception:  # the launch's own error is the one to report
                    log.exception("clean-up after the failed launch of %s failed", job.claim)
            raise

    def sweep(self, older_than_s: float) -> list[str]:
        """Delete what the suite's runs left, created more than ``older_than_s`` ago; returns what went.

        That is every namespace a run created (labelled as the suite's, with a run id), never ``--namespace``;
        in ``--namespace``, the runs' Jobs and Services there (as ``<namespace>/<run-id>``).
        """
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{RUN_ID_LABEL}"
        swept = []
        for ns in items(call(self.kube.core.list_namespace, label_selector=selector)):
            name = View(ns).name
            if _older(ns, cutoff) and name != self.options.namespace and delete_namespace(self.kube, name):
                swept.append(name)
        if self.options.namespace is not None:
            swept += self._sweep_runs(self.options.namespace, selector, cutoff)
        if swept:
            log.warning("swept %d run(s) older than %gs: %s", len(swept), older_than_s, ", ".join(swept))
        return swept

    def _sweep_runs(self, namespace: str, selector: str, cutoff: datetime) -> list[str]:
        """The runs whose Jobs or Services in ``namespace`` are older than ``cutoff``, deleted."""
        kinds = (self.kube.batch.list_namespaced_job, self.kube.core.list_namespaced_service)
        runs = {
            View(obj).labels[RUN_ID_LABEL]
            for list_fn in kinds
            for obj in items(call(list_fn, namespace, label_selector=selector))
            if _older(obj, cutoff)
        }
        swept = []
        for run_id in sorted(runs):
            if delete_labelled(self.kube, namespace, f"{RUN_ID_LABEL}={run_id}", secret_name(run_id)):
                swept.append(str(Claim(namespace, run_id)))
        return swept


def _layout(request: PlacementRequest) -> Placement | None:
    """What each node offers when the request says so (the accelerator and the ranks), else None.

    The accelerator's resource is requested per rank; EFA devices only discovery can count.
    """
    accelerator = request.accelerator
    if accelerator == "auto" or (request.procs_per_node is None and accelerator != "cpu"):
        return None
    procs = request.procs_per_node or 1
    resource = requested_resource(accelerator)
    return Placement(accelerator, procs, {resource: procs} if resource else {}, request.instance_type)


def needs(options: KubernetesOptions, session: BackendSettings) -> list[str]:
    """The options in use that need rights of their own (:mod:`.access`): by name."""
    used = {
        "check_device_plugins": options.check_device_plugins,
        "namespace": options.namespace is not None,
        "mark_nodes": session.marks.label or session.marks.taint is not None,
        "jobset": options.job_kind == "jobset",
        "secrets": session.secrets,
    }
    return [name for name, on in used.items() if on]


def _exists(read: Callable[..., Any], *args: str) -> bool:
    """Whether the object ``read(*args)`` reads exists (any error but 404 is raised)."""
    try:
        call(read, *args)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _older(obj: dict[str, Any], cutoff: datetime) -> bool:
    """Whether ``obj`` was created before ``cutoff`` and is not being deleted already."""
    view = View(obj)
    return view.created is not None and view.created < cutoff and not view.deleting


def _too_few(found: Discovery, nodes: int) -> str:
    return unusable_nodes(nodes, found.usable, found.rejected, found.placement.accelerator)


def _flag(options: KubernetesOptions) -> str:
    """Where the kubeconfig came from, as an error names it: ``--kubeconfig``, or its variable or ini key."""
    source = options.source("kubeconfig")
    return "--kubeconfig" if source == "default" else source
