"""Small read-only views of the API's objects (pods, Jobs, events, ...) over the JSON the API returns.

The code reads a handful of fields of each object; a view names them once, so that no caller walks
``.get("status") or {}`` chains: a field that is absent (or ``null``) reads as empty, never
raises. A view wraps the object as it is (:attr:`View.obj`), copies nothing and never writes.

:func:`parse_time` is the one reader of the API's timestamps (RFC 3339, ``2026-12-01T10:00:00Z``). The
log lines' timestamps (``timestamps=true``, nanoseconds) are another format, read by
:func:`.podlogs.timestamp_key` on its fast bytes path. :func:`as_obj`, :func:`as_objs` and :func:`as_str`
read a field as the type it must have, else empty. Nodes and what makes them: :mod:`.nodeviews`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.utils import parse_quantity

Obj = dict[str, Any]

#: The label (and annotation) the Job controller gives each pod of an Indexed Job: its completion index.
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def parse_time(text: object) -> datetime | None:
    """An API timestamp (``2026-12-01T10:00:00Z``) as an aware datetime; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def epoch(text: object) -> float | None:
    """An API timestamp in seconds since the epoch; None when absent or unreadable."""
    when = parse_time(text)
    return None if when is None else when.timestamp()


def count(quantity: object) -> int:
    """An extended-resource quantity (``"8"``, ``8``, ``"1k"``) as a whole number; 0 when unreadable."""
    try:
        return int(parse_quantity(quantity))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return 0


def as_obj(value: object) -> Obj:
    """``value`` if it is an object (a ``dict``), else an empty one."""
    return value if isinstance(value, dict) else {}


def as_objs(value: object) -> list[Obj]:
    """The objects of ``value`` if it is a list (its other items left out), else an empty list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def as_str(value: object) -> str:
    """``value`` if it is a string, else empty."""
    return value if isinstance(value, str) else ""


def items(body: object) -> list[Obj]:
    """The objects of a list the API returned (its ``items``); empty when absent."""
    return as_objs(as_obj(body).get("items"))


@dataclass(frozen=True)
class Condition:
    """One condition of an object's status (``Ready``, ``PodScheduled``, ``Complete``, ...)."""

    obj: Obj

    @property
    def type(self) -> str:
        """The condition's type."""
        return as_str(self.obj.get("type"))

    @property
    def status(self) -> str:
        """``True``, ``False`` or ``Unknown`` (empty when absent)."""
        return as_str(self.obj.get("status"))

    @property
    def true(self) -> bool:
        """Whether the condition holds."""
        return self.status == "True"

    @property
    def reason(self) -> str:
        """The condition's reason, in one word (empty when absent)."""
        return as_str(self.obj.get("reason"))

    @property
    def message(self) -> str:
        """The condition's message (empty when absent)."""
        return as_str(self.obj.get("message"))

    @property
    def last_transition(self) -> str | None:
        """When the condition last changed, as the API wrote it."""
        return self.obj.get("lastTransitionTime")


@dataclass(frozen=True)
class View:
    """What every object has: its metadata, and its status's conditions."""

    obj: Obj

    @property
    def _meta(self) -> Obj:
        return as_obj(self.obj.get("metadata"))

    @property
    def _spec(self) -> Obj:
        return as_obj(self.obj.get("spec"))

    @property
    def _status(self) -> Obj:
        return as_obj(self.obj.get("status"))

    @property
    def name(self) -> str:
        """The object's name."""
        return as_str(self._meta.get("name"))

    @property
    def uid(self) -> str:
        """The object's uid (empty before the API server assigned one, as in a dry run's answer)."""
        return as_str(self._meta.get("uid"))

    @property
    def resource_version(self) -> str:
        """The version of the object (or of a list) the API returned; empty when absent."""
        return as_str(self._meta.get("resourceVersion"))

    @property
    def namespace(self) -> str:
        """The object's namespace (empty for a cluster-scoped one)."""
        return as_str(self._meta.get("namespace"))

    @property
    def labels(self) -> Mapping[str, str]:
        """The object's labels."""
        return as_obj(self._meta.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        """The object's annotations."""
        return as_obj(self._meta.get("annotations"))

    @property
    def created(self) -> datetime | None:
        """When the object was created."""
        return parse_time(self.creation_timestamp)

    @property
    def creation_timestamp(self) -> str:
        """When the object was created, as the API wrote it (empty when absent); sorts as time does."""
        return as_str(self._meta.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        """Whether the object is being deleted (it has a deletion timestamp)."""
        return bool(self._meta.get("deletionTimestamp"))

    @property
    def deletion_timestamp(self) -> str:
        """When its deletion was asked for, as the API wrote it (empty when it is not being deleted)."""
        return as_str(self._meta.get("deletionTimestamp"))

    @property
    def conditions(self) -> list[Condition]:
        """The status's conditions, in the API's order."""
        return [Condition(c) for c in as_objs(self._status.get("conditions"))]

    def condition(self, kind: str) -> Condition | None:
        """The condition of type ``kind``, if the status has one."""
        return next((c for c in self.conditions if c.type == kind), None)

    def holds(self, kind: str) -> bool:
        """Whether the condition ``kind`` is there and ``True``."""
        found = self.condition(kind)
        return found is not None and found.true


@dataclass(frozen=True)
class Terminated:
    """A container's ``terminated`` state."""

    obj: Obj

    @property
    def reason(self) -> str:
        """``Completed``, ``Error``, ``OOMKilled``, ... (empty when absent)."""
        return as_str(self.obj.get("reason"))

    @property
    def exit_code(self) -> int | None:
        """The container's exit code, when recorded."""
        code = self.obj.get("exitCode")
        return code if isinstance(code, int) else None

    @property
    def message(self) -> str:
        """The termination message (empty when absent)."""
        return as_str(self.obj.get("message"))

    @property
    def failed(self) -> bool:
        """The container ended badly: a non-zero exit code, or killed for memory."""
        return self.reason == "OOMKilled" or (self.exit_code or 0) != 0

    @property
    def started_at(self) -> datetime | None:
        """When the container had started."""
        return parse_time(self.obj.get("startedAt"))

    @property
    def finished_at(self) -> str | None:
        """When the container ended, as the API wrote it."""
        return self.obj.get("finishedAt")


@dataclass(frozen=True)
class ContainerStatus:
    """One entry of a pod's ``containerStatuses`` (or ``initContainerStatuses``)."""

    obj: Obj

    @property
    def name(self) -> str:
        """The container's name."""
        return as_str(self.obj.get("name"))

    @property
    def image(self) -> str:
        """The container's image (empty when absent)."""
        return as_str(self.obj.get("image"))

    @property
    def _state(self) -> Obj:
        return as_obj(self.obj.get("state"))

    @property
    def waiting(self) -> tuple[str, str] | None:
        """While the container waits: its reason and message; else None."""
        if "waiting" not in self._state:
            return None
        waiting = as_obj(self._state["waiting"])
        return as_str(waiting.get("reason")), as_str(waiting.get("message"))

    @property
    def running(self) -> bool:
        """Whether the container runs now."""
        return "running" in self._state

    @property
    def terminated(self) -> Terminated | None:
        """The container's termination, once it has ended."""
        return Terminated(as_obj(self._state["terminated"])) if "terminated" in self._state else None

    @property
    def last_terminated(self) -> Terminated | None:
        """How the container's previous run ended (before a restart), if it did."""
        last = as_obj(self.obj.get("lastState"))
        return Terminated(as_obj(last["terminated"])) if last.get("terminated") else None

    @property
    def started(self) -> bool:
        """Whether the container has started (running, ended, or marked started): its log can be read."""
        return self.running or self.terminated is not None or bool(self.obj.get("started"))

    @property
    def started_at(self) -> datetime | None:
        """When the container started (running or already ended)."""
        running = as_obj(self._state.get("running"))
        if running:
            return parse_time(running.get("startedAt"))
        term = self.terminated
        return term.started_at if term is not None else None


@dataclass(frozen=True)
class Pod(View):
    """A Pod."""

    @property
    def limits(self) -> dict[str, int]:
        """The whole-number resource limits of its containers, summed (the accelerators it was given)."""
        found: dict[str, int] = {}
        for container in as_objs(self._spec.get("containers")):
            for key, value in as_obj(as_obj(container.get("resources")).get("limits")).items():
                text = str(value)
                if text.isdigit():
                    found[key] = found.get(key, 0) + int(text)
        return found

    @property
    def tolerations(self) -> list[Obj]:
        """The taints the pod tolerates (``key``, ``operator``, ``value``, ``effect``), a list of its own."""
        return as_objs(self._spec.get("tolerations"))

    @property
    def node_name(self) -> str | None:
        """The node the pod is bound to, None before it is scheduled."""
        return as_str(self._spec.get("nodeName")) or None

    @property
    def phase(self) -> str:
        """``Pending``, ``Running``, ``Succeeded``, ``Failed`` or ``Unknown`` (``Pending`` when absent)."""
        return as_str(self._status.get("phase")) or "Pending"

    @property
    def finished(self) -> bool:
        """Whether the pod has ended (``Succeeded`` or ``Failed``)."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def reason(self) -> str:
        """The status's reason (``Evicted``, ...; empty when absent)."""
        return as_str(self._status.get("reason"))

    @property
    def message(self) -> str:
        """The status's message (empty when absent)."""
        return as_str(self._status.get("message"))

    @property
    def index(self) -> str:
        """The pod's completion index (its node rank), from its label or annotation, or ``?``."""
        return str(self.labels.get(INDEX_LABEL) or self.annotations.get(INDEX_LABEL) or "?")

    @property
    def node_rank(self) -> int | None:
        """The completion index as a number, None when unknown."""
        return int(self.index) if self.index.isdigit() else None

    @property
    def containers(self) -> list[ContainerStatus]:
        """The statuses of the pod's containers (not its init containers)."""
        return [ContainerStatus(c) for c in as_objs(self._status.get("containerStatuses"))]

    @property
    def all_containers(self) -> Iterator[ContainerStatus]:
        """The statuses of its init containers, then of its containers."""
        for c in as_objs(self._status.get("initContainerStatuses")):
            yield ContainerStatus(c)
        yield from self.containers

    def container(self, name: str) -> ContainerStatus | None:
        """The status of the container (or init container, e.g. a sidecar) ``name``, once reported."""
        return next((c for c in self.all_containers if c.name == name), None)

    @property
    def image(self) -> str:
        """The image of its first (training) container, as its spec names it."""
        first = next(iter(as_objs(self._spec.get("containers"))), {})
        return as_str(first.get("image"))

    @property
    def scheduled_at(self) -> datetime | None:
        """When the pod was bound to a node (its ``PodScheduled`` condition turned ``True``)."""
        cond = self.condition("PodScheduled")
        return parse_time(cond.last_transition) if cond is not None and cond.true else None

    @property
    def started_at(self) -> datetime | None:
        """When the pod's first container started (running or already ended)."""
        times = [t for t in (c.started_at for c in self.containers) if t is not None]
        return min(times) if times else None


@dataclass(frozen=True)
class Job(View):
    """A batch Job."""

    @property
    def suspended(self) -> bool:
        """Whether the Job is suspended (``spec.suspend``: Kueue holds it until its queue admits it)."""
        return bool(self._spec.get("suspend"))

    @property
    def active_deadline_s(self) -> int | None:
        """The Job's ``activeDeadlineSeconds``, None when it has none."""
        deadline = self._spec.get("activeDeadlineSeconds")
        return deadline if isinstance(deadline, int) else None

    @property
    def start_time(self) -> datetime | None:
        """When the Job controller started the Job (``status.startTime``), None before it did."""
        return parse_time(self._status.get("startTime"))

    @property
    def template(self) -> Pod:
        """Its pods' template, read as a pod (its metadata and spec)."""
        return Pod(as_obj(self._spec.get("template")))


@dataclass(frozen=True)
class Event(View):
    """An Event (``core/v1``): what happened to which object, and when."""

    @property
    def reason(self) -> str:
        """Why, in one word (``TriggeredScaleUp``, ``Nominated``, ...; empty when absent)."""
        return as_str(self.obj.get("reason"))

    @property
    def message(self) -> str:
        """What happened, in words (empty when absent)."""
        return as_str(self.obj.get("message"))

    @property
    def last_seen(self) -> str:
        """When it last happened, as the API wrote it; sorts as time does.

        ``lastTimestamp``, else ``eventTime``; empty when neither is there.
        """
        return as_str(self.obj.get("lastTimestamp")) or as_str(self.obj.get("eventTime"))

    @property
    def involved(self) -> str | None:
        """The name of the object it is about, None when it names none."""
        return as_str(as_obj(self.obj.get("involvedObject")).get("name")) or None


@dataclass(frozen=True)
class AccessReview(View):
    """The API server's answer to a SelfSubjectAccessReview."""

    @property
    def allowed(self) -> bool:
        """Whether the right asked about is granted."""
        return bool(self._status.get("allowed"))
