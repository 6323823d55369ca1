"""The kubernetes backend: each run an Indexed Job and its headless Service in a namespace of their own.

The backend is the session's part: it connects (kubeconfig or in-cluster config), sweeps namespaces left by
runs killed outright (``--sweep-older-than``), discovers once which nodes are usable and what each pod gets
(:mod:`.discovery`), and launches runs. When too few nodes are usable it looks for capacity that
can arrive (:mod:`.capacity`: Karpenter or EKS Auto Mode NodePools, a cluster-autoscaler); with
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
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from rollcall.backends import DiscoveryError, Placement, unusable_nodes
from rollcall.backends.kubernetes import capacity
from rollcall.backends.kubernetes.access import check as check_access
from rollcall.backends.kubernetes.capacity import AUTOSCALER_STATUS, Lookup
from rollcall.backends.kubernetes.discovery import (
    Discovery,
    TooFewNodes,
    check_device_plugins,
    discover,
    requested_resource,
    tolerates,
)
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
    job_tolerations,
    render,
)
from rollcall.backends.kubernetes.reaper import Claim, Ledger, release
from rollcall.backends.kubernetes.views import INSTANCE_TYPE_LABEL, View
from rollcall.collect import Collector
from rollcall.jobspec import EFA_RESOURCE, JobSpec
from rollcall.options import DEFAULTS, OptionError, Options

__all__ = ["JobSettings", "KubernetesBackend", "KubernetesJob", "RollcallWarning"]

log = logging.getLogger(__name__)


@dataclass
class KubernetesBackend:
    """Runs jobs on the cluster of a kubeconfig or in-cluster config.

    Attributes:
        extras: labels and annotations added to the pods (tests use them to steer fake nodes).
        unschedulable_grace_s: how long a pod may stay Unschedulable before the run fails.
        cleanup_timeout_s: how long to wait for a namespace to be gone.
        drain_s: how long to keep reading logs after the job has ended.
        progress: where progress lines go (the terminal, through the plugin); None for silence.
    """

    kube: Kube
    options: Options
    name: str = "kubernetes"
    unit: str = "pod"
    extras: PodExtras = field(default_factory=PodExtras)
    unschedulable_grace_s: float = DEFAULTS.unschedulable_grace
    cleanup_timeout_s: float = CLEANUP_TIMEOUT_S
    drain_s: float = DRAIN_S
    progress: Callable[[str], None] | None = None
    discovery: Discovery | None = None
    #: Capacity that can arrive, when too few nodes exist (set by :meth:`discover`).
    arriving: Lookup | None = None
    _ledger: Ledger | None = None

    @staticmethod
    def check(options: Options) -> Kube:
        """Connect and check access, before anything is created; the client.

        A missing ``--image``, a bad kubeconfig or context, an unreachable API server and a right the server
        refuses each raise :class:`~rollcall.options.OptionError` naming the option and the fix
        (:mod:`.kubeconfig`, :mod:`.access`).
        """
        if not options.image:
            raise OptionError(
                "the kubernetes backend needs --image IMAGE, the training image (see images/bert-training/); "
                "or choose another with --backend"
            )
        source = options.source("kubeconfig")
        kube = connect(
            options.kubeconfig, options.context, flag="--kubeconfig" if source == "default" else source
        )
        check_access(
            kube, options.namespace or Names.new(options.namespace_prefix, "check").namespace, options
        )
        return kube

    @classmethod
    def from_options(
        cls, options: Options, progress: Callable[[str], None] | None = None
    ) -> KubernetesBackend:
        """Connect and check access (:meth:`check`), check ``--namespace``, sweep (``--sweep-older-than``).

        Raises :class:`OptionError` on bad input, and when ``--namespace`` (or its ``--service-account``)
        does not exist.
        """
        kube = cls.check(options)
        backend = cls(kube, options, progress=progress, unschedulable_grace_s=options.unschedulable_grace)
        backend.check_namespace()
        if options.sweep_older_than is not None:
            backend.sweep(options.sweep_older_than)
        return backend

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

    def discover(self, options: Options) -> Placement:
        """Read the nodes once and choose; raises :class:`DiscoveryError` when too few are usable."""
        nodes = call(self.kube.core.list_node)["items"]
        try:
            found = discover(
                nodes,
                nodes=options.nodes,
                accelerator=options.accelerator,
                instance_type=options.instance_type,
                procs_per_node=options.procs_per_node,
                efa=options.efa,
                tolerations=job_tolerations(options.toleration),
                node_selector=options.node_selector,
            )
        except TooFewNodes as short:
            found = self._arriving(options, short)
        if found.auto_mode and options.check_device_plugins:
            self._say(
                "--check-device-plugins: EKS Auto Mode nodes run no device-plugin DaemonSets; "
                "relying on the resources they advertise"
            )
        elif self.arriving is not None and options.check_device_plugins:
            self._say(
                "--check-device-plugins: the nodes do not exist yet, so their device plugins cannot be "
                "checked; the pods are scheduled only where the resources they request are advertised"
            )
        elif options.check_device_plugins:
            daemonsets = call(self.kube.apps.list_daemon_set_for_all_namespaces)["items"]
            problems = check_device_plugins(daemonsets, found.placement.accelerator, found.efa)
            if problems:
                raise DiscoveryError("device plugins are not ready:\n  " + "\n  ".join(problems))
        for line in found.warnings():
            self._say(f"warning: {line}")
        self.discovery = found
        return found.placement

    def _arriving(self, options: Options, short: TooFewNodes) -> Discovery:
        """Capacity that can make up for the missing nodes, else ``short`` with what was looked for."""
        need = options.nodes - len(short.usable)
        shape = capacity.shape(options.instance_type)
        accel = short.accelerator or (
            options.accelerator if options.accelerator != "auto" else (shape.accelerator if shape else None)
        )
        resource = None
        if accel is not None:
            resource = (shape.resource if shape and accel != "cpu" else None) or requested_resource(accel)
        procs = options.procs_per_node or (shape.count if shape and shape.accelerator == accel else None)
        if accel == "cpu":
            procs = procs or 1
        labels = dict(options.node_selector)
        if options.instance_type:
            labels[INSTANCE_TYPE_LABEL] = options.instance_type
        amounts = {"nodes": need} | ({resource: need * procs} if resource and procs else {})
        lookup = self._lookup(options, labels, amounts)
        if not lookup.provisioners:
            raise DiscoveryError(f"{short}\n{lookup.report()}") from None
        if accel is None or procs is None:
            raise DiscoveryError(
                f"{short}\n  capacity can arrive ({lookup.describe()}), but what its nodes offer is unknown: "
                f"give --accelerator and --procs-per-node, or an --instance-type rollcall knows "
                f"({', '.join(capacity.plannable())})"
            ) from None
        requests: dict[str, int] = {resource: procs} if resource else {}
        if options.efa == "on":
            requests[EFA_RESOURCE] = shape.efa if shape and shape.efa else 1
        offer = ", ".join(f"{v} {k}" for k, v in requests.items()) or "cpu only"
        description = (
            f"{len(short.usable)} usable node(s); {need} more can arrive from {lookup.describe()}; "
            f"each pod gets {offer}; {procs} rank(s) per node"
        )
        self.arriving = lookup
        self._say(
            f"too few nodes ({len(short.usable)} of {options.nodes}); {need} can arrive from "
            f"{lookup.describe()}: the run will wait up to {options.capacity_timeout:g}s for them"
        )
        placement = Placement(accel, procs, requests, options.instance_type, description)
        return Discovery(placement, short.usable, short.rejected, EFA_RESOURCE in requests)

    def _lookup(self, options: Options, labels: Mapping[str, str], amounts: Mapping[str, int]) -> Lookup:
        """Read the NodePools and the cluster-autoscaler's status, and match them (404: not there)."""
        errors: dict[str, str] = {}
        pools: list[dict[str, object]] | None = None
        try:
            pools = call(self.kube.custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodepools").get(
                "items", []
            )
        except ApiException as exc:
            if exc.status != 404:
                errors["nodepools"] = message_of(exc)
        status = None
        try:
            status = call(
                self.kube.core.read_namespaced_config_map, AUTOSCALER_STATUS[1], AUTOSCALER_STATUS[0]
            )
        except ApiException as exc:
            if exc.status != 404:
                errors["autoscaler"] = message_of(exc)
        tolerations = job_tolerations(self.options.toleration)
        return capacity.find(
            pools,
            status,
            labels=labels,
            tolerates=lambda taint: tolerates(tolerations, taint),
            need=amounts,
            trust_autoscaler=options.given("capacity_timeout"),
            errors=errors,
        )

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(f"[rollcall] {line}")

    # -- runs -------------------------------------------------------------------------------------------

    def settings(self) -> JobSettings:
        """What a run launched now needs of the session."""
        return JobSettings(
            kube=self.kube,
            unschedulable_grace_s=self.unschedulable_grace_s,
            ledger=None if self.options.keep else self.ledger,
            capacity_timeout_s=self.options.capacity_timeout,
            arriving=self.arriving,
            cleanup_timeout_s=self.cleanup_timeout_s,
            drain_s=self.drain_s,
            progress=self.progress,
        )

    def launch(self, spec: JobSpec, collector: Collector) -> KubernetesJob:
        """Create the run's namespace, Service and Job, and start watching them."""
        found = self.discovery
        if found is not None and spec.nodes > len(found.usable) and self.arriving is None:
            raise DiscoveryError("nothing was created: " + _too_few(found, spec.nodes))
        names = Names.new(self.options.namespace_prefix, spec.name, self.options.namespace)
        rendered = render(spec, names, extras=self.extras)
        if self.arriving is not None:  # the Job's deadline starts with it, before the nodes arrive
            job_spec = rendered.job["spec"]
            job_spec["activeDeadlineSeconds"] += math.ceil(self.options.capacity_timeout)
        job = KubernetesJob(self.settings(), spec, names, rendered, collector)
        try:
            job.provision()
        except BaseException:
            if self.options.keep:
                log.warning("--keep: leaving %s after a failed launch", job.claim)
            else:
                try:
                    job.cleanup()
                except Exception:  # the launch's own error is the one to report
                    log.exception("clean-up after the failed launch of %s failed", job.claim)
            raise
        return job

    def sweep(self, older_than_s: float) -> list[str]:
        """Delete what the suite's runs left, created more than ``older_than_s`` ago; returns what went.

        That is every namespace a run created (labelled as the suite's, with a run id), never ``--namespace``;
        in ``--namespace``, the runs' Jobs and Services there (as ``<namespace>/<run-id>``).
        """
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{RUN_ID_LABEL}"
        swept = []
        for ns in call(self.kube.core.list_namespace, label_selector=selector).get("items", []):
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
            for obj in call(list_fn, namespace, label_selector=selector).get("items", [])
            if _older(obj, cutoff)
        }
        swept = []
        for run_id in sorted(runs):
            if delete_labelled(self.kube, namespace, f"{RUN_ID_LABEL}={run_id}"):
                swept.append(str(Claim(namespace, run_id)))
        return swept


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
