"""Each node's facts, the unfit devices among them, drift between nodes and the golden configuration.

Pure functions over what the ranks' ``facts`` events said (:attr:`~rollcall.ranklog.RankReport.facts`, one
event per rank about its own device, see the workload's docstring) and what the backend observed of each
node (:attr:`~rollcall.backends.JobStatus.node_info`, e.g. a Kubernetes node's kubelet version):

- :func:`node_facts` gathers them per node: the node-wide facts (:data:`NODE_KEYS`: versions of the driver,
  CUDA, NCCL, kernel, OS, the workload's stack, the kubelet ...) and one :class:`Device` per rank (with
  what its ``start`` said of the GPU, :data:`START_KEYS`, for a rank that failed before ``facts``);
- :func:`unfit_devices` holds every device to the rules of :data:`RULES` (uncorrected ECC errors, row
  remapping, retired pages, PCIe link, clock events, power limit, memory another process held before the
  run, a Neuron device's ECC counters), every node to its own health as the platform reports it
  (``hardware_ready``, ``lost_devices``) and to its instance type's device count (``device_count``: the
  GPUs NVML and CUDA list, the Neuron devices, against what the backend says the node's type has), and to
  what the node advertises (``advertised_devices``: its GPUs, Neuron
  devices, NeuronCores and EFA interfaces, against its type's, however many of them its ranks were given);
  each rule fails, warns or is off (:class:`FitnessPolicy`); a rule whose fact a
  device could not read finds nothing there (the node's facts say the fact is unknown, and why: never
  healthy);
- :func:`device_summary` is the line of a device's facts that explain a slow rank (clock events, SM clock,
  PCIe link, temperature, power limit);
- :func:`drift` names the keys of :data:`DRIFT_KEYS` whose value differs between nodes;
- :func:`mismatches` holds every node to the golden configuration ``--expect KEY=GLOB`` (:data:`EXPECT_KEYS`),
  or the lines of ``--expect-file FILE`` (:func:`read_expect_file`); a node whose fact is unknown does not
  match.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rollcall.evidence.gpumem import held_memory
from rollcall.ranges import ranges
from rollcall.ranklog import RankReport

Severity = Literal["fail", "warn", "off"]
DriftMode = Literal["fail", "warn", "off"]
DRIFT_MODES: tuple[DriftMode, ...] = ("fail", "warn", "off")

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
)
#: Device facts a rank says in ``start``, read before its CUDA context (what other processes held).
START_KEYS: tuple[str, ...] = ("memory_used_mib", "gpu_processes")
#: The versions that must agree between the nodes of one run (``config_drift``).
DRIFT_KEYS: tuple[str, ...] = (
    "driver",
    "cuda_driver",
    "nccl",
    "kernel",
    "os",
    "python",
    "torch",
    "transformers",
    "neuron_driver",
    "neuron_runtime",
    "neuron_compiler",
    "libfabric",
    "aws_ofi_nccl",
    "kubelet",
    "container_runtime",
    "os_image",
)
#: What ``--expect KEY=GLOB`` may name: a node's fact, an observed one, or a device's (every device matches).
EXPECT_KEYS: tuple[str, ...] = (*NODE_KEYS, *OBSERVED_KEYS, *DEVICE_KEYS)


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
            if (read := {**_started(r), **{k: v for k, v in (r.facts or {}).items() if k in DEVICE_KEYS}})
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


# ---------------------------------------------------------------- unfit devices


@dataclass(frozen=True)
class Rule:
    """One fitness rule: what it finds wrong in a device's facts, as (fact, value, what is wrong).

    A rule of ``scope`` ``"node"`` reads the node's facts instead, once per node. ``default`` is what a
    finding does unless ``--fitness-fail``, ``--fitness-warn`` or ``--fitness-off`` names the rule.
    """

    name: str
    help: str
    find: Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]
    scope: Literal["device", "node"] = "device"
    default: Severity = "fail"


def _positive(key: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        value = _num(f.get(key))
        return (key, f[key], "above 0") if value is not None and value > 0 else None

    return find


def _true(key: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        return (key, True, "set") if f.get(key) is True else None

    return find


def _below(key: str, limit: str, what: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        value, most = _num(f.get(key)), _num(f.get(limit))
        if value is not None and most is not None and value < most:
            return key, f[key], f"below its {what} {f[limit]} ({limit})"
        return None

    return find


def _event(*names: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        active = f.get("clock_events")
        if isinstance(active, list) and (hit := [n for n in names if n in active]):
            return "clock_events", ",".join(hit), "active"
        return None

    return find


#: What ``device_count`` compares: the counts the ranks saw (NVML's, CUDA's; the ``/dev/neuron*`` devices),
#: the count the backend says the node's instance type has, and what they count.
DEVICE_COUNTS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("gpus", "cuda_devices"), "expected_gpus", "GPUs"),
    (("neuron_devices",), "expected_neuron_devices", "Neuron devices"),
)


def _count(value: object) -> int | None:
    """A count as a node holds it (``8``, ``"8"``, or ``"7 | 8"`` when its ranks disagree: the least)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    words = str(value).split(" | ") if isinstance(value, str) else []
    counts = [int(w) for w in words if w.strip().isdigit()]
    return min(counts) if counts and len(counts) == len(words) else None


def _device_count(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """Fewer devices seen on a node than its instance type has (the least count its ranks saw)."""
    for seen_keys, expected_key, what in DEVICE_COUNTS:
        expected = _count(f.get(expected_key))
        seen = {k: c for k in seen_keys if (c := _count(f.get(k))) is not None}
        if expected is None or not seen:
            continue
        key, least = min(seen.items(), key=lambda kv: kv[1])
        if least < expected:
            kind = f.get("instance_type", "unknown")
            return key, least, f"seen, expected {expected} {what} with its instance type {kind}"
    return None


#: What ``advertised_devices`` compares: the count a node advertises (its capacity or allocatable, the
#: lesser), the count its instance type has, and what they count.
ADVERTISED_COUNTS: tuple[tuple[str, str, str], ...] = (
    ("advertised_gpus", "type_gpus", "GPUs"),
    ("advertised_neuron_devices", "type_neuron_devices", "Neuron devices"),
    ("advertised_neuroncores", "type_neuroncores", "NeuronCores"),
    ("advertised_efa", "type_efa", "EFA interfaces"),
)


def _advertised_devices(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """A node advertising fewer GPUs, Neuron devices, NeuronCores or EFA interfaces than its type has.

    Discovery lowers the pods' requests to what the nodes advertise, so the ranks see all they were given
    and ``device_count`` finds nothing: this rule holds the node itself to its type.
    """
    for advertised_key, type_key, what in ADVERTISED_COUNTS:
        advertised, has = _count(f.get(advertised_key)), _count(f.get(type_key))
        if advertised is not None and has is not None and advertised < has:
            kind = f.get("instance_type", "unknown")
            return advertised_key, advertised, f"advertised, its instance type {kind} has {has} {what}"
    return None


def _counted(*keys: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    """The first of ``keys`` above 0 (a Neuron device's ECC counters)."""

    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        return next((hit for key in keys if (hit := _positive(key)(f)) is not None), None)

    return find


def _hardware_ready(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The EKS node monitoring agent's ``AcceleratedHardwareReady`` condition False (Unknown: nothing)."""
    if f.get("hardware_ready") != "False":
        return None
    reason = f.get("hardware_ready_reason")
    said = f": {reason}" if reason else ""
    return "hardware_ready", "False", f"(AcceleratedHardwareReady, the EKS node monitoring agent's){said}"


#: What ``lost_devices`` compares: ``allocatable_<fact>`` against ``capacity_<fact>``, and what they count.
LOST_COUNTS: tuple[tuple[str, str], ...] = (("gpus", "GPUs"), ("efa", "EFA interfaces"))


def _lost_devices(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """A node allocating fewer GPUs or EFA interfaces than its capacity: it holds the rest back, unhealthy."""
    for fact, what in LOST_COUNTS:
        alloc, capacity = _count(f.get(f"allocatable_{fact}")), _count(f.get(f"capacity_{fact}"))
        if alloc is not None and capacity is not None and alloc < capacity:
            lost = capacity - alloc
            return (
                f"allocatable_{fact}",
                alloc,
                f"below its capacity {capacity}: the node has lost {lost} {what} (its device plugin "
                "reports them unhealthy)",
            )
    return None


def _in_use(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """Memory another process held on the GPU before the rank created its context (:mod:`.gpumem`)."""
    held = held_memory(f)
    if held is None:
        return None
    if held.used_mib is None:
        return "gpu_processes", len(held.holders), f"other processes before the run, {held.by}"
    return "memory_used_mib", held.used_mib, f"in use before the run, {held.by}"


#: Every fitness rule, by the name ``--fitness-warn`` and ``--fitness-off`` take.
RULES: tuple[Rule, ...] = (
    Rule(
        "ecc_volatile",
        "uncorrected ECC errors since the driver loaded",
        _positive("ecc_volatile_uncorrected"),
    ),
    Rule(
        "ecc_aggregate", "uncorrected ECC errors over the GPU's life", _positive("ecc_aggregate_uncorrected")
    ),
    Rule("remapped_failure", "a row remapping failed", _true("remapped_failure")),
    Rule("remapped_pending", "a row remapping waits for a GPU reset", _true("remapped_pending")),
    Rule("retired_pending", "retired pages wait for a GPU reset", _true("retired_pending")),
    Rule(
        "pcie_width",
        "the PCIe link runs below its maximum width",
        _below("pcie_width", "pcie_width_max", "max"),
    ),
    Rule(
        "pcie_gen",
        "the PCIe link runs below its maximum generation",
        _below("pcie_gen", "pcie_gen_max", "max"),
    ),
    Rule("hw_slowdown", "the clocks are held down by a hardware slowdown", _event("hw_slowdown")),
    Rule("thermal", "the clocks are held down by temperature", _event("hw_thermal", "sw_thermal")),
    Rule("power_brake", "the clocks are held down by the power brake", _event("hw_power_brake")),
    Rule(
        "power_limit",
        "the power limit is below its default",
        _below("power_limit_w", "power_default_w", "default"),
    ),
    Rule(
        "device_count",
        "the node's ranks see fewer GPUs or Neuron devices than its instance type has",
        _device_count,
        scope="node",
    ),
    Rule(
        "advertised_devices",
        "the node advertises fewer GPUs, Neuron devices, NeuronCores or EFA interfaces than its type has",
        _advertised_devices,
        scope="node",
    ),
    Rule(
        "hardware_ready",
        "the node's AcceleratedHardwareReady condition (the EKS node monitoring agent's) is False",
        _hardware_ready,
        scope="node",
    ),
    Rule(
        "lost_devices",
        "the node allocates fewer GPUs or EFA interfaces than its capacity holds",
        _lost_devices,
        scope="node",
    ),
    Rule(
        "neuron_ecc_uncorrected",
        "a Neuron device counted uncorrected ECC events in its DRAM or SRAM (neuron-monitor)",
        _counted(*NEURON_UNCORRECTED),
    ),
    Rule(
        "neuron_ecc_corrected",
        "a Neuron device counted corrected ECC events in its DRAM or SRAM (neuron-monitor)",
        _counted(*NEURON_CORRECTED),
        default="warn",
    ),
    Rule(
        "gpu_in_use",
        "another process held memory on the GPU before the run",
        _in_use,
        default="warn",
    ),
)
#: The rules the GPUs' events during the run break (:mod:`rollcall.evidence.gpu_events`, judged by the
#: ``gpu_events`` check), by name and what they find: the fitness options take them as they take the others.
EVENT_RULES: tuple[tuple[str, str], ...] = (
    ("gpu_lost", "NVML answered that the GPU is lost, or it was gone from the node's count at the end"),
    ("hardware_event", "an Xid of the catalog's hardware class, or a double-bit ECC error, during the run"),
)
RULE_NAMES: tuple[str, ...] = (*(r.name for r in RULES), *(name for name, _ in EVENT_RULES))


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


#: What a finding of each rule does unless the policy names it (:attr:`Rule.default`).
DEFAULT_SEVERITY: dict[str, Severity] = {r.name: r.default for r in RULES}


@dataclass(frozen=True)
class FitnessPolicy:
    """Which rules fail, warn or are off where that is not their default (by :data:`RULE_NAMES`)."""

    warn: frozenset[str] = frozenset()
    off: frozenset[str] = frozenset()
    fail: frozenset[str] = frozenset()

    def severity(self, rule: str) -> Severity:
        """What a finding of ``rule`` does: off, warn or fail as named, else the rule's default."""
        if rule in self.off:
            return "off"
        if rule in self.warn:
            return "warn"
        return "fail" if rule in self.fail else DEFAULT_SEVERITY.get(rule, "fail")


@dataclass(frozen=True)
class Unfit:
    """A device that breaks a rule: the device, the rule, the fact and its value, and what a finding does."""

    device: Device
    rule: str
    fact: str
    value: Any
    why: str
    severity: Severity = "fail"

    def __str__(self) -> str:
        return f"{self.device.label}: {self.fact}={self.value} {self.why} (rule {self.rule})"

    def as_dict(self) -> dict[str, Any]:
        """The finding, JSON-ready."""
        d = self.device
        return {
            "node": d.node,
            "name": d.name,
            "rank": d.rank,
            "device_index": d.index,
            "gpu_uuid": d.facts.get("gpu_uuid"),
            "gpu_serial": d.facts.get("gpu_serial"),
            "rule": self.rule,
            "fact": self.fact,
            "value": self.value,
            "severity": self.severity,
            "message": str(self),
        }


def unfit_devices(nodes: Iterable[NodeFacts], policy: FitnessPolicy | None = None) -> list[Unfit]:
    """Every rule broken by every device, in node and rank order; rules ``policy`` turns off are skipped.

    A node-wide rule's finding stands first among its node's, on the node itself (:attr:`Device.whole_node`).
    """
    policy = policy or FitnessPolicy()
    found = []
    for node in nodes:
        for rule in RULES:
            if rule.scope != "node" or (severity := policy.severity(rule.name)) == "off":
                continue
            hit = rule.find(node.facts)
            if hit is not None:
                rank = min(node.ranks, default=-1)
                itself = Device(node.node, rank, node.name, node.facts, node.unknown, whole_node=True)
                found.append(Unfit(itself, rule.name, *hit, severity))
        for device in (*node.devices, *node.neuron_devices):
            for rule in RULES:
                if rule.scope != "device" or (severity := policy.severity(rule.name)) == "off":
                    continue
                hit = rule.find(device.facts)
                if hit is not None:
                    found.append(Unfit(device, rule.name, *hit, severity))
    return found


def device_summary(device: Device) -> str:
    """The facts of ``device`` that explain a slow rank, those it read, as one clause.

    ``GPU 3 (UUID GPU-...): clock events sw_power_cap, SM clock 1200 of 1980 MHz, PCIe gen 4 of 5 x8 of
    16, 83 C, power limit 500 of 700 W``; the clock events ``"none"`` when the device read none active.
    """
    f = device.facts

    def pair(key: str, most: str, unit: str = "") -> str | None:
        if key not in f:
            return None
        return f"{f[key]} of {f[most]}{unit}" if most in f else f"{f[key]}{unit}"

    events = f.get("clock_events")
    parts = [
        f"clock events {', '.join(events) or 'none'}" if isinstance(events, list) else None,
        f"SM clock {shown}" if (shown := pair("sm_clock_mhz", "sm_clock_max_mhz", " MHz")) else None,
        f"PCIe gen {shown}" if (shown := pair("pcie_gen", "pcie_gen_max")) else None,
        f"x{shown}" if (shown := pair("pcie_width", "pcie_width_max")) else None,
        f"{f['temperature_c']} C" if "temperature_c" in f else None,
        f"power limit {shown}" if (shown := pair("power_limit_w", "power_default_w", " W")) else None,
    ]
    index = device.index if device.index is not None else "?"
    said = ", ".join(p for p in parts if p) or "no clock, PCIe or power facts read"
    return f"GPU {index} (UUID {f.get('gpu_uuid', 'unknown')}): {said}"


# ---------------------------------------------------------------- drift and the golden configuration


@dataclass(frozen=True)
class Drift:
    """A key whose value differs between nodes: each value with the nodes that have it."""

    key: str
    values: Mapping[str, tuple[int, ...]]

    def __str__(self) -> str:
        shown = "; ".join(
            f"{value} ({'node' if len(ns) == 1 else 'nodes'} {ranges(ns)})"
            for value, ns in self.values.items()
        )
        return f"{self.key} differs between nodes: {shown}"


def drift(nodes: Iterable[NodeFacts], keys: Iterable[str] = DRIFT_KEYS) -> list[Drift]:
    """Each key of ``keys`` two nodes know with different values (a node not knowing it is left out)."""
    nodes = list(nodes)
    found = []
    for key in keys:
        holders: dict[str, list[int]] = defaultdict(list)
        for n in nodes:
            if key in n.facts:
                holders[str(n.facts[key])].append(n.node)
        if len(holders) > 1:
            found.append(Drift(key, {v: tuple(ns) for v, ns in sorted(holders.items())}))
    return found


@dataclass(frozen=True)
class Mismatch:
    """A node whose fact does not match the golden configuration's glob (or is unknown)."""

    node: int
    name: str
    key: str
    glob: str
    value: str | None
    reason: str | None = None

    def __str__(self) -> str:
        found = (
            f"{self.key} is {self.value}" if self.value is not None else f"{self.key} unknown ({self.reason})"
        )
        return f"node {self.node} ({self.name}): {found}, expected {self.key}={self.glob} (--expect)"


def mismatches(nodes: Iterable[NodeFacts], expect: Iterable[tuple[str, str]]) -> list[Mismatch]:
    """Every node's fact that ``expect`` (``(key, glob)`` pairs) does not match; unknown is no match."""
    found = []
    for node in nodes:
        for key, glob in expect:
            values = node.values(key)
            for value in values:
                if not fnmatch.fnmatchcase(str(value), glob):
                    found.append(Mismatch(node.node, node.name, key, glob, str(value)))
            reason = node.why_unknown(key)
            if reason is not None:
                found.append(Mismatch(node.node, node.name, key, glob, None, reason))
    return found


def parse_expect(pairs: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``("torch=2.11.*",)`` as ``(("torch", "2.11.*"),)``; ValueError naming the known keys otherwise."""
    return tuple(_expect_pair(pair) for pair in pairs)


def parse_expect_files(paths: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The pairs of each file of ``paths`` in turn (:func:`read_expect_file`): ``--expect-file``."""
    return tuple(pair for path in paths for pair in read_expect_file(Path(path)))


def _expect_pair(pair: str) -> tuple[str, str]:
    key, eq, glob = pair.partition("=")
    key, glob = key.strip(), glob.strip()
    if not eq or not key or not glob:
        raise ValueError(f"{pair!r} is not KEY=GLOB")
    if key not in EXPECT_KEYS:
        raise ValueError(f"unknown key {key!r}; the keys are {', '.join(EXPECT_KEYS)}")
    return key, glob


def read_expect_file(path: Path) -> list[tuple[str, str]]:
    """The golden configuration in ``path``: one ``KEY=GLOB`` a line; ``#`` comments and blank lines skipped.

    Raises:
        ValueError: naming the file and the line when the file cannot be read, or a line is no ``KEY=GLOB``
            or names an unknown key.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        try:
            found.append(_expect_pair(body))
        except ValueError as exc:
            raise ValueError(f"{path}, line {number}: {exc}") from None
    return found


def parse_rules(words: Iterable[str]) -> frozenset[str]:
    """Rule names, comma-separated (``pcie_width,thermal``); ValueError naming the rules otherwise."""
    names = {n.strip() for w in words for n in w.split(",") if n.strip()}
    unknown = sorted(names - set(RULE_NAMES))
    if unknown:
        raise ValueError(f"unknown rule(s) {', '.join(unknown)}; the rules are {', '.join(RULE_NAMES)}")
    return frozenset(names)


__all__ = [
    "ADVERTISED_COUNTS",
    "DEFAULT_SEVERITY",
    "DEVICE_COUNTS",
    "DEVICE_KEYS",
    "DRIFT_KEYS",
    "DRIFT_MODES",
    "EVENT_RULES",
    "EXPECT_KEYS",
    "LOST_COUNTS",
    "NEURON_CORRECTED",
    "NEURON_DEVICE",
    "NEURON_UNCORRECTED",
    "NODE_KEYS",
    "OBSERVED_KEYS",
    "RULES",
    "RULE_NAMES",
    "START_KEYS",
    "Device",
    "Drift",
    "FitnessPolicy",
    "Mismatch",
    "NodeFacts",
    "Unfit",
    "device_summary",
    "drift",
    "mismatches",
    "node_facts",
    "parse_expect",
    "parse_expect_files",
    "parse_rules",
    "read_expect_file",
    "unfit_devices",
]
