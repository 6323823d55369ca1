"""Each node's facts: what its ranks said of it and of their devices, and what the backend observed of it.

Pure functions over what the ranks' ``facts`` events said (:attr:`~rollcall.ranklog.RankReport.facts`, one
event per rank about its own device, see the workload's docstring) and what the backend observed of each
node (:attr:`~rollcall.backends.JobStatus.node_info`, e.g. a Kubernetes node's kubelet version):
:func:`node_facts` gathers them per node: the node-wide facts (:data:`NODE_KEYS`: versions of the driver,
CUDA, NCCL, kernel, OS, the workload's stack; :data:`OBSERVED_KEYS`: the kubelet, the instance type ...) and
one :class:`Device` per rank (:data:`DEVICE_KEYS`, with what its ``start`` said of the GPU,
:data:`START_KEYS`, for a rank that failed before ``facts``), and each Neuron device's error counters. A
fact a device or a node could not read is unknown, and the node says why.

What the facts are held to: :mod:`.fitness` (the rules), :mod:`.drift` (drift between nodes, ``--expect``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollcall.ranklog import RankReport, Sampled

#: Facts of a whole node: each rank reports them, the node holds the value its ranks agree on.
NODE_KEYS: tuple[str, ...] = (
    "host",
    "kernel",
    "os",
    "python",
    "torch",
    "transformers",
    "nccl",
    "driver",
    "cuda_driver",
    "neuron_driver",
    "neuron_runtime",
    "neuron_compiler",
    "neuron_devices",
    "neuron_cores",
    "gpus",
    "cuda_devices",
    "libfabric",
    "aws_ofi_nccl",
)
#: Facts the backend observed of a node (a Kubernetes Node's status and labels), beside the ranks' own.
OBSERVED_KEYS: tuple[str, ...] = (
    "kubelet",
    "container_runtime",
    "os_image",
    "kernel_version",
    "image",
    "node_group",
    "instance_type",
    "zone",
    "instance_id",
    "capacity_reservation",
    "expected_gpus",
    "expected_neuron_devices",
    "advertised_gpus",
    "advertised_neuron_devices",
    "advertised_neuroncores",
    "advertised_efa",
    "type_gpus",
    "type_neuron_devices",
    "type_neuroncores",
    "type_efa",
    "hardware_ready",
    "hardware_ready_reason",
    "allocatable_gpus",
    "capacity_gpus",
    "allocatable_efa",
    "capacity_efa",
)
#: The fact naming a Neuron device of ``neuron_hw_counters`` (its index), beside its counters.
NEURON_DEVICE = "neuron_device"
#: neuron-monitor's hardware error counters (``neuron_hw_counters``), uncorrected and corrected.
NEURON_UNCORRECTED: tuple[str, ...] = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
NEURON_CORRECTED: tuple[str, ...] = ("mem_ecc_corrected", "sram_ecc_corrected")
#: Facts of one device (NVML), one per rank.
DEVICE_KEYS: tuple[str, ...] = (
    "device_index",
    "gpu_name",
    "gpu_uuid",
    "gpu_serial",
    "memory_mib",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_uncorrected",
    "remapped_pending",
    "remapped_failure",
    "retired_pending",
    "clock_events",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "power_limit_w",
    "power_default_w",
    "temperature_c",
    "memory_used_mib",
    "gpu_processes",
    "samples",
    "sampled",
    "clock_events_share",
)
#: A clock-event reason active in at least this share of a rank's samples is held (``clock_events``).
HELD_SHARE = 0.5
#: The facts a rank's samples give in place of its one reading, where they read them (:func:`sampled_facts`).
SAMPLED_KEYS: tuple[str, ...] = ("clock_events", "sm_clock_mhz", "pcie_gen", "pcie_width")
#: Device facts a rank says in ``start``, read before its CUDA context (what other processes held).
START_KEYS: tuple[str, ...] = ("memory_used_mib", "gpu_processes")


@dataclass(frozen=True)
class Device:
    """One rank's device and what it read of it (``facts`` without the node-wide keys).

    ``whole_node`` marks the node itself standing as the device of a node-wide rule (``device_count``,
    ``advertised_devices``):
    ``rank`` is then the node's first rank, ``facts`` the node's.
    """

    node: int
    rank: int
    name: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    unknown: Mapping[str, str] = field(default_factory=dict)
    whole_node: bool = False
    #: False for a GPU of the node that no rank used (named by a GPU event): ``rank`` is then -1.
    on_rank: bool = True

    @property
    def index(self) -> Any:
        """The device's index (NVML's), None when unknown."""
        return self.facts.get("device_index")

    @property
    def label(self) -> str:
        """``node 1 (gpu-a) GPU 3, UUID GPU-..., serial 1650...``: everything that names the device.

        A Neuron device (:data:`NEURON_DEVICE`): ``node 1 (trn-a) Neuron device 5``.
        """
        if self.whole_node:
            return f"node {self.node} ({self.name})"
        if NEURON_DEVICE in self.facts:
            return f"node {self.node} ({self.name}) Neuron device {self.facts[NEURON_DEVICE]}"
        index = self.index if self.index is not None else "?"
        uuid = self.facts.get("gpu_uuid", "unknown")
        serial = self.facts.get("gpu_serial", "unknown")
        rank = f" rank {self.rank}" if self.on_rank else ""
        return f"node {self.node} ({self.name}){rank} GPU {index}, UUID {uuid}, serial {serial}"

    def as_dict(self) -> dict[str, Any]:
        """The device, JSON-ready."""
        return {"rank": self.rank, **self.facts, "unknown": dict(self.unknown)}


@dataclass(frozen=True)
class NodeFacts:
    """One node: its name, its node-wide facts, the ones unknown and why, its devices and its ranks.

    ``devices`` are its ranks' own (one per rank, NVML's); ``neuron_devices`` every Neuron device of the
    instance with its hardware error counters, as the rank that read them (local rank 0) reported them.
    """

    node: int
    name: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    unknown: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[Device, ...] = ()
    ranks: tuple[int, ...] = ()
    neuron_devices: tuple[Device, ...] = ()

    def values(self, key: str) -> list[Any]:
        """The node's value of ``key`` (a device key: each device's that knows it)."""
        if key in DEVICE_KEYS:
            return [d.facts[key] for d in self.devices if key in d.facts]
        return [self.facts[key]] if key in self.facts else []

    def why_unknown(self, key: str) -> str | None:
        """Why the node (or one of its devices) could not read ``key``; None when all did."""
        if key in DEVICE_KEYS:
            if not self.devices:
                return self.unknown.get("nvml", "no device reported it")
            return next(
                (
                    d.unknown.get(key, d.unknown.get("nvml", "not reported"))
                    for d in self.devices
                    if key not in d.facts
                ),
                None,
            )
        if key in self.facts:
            return None
        return self.unknown.get(key, "not reported")

    def as_dict(self) -> dict[str, Any]:
        """The node, JSON-ready."""
        return {
            "node": self.node,
            "name": self.name,
            "facts": dict(self.facts),
            "unknown": dict(self.unknown),
            "devices": [d.as_dict() for d in self.devices],
            "neuron_devices": [d.as_dict() for d in self.neuron_devices],
        }


def node_facts(
    reports: Mapping[int, RankReport],
    node_of: Callable[[int], int],
    observed: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[NodeFacts, ...]:
    """Every node whose ranks reported facts, with what the backend ``observed`` of it (by node name).

    A node is named by its ranks' ``start`` ``node`` (the Kubernetes node), else the host they reported.
    A node-wide fact the ranks of a node disagree on holds every value, ``" | "``-joined.
    """
    by_node: dict[int, list[RankReport]] = defaultdict(list)
    for rank, report in sorted(reports.items()):
        if report.facts is not None or _started(report):
            by_node[node_of(rank)].append(report)
    nodes = []
    for node, reps in sorted(by_node.items()):
        name = _node_name(reps)
        facts: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for key in NODE_KEYS:
            seen = sorted({str(v) for r in reps if (v := (r.facts or {}).get(key)) is not None})
            if seen:
                facts[key] = seen[0] if len(seen) == 1 else " | ".join(seen)
            elif reasons := [r.unknown[key] for r in reps if key in r.unknown]:
                unknown[key] = reasons[0]
        for key, reason in ((k, v) for r in reps for k, v in r.unknown.items()):
            if key not in NODE_KEYS and key not in DEVICE_KEYS:
                unknown.setdefault(key, reason)  # e.g. "nvml": "no NVML: device is cpu"
        for key, value in ((observed or {}).get(name) or {}).items():
            facts.setdefault(key, value)
        devices = tuple(
            Device(node, r.rank, name, read, {k: v for k, v in r.unknown.items() if k in DEVICE_KEYS})
            for r in reps
            if (
                read := {
                    **_started(r),
                    **{k: v for k, v in (r.facts or {}).items() if k in DEVICE_KEYS},
                    **sampled_facts(r.samples),
                }
            )
        )
        ranks = tuple(r.rank for r in reps)
        nodes.append(NodeFacts(node, name, facts, unknown, devices, ranks, _neuron_devices(node, name, reps)))
    return tuple(nodes)


def _neuron_devices(node: int, name: str, reports: list[RankReport]) -> tuple[Device, ...]:
    """Each Neuron device of ``neuron_hw_counters`` (the first rank of the node that read them), by index."""
    for r in reports:
        counters = (r.facts or {}).get("neuron_hw_counters")
        if isinstance(counters, dict) and counters:
            found = [
                Device(node, r.rank, name, {NEURON_DEVICE: int(index), **values})
                for index, values in counters.items()
                if str(index).isdigit() and isinstance(values, dict)
            ]
            return tuple(sorted(found, key=lambda d: d.facts[NEURON_DEVICE]))
    return ()


def sampled_facts(samples: Sampled | None) -> dict[str, Any]:
    """The device facts a rank's samples give, in place of its one reading of each (none without samples).

    ``samples``: how many reads; ``sampled``: which of :data:`SAMPLED_KEYS` they read; ``clock_events``: the
    reasons held (active in at least :data:`HELD_SHARE` of the reads), ``clock_events_share`` each reason's
    share; ``sm_clock_mhz`` the median; ``pcie_gen`` and ``pcie_width`` the most the link reached under load
    (a link that trained up under load is healthy; one low in every read is not).
    """
    if samples is None or samples.samples < 1:
        return {}
    share = samples.clock_events_share
    values: dict[str, Any] = {
        "clock_events": None if share is None else [n for n, s in share.items() if s >= HELD_SHARE],
        "sm_clock_mhz": samples.sm_clock_mhz_median,
        "pcie_gen": samples.pcie_gen_max,
        "pcie_width": samples.pcie_width_max,
    }
    read = {k: v for k, v in values.items() if v is not None}
    extra = {} if share is None else {"clock_events_share": dict(share)}
    return {"samples": samples.samples, "sampled": [k for k in SAMPLED_KEYS if k in read], **extra, **read}


def samples_of(facts: Mapping[str, Any], key: str) -> int | None:
    """How many samples gave ``key`` (one of :data:`SAMPLED_KEYS`) of a device; None: its one reading."""
    count, sampled = facts.get("samples"), facts.get("sampled")
    if isinstance(count, int) and isinstance(sampled, list) and key in sampled:
        return count
    return None


def _started(report: RankReport) -> dict[str, Any]:
    """The device facts a rank said in ``start`` (:data:`START_KEYS`): it may fail before ``facts``."""
    return {k: v for k, v in (report.start or {}).items() if k in START_KEYS}


def _node_name(reports: list[RankReport]) -> str:
    for key in ("node", "host"):
        for r in reports:
            named = (r.start or {}).get(key)
            if isinstance(named, str) and named:
                return named
    hosts = sorted({h for r in reports if isinstance(h := (r.facts or {}).get("host"), str)})
    return hosts[0] if hosts else "unknown"


__all__ = [
    "DEVICE_KEYS",
    "HELD_SHARE",
    "NEURON_CORRECTED",
    "NEURON_DEVICE",
    "NEURON_UNCORRECTED",
    "NODE_KEYS",
    "OBSERVED_KEYS",
    "SAMPLED_KEYS",
    "START_KEYS",
    "Device",
    "NodeFacts",
    "node_facts",
    "sampled_facts",
    "samples_of",
]
