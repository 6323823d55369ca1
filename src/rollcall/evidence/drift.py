"""Drift between the nodes of one run, and the golden configuration every node is held to.

Pure functions over each node's facts (:mod:`.nodefacts`):

- :func:`drift` names the keys of :data:`DRIFT_KEYS` whose value differs between nodes (``config_drift``);
- :func:`mismatches` holds every node to the golden configuration ``--expect KEY=GLOB`` (:data:`EXPECT_KEYS`),
  or the lines of ``--expect-file FILE`` (:func:`read_expect_file`); a node whose fact is unknown does not
  match (``expectations``).
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rollcall.evidence.nodefacts import DEVICE_KEYS, NODE_KEYS, OBSERVED_KEYS, NodeFacts
from rollcall.ranges import ranges

DriftMode = Literal["fail", "warn", "off"]
DRIFT_MODES: tuple[DriftMode, ...] = ("fail", "warn", "off")
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
#: Whose a fact is, for ``--expect``: a node's own (its driver, kernel, devices, instance type...), or what
#: the run brought to it and where it was placed: the platform's.
Whose = Literal["node", "platform"]
#: The facts of :data:`EXPECT_KEYS` that are the platform's: what the run brought with it (its image: the OS
#: and Python inside it, torch, transformers, NCCL, libfabric and the NCCL net plugin inside it, the Neuron
#: runtime and compiler inside it), the image its node group gives every node (``image``) and where the
#: scheduler placed it (the node group, zone, instance and capacity reservation). A node that misses one fails
#: the run and is marked for nothing. Every other key is the node's own (:func:`whose`): a node that misses
#: it is unfit.
PLATFORM_KEYS: frozenset[str] = frozenset(
    {
        "os",
        "python",
        "torch",
        "transformers",
        "nccl",
        "neuron_runtime",
        "neuron_compiler",
        "libfabric",
        "aws_ofi_nccl",
        "image",
        "node_group",
        "zone",
        "instance_id",
        "capacity_reservation",
    }
)


def whose(key: str) -> Whose:
    """Whose the fact ``key`` of ``--expect`` is: the node's own, or the platform's (`PLATFORM_KEYS`)."""
    return "platform" if key in PLATFORM_KEYS else "node"


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

    @property
    def whose(self) -> Whose:
        """Whose the fact is (:func:`whose`)."""
        return whose(self.key)

    @property
    def out(self) -> Literal["node"] | None:
        """What it takes out of service: its node, where the fact is the node's own and was read.

        Else nothing: the platform's fact, or one the node could not read (no mark on what is not known).
        """
        return "node" if self.whose == "node" and self.value is not None else None

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


__all__ = [
    "DRIFT_KEYS",
    "DRIFT_MODES",
    "EXPECT_KEYS",
    "PLATFORM_KEYS",
    "Drift",
    "Mismatch",
    "Whose",
    "drift",
    "mismatches",
    "parse_expect",
    "parse_expect_files",
    "read_expect_file",
    "whose",
]
