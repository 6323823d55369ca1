"""The kubernetes backend: each run an Indexed Job and its headless Service in a namespace of their own.

The backend is the session's part: it connects (kubeconfig or in-cluster config), sweeps namespaces left by
runs killed outright (``--sweep-older-than``), discovers once which nodes are usable and what each pod gets
(:mod:`rollcall.discovery`), and launches runs. A run renders ``manifests/`` from the JobSpec, validated
offline (:mod:`rollcall.manifests`), in a namespace ``<prefix>-<random>``; its lifecycle (provision, wait,
collect, clean up) is :class:`~rollcall.backends.kubernetes_job.KubernetesJob`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rollcall.access import check as check_access
from rollcall.backends import Placement
from rollcall.backends.kubernetes_job import (
    CLEANUP_TIMEOUT_S,
    DRAIN_S,
    JobSettings,
    KubernetesJob,
    RollcallWarning,
)
from rollcall.collect import Collector
from rollcall.discovery import Discovery, DiscoveryError, check_device_plugins, discover, report
from rollcall.jobspec import JobSpec
from rollcall.kube import Kube, call, connect, delete_namespace
from rollcall.manifests import MANAGED_BY, MANAGED_BY_LABEL, Names, PodExtras, job_tolerations, render
from rollcall.options import DEFAULTS, OptionError, Options
from rollcall.reaper import Ledger

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
    extras: PodExtras = field(default_factory=PodExtras)
    unschedulable_grace_s: float = DEFAULTS.unschedulable_grace
    cleanup_timeout_s: float = CLEANUP_TIMEOUT_S
    drain_s: float = DRAIN_S
    progress: Callable[[str], None] | None = None
    discovery: Discovery | None = None
    _ledger: Ledger | None = None

    @staticmethod
    def check(options: Options) -> Kube:
        """Connect and check access, before anything is created; the client.

        A missing ``--image``, a bad kubeconfig or context, an unreachable API server and a right the server
        refuses each raise :class:`~rollcall.options.OptionError` naming the option and the fix
        (:mod:`rollcall.kubeconfig`, :mod:`rollcall.access`).
        """
        if not options.image:
            raise OptionError(
                "the kubernetes backend needs --image IMAGE, the training image (see images/bert-training/); "
                "or choose another with --backend"
            )
        source = options.sources.get("kubeconfig", "default")
        kube = connect(
            options.kubeconfig, options.context, flag="--kubeconfig" if source == "default" else source
        )
        check_access(kube, Names.new(options.namespace_prefix, "check").namespace, options)
        return kube

    @classmethod
    def from_options(
        cls, options: Options, progress: Callable[[str], None] | None = None
    ) -> KubernetesBackend:
        """Connect and check access (:meth:`check`); sweep old namespaces with ``--sweep-older-than``."""
        kube = cls.check(options)
        backend = cls(kube, options, progress=progress, unschedulable_grace_s=options.unschedulable_grace)
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
            self._ledger = Ledger(lambda ns: delete_namespace(self.kube, ns) and None, args)
        return self._ledger

    # -- discovery --------------------------------------------------------------------------------------

    def discover(self, options: Options) -> Placement:
        """Read the nodes once and choose; raises :class:`DiscoveryError` when too few are usable."""
        nodes = call(self.kube.core.list_node)["items"]
        found = discover(
            nodes,
            nodes=options.nodes,
            accelerator=options.accelerator,
            instance_type=options.instance_type,
            procs_per_node=options.procs_per_node,
            efa=options.efa,
            tolerations=job_tolerations(),
            node_selector=options.node_selector,
        )
        if options.check_device_plugins:
            daemonsets = call(self.kube.apps.list_daemon_set_for_all_namespaces)["items"]
            problems = check_device_plugins(daemonsets, found.placement.accelerator, found.efa)
            if problems:
                raise DiscoveryError("device plugins are not ready:\n  " + "\n  ".join(problems))
        self.discovery = found
        return found.placement

    # -- runs -------------------------------------------------------------------------------------------

    def settings(self) -> JobSettings:
        """What a run launched now needs of the session."""
        return JobSettings(
            kube=self.kube,
            unschedulable_grace_s=self.unschedulable_grace_s,
            ledger=None if self.options.keep else self.ledger,
            cleanup_timeout_s=self.cleanup_timeout_s,
            drain_s=self.drain_s,
            progress=self.progress,
        )

    def launch(self, spec: JobSpec, collector: Collector) -> KubernetesJob:
        """Create the run's namespace, Service and Job, and start watching them."""
        found = self.discovery
        if found is not None and spec.nodes > len(found.usable):
            raise DiscoveryError("nothing was created: " + _too_few(found, spec.nodes))
        names = Names.new(self.options.namespace_prefix, spec.name)
        rendered = render(spec, names, extras=self.extras)
        job = KubernetesJob(self.settings(), spec, names, rendered, collector)
        try:
            job.provision()
        except BaseException:
            if self.options.keep:
                log.warning("--keep: leaving namespace %s after a failed launch", names.namespace)
            else:
                try:
                    job.cleanup()
                except Exception:  # the launch's own error is the one to report
                    log.exception("clean-up after the failed launch of %s failed", names.namespace)
            raise
        return job

    def sweep(self, older_than_s: float) -> list[str]:
        """Delete the suite's namespaces created more than ``older_than_s`` ago; returns their names."""
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
        body = call(self.kube.core.list_namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
        swept = []
        for ns in body.get("items", []):
            meta = ns["metadata"]
            created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
            old = created < cutoff and not meta.get("deletionTimestamp")
            if old and delete_namespace(self.kube, meta["name"]):
                swept.append(meta["name"])
        if swept:
            log.warning(
                "swept %d namespace(s) older than %gs: %s", len(swept), older_than_s, ", ".join(swept)
            )
        return swept


def _too_few(found: Discovery, nodes: int) -> str:
    return report(nodes, found.usable, found.rejected, found.placement.accelerator)
