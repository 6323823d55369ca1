"""The run's Kubernetes objects: loaded from ``manifests/*.yaml``, filled in from the JobSpec, validated.

Rendering is data, not text: each file is parsed with ``yaml.safe_load`` and typed values are set in the
dicts, so nothing the user passes (image, arguments, environment) can change the document's structure.

:func:`validate` checks a rendered object against the Kubernetes schema that the official client was
generated from, offline: every field must be known to its kind (no typos silently dropped), of the right type,
and required fields present. The kubernetes backend then also sends each object as a server-side dry run
(strict field validation) before creating it.
"""

from __future__ import annotations

import copy
import math
import posixpath
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from rollcall.backends.kubernetes.api import JOBSET_API_VERSION
from rollcall.backends.kubernetes.instances import lookup
from rollcall.backends.kubernetes.views import Job
from rollcall.jobspec import (
    COMPILE_CACHE_DIR,
    EFA_RESOURCE,
    IMAGE_DIR,
    IMAGE_PYTHON,
    LAUNCH_MODULE,
    NEURON_CACHE_DIR,
    POD_MONITOR_DIR,
    CacheVolume,
    JobSpec,
    Scheduling,
    Toleration,
    launcher_monitor_command,
    manifests_dir,
)
from rollcall.secrets import REDACTED, SecretSource, secret_env
from rollcall_workload.contract import MONITOR_DIR_ENV

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rollcall"
RUN_ID_LABEL = "rollcall/run-id"
JOB_LABEL = "rollcall/job"
#: The training container's name.
CONTAINER = "train"
#: The node's monitor: a native sidecar (an init container with ``restartPolicy: Always``) beside it.
MONITOR_CONTAINER = "monitor"
#: The volume of the node's monitor directory, shared by both containers.
MONITOR_VOLUME = "monitor"
#: With EFA requested: NCCL says which network it chose (the EFA check reads it), libfabric is held to its
#: EFA provider, and fork() stays safe with registered memory. The aws-ofi-nccl plugin tunes NCCL for the
#: platform itself ("NET/OFI Configuring AWS-specific options"), so no NCCL tunable is forced here.
EFA_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
}
#: Added where the instance type's EFA does RDMA (:mod:`.instances`): GPUDirect / device RDMA.
EFA_RDMA_ENV = {"FI_EFA_USE_DEVICE_RDMA": "1"}
#: On Neuron: the interface the collectives bootstrap over, the pod's own (the Neuron EKS samples set it).
NEURON_ENV = {"CCOM_SOCKET_IFNAME": "eth0"}
#: The volume of ``--neuron-cache``.
NEURON_CACHE_VOLUME = "neuron-cache"
#: The volume of ``--compile-cache``.
COMPILE_CACHE_VOLUME = "compile-cache"
#: The Pod Security level a run's namespace enforces: ``manifests/namespace.yaml``'s (baseline), or privileged
#: where the run mounts a directory of the node, with the reason in :data:`POD_SECURITY_REASON`.
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
POD_SECURITY_PRIVILEGED = "privileged"
POD_SECURITY_REASON = "rollcall/pod-security-reason"
#: The label that submits a Job to a Kueue LocalQueue (``--queue``).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The JobSet's one replicated job (``manifests/jobset.yaml``): its Job is ``<jobset>-node-0``.
REPLICATED_JOB = "node"

Obj = dict[str, Any]
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ManifestError(ValueError):
    """A rendered object does not match the Kubernetes schema; the message lists every problem."""


@dataclass(frozen=True)
class Names:
    """One run's object names; the namespace is ``<prefix>-<random>``, so parallel runs never collide.

    With ``own_namespace`` False the run lives in an existing namespace (``--namespace``), which it neither
    creates nor deletes; its Job and Service are told apart from others' by their names and run-id label.
    With ``jobset`` the run is that JobSet (``--job-kind jobset``), whose controller makes the Job ``job``
    (``<jobset>-node-0``) and the headless Service ``service``.
    """

    namespace: str
    job: str
    service: str
    run_id: str
    own_namespace: bool = True
    jobset: str | None = None

    @classmethod
    def new(cls, prefix: str, job: str, namespace: str | None = None, *, kind: str = "job") -> Names:
        """Fresh names for a run of ``job``, in ``namespace`` when given, else in one of its own.

        ``kind`` is ``--job-kind``'s: ``jobset`` names the JobSet ``job``, its Job ``<job>-node-0``.
        """
        run_id = secrets.token_hex(4)
        own = namespace is None
        jobset = job if kind == "jobset" else None
        return cls(
            namespace=f"{prefix}-{run_id}" if namespace is None else namespace,
            job=f"{job}-{REPLICATED_JOB}-0" if jobset else job,
            service=job,
            run_id=run_id,
            own_namespace=own,
            jobset=jobset,
        )

    @property
    def run(self) -> str:
        """The run's name: its JobSet's, else its Job's."""
        return self.jobset or self.job

    @property
    def workload(self) -> str:
        """What runs the roll call, for messages: ``JobSet ns/x`` or ``Job ns/x``."""
        kind = "JobSet" if self.jobset else "Job"
        return f"{kind} {self.namespace}/{self.run}"

    @property
    def selector(self) -> str:
        """The label selector of the run's objects."""
        return f"{RUN_ID_LABEL}={self.run_id}"

    @property
    def secret(self) -> str:
        """The run's Secret: the workload's secret variables, by name (:mod:`rollcall.secrets`)."""
        return secret_name(self.run_id)


def secret_name(run_id: str) -> str:
    """The Secret of the run ``run_id``: deleted by name, as the suite may not list Secrets."""
    return f"rollcall-env-{run_id}"


@dataclass(frozen=True)
class Rendered:
    """A run's namespace (None in an existing one), headless Service and Indexed Job.

    With ``jobset``: the JobSet whose one replicated job is that Job (its spec the same dict), which makes
    its own Service (``service`` None). With ``secret``: the Secret the pods' secret variables come from (its
    ``stringData`` holds those of ``--workload-env``); the backend adds those of ``sources``
    (``--workload-secret``) before creating it (:meth:`fill`).
    """

    namespace: Obj | None
    service: Obj | None
    job: Obj
    jobset: Obj | None = None
    secret: Obj | None = None
    sources: Mapping[str, SecretSource] = field(default_factory=dict)

    def objects(self) -> list[Obj]:
        """The objects to create, in order."""
        workload = self.jobset if self.jobset is not None else self.job
        return [o for o in (self.namespace, self.secret, self.service, workload) if o is not None]

    def shown(self) -> list[Obj]:
        """:meth:`objects` as they may be printed: each of the Secret's values ``<redacted>``."""
        if self.secret is None:
            return self.objects()
        hidden = dict.fromkeys([*self.secret["stringData"], *self.sources], REDACTED)
        secret = {**self.secret, "stringData": hidden}
        return [secret if o is self.secret else o for o in self.objects()]

    def fill(self, values: Mapping[str, str]) -> None:
        """Put the value of each of :attr:`sources` into the Secret; ValueError where one is missing."""
        missing = sorted(set(self.sources) - set(values))
        if missing or self.secret is None:
            raise ValueError(f"no value for {', '.join(missing) or 'the secret'}")
        self.secret["stringData"].update({name: values[name] for name in self.sources})

    @property
    def efa(self) -> bool:
        """Whether the pods request EFA devices."""
        return EFA_RESOURCE in Job(self.job).template.limits

    def extend_deadline(self, seconds: float) -> None:
        """Give the Job's ``activeDeadlineSeconds`` ``seconds`` more (whole seconds, rounded up)."""
        self.job["spec"]["activeDeadlineSeconds"] += math.ceil(seconds)


@dataclass
class PodExtras:
    """Labels and annotations added to the Job's pods (tests use them to steer the fake nodes)."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@cache
def _load(directory: Path, name: str) -> Obj:
    with (directory / name).open() as f:
        doc: Obj = yaml.safe_load(f)
    return doc


def load(name: str) -> Obj:
    """A fresh copy of ``manifests/<name>``."""
    try:
        directory = manifests_dir()
    except FileNotFoundError as e:
        raise ManifestError(str(e)) from None
    return copy.deepcopy(_load(directory, name))


def job_tolerations(extra: Sequence[Toleration] = ()) -> list[Obj]:
    """The tolerations of the Job's pods: the manifest's, then ``extra`` (discovery judges taints by them)."""
    return _tolerating(Job(load("job.yaml")).template.tolerations, extra)


def _tolerating(tolerations: list[Obj], extra: Sequence[Toleration]) -> list[Obj]:
    """``tolerations``, then each of ``extra`` that is not among them yet."""
    for toleration in extra:
        if toleration.manifest() not in tolerations:
            tolerations.append(toleration.manifest())
    return tolerations


def render(spec: JobSpec, names: Names, *, extras: PodExtras | None = None) -> Rendered:
    """The run's objects for ``spec``, validated offline; EFA is on when ``spec.resources`` asks for it.

    Its namespace (where it owns one), its headless Service (a JobSet makes its own), the Indexed Job
    (:func:`_job`) whose pods train (:func:`_train`), and the Secret their secret variables come from.
    """
    _check_names(spec, names)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: names.run_id}
    namespace = _namespace(spec, names, labels) if names.own_namespace else None
    service = _service(spec, names, labels) if names.jobset is None else None
    job = _job(spec, names, labels, extras or PodExtras())
    secret = _train(job["spec"]["template"]["spec"], spec, names, labels)
    models = ((namespace, client.V1Namespace), (secret, client.V1Secret), (service, client.V1Service))
    for obj, model in (*models, (job, client.V1Job)):
        if obj is None:
            continue
        problems = validate(obj, model)
        if problems:
            raise ManifestError(
                f"{obj['kind']} {obj['metadata']['name']} does not match the Kubernetes schema:\n  "
                + "\n  ".join(problems)
            )
    if names.jobset is not None:
        return Rendered(namespace, None, job, _jobset(job, names, labels), secret, spec.secrets)
    return Rendered(namespace, service, job, secret=secret, sources=spec.secrets)


def _check_names(spec: JobSpec, names: Names) -> None:
    """A ManifestError where ``spec`` has no image or a name of ``names`` is no DNS label."""
    if not spec.image:
        raise ManifestError("the kubernetes backend needs --image (the training image)")
    if not _NAMESPACE.match(names.namespace):
        raise ManifestError(f"namespace name {names.namespace!r} is not a DNS label")
    for what, value in (("job", names.job), ("service", names.service)):
        if not _DNS_LABEL.match(value):
            raise ManifestError(f"{what} name {value!r} is not a DNS label")


def _namespace(spec: JobSpec, names: Names, labels: Mapping[str, str]) -> Obj:
    """The run's own namespace, labelled as its run's, at the Pod Security level its pods need."""
    namespace = load("namespace.yaml")
    namespace["metadata"]["name"] = names.namespace
    namespace["metadata"]["labels"].update(labels)
    namespace["metadata"]["annotations"] = {JOB_LABEL: names.run}
    _pod_security(namespace, spec)
    return namespace


def _service(spec: JobSpec, names: Names, labels: Mapping[str, str]) -> Obj:
    """The headless Service naming each pod of the Job (``<job>-<index>.<service>``), on the master port."""
    service = load("service.yaml")
    service["metadata"].update(name=names.service, namespace=names.namespace)
    service["metadata"]["labels"].update(labels)
    service["spec"]["selector"] = {JOB_LABEL: names.job}
    service["spec"]["ports"][0].update(port=spec.master_port, targetPort=spec.master_port)
    return service


def _job(spec: JobSpec, names: Names, labels: Mapping[str, str], extras: PodExtras) -> Obj:
    """The Indexed Job: one pod per node, each on a node of its own, placed and scheduled as ``spec`` asks."""
    job = load("job.yaml")
    job["metadata"].update(name=names.job, namespace=names.namespace)
    job["metadata"]["labels"].update(labels)
    job["spec"].update(
        completions=spec.nodes,
        parallelism=spec.nodes,
        activeDeadlineSeconds=max(1, math.ceil(spec.job_timeout_s)),
    )
    template = job["spec"]["template"]
    template["metadata"]["labels"].update({**extras.labels, **labels, JOB_LABEL: names.job})
    if extras.annotations:
        template["metadata"]["annotations"] = {
            **template["metadata"].get("annotations", {}),
            **extras.annotations,
        }
    pod = template["spec"]
    pod["subdomain"] = names.service
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    anti["labelSelector"]["matchLabels"] = {JOB_LABEL: names.job}
    selector = dict(spec.node_selector)
    if spec.instance_type:
        selector["node.kubernetes.io/instance-type"] = spec.instance_type
    if selector:
        pod["nodeSelector"] = selector
    if spec.machines:  # a re-run of some nodes, a re-check of tainted ones: on those machines, none other
        # one term per machine, the terms ORed: a node field selector's In takes one value only
        terms = [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [m]}]}
            for m in spec.machines
        ]
        pod["affinity"]["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    _schedule(job, spec.scheduling)
    return job


def _train(pod: Obj, spec: JobSpec, names: Names, labels: Mapping[str, str]) -> Obj | None:
    """The pod's training container (its image, torchrun, environment, caches, port, devices) and monitor.

    Returns the run's Secret where a variable is secret: the container names where each value is, never it.
    """
    container = pod["containers"][0]
    container["image"] = spec.image
    container["command"] = spec.torchrun_command(  # behind the launch faults' wrapper, which becomes it
        node_rank="$(JOB_COMPLETION_INDEX)",
        launcher=(
            *IMAGE_PYTHON,
            "-m",
            LAUNCH_MODULE,
            "--node-rank=$(JOB_COMPLETION_INDEX)",
            "--",
            "torchrun",
        ),
        master_addr=f"{names.job}-0.{names.service}",
        compile_cache_dir=COMPILE_CACHE_DIR,
    )
    public, hidden = secret_env(spec.workload_env(), spec.secrets)
    env = {**fabric_env(spec), **public, MONITOR_DIR_ENV: POD_MONITOR_DIR}
    container["env"] += [{"name": k, "value": v} for k, v in env.items()]
    secret = _secret(names, labels, hidden) if hidden or spec.secrets else None
    container["env"] += [  # the Job holds where each secret is, never its value
        {"name": k, "valueFrom": {"secretKeyRef": {"name": names.secret, "key": k}}}
        for k in sorted({*hidden, *spec.secrets})
    ]
    _monitor(pod, spec)
    for name, volume, directory in (
        (NEURON_CACHE_VOLUME, spec.neuron_cache, NEURON_CACHE_DIR),
        (COMPILE_CACHE_VOLUME, spec.compile_cache, COMPILE_CACHE_DIR),
    ):
        if volume is not None:
            pod["volumes"].append(cache_volume(name, volume))
            container["volumeMounts"].append({"name": name, "mountPath": directory})
    container["ports"][0]["containerPort"] = spec.master_port
    devices = {k: str(v) for k, v in spec.resources.items()}
    requests = {**spec.requests, **devices}
    limits = {**spec.limits, **devices}
    container["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return secret


def _secret(names: Names, labels: Mapping[str, str], values: Mapping[str, str]) -> Obj:
    """The run's Secret, holding ``values`` (those of ``--workload-secret`` are added at launch)."""
    metadata = {"name": names.secret, "namespace": names.namespace, "labels": dict(labels)}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": {**values},
    }


def host_directories(spec: JobSpec) -> list[str]:
    """The options of ``spec`` that mount a directory of each node (a ``host:/PATH`` cache), as given."""
    caches = (("--neuron-cache", spec.neuron_cache), ("--compile-cache", spec.compile_cache))
    return [f"{option} {cache}" for option, cache in caches if cache is not None and cache.kind == "host"]


def _pod_security(namespace: Obj, spec: JobSpec) -> None:
    """A run that mounts a directory of the node enforces privileged, saying why (baseline forbids hostPath).

    ``rbac/admission-policy.yaml`` still holds the run's pods to baseline but for directories under its
    ``hostPathPrefixes``.
    """
    hosts = host_directories(spec)
    if hosts:
        namespace["metadata"]["labels"][POD_SECURITY_ENFORCE] = POD_SECURITY_PRIVILEGED
        namespace["metadata"]["annotations"][POD_SECURITY_REASON] = (
            f"{' and '.join(hosts)}: a directory of each node (hostPath), which Pod Security's baseline "
            "level forbids; rollcall's admission policy admits it under its hostPathPrefixes only"
        )


def _jobset(job: Obj, names: Names, labels: Mapping[str, str]) -> Obj:
    """The JobSet of ``manifests/jobset.yaml`` around the rendered ``job`` (its spec the same dict).

    The JobSet controller names the Job ``<jobset>-node-0`` and gives it the template's labels; Kueue's
    label and ``suspend`` move to the JobSet, which Kueue admits whole.
    """
    assert names.jobset is not None
    jobset = load("jobset.yaml")
    assert jobset["apiVersion"] == JOBSET_API_VERSION, jobset["apiVersion"]
    jobset["metadata"].update(name=names.jobset, namespace=names.namespace)
    jobset["metadata"]["labels"].update(labels)
    jobset["spec"]["network"]["subdomain"] = names.service
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert names.job == f"{names.jobset}-{replicated['name']}-0", (names, replicated["name"])
    queue = job["metadata"]["labels"].pop(QUEUE_LABEL, None)
    if queue is not None:
        jobset["metadata"]["labels"][QUEUE_LABEL] = queue
        jobset["spec"]["suspend"] = job["spec"].pop("suspend")
    replicated["template"] = {"metadata": {"labels": dict(job["metadata"]["labels"])}, "spec": job["spec"]}
    return jobset


#: What the monitor sidecar of an NVIDIA pod is given to hear its node's GPUs through NVML without holding
#: one: the NVIDIA container toolkit's variables (it requests no ``nvidia.com/gpu``, so the device plugin
#: gives it none). A toolkit set to refuse them to unprivileged containers leaves NVML without a GPU, and
#: the monitor says the GPU events are off. It is every GPU of the node, not the ranks' own, on purpose: an
#: Xid names the GPU it happened on, and the monitor owns the events of each (it hears one on a GPU no rank
#: uses, which still makes its node unfit). For it the toolkit mounts every GPU's device node and NVML's
#: library (``utility``), no CUDA driver library.
MONITOR_NVIDIA_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}


def _monitor(pod: Obj, spec: JobSpec) -> None:
    """The node's monitor sidecar: the training image, reading the monitor directory both containers mount.

    It watches its pod's launcher too (found among the pod's processes, which the pod shares) at the
    launchers' rendezvous, in steps of the ranks' join bound: the node is heard once its launcher runs.
    """
    (sidecar,) = (c for c in pod["initContainers"] if c["name"] == MONITOR_CONTAINER)
    command = launcher_monitor_command(
        POD_MONITOR_DIR, IMAGE_PYTHON, "$(JOB_COMPLETION_INDEX)", spec.workload_args
    )
    sidecar.update(image=spec.image, command=command, workingDir=IMAGE_DIR)
    if spec.accelerator == "nvidia":
        sidecar["env"] = [{"name": k, "value": v} for k, v in MONITOR_NVIDIA_ENV.items()]
    for c in (sidecar, *pod["containers"]):
        for mount in c["volumeMounts"]:
            if mount["name"] == MONITOR_VOLUME:  # an emptyDir anyone may write: the directory is made in it
                mount["mountPath"] = posixpath.dirname(POD_MONITOR_DIR)


def fabric_env(spec: JobSpec) -> dict[str, str]:
    """The EFA and Neuron settings of ``spec``'s pods (the user's ``--workload-env`` goes on top)."""
    env: dict[str, str] = {}
    if EFA_RESOURCE in spec.resources:
        env.update(EFA_ENV)
        known = lookup(spec.instance_type)
        if known is not None and known.efa_rdma:
            env.update(EFA_RDMA_ENV)
    if spec.accelerator == "neuron":
        env.update(NEURON_ENV)
    if spec.neuron_cache is not None:
        # torch-neuronx's persistent cache; a --cache_dir in the user's NEURON_CC_FLAGS still wins
        env["NEURON_COMPILE_CACHE_URL"] = NEURON_CACHE_DIR
    return env


def cache_volume(name: str, cache: CacheVolume) -> Obj:
    """The pod volume ``name`` of a compiler's cache (``--neuron-cache``, ``--compile-cache``).

    A directory of the node (created when absent), or an NFS export.
    """
    if cache.kind == "nfs":
        return {"name": name, "nfs": {"server": cache.server, "path": cache.path}}
    return {"name": name, "hostPath": {"path": cache.path, "type": "DirectoryOrCreate"}}


def _schedule(job: Obj, scheduling: Scheduling) -> None:
    """Set what ``scheduling`` asks of the Job and its pods."""
    pod = job["spec"]["template"]["spec"]
    if scheduling.tolerations:
        pod["tolerations"] = _tolerating(pod.get("tolerations", []), scheduling.tolerations)
    if scheduling.priority_class:
        pod["priorityClassName"] = scheduling.priority_class
    if scheduling.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in scheduling.image_pull_secrets]
    if scheduling.service_account:
        pod["serviceAccountName"] = scheduling.service_account
    if scheduling.queue:
        # Kueue admits a Job created suspended: it unsuspends it once the queue's quota allows.
        job["metadata"]["labels"][QUEUE_LABEL] = scheduling.queue
        job["spec"]["suspend"] = True


# -- offline schema validation ------------------------------------------------------------------------------

_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "bytes": (str, bytes),
    "datetime": (str, datetime),
}


def validate(obj: Mapping[str, Any], model: type, path: str = "") -> list[str]:
    """Every way ``obj`` (JSON field names) departs from ``model`` (a generated ``kubernetes.client`` model).

    Unknown fields, wrong types and missing required fields are reported with their path, e.g.
    ``spec.template.spec.containers[0].imagePullPolicy: unknown field (known: ...)``.
    """
    types: Mapping[str, str] = model.openapi_types  # type: ignore[attr-defined]
    attrs: Mapping[str, str] = model.attribute_map  # type: ignore[attr-defined]
    by_json = {json_name: attr for attr, json_name in attrs.items()}
    problems = []
    for key, value in obj.items():
        where = f"{path}.{key}" if path else key
        attr = by_json.get(key)
        if attr is None:
            problems.append(f"{where}: unknown field of {model.__name__}")
            continue
        if value is None:
            continue
        problems += _check(value, types[attr], where)
    fields = getattr(model, "model_fields", {})
    for attr, info in fields.items():
        if info.is_required() and attrs[attr] not in obj:
            problems.append(f"{path or model.__name__}: missing required field {attrs[attr]}")
    return problems


def _check(value: Any, kind: str, where: str) -> list[str]:
    if kind == "object":
        return []
    if kind in _SCALARS:
        allowed = _SCALARS[kind]
        if isinstance(value, bool) and bool not in allowed:
            return [f"{where}: expected {kind}, got a boolean"]
        return [] if isinstance(value, allowed) else [f"{where}: expected {kind}, got {type(value).__name__}"]
    if kind.startswith("List[") and kind.endswith("]"):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        inner = kind[5:-1]
        return [p for i, item in enumerate(value) for p in _check(item, inner, f"{where}[{i}]")]
    if kind.startswith("Dict[str, ") and kind.endswith("]"):
        if not isinstance(value, dict):
            return [f"{where}: expected a map, got {type(value).__name__}"]
        inner = kind[10:-1]
        return [p for k, item in value.items() for p in _check(item, inner, f"{where}.{k}")]
    model = getattr(client, kind, None)
    if model is None:
        return []  # a type this client does not describe: leave it to the server's dry run
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({kind}), got {type(value).__name__}"]
    return validate(value, model, where)
