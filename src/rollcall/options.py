"""The suite's options: one table, each also read from ``ROLLCALL_<NAME>``, validated into :class:`Options`.

Precedence: the command line, then the environment variable, then the default. A bad value raises
:class:`OptionError` naming the option, where the value came from, and what to write instead.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rollcall.jobspec import parse_env_pairs


class OptionError(ValueError):
    """A bad option value; the message says which option and how to fix it."""


def env_name(option: str) -> str:
    """``--job-timeout`` reads ``ROLLCALL_JOB_TIMEOUT``."""
    return "ROLLCALL_" + option.lstrip("-").replace("-", "_").upper()


def _int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"expected a whole number >= {minimum}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number > 0") from None
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a finite number > 0")
    return value


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError("expected a duration such as 3600, 90m, 6h or 2d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("expected a number from 0 to 1") from None
    if not 0 <= value < 1:
        raise ValueError("must be >= 0 and < 1 (0 turns the check off)")
    return value


def _percent(text: str) -> float:
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise ValueError("expected a percentage such as 10") from None
    if not 0 <= value < 100:
        raise ValueError("must be >= 0 and < 100")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _prefix(text: str) -> str:
    if not re.match(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$", text):
        raise ValueError("must be 1-30 lower-case letters, digits or '-', starting with a letter")
    return text


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


@dataclass(frozen=True)
class Spec:
    """One option: its flag, how to parse it, its default and its help."""

    flag: str
    parse: Callable[[str], Any] | None
    default: Any
    help: str
    metavar: str | None = None
    multiple: bool = False
    flag_only: bool = False


OPTIONS: tuple[Spec, ...] = (
    Spec("--nodes", _int(1), 2, "nodes (pods) to train on", "N"),
    Spec(
        "--procs-per-node",
        _int(1),
        None,
        "ranks per node (default: the nodes' allocatable GPUs or NeuronCores; 1 on cpu)",
        "N",
    ),
    Spec("--accelerator", _choice("auto", "nvidia", "neuron", "cpu"), "auto", "device the ranks train on"),
    Spec("--instance-type", str, None, "only nodes with this node.kubernetes.io/instance-type", "TYPE"),
    Spec("--image", str, None, "the training image (required by the kubernetes backend)", "IMAGE"),
    Spec(
        "--backend",
        _choice("auto", "kubernetes", "local"),
        "auto",
        "where to run: auto = kubernetes when a kubeconfig or in-cluster config exists, else local",
    ),
    Spec("--kubeconfig", str, None, "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)", "PATH"),
    Spec("--context", str, None, "kubeconfig context to use", "NAME"),
    Spec("--namespace-prefix", _prefix, "rollcall", "prefix of each run's namespace", "PREFIX"),
    Spec("--job-timeout", _positive_float, 1800.0, "seconds the training job may run", "SECONDS"),
    Spec("--efa", _choice("auto", "on", "off"), "auto", "request the nodes' EFA devices"),
    Spec("--min-throughput", _positive_float, None, "fail ranks below this many samples/s", "SAMPLES_PER_S"),
    Spec("--retries", _int(0), 0, "re-run a failed job this many times (a pass after a retry is flaky)", "N"),
    Spec(
        "--keep", _bool, False, "leave namespaces, Jobs and processes in place for debugging", flag_only=True
    ),
    Spec("--artifacts-dir", str, "artifacts", "where logs and reports go", "DIR"),
    Spec(
        "--unschedulable-grace",
        _positive_float,
        60.0,
        "seconds a pod may stay Unschedulable before the run fails with the scheduler's reason",
        "SECONDS",
    ),
    Spec(
        "--sweep-older-than",
        _duration,
        None,
        "at session start, delete this suite's namespaces older than this (e.g. 6h): left by killed runs",
        "DURATION",
    ),
    Spec(
        "--check-device-plugins",
        _bool,
        False,
        "before running, check that the NVIDIA/Neuron and EFA device-plugin DaemonSets are ready",
        flag_only=True,
    ),
    Spec(
        "--workload-env",
        str,
        (),
        "extra environment for the workload's processes (repeatable)",
        "KEY=VALUE",
        multiple=True,
    ),
    Spec("--workload-args", str, (), "extra arguments for train.py, one shell-quoted string", "ARGS"),
    Spec("--baseline", str, None, "JSON baseline file to gate throughput and epoch time against", "FILE"),
    Spec(
        "--max-regression",
        _percent,
        10.0,
        "fail when throughput falls, or epoch time rises, more than PCT percent against --baseline",
        "PCT",
    ),
    Spec(
        "--write-baseline",
        str,
        None,
        "record each sound run's figures as the new baseline in FILE (merged with its entries)",
        "FILE",
    ),
    Spec(
        "--straggler-ratio",
        _fraction,
        0.8,
        "fail ranks whose throughput is below RATIO x the median of all ranks, or whose compute time per "
        "step exceeds the median rank's by more than 1/RATIO (0: off)",
        "RATIO",
    ),
    Spec(
        "--min-busbw",
        _positive_float,
        None,
        "fail a node (or pair of nodes, or the world) whose all-reduce bus bandwidth is below this",
        "GBPS",
    ),
    Spec(
        "--busbw-ratio",
        _fraction,
        0.5,
        "fail a node whose all-reduce bus bandwidth is below RATIO x the median node's (0: off)",
        "RATIO",
    ),
)


@dataclass(frozen=True)
class Options:
    """The validated options of one pytest session."""

    nodes: int = 2
    procs_per_node: int | None = None
    accelerator: Literal["auto", "nvidia", "neuron", "cpu"] = "auto"
    instance_type: str | None = None
    image: str | None = None
    backend: Literal["auto", "kubernetes", "local"] = "auto"
    kubeconfig: str | None = None
    context: str | None = None
    namespace_prefix: str = "rollcall"
    job_timeout: float = 1800.0
    efa: Literal["auto", "on", "off"] = "auto"
    min_throughput: float | None = None
    retries: int = 0
    keep: bool = False
    artifacts_dir: Path = Path("artifacts")
    unschedulable_grace: float = 60.0
    sweep_older_than: float | None = None
    check_device_plugins: bool = False
    workload_env: dict[str, str] = field(default_factory=dict)
    workload_args: tuple[str, ...] = ()
    baseline: str | None = None
    max_regression: float = 10.0
    write_baseline: str | None = None
    straggler_ratio: float = 0.8
    min_busbw: float | None = None
    busbw_ratio: float = 0.5
    sources: dict[str, str] = field(default_factory=dict)


def attr_name(flag: str) -> str:
    """``--job-timeout`` is stored as ``job_timeout``."""
    return flag.lstrip("-").replace("-", "_")


def resolve(cli: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Options:
    """Options from command-line values (``None`` or empty when not given), the environment and defaults."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in OPTIONS:
        name = attr_name(spec.flag)
        given = cli.get(name)
        env = env_name(spec.flag)
        if given not in (None, False, [], ()):
            raw, source = given, spec.flag
        elif env in environ:
            raw, source = environ[env], env
        else:
            values[name], sources[name] = spec.default, "default"
            continue
        sources[name] = source
        values[name] = _convert(spec, raw, source)
    values["artifacts_dir"] = Path(values["artifacts_dir"])
    try:
        values["workload_env"] = parse_env_pairs(values["workload_env"])
    except ValueError as exc:
        raise OptionError(f"{exc} (from {sources['workload_env']})") from None
    return Options(**values, sources=sources)


def _convert(spec: Spec, raw: Any, source: str) -> Any:
    if spec.flag_only and isinstance(raw, bool):
        return raw
    if spec.multiple:
        items: Sequence[str] = shlex.split(raw) if isinstance(raw, str) else list(raw)
        return tuple(items)
    if spec.flag == "--workload-args":
        try:
            return tuple(shlex.split(raw))
        except ValueError as exc:
            raise OptionError(
                f"{spec.flag} {raw!r} (from {source}) is not shell-quoted text: {exc}"
            ) from None
    assert spec.parse is not None
    try:
        return spec.parse(raw)
    except ValueError as exc:
        example = f"{spec.flag} {spec.metavar}" if spec.metavar else spec.flag
        raise OptionError(
            f"invalid {spec.flag} value {raw!r} (from {source}): {exc}; use {example}"
        ) from None
