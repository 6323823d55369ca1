"""The suite's options, each declared once in :class:`Options`, also read from ``ROLLCALL_<NAME>``.

Every field of :class:`Options` is declared by :func:`option`: its flag, how to parse it, its default and
its help; the environment variable is the flag's (``--job-timeout`` reads ``ROLLCALL_JOB_TIMEOUT``).
:data:`OPTIONS`, the table the pytest plugin registers, is derived from those fields, and :data:`DEFAULTS`
holds every default for modules that need one. Adding an option is adding one field.

Precedence: the command line, then the environment variable, then the default. A bad value raises
:class:`OptionError` naming the option, where the value came from, and what to write instead.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, cast, get_args

from rollcall.checks.fitness import (
    EXPECT_KEYS,
    RULE_NAMES,
    DriftMode,
    parse_expect,
    parse_expect_files,
    parse_rules,
)
from rollcall.jobspec import (
    DEFAULT_JOB_TIMEOUT_S,
    AcceleratorChoice,
    CacheVolume,
    EfaChoice,
    Scheduling,
    Taint,
    TaintEffect,
    Toleration,
    check_args,
    check_env,
    check_image,
    parse_cache_volume,
    parse_compile_cache,
)

BackendChoice = Literal["auto", "kubernetes", "local", "slurm"]


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


def _busbw_floor(text: str) -> float | Literal["auto"]:
    if text.strip() == "auto":
        return "auto"
    try:
        return _positive_float(text)
    except ValueError as exc:
        raise ValueError(f"{exc}, or auto (the instance type's published floor)") from None


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError("expected a duration such as 3600, 90m, 6h or 2d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _positive_duration(text: str) -> float:
    value = _duration(text)
    if value <= 0:
        raise ValueError("expected a duration above 0, such as 120 or 5m")
    return value


def _duration_or_off(text: str) -> float:
    return 0.0 if text.strip() == "0" else _duration(text)


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


def _choice(literal: Any) -> Callable[[str], str]:
    """A parser accepting the values of a ``Literal`` type."""
    choices: tuple[str, ...] = get_args(literal)

    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


def _prefix(text: str) -> str:
    if not re.match(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$", text):
        raise ValueError("must be 1-30 lower-case letters, digits or '-', starting with a letter")
    return text


def _prom_file(text: str) -> Path:
    """A file name ending in ``.prom``, the only files node_exporter's textfile collector reads."""
    path = Path(text)
    if path.suffix != ".prom" or not path.stem:
        raise ValueError("must name a file ending in .prom (node_exporter's textfile collector reads *.prom)")
    if path.is_dir():
        raise ValueError("is a directory; name a file in it, e.g. DIR/rollcall.prom")
    return path


def _http_url(text: str) -> str:
    """An http(s) URL with a host (``http://127.0.0.1:9091``)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL with a host, e.g. http://pushgateway:9091")
    return text


def _label_value(text: str) -> str:
    if not text or any(c.isspace() or c == "/" for c in text):
        raise ValueError("must be a non-empty word without spaces or '/'")
    return text


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _shell_words(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"not shell-quoted text: {exc}") from None


def _env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x=y"]`` gives ``{"A": "1", "B": "x=y"}``; a pair without ``=`` is an error."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ValueError(f"{pair!r} is not KEY=VALUE with KEY a variable name (e.g. A=1)")
        env[key] = value
    return env


def _workload_env(pairs: Sequence[str]) -> dict[str, str]:
    """:func:`_env_pairs`, each fault-injection variable checked by the workload's own parsing."""
    env = _env_pairs(pairs)
    check_env(env)
    return env


def _workload_args(text: str) -> tuple[str, ...]:
    """Shell words that the workload's own parser accepts."""
    words = _shell_words(text)
    check_args(words)
    return words


def _slurm_names(text: str) -> str:
    if not re.match(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$", text):
        raise ValueError("must be Slurm names (letters, digits, '_', '.', '+', '-') joined by ','")
    return text


def _word(text: str) -> str:
    if not text or any(c.isspace() for c in text):
        raise ValueError("must be one word, without spaces")
    return text


def _quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``8Gi``) as a number; ValueError when it is none."""
    from kubernetes.utils import parse_quantity

    value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    return value


_RESOURCE_NAME = re.compile(r"^(?:[a-z0-9.-]+/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _resources(text: str) -> dict[str, str]:
    """``cpu=2,memory=8Gi`` (kubectl's form) as a mapping, each quantity checked."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, quantity = pair.partition("=")
        if not sep or not _RESOURCE_NAME.match(name.strip()):
            raise ValueError(f"{pair!r} is not NAME=QUANTITY")
        quantity = quantity.strip()
        try:
            _quantity(quantity)
        except ValueError:
            raise ValueError(f"{quantity!r} is not a Kubernetes quantity (e.g. 500m, 2, 8Gi)") from None
        out[name.strip()] = quantity
    if not out:
        raise ValueError("expected NAME=QUANTITY pairs")
    return out


_LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    """``["karpenter.sh/nodepool=gpu"]`` as a mapping of label names to values."""
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _LABEL_KEY.match(key):
            raise ValueError(
                f"{pair!r} is not KEY=VALUE with KEY a label name (e.g. karpenter.sh/nodepool=gpu)"
            )
        if not _LABEL_VALUE.match(value):
            raise ValueError(
                f"{value!r} is not a label value (63 characters at most: letters, digits, '-_.')"
            )
        labels[key] = value
    return labels


def _is_label_key(key: str) -> bool:
    """A qualified name: ``[prefix/]name``, the prefix a DNS subdomain, the name at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    return (
        bool(_LABEL_KEY.match(key))
        and len(name) <= 63
        and len(prefix) <= 253
        and (not prefix or bool(_DNS_SUBDOMAIN.match(prefix)))
    )


def _taint_parts(word: str) -> tuple[str, str | None, TaintEffect]:
    """``dedicated=ml:NoSchedule`` as its key, value (None without ``=``) and effect (kubectl's syntax)."""
    effects: tuple[str, ...] = get_args(TaintEffect)
    body, sep, effect = word.rpartition(":")
    if not sep:
        raise ValueError(f"{word!r} has no :EFFECT, e.g. dedicated=ml:NoSchedule or dedicated:NoSchedule")
    if effect not in effects:
        raise ValueError(f"{effect!r} (in {word!r}) is not a taint effect: one of {', '.join(effects)}")
    key, eq, value = body.partition("=")
    if not _is_label_key(key):
        raise ValueError(f"{key!r} (in {word!r}) is not a taint key (a label name, e.g. nvidia.com/gpu)")
    if eq and not _LABEL_VALUE.match(value):
        raise ValueError(
            f"{value!r} (in {word!r}) is not a taint value (63 characters at most: letters, digits, '-_.')"
        )
    return key, value if eq else None, cast(TaintEffect, effect)


def _tolerations(words: Sequence[str]) -> tuple[Toleration, ...]:
    """``["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]`` as tolerations (kubectl's syntax)."""
    found: dict[Toleration, None] = {}
    for word in words:
        key, value, effect = _taint_parts(word)
        found[Toleration(key, effect, value)] = None
    return tuple(found)


def _taint(text: str) -> Taint:
    """``rollcall/unfit=true:NoSchedule`` as a taint (kubectl's syntax; ``KEY:EFFECT`` has no value)."""
    key, value, effect = _taint_parts(text.strip())
    return Taint(key, effect, value or "")


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _object_name(limit: int = 253) -> Callable[[str], str]:
    """A parser of object names: DNS subdomains (lower-case letters, digits, '-' and '.') of ``limit``."""

    def parse(text: str) -> str:
        if not _DNS_SUBDOMAIN.match(text) or len(text) > limit:
            raise ValueError(
                f"must be an object name: at most {limit} lower-case letters, digits, '-' or '.', "
                "starting and ending with a letter or digit"
            )
        return text

    return parse


def _object_names(words: Sequence[str]) -> tuple[str, ...]:
    parse = _object_name()
    return tuple(dict.fromkeys(parse(w) for w in words))


def _namespace(text: str) -> str:
    if not _DNS_LABEL.match(text) or len(text) > 63:
        raise ValueError(
            "must be a namespace name: at most 63 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return text


@dataclass(frozen=True)
class Spec:
    """One option: its flag, how to parse it, its default and its help.

    Attributes:
        parse: turns the text given into the value (with ``multiple``, the tuple of words given).
        multiple: repeatable on the command line; its environment variable holds shell-quoted words.
        switch: a flag without a value (its variable reads true/false).
    """

    flag: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    multiple: bool = False
    switch: bool = False

    @property
    def name(self) -> str:
        """The field of :class:`Options` holding it: ``--job-timeout`` is ``job_timeout``."""
        return attr_name(self.flag)

    @property
    def env(self) -> str:
        """The environment variable it also reads."""
        return env_name(self.flag)


def option(
    flag: str,
    parse: Callable[[Any], Any],
    default: Any,
    help: str,
    metavar: str | None = None,
    *,
    multiple: bool = False,
    switch: bool = False,
) -> Any:
    """Declare a field of :class:`Options` as an option (see the module docstring)."""
    spec = Spec(flag, parse, default, help, metavar, multiple, switch)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True)
class Options:
    """The validated options of one pytest session; each field is one option."""

    nodes: int = option("--nodes", _int(1), 2, "nodes (pods) to train on", "N")
    procs_per_node: int | None = option(
        "--procs-per-node",
        _int(1),
        None,
        "ranks per node (default: the nodes' allocatable GPUs or NeuronCores; 1 on cpu)",
        "N",
    )
    accelerator: AcceleratorChoice = option(
        "--accelerator", _choice(AcceleratorChoice), "auto", "device the ranks train on"
    )
    instance_type: str | None = option(
        "--instance-type", str, None, "only nodes with this node.kubernetes.io/instance-type", "TYPE"
    )
    image: str | None = option(
        "--image", check_image, None, "the training image (required by the kubernetes backend)", "IMAGE"
    )
    node_selector: dict[str, str] = option(
        "--node-selector",
        _labels,
        {},
        "only nodes with this label, e.g. karpenter.sh/nodepool=gpu (repeatable)",
        "KEY=VALUE",
        multiple=True,
    )
    requests: dict[str, str] | None = option(
        "--requests",
        _resources,
        None,
        "each pod's requests besides the accelerator, e.g. cpu=4,memory=16Gi",
        "cpu=N,memory=Q",
    )
    limits: dict[str, str] | None = option(
        "--limits",
        _resources,
        None,
        "each pod's limits besides the accelerator, e.g. memory=32Gi (a container over it is OOMKilled)",
        "cpu=N,memory=Q",
    )
    toleration: tuple[Toleration, ...] = option(
        "--toleration",
        _tolerations,
        (),
        "the pods tolerate this taint, in kubectl's syntax; without =VALUE any value (repeatable)",
        "KEY[=VALUE]:EFFECT",
        multiple=True,
    )
    priority_class: str | None = option(
        "--priority-class", _object_name(), None, "the pods' PriorityClass", "NAME"
    )
    queue: str | None = option(
        "--queue",
        _object_name(63),
        None,
        "submit the Job to this Kueue LocalQueue (label kueue.x-k8s.io/queue-name; created suspended, "
        "for Kueue to admit)",
        "NAME",
    )
    image_pull_secret: tuple[str, ...] = option(
        "--image-pull-secret",
        _object_names,
        (),
        "a Secret in the run's namespace to pull the image with (repeatable)",
        "NAME",
        multiple=True,
    )
    service_account: str | None = option(
        "--service-account",
        _object_name(),
        None,
        "the pods' ServiceAccount (e.g. one bound to an IAM role)",
        "NAME",
    )
    namespace: str | None = option(
        "--namespace",
        _namespace,
        None,
        "run inside this existing namespace (never created nor deleted; each run's Job and Service are) "
        "instead of a namespace per run",
        "NAME",
    )
    backend: BackendChoice = option(
        "--backend",
        _choice(BackendChoice),
        "auto",
        "where to run: auto = kubernetes when a kubeconfig or in-cluster config exists, else local; "
        "slurm only when asked for",
    )
    kubeconfig: str | None = option(
        "--kubeconfig", str, None, "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)", "PATH"
    )
    context: str | None = option("--context", str, None, "kubeconfig context to use", "NAME")
    namespace_prefix: str = option(
        "--namespace-prefix", _prefix, "rollcall", "prefix of each run's namespace", "PREFIX"
    )
    job_timeout: float = option(
        "--job-timeout", _positive_float, DEFAULT_JOB_TIMEOUT_S, "seconds the training job may run", "SECONDS"
    )
    efa: EfaChoice = option(
        "--efa", _choice(EfaChoice), "auto", "request every EFA interface of the nodes' instance type"
    )
    neuron_cache: CacheVolume | None = option(
        "--neuron-cache",
        parse_cache_volume,
        None,
        "keep the Neuron compile cache between runs in this volume: host:/PATH (a directory of each node) "
        "or nfs:SERVER:/PATH (e.g. an Amazon EFS file system, shared by all nodes)",
        "host:/PATH|nfs:SERVER:/PATH",
    )
    compile_cache: CacheVolume | None = option(
        "--compile-cache",
        parse_compile_cache,
        None,
        "keep inductor's and Triton's caches (train.py --compile-cache) between runs in this volume: "
        "host:/PATH (a directory of each node; local and slurm also take a plain /PATH) or nfs:SERVER:/PATH "
        "(kubernetes only; e.g. an Amazon EFS file system, shared by all nodes)",
        "host:/PATH|nfs:SERVER:/PATH",
    )
    min_throughput: float | None = option(
        "--min-throughput", _positive_float, None, "fail ranks below this many samples/s", "SAMPLES_PER_S"
    )
    retries: int = option(
        "--retries",
        _int(0),
        0,
        "re-run a failed job this many times (a pass after a retry is flaky; after infrastructure "
        "disruptions only, it is passed after a disruption)",
        "N",
    )
    keep: bool = option(
        "--keep", _bool, False, "leave namespaces, Jobs and processes in place for debugging", switch=True
    )
    artifacts_dir: Path = option(
        "--artifacts-dir", Path, Path("artifacts"), "where logs and reports go", "DIR"
    )
    unschedulable_grace: float = option(
        "--unschedulable-grace",
        _positive_float,
        60.0,
        "seconds a pod may stay Unschedulable (slurm: a job PENDING for a reason that cannot clear) "
        "before the run fails with the scheduler's reason",
        "SECONDS",
    )
    capacity_timeout: float = option(
        "--capacity-timeout",
        _duration,
        900.0,
        "how long pods may wait for nodes that a Karpenter NodePool or cluster-autoscaler provisions, or for "
        "Kueue quota, before the run fails (given explicitly, a running cluster-autoscaler is trusted to "
        "provide nodes); the job timeout counts from when every pod is scheduled",
        "DURATION",
    )
    sweep_older_than: float | None = option(
        "--sweep-older-than",
        _duration,
        None,
        "at session start, delete this suite's namespaces older than this (e.g. 6h): left by killed runs",
        "DURATION",
    )
    check_device_plugins: bool = option(
        "--check-device-plugins",
        _bool,
        False,
        "before running, check that the NVIDIA/Neuron and EFA device-plugin DaemonSets are ready",
        switch=True,
    )
    workload_env: dict[str, str] = option(
        "--workload-env",
        _workload_env,
        {},
        "extra environment for the workload's processes (repeatable)",
        "KEY=VALUE",
        multiple=True,
    )
    workload_args: tuple[str, ...] = option(
        "--workload-args", _workload_args, (), "extra arguments for train.py, one shell-quoted string", "ARGS"
    )
    baseline: str | None = option(
        "--baseline",
        str,
        None,
        "JSON baseline file to gate throughput, epoch time, compute time and bus bandwidth against",
        "FILE",
    )
    max_regression: float = option(
        "--max-regression",
        _percent,
        10.0,
        "fail when throughput or bus bandwidth falls, or epoch or compute time rises, more than PCT percent "
        "against --baseline",
        "PCT",
    )
    baseline_history: str | None = option(
        "--baseline-history",
        str,
        None,
        "instead of --baseline: each configuration's reference is the median of its last --baseline-runs "
        "sound runs in SOURCE (a directory of past artifacts, or a glob of results.json files); a figure "
        "regresses only past both --max-regression and --baseline-mads spreads",
        "SOURCE",
    )
    baseline_runs: int = option(
        "--baseline-runs", _int(1), 10, "how many of the latest sound runs --baseline-history uses", "N"
    )
    baseline_mads: float = option(
        "--baseline-mads",
        _positive_float,
        3.0,
        "with --baseline-history, a figure must also be worse than the median by more than K spreads "
        "(1.4826 x MAD, a robust standard deviation)",
        "K",
    )
    write_baseline: str | None = option(
        "--write-baseline",
        str,
        None,
        "record each sound run's figures as the new baseline in FILE (merged with its entries)",
        "FILE",
    )
    progress_every: float = option(
        "--progress-every",
        _duration_or_off,
        30.0,
        "while a job runs, print the live roll call every DURATION when the output is not a terminal "
        "(a terminal's line updates every second; 0: no live roll call)",
        "DURATION",
    )
    metrics_file: Path | None = option(
        "--metrics-file",
        _prom_file,
        None,
        "write the session's metrics here in Prometheus' text format, atomically (node_exporter's textfile "
        "collector reads *.prom)",
        "PATH",
    )
    pushgateway: str | None = option(
        "--pushgateway",
        _http_url,
        None,
        "push the session's metrics to the Prometheus Pushgateway at URL (grouped by job, cluster, config)",
        "URL",
    )
    pushgateway_job: str = option(
        "--pushgateway-job", _label_value, "rollcall", "the job label of --pushgateway's grouping key", "NAME"
    )
    straggler_ratio: float = option(
        "--straggler-ratio",
        _fraction,
        0.8,
        "fail ranks whose throughput is below RATIO x the median of all ranks, or whose compute time per "
        "step exceeds the median rank's by more than 1/RATIO (0: off)",
        "RATIO",
    )
    min_busbw: float | Literal["auto"] = option(
        "--min-busbw",
        _busbw_floor,
        "auto",
        "fail a node (or pair of nodes, or the world) whose all-reduce bus bandwidth is below GBPS; auto: "
        "below the published floor of the nodes' instance type, where one is known (rollcall.checks.floors)",
        "GBPS",
    )
    busbw_ratio: float = option(
        "--busbw-ratio",
        _fraction,
        0.5,
        "fail a node whose all-reduce bus bandwidth is below RATIO x the median node's (0: off)",
        "RATIO",
    )
    fitness_warn: frozenset[str] = option(
        "--fitness-warn",
        parse_rules,
        frozenset(),
        f"report a device breaking these fitness rules as a warning, not a failure ({', '.join(RULE_NAMES)})",
        "RULE[,RULE...]",
        multiple=True,
    )
    fitness_off: frozenset[str] = option(
        "--fitness-off",
        parse_rules,
        frozenset(),
        "do not apply these fitness rules (the names --fitness-warn takes)",
        "RULE[,RULE...]",
        multiple=True,
    )
    drift: DriftMode = option(
        "--drift",
        _choice(DriftMode),
        "warn",
        "what nodes that differ in a version (driver, CUDA, NCCL, kernel, torch ...) do: fail, warn or off",
    )
    expect: tuple[tuple[str, str], ...] = option(
        "--expect",
        parse_expect,
        (),
        f"fail the run when a node's fact does not match GLOB (repeatable; keys: {', '.join(EXPECT_KEYS)})",
        "KEY=GLOB",
        multiple=True,
    )
    expect_file: tuple[tuple[str, str], ...] = option(
        "--expect-file",
        parse_expect_files,
        (),
        "as --expect, one KEY=GLOB a line of FILE ('#' starts a comment; blank lines skipped; repeatable)",
        "FILE",
        multiple=True,
    )
    slurm_partition: str | None = option(
        "--slurm-partition", _slurm_names, None, "slurm: the partition(s) to submit to", "PARTITION"
    )
    slurm_account: str | None = option(
        "--slurm-account", _slurm_names, None, "slurm: the account to charge", "ACCOUNT"
    )
    isolate: bool = option(
        "--isolate",
        _bool,
        False,
        "when a run fails naming no node (a hang of the world, a slow world, a rendezvous that never "
        "completes), re-run the bandwidth phase alone on halves of the nodes until the bad node is named",
        switch=True,
    )
    isolate_timeout: float = option(
        "--isolate-timeout",
        _positive_duration,
        120.0,
        "the longest one --isolate run may take (the job timeout when shorter): a group of nodes still "
        "running then (a node hung before rendezvous) counts as failing",
        "SECONDS",
    )
    taint_unfit: Taint | None = option(
        "--taint-unfit",
        _taint,
        None,
        "kubernetes: after the verdict, taint each node it names unfit with this taint (kubectl's syntax, "
        "e.g. rollcall/unfit=true:NoSchedule), keeping the node's other taints",
        "KEY=VALUE:EFFECT",
    )
    container_image: str | None = option(
        "--container-image",
        _word,
        None,
        "slurm: run each node's torchrun in this image through pyxis/enroot (srun --container-image)",
        "IMAGE",
    )
    #: Where each option's value came from: its flag, its environment variable, or ``default``.
    sources: dict[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """Where option ``name``'s value came from: its flag, its variable, or ``default``."""
        return self.sources.get(name, "default")

    def given(self, name: str) -> bool:
        """Whether the user set option ``name`` (by its flag or its variable), rather than its default."""
        return self.source(name) != "default"

    @property
    def scheduling(self) -> Scheduling:
        """The scheduling options, as the Job's pods carry them."""
        return Scheduling(
            tolerations=self.toleration,
            priority_class=self.priority_class,
            queue=self.queue,
            image_pull_secrets=self.image_pull_secret,
            service_account=self.service_account,
        )


#: Every option, in declaration order (what the plugin registers).
OPTIONS: tuple[Spec, ...] = tuple(f.metadata["option"] for f in fields(Options) if "option" in f.metadata)
#: Every option at its default.
DEFAULTS = Options()


def attr_name(flag: str) -> str:
    """``--job-timeout`` is stored as ``job_timeout``."""
    return flag.lstrip("-").replace("-", "_")


def resolve(cli: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Options:
    """Options from command-line values (``None`` or empty when not given), the environment and defaults."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in OPTIONS:
        given = cli.get(spec.name)
        if given not in (None, False, [], ()):
            raw, source = given, spec.flag
        elif spec.env in environ:
            raw, source = environ[spec.env], spec.env
        else:
            sources[spec.name] = "default"
            continue
        sources[spec.name] = source
        values[spec.name] = _convert(spec, raw, source)
    _check_requests_within_limits(values.get("requests") or {}, values.get("limits") or {})
    if values.get("baseline") and values.get("baseline_history"):
        raise OptionError(
            f"--baseline {values['baseline']} and --baseline-history {values['baseline_history']}: "
            "the gate takes one reference; pass one of them"
        )
    if values.get("service_account") not in (None, "default") and values.get("namespace") is None:
        raise OptionError(
            f"--service-account {values['service_account']}: a run's own namespace holds no ServiceAccount "
            "but default; pass --namespace NAME, the existing namespace that holds it"
        )
    return Options(**values, sources=sources)


def _check_requests_within_limits(requests: Mapping[str, str], limits: Mapping[str, str]) -> None:
    for name in sorted(requests.keys() & limits.keys()):
        if _quantity(requests[name]) > _quantity(limits[name]):
            raise OptionError(
                f"--requests {name}={requests[name]} is more than --limits {name}={limits[name]}; "
                "a request may not exceed its limit"
            )


def _convert(spec: Spec, raw: Any, source: str) -> Any:
    if spec.switch and isinstance(raw, bool):
        return raw
    try:
        if spec.multiple:
            words = _shell_words(raw) if isinstance(raw, str) else tuple(raw)
            return spec.parse(words)
        return spec.parse(raw)
    except ValueError as exc:
        shown = " ".join(map(shlex.quote, raw)) if isinstance(raw, list | tuple) else raw
        example = f"{spec.flag} {spec.metavar}" if spec.metavar else spec.flag
        raise OptionError(
            f"invalid {spec.flag} value {shown!r} (from {source}): {exc}; use {example}"
        ) from None
