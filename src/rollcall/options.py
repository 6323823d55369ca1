"""The suite's options, each declared once in :class:`Options`, also read from ``ROLLCALL_<NAME>``.

Every field of :class:`Options` is declared by :func:`option`: its flag, how to parse it, its default, its
help and its group (one of :data:`GROUPS`: ``pytest --help`` and ``docs/options.md`` show the options so);
the environment variable is the flag's (``--job-timeout`` reads ``ROLLCALL_JOB_TIMEOUT``). A setting that
describes the cluster (``ini=True``) can also come from the ini file (``[tool.pytest.ini_options]`` or
``pytest.ini``) as ``rollcall_<name>`` (``--context`` is ``rollcall_context``).
:data:`OPTIONS`, the table the pytest plugin registers, is derived from those fields, and :data:`DEFAULTS`
holds every default for modules that need one. Adding an option is adding one field.

Precedence: the command line, then the environment variable, then the ini file, then the default. A bad
value raises :class:`OptionError` naming the option, where the value came from, and what to write instead.
``python -m rollcall.options --markdown`` prints the reference, ``docs/options.md``.
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

from rollcall.evidence.fitness import (
    EXPECT_KEYS,
    RULE_NAMES,
    DriftMode,
    parse_expect,
    parse_expect_files,
    parse_rules,
)
from rollcall.evidence.xids import XidClass, parse_xid_classes
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

#: The option groups, in the order ``pytest --help`` and ``docs/options.md`` show them: name, title.
GROUPS: tuple[tuple[str, str], ...] = (
    ("job", "the job: where it runs, its size, image, workload and deadlines"),
    ("kubernetes", "Kubernetes: the cluster, the nodes, the pods' scheduling and capacity"),
    ("slurm", "Slurm: the partition, account and container image"),
    ("judging", "judging: throughput, stragglers, bus bandwidth, node fitness"),
    ("baselines", "baselines: the release gate against past runs"),
    ("recovery", "recovery: retries, isolating a bad node, tainting unfit ones"),
    ("reports", "reports: artifacts, the live roll call, metrics"),
)
GroupName = Literal["job", "kubernetes", "slurm", "judging", "baselines", "recovery", "reports"]


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


class _Choice:
    """A parser accepting the values of a ``Literal`` type (:attr:`choices`, shown in the reference)."""

    def __init__(self, literal: Any) -> None:
        self.choices: tuple[str, ...] = get_args(literal)

    def __call__(self, text: str) -> str:
        if text not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}")
        return text


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
        group: the name of its group in :data:`GROUPS`.
        ini: it describes the cluster, so the ini file may also set it (as :attr:`ini_name`).
        doc: the reference's fuller text (``docs/options.md``), where ``help`` is too short for it.
    """

    flag: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str | None = None
    multiple: bool = False
    switch: bool = False
    group: GroupName = "job"
    ini: bool = False
    doc: str = ""

    @property
    def name(self) -> str:
        """The field of :class:`Options` holding it: ``--job-timeout`` is ``job_timeout``."""
        return attr_name(self.flag)

    @property
    def env(self) -> str:
        """The environment variable it also reads."""
        return env_name(self.flag)

    @property
    def ini_name(self) -> str | None:
        """The ini file's key it also reads (``rollcall_kubeconfig``), or None when it reads none."""
        return "rollcall_" + self.name if self.ini else None


def option(
    flag: str,
    parse: Callable[[Any], Any],
    default: Any,
    help: str,
    metavar: str | None = None,
    *,
    group: GroupName,
    multiple: bool = False,
    switch: bool = False,
    ini: bool = False,
    doc: str = "",
) -> Any:
    """Declare a field of :class:`Options` as an option (see the module docstring)."""
    spec = Spec(flag, parse, default, help, metavar, multiple, switch, group, ini, doc)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True)
class Options:
    """The validated options of one pytest session; each field is one option."""

    nodes: int = option("--nodes", _int(1), 2, "nodes (pods) to train on", "N", group="job")
    procs_per_node: int | None = option(
        "--procs-per-node",
        _int(1),
        None,
        "ranks per node (default: the nodes' allocatable GPUs or NeuronCores; 1 on cpu)",
        "N",
        group="job",
        doc="ranks per node: the nodes' allocatable GPUs or NeuronCores; 1 on cpu",
    )
    accelerator: AcceleratorChoice = option(
        "--accelerator",
        _Choice(AcceleratorChoice),
        "auto",
        "device the ranks train on",
        group="job",
        ini=True,
    )
    instance_type: str | None = option(
        "--instance-type",
        str,
        None,
        "only nodes with this node.kubernetes.io/instance-type",
        "TYPE",
        group="kubernetes",
        ini=True,
        doc="only nodes with this `node.kubernetes.io/instance-type` (chooses among mixed types)",
    )
    image: str | None = option(
        "--image",
        check_image,
        None,
        "the training image (required by the kubernetes backend)",
        "IMAGE",
        group="job",
        ini=True,
        doc=(
            "the training image (required by the kubernetes backend); a reference that no runtime would "
            "accept is refused before anything is created"
        ),
    )
    node_selector: dict[str, str] = option(
        "--node-selector",
        _labels,
        {},
        "only nodes with this label, e.g. karpenter.sh/nodepool=gpu (repeatable)",
        "KEY=VALUE",
        multiple=True,
        group="kubernetes",
        ini=True,
        doc="only nodes with this label (repeatable; the variable takes space-separated pairs)",
    )
    requests: dict[str, str] | None = option(
        "--requests",
        _resources,
        None,
        "each pod's requests besides the accelerator, e.g. cpu=4,memory=16Gi",
        "cpu=N,memory=Q",
        group="kubernetes",
        doc="each pod's requests besides the accelerator (the pods are BestEffort without)",
    )
    limits: dict[str, str] | None = option(
        "--limits",
        _resources,
        None,
        "each pod's limits besides the accelerator, e.g. memory=32Gi (a container over it is OOMKilled)",
        "cpu=N,memory=Q",
        group="kubernetes",
        doc=(
            "each pod's limits besides the accelerator; a container over its memory limit is named OOMKilled"
        ),
    )
    toleration: tuple[Toleration, ...] = option(
        "--toleration",
        _tolerations,
        (),
        "the pods tolerate this taint, in kubectl's syntax; without =VALUE any value (repeatable)",
        "KEY[=VALUE]:EFFECT",
        multiple=True,
        group="kubernetes",
        ini=True,
        doc=(
            "the pods tolerate this taint, in kubectl's taint syntax (`dedicated=ml:NoSchedule`; "
            "`KEY:EFFECT` tolerates any value; EFFECT is `NoSchedule`, `PreferNoSchedule` or "
            "`NoExecute`); discovery counts a node so tainted as usable (repeatable). The accelerators' "
            "and EFA's own taints (`nvidia.com/gpu`, `aws.amazon.com/neuron`, "
            "`aws.amazon.com/neuroncore`, `vpc.amazonaws.com/efa`, `aws.amazon.com/efa`) are always "
            "tolerated"
        ),
    )
    priority_class: str | None = option(
        "--priority-class",
        _object_name(),
        None,
        "the pods' PriorityClass",
        "NAME",
        group="kubernetes",
        ini=True,
    )
    queue: str | None = option(
        "--queue",
        _object_name(63),
        None,
        "submit the Job to this Kueue LocalQueue (label kueue.x-k8s.io/queue-name; created suspended, "
        "for Kueue to admit)",
        "NAME",
        group="kubernetes",
        ini=True,
        doc=(
            "submit the Job to this Kueue LocalQueue: label `kueue.x-k8s.io/queue-name`, created with "
            "`suspend: true` for Kueue to admit it"
        ),
    )
    image_pull_secret: tuple[str, ...] = option(
        "--image-pull-secret",
        _object_names,
        (),
        "a Secret in the run's namespace to pull the image with (repeatable)",
        "NAME",
        multiple=True,
        group="kubernetes",
        ini=True,
        doc=(
            "a Secret the kubelet pulls the image with; it must exist in the run's namespace, so usually "
            "with `--namespace` (repeatable)"
        ),
    )
    service_account: str | None = option(
        "--service-account",
        _object_name(),
        None,
        "the pods' ServiceAccount (e.g. one bound to an IAM role)",
        "NAME",
        group="kubernetes",
        ini=True,
        doc=(
            "the pods' ServiceAccount (e.g. one bound to an IAM role: IRSA and EKS Pod Identity project "
            "their own token; the Kubernetes API token stays unmounted); needs `--namespace`, checked at "
            "session start"
        ),
    )
    namespace: str | None = option(
        "--namespace",
        _namespace,
        None,
        "run inside this existing namespace (never created nor deleted; each run's Job and Service are) "
        "instead of a namespace per run",
        "NAME",
        group="kubernetes",
        ini=True,
        doc=(
            "run inside this existing namespace (checked at session start: exit 4 if it does not exist): "
            "each run creates only its Service and Job there, told apart by name and `rollcall/run-id` "
            "label, and deletes them (the Job with its pods) afterwards; the namespace itself is never "
            "created, swept nor deleted"
        ),
    )
    backend: BackendChoice = option(
        "--backend",
        _Choice(BackendChoice),
        "auto",
        "where to run: auto = kubernetes when a kubeconfig or in-cluster config exists, else local; "
        "slurm only when asked for",
        group="job",
        ini=True,
        doc=(
            "auto: kubernetes when a kubeconfig or in-cluster config exists, else local (slurm only when "
            "asked for); printed in the header and recorded in every report"
        ),
    )
    kubeconfig: str | None = option(
        "--kubeconfig",
        str,
        None,
        "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)",
        "PATH",
        group="kubernetes",
        ini=True,
        doc=(
            "kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`); a missing, unreadable or "
            "malformed one is refused before anything is created"
        ),
    )
    context: str | None = option(
        "--context",
        str,
        None,
        "kubeconfig context to use",
        "NAME",
        group="kubernetes",
        ini=True,
        doc="kubeconfig context; an unknown one is refused, listing those there are",
    )
    namespace_prefix: str = option(
        "--namespace-prefix",
        _prefix,
        "rollcall",
        "prefix of each run's namespace",
        "PREFIX",
        group="kubernetes",
        ini=True,
        doc="each run gets its own namespace `<prefix>-<random>` (unless `--namespace`)",
    )
    job_timeout: float = option(
        "--job-timeout",
        _positive_float,
        DEFAULT_JOB_TIMEOUT_S,
        "seconds the training job may run",
        "SECONDS",
        group="job",
    )
    efa: EfaChoice = option(
        "--efa",
        _Choice(EfaChoice),
        "auto",
        "request every EFA interface of the nodes' instance type",
        group="kubernetes",
        ini=True,
        doc=(
            "request every EFA interface the nodes' instance type has (a node advertising fewer is "
            "unusable) and prove NCCL used EFA; `auto` uses EFA when every usable node has it and "
            "refuses, naming the nodes without it, when only some do"
        ),
    )
    neuron_cache: CacheVolume | None = option(
        "--neuron-cache",
        parse_cache_volume,
        None,
        "keep the Neuron compile cache between runs in this volume: host:/PATH (a directory of each node) "
        "or nfs:SERVER:/PATH (e.g. an Amazon EFS file system, shared by all nodes)",
        "host:/PATH|nfs:SERVER:/PATH",
        group="kubernetes",
        doc=(
            "keep the Neuron compile cache between runs: a directory of each node, or an NFS export such "
            "as Amazon EFS shared by all nodes (mounted at `/var/cache/neuron-compile-cache`, "
            "`NEURON_COMPILE_CACHE_URL` set)"
        ),
    )
    compile_cache: CacheVolume | None = option(
        "--compile-cache",
        parse_compile_cache,
        None,
        "keep inductor's and Triton's caches (train.py --compile-cache) between runs in this volume: "
        "host:/PATH (a directory of each node; local and slurm also take a plain /PATH) or nfs:SERVER:/PATH "
        "(kubernetes only; e.g. an Amazon EFS file system, shared by all nodes)",
        "host:/PATH|nfs:SERVER:/PATH",
        group="job",
        doc=(
            "keep inductor's and Triton's caches (`train.py --compile-cache`) between runs: on kubernetes"
            " a directory of each node or an NFS export, mounted at `/var/cache/rollcall-compile-cache` "
            "(the same mount rules as `--neuron-cache`); local and slurm take a directory (`/PATH` or "
            "`host:/PATH`) as it is (slurm with `--container-image` mounts it into the image at the same "
            "fixed path), NFS being refused there. Each rank's `throughput` says whether its compile came"
            " from the cache (`compile_cache`: hit, miss or off, beside `compile_s`), shown in "
            "`results.json`'s `compile_cache` and on the rank's tile"
        ),
    )
    min_throughput: float | None = option(
        "--min-throughput",
        _positive_float,
        None,
        "fail ranks below this many samples/s",
        "SAMPLES_PER_S",
        group="judging",
        doc="fail ranks slower than this",
    )
    retries: int = option(
        "--retries",
        _int(0),
        0,
        "re-run a failed job this many times (a pass after a retry is flaky; after infrastructure "
        "disruptions only, it is passed after a disruption)",
        "N",
        group="recovery",
        doc=(
            "re-run a failed job; a pass after a retry is reported as flaky, a pass after infrastructure "
            "disruptions only as passed after a disruption"
        ),
    )
    keep: bool = option(
        "--keep",
        _bool,
        False,
        "leave namespaces, Jobs and processes in place for debugging",
        switch=True,
        group="job",
    )
    artifacts_dir: Path = option(
        "--artifacts-dir",
        Path,
        Path("artifacts"),
        "where logs and reports go",
        "DIR",
        group="reports",
        doc="per-pod logs and reports",
    )
    unschedulable_grace: float = option(
        "--unschedulable-grace",
        _positive_float,
        60.0,
        "seconds a pod may stay Unschedulable (slurm: a job PENDING for a reason that cannot clear) "
        "before the run fails with the scheduler's reason",
        "SECONDS",
        group="job",
        doc=(
            "how long a pod may stay Unschedulable (slurm: a job PENDING for a reason that cannot clear) "
            "before the run fails with the scheduler's reason"
        ),
    )
    capacity_timeout: float = option(
        "--capacity-timeout",
        _duration,
        900.0,
        "how long pods may wait for nodes that a Karpenter NodePool or cluster-autoscaler provisions, or for "
        "Kueue quota, before the run fails (given explicitly, a running cluster-autoscaler is trusted to "
        "provide nodes); the job timeout counts from when every pod is scheduled",
        "DURATION",
        group="kubernetes",
        doc=(
            "how long pods may wait for nodes that a Karpenter NodePool or cluster-autoscaler provisions,"
            " or for Kueue quota (given explicitly, a running cluster-autoscaler is trusted to provide "
            "nodes); the job timeout counts from when every pod is scheduled"
        ),
    )
    sweep_older_than: float | None = option(
        "--sweep-older-than",
        _duration,
        None,
        "at session start, delete this suite's namespaces older than this (e.g. 6h): left by killed runs",
        "DURATION",
        group="kubernetes",
        doc=(
            "at session start, delete this suite's namespaces older than this (e.g. `6h`), left by killed"
            " runs (only those a run created, labelled with its run id); with `--namespace`, the old "
            "runs' Jobs and Services in it instead"
        ),
    )
    check_device_plugins: bool = option(
        "--check-device-plugins",
        _bool,
        False,
        "before running, check that the NVIDIA/Neuron and EFA device-plugin DaemonSets are ready",
        switch=True,
        group="kubernetes",
        doc="first check that the NVIDIA/Neuron and EFA device-plugin DaemonSets are ready",
    )
    workload_env: dict[str, str] = option(
        "--workload-env",
        _workload_env,
        {},
        "extra environment for the workload's processes (repeatable)",
        "KEY=VALUE",
        multiple=True,
        group="job",
        doc=(
            "extra environment for the workload (repeatable; the variable takes space-separated pairs); "
            "the fault-injection variables (`ROLLCALL_FAIL_RANK=0,2`, `ROLLCALL_HANG_RANK=1`, ... see "
            "`src/rollcall_workload/contract.py`) are checked by the workload's own parsing before "
            "anything is created"
        ),
    )
    workload_args: tuple[str, ...] = option(
        "--workload-args",
        _workload_args,
        (),
        "extra arguments for train.py, one shell-quoted string",
        "ARGS",
        group="job",
        doc=(
            'extra arguments for `train.py`, e.g. `"--model large --seq-len 512 --compile"`; parsed by '
            "`train.py`'s own parser before anything is created (skipped, with a debug log, when the "
            "suite is installed without its checkout)"
        ),
    )
    baseline: str | None = option(
        "--baseline",
        str,
        None,
        "JSON baseline file to gate throughput, epoch time, compute time and bus bandwidth against",
        "FILE",
        group="baselines",
        doc="JSON baseline to gate throughput, epoch time, compute time and world bus bandwidth against",
    )
    max_regression: float = option(
        "--max-regression",
        _percent,
        10.0,
        "fail when throughput or bus bandwidth falls, or epoch or compute time rises, more than PCT percent "
        "against --baseline",
        "PCT",
        group="baselines",
        doc=(
            "fail when total or median-rank throughput or the world's bus bandwidth falls, or epoch time "
            "or the median compute time rises, more than PCT%"
        ),
    )
    baseline_history: str | None = option(
        "--baseline-history",
        str,
        None,
        "instead of --baseline: each configuration's reference is the median of its last --baseline-runs "
        "sound runs in SOURCE (a directory of past artifacts, or a glob of results.json files); a figure "
        "regresses only past both --max-regression and --baseline-mads spreads",
        "SOURCE",
        group="baselines",
        doc=(
            "instead of `--baseline`: each configuration's reference is the median of its last "
            "`--baseline-runs` sound runs in SOURCE (a directory of past artifacts, or a glob of "
            "`results.json` files); see [gating.md](gating.md)"
        ),
    )
    baseline_runs: int = option(
        "--baseline-runs",
        _int(1),
        10,
        "how many of the latest sound runs --baseline-history uses",
        "N",
        group="baselines",
        doc="how many of the latest sound runs of a configuration make its reference",
    )
    baseline_mads: float = option(
        "--baseline-mads",
        _positive_float,
        3.0,
        "with --baseline-history, a figure must also be worse than the median by more than K spreads "
        "(1.4826 x MAD, a robust standard deviation)",
        "K",
        group="baselines",
        doc=(
            "with `--baseline-history`, a figure must also be worse than the median by more than K "
            "spreads (1.4826 x MAD) to regress"
        ),
    )
    write_baseline: str | None = option(
        "--write-baseline",
        str,
        None,
        "record each sound run's figures as the new baseline in FILE (merged with its entries)",
        "FILE",
        group="baselines",
        doc="record each sound run's figures as the new baseline (merged by key)",
    )
    progress_every: float = option(
        "--progress-every",
        _duration_or_off,
        30.0,
        "while a job runs, print the live roll call every DURATION when the output is not a terminal "
        "(a terminal's line updates every second; 0: no live roll call)",
        "DURATION",
        group="reports",
        doc=(
            "the live roll call while a job runs (ranks started, epochs done min-max, throughput and "
            "complete out of the world, the slowest rank so far): on a terminal one line updated every "
            "second; otherwise a plain line every DURATION (CI logs); the state at the job's end always; "
            "`0` turns it off; not shown by xdist workers, whose output pytest does not show"
        ),
    )
    metrics_file: Path | None = option(
        "--metrics-file",
        _prom_file,
        None,
        "write the session's metrics here in Prometheus' text format, atomically (node_exporter's textfile "
        "collector reads *.prom)",
        "PATH",
        group="reports",
        doc=(
            "write the session's metrics in Prometheus' text format, atomically, for node_exporter's "
            "textfile collector (the name must end in `.prom`; under xdist each worker writes "
            "`NAME.gwN.prom`)"
        ),
    )
    pushgateway: str | None = option(
        "--pushgateway",
        _http_url,
        None,
        "push the session's metrics to the Prometheus Pushgateway at URL (grouped by job, cluster, config)",
        "URL",
        group="reports",
        doc=(
            "push the session's metrics to a Prometheus Pushgateway, one group per configuration "
            "(grouping key `job`, `cluster`, `config`); a push that fails is a warning in the terminal "
            "summary, never a changed verdict"
        ),
    )
    pushgateway_job: str = option(
        "--pushgateway-job",
        _label_value,
        "rollcall",
        "the job label of --pushgateway's grouping key",
        "NAME",
        group="reports",
        doc=(
            "the `job` of `--pushgateway`'s grouping key (`cluster` is `--context`, else the backend's name)"
        ),
    )
    straggler_ratio: float = option(
        "--straggler-ratio",
        _fraction,
        0.8,
        "fail ranks whose throughput is below RATIO x the median of all ranks, or whose compute time per "
        "step exceeds the median rank's by more than 1/RATIO (0: off)",
        "RATIO",
        group="judging",
        doc=(
            "fail ranks below RATIO x the median rank's throughput, or whose compute time per step "
            "exceeds the median rank's by more than 1/RATIO (0: off)"
        ),
    )
    min_busbw: float | Literal["auto"] = option(
        "--min-busbw",
        _busbw_floor,
        "auto",
        "fail a node (or pair of nodes, or the world) whose all-reduce bus bandwidth is below GBPS; auto: "
        "below the published floor of the nodes' instance type, where known (rollcall.evidence.floors)",
        "GBPS",
        group="judging",
        doc=(
            "fail a node, ring pair of nodes or the world whose all-reduce bus bandwidth is below GBPS "
            "GB/s; `auto`: below the published floor of the run's instance type (one node over NVLink, "
            "two or more over the fabric), where one is known (`evidence/floors.py`: each floor's source "
            "and the message size it was published at), naming the group and the floor's source; on GPUs "
            "the bandwidth phase then measures at the floor's size, up to 2 GiB"
        ),
    )
    busbw_ratio: float = option(
        "--busbw-ratio",
        _fraction,
        0.5,
        "fail a node whose all-reduce bus bandwidth is below RATIO x the median node's (0: off)",
        "RATIO",
        group="judging",
        doc=(
            "fail a node (or pair) whose bus bandwidth is below RATIO x the median node's (pair's) (0: off)"
        ),
    )
    fitness_warn: frozenset[str] = option(
        "--fitness-warn",
        parse_rules,
        frozenset(),
        f"report a device breaking these fitness rules as a warning, not a failure ({', '.join(RULE_NAMES)})",
        "RULE[,RULE...]",
        multiple=True,
        group="judging",
        doc=(
            "report a device that breaks these fitness rules as a warning, not a failure (repeatable; "
            "rules in [fitness.md](fitness.md)); an unknown rule is refused, listing them"
        ),
    )
    fitness_fail: frozenset[str] = option(
        "--fitness-fail",
        parse_rules,
        frozenset(),
        "fail a device breaking these fitness rules where the rule warns by default (gpu_in_use, ...)",
        "RULE[,RULE...]",
        multiple=True,
        group="judging",
        doc=(
            "fail a device that breaks these fitness rules where the rule warns by default: "
            "`neuron_ecc_corrected`, `gpu_in_use` (repeatable); --fitness-warn and --fitness-off win over it"
        ),
    )
    fitness_off: frozenset[str] = option(
        "--fitness-off",
        parse_rules,
        frozenset(),
        "do not apply these fitness rules (the names --fitness-warn takes)",
        "RULE[,RULE...]",
        multiple=True,
        group="judging",
        doc="do not apply these fitness rules (repeatable)",
    )
    xid_class: dict[int, XidClass] = option(
        "--xid-class",
        parse_xid_classes,
        {},
        "move Xids between the classes of NVIDIA's Xid catalog: hardware (the GPU is unfit), program "
        "(evidence beside the error of the rank on that GPU), system (a warning), e.g. 31=hardware",
        "XID=CLASS[,XID=CLASS...]",
        multiple=True,
        group="judging",
        doc=(
            "move Xids between the classes of NVIDIA's Xid catalog (repeatable; classes in "
            "[gpu-health.md](gpu-health.md)): `hardware` makes the GPU unfit, `program` is evidence beside "
            "the error of the rank on that GPU, `system` a warning; a pair that is no XID=CLASS is refused"
        ),
    )
    drift: DriftMode = option(
        "--drift",
        _Choice(DriftMode),
        "warn",
        "what nodes that differ in a version (driver, CUDA, NCCL, kernel, torch ...) do: fail, warn or off",
        group="judging",
        doc=(
            "nodes of one run whose driver, CUDA, NCCL, kernel, OS, Python, torch, transformers, Neuron, "
            "libfabric, aws-ofi-nccl, kubelet or container-runtime versions differ are named "
            "(`config_drift`); `fail` fails the run"
        ),
    )
    expect: tuple[tuple[str, str], ...] = option(
        "--expect",
        parse_expect,
        (),
        f"fail the run when a node's fact does not match GLOB (repeatable; keys: {', '.join(EXPECT_KEYS)})",
        "KEY=GLOB",
        multiple=True,
        group="judging",
        doc=(
            "the golden configuration: fail the run when a node's fact does not match the glob, or is "
            "unknown (repeatable; keys in [fitness.md](fitness.md); an unknown key is refused, listing them)"
        ),
    )
    expect_file: tuple[tuple[str, str], ...] = option(
        "--expect-file",
        parse_expect_files,
        (),
        "as --expect, one KEY=GLOB a line of FILE ('#' starts a comment; blank lines skipped; repeatable)",
        "FILE",
        multiple=True,
        group="judging",
        doc=(
            "the golden configuration from a file, beside any `--expect`: one `KEY=GLOB` a line, `#` "
            "starting a comment, blank lines skipped (repeatable); a malformed line or an unknown key is "
            "refused, naming the file and the line (not `--expect @FILE`: pytest reads an `@FILE` "
            "argument as its own file of arguments)"
        ),
    )
    slurm_partition: str | None = option(
        "--slurm-partition",
        _slurm_names,
        None,
        "slurm: the partition(s) to submit to",
        "PARTITION",
        group="slurm",
        ini=True,
        doc="slurm: the partition(s) to submit to (default: the cluster's default partition)",
    )
    slurm_account: str | None = option(
        "--slurm-account",
        _slurm_names,
        None,
        "slurm: the account to charge",
        "ACCOUNT",
        group="slurm",
        ini=True,
    )
    isolate: bool = option(
        "--isolate",
        _bool,
        False,
        "when a run fails naming no node (a hang of the world, a slow world, a rendezvous that never "
        "completes), re-run the bandwidth phase alone on halves of the nodes until the bad node is named",
        switch=True,
        group="recovery",
        doc=(
            "when the deciding attempt fails naming no node (every rank hung or waiting, a slow world, a "
            "rendezvous that never completed), re-run the bandwidth phase alone (`train.py "
            "--bandwidth-only`) on halves of the nodes, recursively, until the node(s) failing alone or "
            "in every group holding them are named: about 2 log2(N) short runs, listed in "
            "`results.json`'s `isolation`"
        ),
    )
    isolate_timeout: float = option(
        "--isolate-timeout",
        _positive_duration,
        120.0,
        "the longest one --isolate run may take (the job timeout when shorter): a group of nodes still "
        "running then (a node hung before rendezvous) counts as failing",
        "SECONDS",
        group="recovery",
        doc=(
            "the longest one `--isolate` run may take (the job timeout when shorter): a group still "
            "running then (a node hung before rendezvous holds the others there) is ended and counts as "
            "failing, its evidence `hung: still running at its Ns bound`"
        ),
    )
    taint_unfit: Taint | None = option(
        "--taint-unfit",
        _taint,
        None,
        "kubernetes: after the verdict, taint each node it names unfit with this taint (kubectl's syntax, "
        "e.g. rollcall/unfit=true:NoSchedule), keeping the node's other taints",
        "KEY=VALUE:EFFECT",
        group="recovery",
        doc=(
            "kubernetes only (exit 4 on other backends): after the verdict, taint each node it names "
            "unfit (`unfit_nodes`, `unfit-nodes.txt`) with this taint, in kubectl's syntax "
            "(`rollcall/unfit=true:NoSchedule`; `KEY:EFFECT` has no value), keeping the node's other "
            "taints; tainting again changes nothing; what it did is printed and in `results.json`'s "
            "`taint_unfit`; needs `patch nodes` (`manifests/rbac/`), asked at session start only with the"
            " option"
        ),
    )
    container_image: str | None = option(
        "--container-image",
        _word,
        None,
        "slurm: run each node's torchrun in this image through pyxis/enroot (srun --container-image)",
        "IMAGE",
        group="slurm",
        ini=True,
        doc=(
            "slurm: run each node's torchrun in this image through pyxis/enroot (`srun "
            "--container-image`); without it the nodes run this checkout's `train.py` with this Python's "
            "torch (a shared file system)"
        ),
    )
    #: Where each option's value came from: its flag, its environment variable, ``ini rollcall_<name>``
    #: or ``default``.
    sources: dict[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """Where option ``name``'s value came from: its flag, its variable, its ini key, or ``default``."""
        return self.sources.get(name, "default")

    def given(self, name: str) -> bool:
        """Whether the user set option ``name`` (flag, variable or ini file), rather than its default."""
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


def resolve(
    cli: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, str | Sequence[str]] | None = None,
) -> Options:
    """Options from the command line, the environment, the ini file and the defaults, in that order.

    ``cli`` and ``ini`` are by option name; a value ``None``, ``""`` or empty is not given (what argparse and
    pytest's ``getini`` return then). Only the options declared ``ini=True`` read ``ini``.
    """
    environ = os.environ if environ is None else environ
    ini = {} if ini is None else ini
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in OPTIONS:
        given = cli.get(spec.name)
        if given not in (None, False, [], ()):
            raw, source = given, spec.flag
        elif spec.env in environ:
            raw, source = environ[spec.env], spec.env
        elif spec.ini_name and ini.get(spec.name) not in (None, "", [], ()):
            raw, source = ini[spec.name], f"ini {spec.ini_name}"
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


#: The command that writes the reference, ``docs/options.md`` (a unit test holds the file to it).
REGENERATE = "python -m rollcall.options --markdown > docs/options.md"


def _shown_default(spec: Spec) -> str:
    """The reference's default cell: ``30`` for 30.0, ``off`` for a switch, empty for no value."""
    default = spec.default
    if spec.switch:
        return "off"
    if default is None or (not isinstance(default, int | float) and not default):
        return ""
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"


def _usage(spec: Spec) -> str:
    """``--efa auto|on|off``, ``--nodes N``, ``--keep``: the flag and what it takes."""
    if isinstance(spec.parse, _Choice):
        return f"{spec.flag} {'|'.join(spec.parse.choices)}"
    return f"{spec.flag} {spec.metavar}" if spec.metavar else spec.flag


def markdown() -> str:
    """The option reference, ``docs/options.md``: one table per group, from the declarations."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = [
        "# Options",
        "",
        f"<!-- Generated from src/rollcall/options.py; do not edit. Regenerate: {REGENERATE} -->",
        "",
        "Every option also reads an environment variable, so CI systems can set it. The settings that "
        "describe a cluster can also be set in the ini file (`[tool.pytest.ini_options]` of "
        "`pyproject.toml`, or `pytest.ini`), as the *ini* column names them. The command line wins over the "
        "environment, the environment over the ini file, the ini file over the default. Bad values stop the "
        "session before anything is created, with a message naming the option, where the value came from, "
        "and the fix. `pytest --help` lists the options in the same groups.",
        "",
        "```toml",
        "[tool.pytest.ini_options]",
        'rollcall_backend = "kubernetes"',
        'rollcall_context = "nightly-eks"',
        'rollcall_instance_type = "p5.48xlarge"',
        'rollcall_node_selector = ["karpenter.sh/nodepool=gpu"]',
        "```",
    ]
    for group, title in GROUPS:
        out += [
            "",
            f"## {title[0].upper()}{title[1:]}",
            "",
            "| option | environment | ini | default | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for spec in OPTIONS:
            if spec.group != group:
                continue
            ini = f"`{spec.ini_name}`" if spec.ini_name else ""
            row = [f"`{cell(_usage(spec))}`", f"`{spec.env}`", ini, _shown_default(spec)]
            out.append("| " + " | ".join([*row, cell(spec.doc or spec.help)]) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rollcall.options --markdown``: print the option reference."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m rollcall.options", description=main.__doc__)
    parser.add_argument("--markdown", action="store_true", required=True, help="the reference in Markdown")
    parser.parse_args(argv)
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
