"""The judging options: throughput, stragglers, bus bandwidth, node fitness and the GPUs' events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rollcall.evidence.drift import DriftMode, parse_expect, parse_expect_files
from rollcall.evidence.fitness import RULE_NAMES, parse_rules
from rollcall.evidence.xids import XidClass, parse_xid_classes
from rollcall.options.declare import GroupName, Section, option
from rollcall.options.values import Choice, fraction, positive_float, share_of_default


def busbw_floor(text: str) -> float | Literal["auto"]:
    """GB/s above 0, or ``auto``: the published floor of the nodes' instance type."""
    if text.strip() == "auto":
        return "auto"
    try:
        return positive_float(text)
    except ValueError as exc:
        raise ValueError(f"{exc}, or auto (the instance type's published floor)") from None


@dataclass(frozen=True, kw_only=True)
class JudgingOptions(Section):
    """What a run is held to beyond the roll call itself (:func:`rollcall.gate.criteria_of` reads it)."""

    GROUP: ClassVar[GroupName] = "judging"

    min_throughput: float | None = option(
        "--min-throughput",
        positive_float,
        None,
        "fail ranks slower than this many samples/s",
        "SAMPLES_PER_S",
    )
    straggler_ratio: float = option(
        "--straggler-ratio",
        fraction,
        0.8,
        "fail ranks below RATIO x the median rank's throughput, or whose compute time per step "
        "exceeds the median rank's by more than 1/RATIO (0: off)",
        "RATIO",
    )
    min_busbw: float | Literal["auto"] = option(
        "--min-busbw",
        busbw_floor,
        "auto",
        (
            "fail a node, ring pair of nodes or the world whose all-reduce bus bandwidth is below GBPS "
            "GB/s; `auto`: below the published floor of the run's instance type (one node over NVLink, "
            "two or more over the fabric), where one is known. Each floor's source and the message size "
            "it was published at are in `evidence/floors.py`; a failure names the group and the floor's "
            "source; on GPUs the bandwidth phase then measures at the floor's size, up to 2 GiB"
        ),
        "GBPS",
    )
    busbw_ratio: float = option(
        "--busbw-ratio",
        fraction,
        0.5,
        "fail a node (or pair) whose bus bandwidth is below RATIO x the median node's (pair's) (0: off)",
        "RATIO",
    )
    fitness_warn: frozenset[str] = option(
        "--fitness-warn",
        parse_rules,
        frozenset(),
        "report a device that breaks these fitness rules as a warning, not a failure (repeatable; the "
        f"rules, in [fitness.md](fitness.md): {', '.join(f'`{r}`' for r in RULE_NAMES)}); an unknown rule "
        "is refused, listing them",
        "RULE[,RULE...]",
        multiple=True,
    )
    fitness_fail: frozenset[str] = option(
        "--fitness-fail",
        parse_rules,
        frozenset(),
        "fail a device that breaks these fitness rules where the rule warns by default: "
        "`neuron_ecc_corrected`, `gpu_in_use` (repeatable); --fitness-warn and --fitness-off win over it",
        "RULE[,RULE...]",
        multiple=True,
    )
    power_floor: float | None = option(
        "--power-floor",
        share_of_default,
        None,
        "fail a GPU whose enforced power limit (NVML's, the limit in force) is below PCT percent of its "
        "default (`90` or `90%`; rule `power_limit`, which otherwise only reports an administrator's cap "
        "as a warning); `--fitness-warn power_limit` keeps it a warning, `--fitness-off` turns it off",
        "PCT",
    )
    fitness_off: frozenset[str] = option(
        "--fitness-off",
        parse_rules,
        frozenset(),
        "do not apply these fitness rules (repeatable; the names `--fitness-warn` takes)",
        "RULE[,RULE...]",
        multiple=True,
    )
    xid_class: dict[int, XidClass] = option(
        "--xid-class",
        parse_xid_classes,
        {},
        (
            "move Xids between the classes of NVIDIA's Xid catalog, e.g. `31=hardware` (repeatable; "
            "classes in [gpu-health.md](gpu-health.md)): `hardware` makes the GPU unfit, `program` is "
            "evidence beside the error of the rank on that GPU, `system` a warning; a pair that is no "
            "XID=CLASS is refused"
        ),
        "XID=CLASS[,XID=CLASS...]",
        multiple=True,
    )
    drift: DriftMode = option(
        "--drift",
        Choice(DriftMode),
        "warn",
        "nodes of one run whose driver, CUDA, NCCL, kernel, OS, Python, torch, transformers, Neuron, "
        "libfabric, aws-ofi-nccl, kubelet or container-runtime versions differ are named "
        "(`config_drift`); `fail` fails the run",
    )
    expect: tuple[tuple[str, str], ...] = option(
        "--expect",
        parse_expect,
        (),
        "the golden configuration: fail the run when a node's fact does not match the glob, or is "
        "unknown (repeatable; keys in [fitness.md](fitness.md); an unknown key is refused, listing them)",
        "KEY=GLOB",
        multiple=True,
    )
    expect_file: tuple[tuple[str, str], ...] = option(
        "--expect-file",
        parse_expect_files,
        (),
        "the golden configuration from a file, beside any `--expect`: one `KEY=GLOB` a line, `#` "
        "starting a comment, blank lines skipped (repeatable); a malformed line or an unknown key is "
        "refused, naming the file and the line (not `--expect @FILE`: pytest reads an `@FILE` "
        "argument as its own file of arguments)",
        "FILE",
        multiple=True,
    )
