"""Which devices and nodes are unfit: the rules every device and node is held to, and the policy over them.

Pure functions over each node's facts (:mod:`.nodefacts`):

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
  PCIe link, temperature, power limit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rollcall.evidence.gpumem import held_memory
from rollcall.evidence.nodefacts import NEURON_CORRECTED, NEURON_UNCORRECTED, Device, NodeFacts, samples_of
from rollcall.evidence.xids import Scope

Severity = Literal["fail", "warn", "off"]


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
    #: The fact a device's samples hold for this rule (:data:`~.nodefacts.SAMPLED_KEYS`): without them, judged
    #: on the one reading, a finding only warns (:data:`ONE_READING`).
    sampled: str | None = None
    #: What it finds below a floor the user set (:attr:`FitnessPolicy.floors`, a fraction): such a finding
    #: fails (unless ``--fitness-warn`` or ``--fitness-off`` names the rule); above the floor, ``find`` at
    #: the rule's default.
    floor: Callable[[Mapping[str, Any], float], tuple[str, Any, str] | None] | None = None


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


#: What a finding of a sampled rule judged on a device's one reading says (it only warns).
ONE_READING = "in one reading, not held"


def _link(key: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    """The PCIe link's ``key`` below its maximum: the most it reached under load where sampled."""
    limit = f"{key}_max"

    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        value, most = _num(f.get(key)), _num(f.get(limit))
        if value is None or most is None or value >= most:
            return None
        n = samples_of(f, key)
        how = f"in all {n} samples (the most it reached under load)" if n else ONE_READING
        return key, f[key], f"below its max {f[limit]} ({limit}) {how}"

    return find


def _under_floor(key: str, full: str) -> Callable[[Mapping[str, Any], float], tuple[str, Any, str] | None]:
    """``key`` below ``floor`` (a fraction) of ``full``: a floor the user set (``--power-floor``)."""

    def find(f: Mapping[str, Any], floor: float) -> tuple[str, Any, str] | None:
        value, most = _num(f.get(key)), _num(f.get(full))
        if value is not None and most is not None and value < floor * most:
            return key, f[key], f"below the floor {floor:.0%} of its {full} {f[full]} (--power-floor)"
        return None

    return find


def _event(*names: str) -> Callable[[Mapping[str, Any]], tuple[str, Any, str] | None]:
    """One of the clock-event reasons ``names`` held (sampled), or active in the one reading."""

    def find(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
        active = f.get("clock_events")
        if not isinstance(active, list) or not (hit := [n for n in names if n in active]):
            return None
        n = samples_of(f, "clock_events")
        if not n:
            return "clock_events", ",".join(hit), f"active {ONE_READING}"
        share = f.get("clock_events_share")
        shares = share if isinstance(share, dict) else {}
        held = ", ".join(f"{_num(shares.get(h)) or 0:.0%}" for h in hit)
        return "clock_events", ",".join(hit), f"held in {held} of {n} samples"

    return find


#: What ``device_count`` compares: the counts the ranks saw (NVML's, CUDA's; the ``/dev/neuron*`` devices),
#: the count the backend says the node's instance type has, and what they count.
DEVICE_COUNTS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("gpus", "cuda_devices"), "expected_gpus", "GPUs"),
    (("neuron_devices",), "expected_neuron_devices", "Neuron devices"),
)


def count_of(value: object, pick: Callable[[list[int]], int] = min) -> int | None:
    """A count as a node holds it (``8``, ``"8"``, or ``"7 | 8"`` when its ranks disagree: ``pick``'s)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    words = str(value).split(" | ") if isinstance(value, str) else []
    counts = [int(w) for w in words if w.strip().isdigit()]
    return pick(counts) if counts and len(counts) == len(words) else None


def _device_count(f: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """Fewer devices seen on a node than its instance type has (the least count its ranks saw)."""
    for seen_keys, expected_key, what in DEVICE_COUNTS:
        expected = count_of(f.get(expected_key))
        seen = {k: c for k in seen_keys if (c := count_of(f.get(k))) is not None}
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
        advertised, has = count_of(f.get(advertised_key)), count_of(f.get(type_key))
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
        alloc, capacity = count_of(f.get(f"allocatable_{fact}")), count_of(f.get(f"capacity_{fact}"))
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
        "ecc_aggregate",
        "uncorrected ECC errors over the GPU's life (a lifetime count: a remapped old error stays in it)",
        _positive("ecc_aggregate_uncorrected"),
        default="warn",
    ),
    Rule("remapped_failure", "a row remapping failed", _true("remapped_failure")),
    Rule("remapped_pending", "a row remapping waits for a GPU reset", _true("remapped_pending")),
    Rule("retired_pending", "retired pages wait for a GPU reset", _true("retired_pending")),
    Rule(
        "pcie_width",
        "the PCIe link stays below its maximum width in every sample under load (one reading: warns)",
        _link("pcie_width"),
        sampled="pcie_width",
    ),
    Rule(
        "pcie_gen",
        "the PCIe link stays below its maximum generation in every sample under load (one reading: warns)",
        _link("pcie_gen"),
        sampled="pcie_gen",
    ),
    Rule(
        "hw_slowdown",
        "the clocks are held down by a hardware slowdown in half the samples or more (one reading: warns)",
        _event("hw_slowdown"),
        sampled="clock_events",
    ),
    Rule(
        "thermal",
        "the clocks are held down by temperature in half the samples or more (one reading: warns)",
        _event("hw_thermal", "sw_thermal"),
        sampled="clock_events",
    ),
    Rule(
        "power_brake",
        "the clocks are held down by the power brake in half the samples or more (one reading: warns)",
        _event("hw_power_brake"),
        sampled="clock_events",
    ),
    Rule(
        "power_limit",
        "the enforced power limit is below its default (an administrator's cap: reported; it fails only "
        "below --power-floor)",
        _below("power_limit_w", "power_default_w", "default"),
        default="warn",
        floor=_under_floor("power_limit_w", "power_default_w"),
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
    #: A floor the user set for a rule that has one (:attr:`Rule.floor`), as a fraction (``--power-floor``).
    floors: Mapping[str, float] = field(default_factory=dict)

    def severity(self, rule: str) -> Severity:
        """What a finding of ``rule`` does: off, warn or fail as named, else the rule's default."""
        if rule in self.off:
            return "off"
        if rule in self.warn:
            return "warn"
        return "fail" if rule in self.fail else DEFAULT_SEVERITY.get(rule, "fail")


@dataclass(frozen=True)
class Unfit:
    """A device that breaks a rule: the device, the rule, the fact and its value, and what a finding does.

    ``severity`` is what it does to this run; ``out`` what it takes out of service, under the user's rules
    (:func:`takes_out`): the device's node, the device alone (a GPU no rank of the run used), or nothing (a
    rule that only warns, by default or by ``--fitness-warn``). This is the one predicate every node verdict,
    mark and :attr:`~rollcall.verdict.Verdict.unfit_nodes` follows.
    """

    device: Device
    rule: str
    fact: str
    value: Any
    why: str
    severity: Severity = "fail"
    out: Scope | None = "node"

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
            "takes_out": self.out,
            "message": str(self),
        }


def takes_out(severity: Severity, scope: Scope = "node", used: bool = True) -> Scope | None:
    """What a finding takes out of service: ``severity`` is the user's for its rule (``--fitness-*``).

    Nothing where the rule does not fail; else the node where the run used the device, or where the finding
    is the node's whole (``scope`` ``node``: a node-wide rule, a GPU lost, a node reboot NVIDIA asks for);
    else (a GPU-scoped finding on a GPU no rank of the run used) the GPU alone.
    """
    if severity != "fail":
        return None
    return "node" if used or scope == "node" else "gpu"


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
                found.append(Unfit(itself, rule.name, *hit, severity, takes_out(severity)))
        for device in (*node.devices, *node.neuron_devices):
            for rule in RULES:
                if rule.scope != "device" or (severity := policy.severity(rule.name)) == "off":
                    continue
                floor = policy.floors.get(rule.name)
                hit = rule.floor(device.facts, floor) if rule.floor and floor is not None else None
                if hit is not None:  # below the user's floor: it fails, unless the user said otherwise
                    severity = severity if rule.name in policy.warn else "fail"
                else:
                    hit = rule.find(device.facts)
                if hit is not None:
                    if rule.sampled and samples_of(device.facts, rule.sampled) is None and severity == "fail":
                        severity = "warn"  # one reading, not held: it takes nothing out
                    found.append(Unfit(device, rule.name, *hit, severity, takes_out(severity)))
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
    "EVENT_RULES",
    "LOST_COUNTS",
    "ONE_READING",
    "RULES",
    "RULE_NAMES",
    "FitnessPolicy",
    "Unfit",
    "count_of",
    "device_summary",
    "parse_rules",
    "takes_out",
    "unfit_devices",
]
