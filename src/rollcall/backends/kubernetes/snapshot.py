"""A failed run's objects as they were when it ended: its pods, its Job and their events, as YAML.

Saved next to the logs (``pods.yaml``, ``job.yaml``, ``events.yaml``, and ``jobset.yaml`` with
``--job-kind jobset``), without their ``managedFields``; in an
existing namespace (``--namespace``) only the events of the run's own objects. Best effort: a snapshot that
cannot be taken is a warning, and the verdict stands.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.manifests import Names
from rollcall.backends.kubernetes.pod_state import index_of
from rollcall.backends.kubernetes.views import Event, Obj, Pod, items

log = logging.getLogger(__name__)


def save(
    kube: Kube, names: Names, pods: list[Obj], job: Obj | None, directory: Path, *, jobset: Obj | None = None
) -> None:
    """Write ``pods``, ``job``, ``jobset`` and the run's namespace's events as YAML into ``directory``."""
    try:
        pods = sorted(pods, key=index_of)
        events = items(call(kube.core.list_namespaced_event, names.namespace, retry_s=10))
        if not names.own_namespace:  # only the run's own, of all in a shared namespace
            own = {names.run, names.job, names.service, *(Pod(p).name for p in pods)}
            events = [e for e in events if Event(e).involved in own]
        events.sort(key=lambda e: Event(e).last_seen)
        saved = (("pods.yaml", pods), ("job.yaml", job), ("jobset.yaml", jobset), ("events.yaml", events))
        for name, data in saved:
            if data is not None:
                (directory / name).write_text(yaml.safe_dump(trim(data), sort_keys=False))
    except Exception as exc:  # evidence is best effort; the verdict stands
        log.warning("could not save the state of %s: %s", names.namespace, message_of(exc))


def trim(data: Any) -> Any:
    """Objects without their managedFields (noise in a report)."""
    if isinstance(data, list):
        return [trim(item) for item in data]
    if isinstance(data, dict):
        meta = data.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            data = {**data, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return data
