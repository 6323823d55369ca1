"""Whose GPU an event is on: the GPUs the run's ranks named as their own, and every other GPU of their nodes.

A node's monitor hears every GPU of its node (on Kubernetes its sidecar is given them all): on a node the run
shares, another tenant's GPUs too. Which GPUs the run uses is known as its ranks start: each rank's
``facts`` (its ``gpu_uuid``; its ``device_index`` where it read no UUID) and, before the rank can say a word,
the devices its environment gives it, which its node's monitor reports in ``rank_process``
(``visible_devices``: ``CUDA_VISIBLE_DEVICES``, else ``NVIDIA_VISIBLE_DEVICES``; indexes, UUIDs, ``all``,
``none``).

:class:`RunGpus` holds them. Where the run owns its nodes (the backend says so:
:attr:`rollcall.backends.JobStatus.owns_nodes`), or the backend does not say, every GPU of them is the run's.
On a node it shares, a GPU is the run's where a rank named its UUID (a UUID an environment names may
be a unique prefix of it, as CUDA takes one), or its NVML index on the same node, or where a rank of that node
may use every GPU (``all``, or a device named in a way no GPU event can be matched to, such as a MIG
instance). Where any rank of the world named nothing (no facts, and its monitor reported no devices), which
GPUs the run uses is unknown and :meth:`RunGpus.owns` says every GPU is the run's: a fault is never hidden
for want of knowing whose it is. So is an event whose GPU NVML named by no UUID.

An index names a GPU on one machine. A node goes by the log its lines came in (a pod, ``node-<i>``) and by
its own name (its monitor's ``node``, its ranks' ``start``), so that the local backend's simulated nodes,
which share one machine's GPUs and each hear all of them, are one machine. CUDA numbers devices fastest first
unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, NVML by PCI bus: on a machine of identical GPUs the two agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rollcall.ranklog import GpuHeard, LauncherHeard, RankProcessHeard, RankReport

#: What ``visible_devices`` says for no device at all (NVIDIA's container toolkit's words, and CUDA's empty);
#: ``all`` says every device of the node.
NO_DEVICE = frozenset({"", "none", "void", "nodevfiles"})


@dataclass(frozen=True)
class RunGpus:
    """The GPUs the run's ranks named as their own (see the module's docstring)."""

    #: Each UUID a rank named, or a prefix of one its environment named.
    uuids: frozenset[str] = frozenset()
    #: ``(where, index)``: an NVML index a rank named on a node, by each name the node goes by.
    indexes: frozenset[tuple[str, int]] = frozenset()
    #: The names of the nodes where a rank may use every GPU.
    every: frozenset[str] = frozenset()
    #: Each log's node, by the log (a pod's, ``node-<i>``): the node's own name, where a line said it.
    names: Mapping[str, str] = field(default_factory=dict)
    #: Every rank of the world named its GPUs (or none): False, and every GPU counts as the run's.
    known: bool = False
    #: The backend said the run shares its nodes (``owns_nodes`` False): only there is a GPU another's.
    shared: bool = False

    @classmethod
    def of(
        cls,
        reports: Mapping[int, RankReport],
        processes: Iterable[RankProcessHeard],
        heard: Iterable[GpuHeard],
        launchers: Iterable[LauncherHeard],
        *,
        world_size: int,
        owns_nodes: bool | None = None,
    ) -> RunGpus:
        """The GPUs the world's ranks named, by their facts and by the devices their monitors reported.

        ``owns_nodes``: what the backend said of the run's nodes (None: it did not say).
        """
        names = {h.source: h.node for h in heard if h.node}
        names |= {x.source: x.node for x in launchers if x.node}
        for report in reports.values():
            if isinstance(node := (report.start or {}).get("node"), str) and node:
                names |= {source: node for source in report.sources if source not in names}
        uuids: set[str] = set()
        indexes: set[tuple[str, int]] = set()
        every: set[str] = set()
        named: set[int] = set()

        def where(sources: Iterable[str]) -> set[str]:
            return {w for s in sources for w in (s, names.get(s)) if w}

        for rank, report in reports.items():
            facts = report.facts or {}
            if isinstance(uuid := facts.get("gpu_uuid"), str) and uuid:
                uuids.add(uuid)
                named.add(rank)
            elif isinstance(index := facts.get("device_index"), int):
                indexes |= {(w, index) for w in where(report.sources)}
                named.add(rank)
        for process in processes:
            if process.visible_devices is None or not 0 <= process.rank < world_size:
                continue
            named.add(process.rank)
            places = where([process.source])
            for token in (t.strip() for t in process.visible_devices.split(",")):
                if token.lower() in NO_DEVICE:
                    continue
                if token.isdigit():
                    indexes |= {(w, int(token)) for w in places}
                elif token.startswith("GPU-"):
                    uuids.add(token)
                else:  # all, a MIG instance ...: no GPU event can be told apart from the rank's own
                    every |= places
        known = world_size > 0 and named >= set(range(world_size))
        shared = owns_nodes is False
        return cls(frozenset(uuids), frozenset(indexes), frozenset(every), names, known, shared)

    def owns(self, h: GpuHeard) -> bool:
        """Whether the event's GPU is the run's: a rank named it, or nothing says it is another's."""
        return not self.shared or self.named(h)

    def named(self, h: GpuHeard) -> bool:
        """Whether a rank of the run named the event's GPU as one it may use, or nothing can tell (True)."""
        if not self.known or not h.uuid:
            return True
        if any(h.uuid.startswith(u) for u in self.uuids):
            return True
        places = {w for w in (h.source, h.node, self.names.get(h.source)) if w}
        return bool(places & self.every) or any((w, h.gpu) in self.indexes for w in places)


__all__ = ["NO_DEVICE", "RunGpus"]
