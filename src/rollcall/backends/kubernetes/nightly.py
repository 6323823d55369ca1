"""The suite inside the cluster on a schedule: the objects ``rollcall render --cronjob SCHEDULE`` prints.

They are the least-privilege identity of ``manifests/rbac/`` (its Namespace, ServiceAccount, ClusterRole and
binding, the autoscaler-status Role, the admission policy), read from those files, and the CronJob of
``manifests/nightly/cronjob.yaml`` filled in as data (as :mod:`.manifests` fills the Job): the schedule, the
suite's image (``images/suite/Dockerfile``), the namespace and ServiceAccount of ``manifests/rbac/``, the
suite options the render was given as the container's ``ROLLCALL_*`` environment, and where the results go
(an emptyDir by default, a claim with ``--results-pvc``). The pod runs ``pytest tests/e2e`` with the
in-cluster config of that ServiceAccount; ``--pushgateway`` given to the render is passed on like any option.

No secret's value is printed (:mod:`rollcall.secrets`): a ``--workload-env`` pair whose name looks secret is
passed as ``--workload-secret NAME``, and each such variable's value comes to the pod from the Secret
:data:`NIGHTLY_SECRET` of its namespace, which its owner creates (:func:`by_reference`).
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from rollcall.backends.kubernetes.manifests import ManifestError, validate
from rollcall.backends.kubernetes.views import View
from rollcall.jobspec import manifests_dir
from rollcall.options.values import env_name
from rollcall.secrets import is_secret, redact

Obj = dict[str, Any]

#: The container of the CronJob's pod that runs the suite.
SUITE_CONTAINER = "suite"
#: Where that container keeps each run's results (the template's mount).
RESULTS_DIR = "/results"
#: Options the CronJob sets itself, or that mean nothing inside the cluster: the pod uses its in-cluster
#: config (no kubeconfig or context), its backend is kubernetes and its script names each run's directory.
NOT_PASSED = frozenset({"kubeconfig", "context", "backend", "artifacts_dir"})
#: The Secret of the CronJob's namespace, made by its owner, that the pod's secret variables come from.
NIGHTLY_SECRET = "rollcall-nightly-secrets"
#: The order the objects are applied in: what others live in or refer to first.
KIND_ORDER = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "CronJob",
)
#: The schedule's fields, as the CronJob controller reads them: name, lowest, highest, names allowed.
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_PART = re.compile(r"^(?P<range>\*|\?|(?P<lo>[0-9A-Za-z]+)(?:-(?P<hi>[0-9A-Za-z]+))?)(?:/(?P<step>[0-9]+))?$")
_EXAMPLE = "--cronjob '0 2 * * *' (minute hour day-of-month month day-of-week: every night at 02:00 UTC)"


def check_schedule(text: str) -> str:
    """``text`` when it is a schedule of five cron fields, else ValueError naming ``--cronjob`` and a fix."""
    fields = text.split()
    if len(fields) != len(CRON_FIELDS):
        raise ValueError(
            f"--cronjob {text!r}: a schedule has {len(CRON_FIELDS)} fields, got {len(fields)}; use e.g. "
            f"{_EXAMPLE}"
        )
    for value, (name, low, high, names) in zip(fields, CRON_FIELDS, strict=True):
        for part in value.split(","):
            problem = _part_problem(part, low, high, names)
            if problem:
                raise ValueError(f"--cronjob {text!r}: {name} {value!r}: {problem}; use e.g. {_EXAMPLE}")
    return " ".join(fields)


def _part_problem(part: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    match = _PART.match(part)
    if not match:
        return f"{part!r} is not N, N-M, * or one of them /STEP"
    bounds = []
    for word in (match["lo"], match["hi"]):
        if word is None:
            continue
        if word.isdigit():
            number = int(word)
        elif word.upper() in names:
            number = names.index(word.upper()) + low
        else:
            return f"{word!r} is not a number{' or a name (' + ', '.join(names) + ')' if names else ''}"
        if not low <= number <= high:
            return f"{word} is outside {low}-{high}"
        bounds.append(number)
    if len(bounds) == 2 and bounds[0] > bounds[1]:
        return f"the range {part!r} runs backwards"
    if match["step"] is not None and int(match["step"]) == 0:
        return "a step of 0 never advances"
    return None


@dataclass(frozen=True)
class Nightly:
    """What the CronJob is made of.

    Attributes:
        schedule: five cron fields (checked by :func:`check_schedule`), in UTC (the template's timeZone).
        suite_image: the suite's own image (``images/suite/Dockerfile``).
        env: the suite options to pass, as their ``ROLLCALL_*`` variables and text.
        results_claim: the PersistentVolumeClaim that keeps the results; None for an emptyDir.
    """

    schedule: str
    suite_image: str
    env: Mapping[str, str] = field(default_factory=dict)
    results_claim: str | None = None


def suite_env(given: Mapping[str, str]) -> dict[str, str]:
    """The variables the pod's suite reads, of the options the render was given (``ROLLCALL_*``: text).

    ``given`` holds each option given to the render (by flag or variable) as its variable, in the text it
    was given (:func:`rollcall.options.given_environment`), so the suite in the pod parses it as the render
    did; those of :data:`NOT_PASSED` are left out. A file the render's machine holds cannot be read in the
    pod: ``--baseline`` is refused, naming the CronJob's own baseline (the ConfigMap ``rollcall-baseline``).
    """
    baseline = given.get(env_name("--baseline"))
    if baseline is not None:
        raise ValueError(
            f"--baseline {baseline}: a file of this machine is not in the CronJob's pod; "
            "create the ConfigMap rollcall-baseline from it in the CronJob's namespace (kubectl create "
            "configmap rollcall-baseline --from-file=baseline.json=FILE), which the pod reads, and "
            "leave --baseline out"
        )
    left_out = {env_name(f"--{name.replace('_', '-')}") for name in NOT_PASSED}
    return {name: value for name, value in given.items() if name not in left_out}


def by_reference(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The suite's variables with each secret pair of ``--workload-env`` given as ``--workload-secret NAME``.

    Also the names of every ``--workload-secret NAME`` (its value from the suite's environment), which the
    pod's environment takes from :data:`NIGHTLY_SECRET`; one from a Secret of the cluster
    (``NAME=NAMESPACE/SECRET/KEY``) is read by the suite in the pod, as elsewhere.
    """
    given, pairs_at, secret_at = dict(env), env_name("--workload-env"), env_name("--workload-secret")
    pairs = shlex.split(given.pop(pairs_at, ""))
    kept = [p for p in pairs if not is_secret(p.partition("=")[0])]
    words = [*shlex.split(given.pop(secret_at, "")), *(p.partition("=")[0] for p in pairs if p not in kept)]
    if kept:
        given[pairs_at] = shlex.join(kept)
    if words:
        given[secret_at] = shlex.join(dict.fromkeys(words))
    return given, [w for w in dict.fromkeys(words) if "=" not in w]


def _documents(directory: Path) -> list[Obj]:
    docs: list[Obj] = []
    for path in sorted(directory.glob("*.yaml")):
        with path.open() as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def rbac() -> list[Obj]:
    """The objects of ``manifests/rbac/``, in the order they are applied."""
    docs = _documents(manifests_dir() / "rbac")
    return sorted(docs, key=lambda d: KIND_ORDER.index(d["kind"]))


def service_account(objects: list[Obj]) -> Obj:
    """The one ServiceAccount among ``objects`` (the identity the suite runs as)."""
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    return account


def cronjob_template() -> Obj:
    """A fresh copy of ``manifests/nightly/cronjob.yaml``'s CronJob."""
    (cron,) = [d for d in _documents(manifests_dir() / "nightly") if d["kind"] == "CronJob"]
    return copy.deepcopy(cron)


def render_nightly(nightly: Nightly) -> list[Obj]:
    """The RBAC of ``manifests/rbac/`` and the CronJob running the suite, validated offline."""
    objects = rbac()
    account = service_account(objects)
    cron = cronjob_template()
    cron["metadata"]["namespace"] = View(account).namespace
    cron["spec"]["schedule"] = check_schedule(nightly.schedule)
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["serviceAccountName"] = View(account).name
    (container,) = [c for c in pod["containers"] if c["name"] == SUITE_CONTAINER]
    container["image"] = nightly.suite_image
    env: list[Obj] = container.setdefault("env", [])
    given, secrets = by_reference(nightly.env)
    for name, value in {k: redact(v) for k, v in given.items()}.items():
        found = next((e for e in env if e["name"] == name), None)
        if found is None:
            env.append({"name": name, "value": value})
        else:
            found.clear()
            found.update(name=name, value=value)
    for name in secrets:
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": NIGHTLY_SECRET, "key": name}}})
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == RESULTS_DIR]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    volume.pop("persistentVolumeClaim", None)
    if nightly.results_claim:
        volume["persistentVolumeClaim"] = {"claimName": nightly.results_claim}
    else:
        volume["emptyDir"] = {}
    objects.append(cron)
    problems = []
    for obj in objects:
        model = getattr(client, f"V1{obj['kind']}", None)
        if model is None:
            problems.append(f"{obj['kind']}: no schema to check it against")
            continue
        problems += [f"{obj['kind']} {View(obj).name}: {p}" for p in validate(obj, model)]
    if problems:
        raise ManifestError("; ".join(problems))
    return objects


def header(nightly: Nightly, objects: list[Obj]) -> str:
    """The comment that opens the rendered stream: what runs when, as whom, and where its results stay."""
    cron = objects[-1]
    namespace, name = View(cron).namespace, View(cron).name
    account = View(service_account(objects)).name
    if nightly.results_claim:
        kept = (
            f"on the PersistentVolumeClaim {nightly.results_claim} (it must exist in {namespace}; "
            "manifests/nightly/results-pvc.yaml is one)"
        )
    else:
        kept = (
            "on an emptyDir: they go with the Job's pod, whose log keeps the verdict (--results-pvc NAME "
            "keeps them on a claim)"
        )
    push = nightly.env.get("ROLLCALL_PUSHGATEWAY")
    lines = [
        f"CronJob {namespace}/{name}: the roll call on schedule {cron['spec']['schedule']!r} "
        f"({cron['spec'].get('timeZone', 'UTC')}), pytest tests/e2e from {nightly.suite_image}, as the",
        f"ServiceAccount {account} (in-cluster config) with the rights of manifests/rbac/.",
        "Each run's results.json, junit.xml, ranks.junit.xml and report.html go to",
        f"{RESULTS_DIR}/<UTC time>/ {kept}.",
        f"Metrics are pushed to {push}."
        if push
        else "No metrics are pushed (--pushgateway URL pushes them).",
        *_secrets_lines(nightly, namespace),
        "Apply: kubectl apply -f FILE; run once now:",
        f"  kubectl -n {namespace} create job --from=cronjob/{name} NAME",
    ]
    return "".join(f"# {line}\n" for line in lines)


def _secrets_lines(nightly: Nightly, namespace: str) -> list[str]:
    """What the header says of the workload's secrets: the Secret to create, with their names."""
    names = by_reference(nightly.env)[1]
    if not names:
        return []
    literals = " ".join(f"--from-literal={name}=..." for name in names)
    return [
        f"The workload's secret variables ({', '.join(names)}) come from the Secret {NIGHTLY_SECRET}, which",
        f"the suite never reads: kubectl -n {namespace} create secret generic {NIGHTLY_SECRET} {literals}",
    ]


def render_text(nightly: Nightly) -> str:
    """The stream ``rollcall render --cronjob`` prints: the header, then the objects as YAML."""
    objects = render_nightly(nightly)
    return header(nightly, objects) + yaml.safe_dump_all(objects, sort_keys=False)
