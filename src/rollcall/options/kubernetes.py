"""The Kubernetes options: the cluster, the nodes, the pods' scheduling and capacity, in Kubernetes' syntaxes.

This section is what the kubernetes wing is given (:class:`KubernetesOptions`); its values are read in
Kubernetes' and kubectl's own forms: quantities, label selectors, taints and object names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar, Literal, cast, get_args

from rollcall.jobspec import (
    CacheVolume,
    EfaChoice,
    Scheduling,
    Taint,
    TaintEffect,
    Toleration,
    parse_cache_volume,
)
from rollcall.options.declare import DURATION, GroupName, Section, option
from rollcall.options.values import Choice, OptionError, duration, switch

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_RESOURCE_NAME = re.compile(r"^(?:[a-z0-9.-]+/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

#: What runs the roll call: an Indexed Job with a headless Service of rollcall's, or one JobSet
#: (sigs.k8s.io/jobset) that makes its own.
JobKind = Literal["job", "jobset"]


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``500m``, ``8Gi``) as a number; ValueError when it is none."""
    from kubernetes.utils import parse_quantity

    value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    return value


def resources(text: str) -> dict[str, str]:
    """``cpu=2,memory=8Gi`` (kubectl's form) as a mapping, each quantity checked."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, amount = pair.partition("=")
        if not sep or not _RESOURCE_NAME.match(name.strip()):
            raise ValueError(f"{pair!r} is not NAME=QUANTITY")
        amount = amount.strip()
        try:
            quantity(amount)
        except ValueError:
            raise ValueError(f"{amount!r} is not a Kubernetes quantity (e.g. 500m, 2, 8Gi)") from None
        out[name.strip()] = amount
    if not out:
        raise ValueError("expected NAME=QUANTITY pairs")
    return out


def labels(pairs: Sequence[str]) -> dict[str, str]:
    """``["karpenter.sh/nodepool=gpu"]`` as a mapping of label names to values."""
    found: dict[str, str] = {}
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
        found[key] = value
    return found


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


def tolerations(words: Sequence[str]) -> tuple[Toleration, ...]:
    """``["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]`` as tolerations (kubectl's syntax)."""
    found: dict[Toleration, None] = {}
    for word in words:
        key, value, effect = _taint_parts(word)
        found[Toleration(key, effect, value)] = None
    return tuple(found)


def taint(text: str) -> Taint:
    """``rollcall/unfit=true:NoSchedule`` as a taint (kubectl's syntax; ``KEY:EFFECT`` has no value)."""
    key, value, effect = _taint_parts(text.strip())
    return Taint(key, effect, value or "")


def object_name(limit: int = 253) -> Callable[[str], str]:
    """A parser of object names: DNS subdomains (lower-case letters, digits, '-' and '.') of ``limit``."""

    def parse(text: str) -> str:
        if not _DNS_SUBDOMAIN.match(text) or len(text) > limit:
            raise ValueError(
                f"must be an object name: at most {limit} lower-case letters, digits, '-' or '.', "
                "starting and ending with a letter or digit"
            )
        return text

    return parse


def object_names(words: Sequence[str]) -> tuple[str, ...]:
    """Object names, each once."""
    parse = object_name()
    return tuple(dict.fromkeys(parse(w) for w in words))


def namespace_name(text: str) -> str:
    """A namespace's name (a DNS label of at most 63 characters)."""
    if not _DNS_LABEL.match(text) or len(text) > 63:
        raise ValueError(
            "must be a namespace name: at most 63 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return text


def prefix_name(text: str) -> str:
    """The prefix of each run's namespace."""
    if not re.match(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$", text):
        raise ValueError("must be 1-30 lower-case letters, digits or '-', starting with a letter")
    return text


@dataclass(frozen=True, kw_only=True)
class KubernetesOptions(Section):
    """The cluster, the nodes a run may use, the pods' scheduling, the capacity a run may wait for."""

    GROUP: ClassVar[GroupName] = "kubernetes"

    kubeconfig: str | None = option(
        "--kubeconfig",
        str,
        None,
        "kubeconfig file (none: `$KUBECONFIG`, then `~/.kube/config`); a missing, unreadable or "
        "malformed one is refused before anything is created",
        "PATH",
    )
    context: str | None = option(
        "--context",
        str,
        None,
        (
            "kubeconfig context (none: the kubeconfig's current context); an unknown one is refused, "
            "listing those there are"
        ),
        "NAME",
    )
    namespace: str | None = option(
        "--namespace",
        namespace_name,
        None,
        "run inside this existing namespace (checked at session start: exit 4 if it does not exist): "
        "each run creates only its Service and Job there, told apart by name and `rollcall/run-id` "
        "label, and deletes them (the Job with its pods) afterwards; the namespace itself is never "
        "created, swept nor deleted",
        "NAME",
    )
    namespace_prefix: str = option(
        "--namespace-prefix",
        prefix_name,
        "rollcall",
        "each run gets its own namespace `<prefix>-<random>` (unless `--namespace`)",
        "PREFIX",
    )
    job_kind: JobKind = option(
        "--job-kind",
        Choice(JobKind),
        "job",
        "what runs the roll call: `job`, an Indexed Job and a headless Service, or `jobset`, one JobSet "
        "(sigs.k8s.io/jobset, API `jobset.x-k8s.io/v1alpha2`, tested with v0.12.0) of one replicated "
        "job of N pods, with the JobSet's own headless Service; the same pods, ranks, verdict and "
        "clean-up. A cluster without the JobSet API is refused before anything is created (exit 4)",
    )
    instance_type: str | None = option(
        "--instance-type",
        str,
        None,
        "only nodes with this `node.kubernetes.io/instance-type` (chooses among mixed types)",
        "TYPE",
    )
    node_selector: dict[str, str] = option(
        "--node-selector",
        labels,
        {},
        (
            "only nodes with this label, e.g. `karpenter.sh/nodepool=gpu` (repeatable; the variable takes "
            "space-separated pairs)"
        ),
        "KEY=VALUE",
        multiple=True,
    )
    toleration: tuple[Toleration, ...] = option(
        "--toleration",
        tolerations,
        (),
        "the pods tolerate this taint, in kubectl's taint syntax (`dedicated=ml:NoSchedule`; "
        "`KEY:EFFECT` tolerates any value; EFFECT is `NoSchedule`, `PreferNoSchedule` or "
        "`NoExecute`); discovery counts a node so tainted as usable (repeatable). The accelerators' "
        "and EFA's own taints (`nvidia.com/gpu`, `aws.amazon.com/neuron`, "
        "`aws.amazon.com/neuroncore`, `vpc.amazonaws.com/efa`, `aws.amazon.com/efa`) are always "
        "tolerated",
        "KEY[=VALUE]:EFFECT",
        multiple=True,
    )
    requests: dict[str, str] | None = option(
        "--requests",
        resources,
        None,
        (
            "each pod's requests besides the accelerator, e.g. `cpu=4,memory=16Gi` (the pods are "
            "BestEffort without)"
        ),
        "cpu=N,memory=Q",
    )
    limits: dict[str, str] | None = option(
        "--limits",
        resources,
        None,
        (
            "each pod's limits besides the accelerator, e.g. `memory=32Gi`; a container over its memory "
            "limit is named OOMKilled"
        ),
        "cpu=N,memory=Q",
    )
    priority_class: str | None = option(
        "--priority-class", object_name(), None, "the pods' PriorityClass", "NAME"
    )
    queue: str | None = option(
        "--queue",
        object_name(63),
        None,
        "submit the Job to this Kueue LocalQueue: label `kueue.x-k8s.io/queue-name`, created with "
        "`suspend: true` for Kueue to admit it",
        "NAME",
    )
    image_pull_secret: tuple[str, ...] = option(
        "--image-pull-secret",
        object_names,
        (),
        "a Secret the kubelet pulls the image with; it must exist in the run's namespace, so usually "
        "with `--namespace` (repeatable)",
        "NAME",
        multiple=True,
    )
    service_account: str | None = option(
        "--service-account",
        object_name(),
        None,
        "the pods' ServiceAccount (e.g. one bound to an IAM role: IRSA and EKS Pod Identity project "
        "their own token; the Kubernetes API token stays unmounted); needs `--namespace`, checked at "
        "session start",
        "NAME",
    )
    efa: EfaChoice = option(
        "--efa",
        Choice(EfaChoice),
        "auto",
        "request every EFA interface the nodes' instance type has (a node advertising fewer is "
        "unusable) and prove NCCL used EFA; `auto` uses EFA when every usable node has it and "
        "refuses, naming the nodes without it, when only some do",
    )
    neuron_cache: CacheVolume | None = option(
        "--neuron-cache",
        parse_cache_volume,
        None,
        (
            "keep the Neuron compile cache between runs in this volume: `host:/PATH`, a directory of each "
            "node, or `nfs:SERVER:/PATH`, an NFS export such as Amazon EFS shared by all nodes (mounted "
            "at `/var/cache/neuron-compile-cache`, `NEURON_COMPILE_CACHE_URL` set)"
        ),
        "host:/PATH|nfs:SERVER:/PATH",
    )
    capacity_timeout: float = option(
        "--capacity-timeout",
        duration,
        900.0,
        (
            "how long pods may wait for nodes that a Karpenter NodePool or cluster-autoscaler provisions, "
            "or for Kueue quota, before the run fails (given explicitly, a running cluster-autoscaler is "
            "trusted to provide nodes); the job timeout counts from when every pod is scheduled"
        ),
        DURATION,
    )
    sweep_older_than: float | None = option(
        "--sweep-older-than",
        duration,
        None,
        "at session start, delete this suite's namespaces older than this (e.g. `6h`), left by killed"
        " runs (only those a run created, labelled with its run id); with `--namespace`, the old "
        "runs' Jobs and Services in it instead",
        DURATION,
    )
    check_device_plugins: bool = option(
        "--check-device-plugins",
        switch,
        False,
        "first check that the NVIDIA/Neuron and EFA device-plugin DaemonSets are ready",
        switch=True,
    )

    def __post_init__(self) -> None:
        _check_requests_within_limits(self.requests or {}, self.limits or {})
        if self.service_account not in (None, "default") and self.namespace is None:
            raise OptionError(
                f"--service-account {self.service_account}: a run's own namespace holds no ServiceAccount "
                "but default; pass --namespace NAME, the existing namespace that holds it"
            )

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


def _check_requests_within_limits(requests: Mapping[str, str], limits: Mapping[str, str]) -> None:
    for name in sorted(requests.keys() & limits.keys()):
        if quantity(requests[name]) > quantity(limits[name]):
            raise OptionError(
                f"--requests {name}={requests[name]} is more than --limits {name}={limits[name]}; "
                "a request may not exceed its limit"
            )
