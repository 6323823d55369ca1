"""The deletion of one run's objects: by its clean-up, and by someone else while it runs.

:class:`Cleanup`
    The run's namespace is deleted with foreground propagation, its Jobs first
    (:func:`.kube.delete_namespace`), and awaited within a bound (a :class:`~rollcall.backends.CleanupError`
    otherwise). In an existing namespace, the run's Job (foreground, so its pods go first), Service and pods
    (in one request: :func:`.kube.delete_labelled`) are deleted instead, and awaited likewise; the namespace
    stays. The pods of a lost node are deleted at once first: no kubelet would confirm their deletion.
:class:`UnderRun`
    While the run waits, the run's namespace, Job, Service or pods someone else deletes
    (:func:`.pod_state.deleted_under_run`): a disruption, not a failed rank. The Job and pods come from the
    wait's informers; the namespace and the Service are read every :data:`OWNED_CHECK_S` seconds, and at once
    when the Job or a pod is seen going away.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from rollcall.backends import CleanupError
from rollcall.backends.kubernetes.kube import (
    CONNECT_TIMEOUT_S,
    Kube,
    call,
    delete_labelled,
    delete_namespace,
    message_of,
)
from rollcall.backends.kubernetes.manifests import Names
from rollcall.backends.kubernetes.pod_state import deleted_under_run, job_result, not_ready
from rollcall.backends.kubernetes.reaper import Claim, Ledger
from rollcall.backends.kubernetes.views import Job, Obj, Pod, View
from rollcall.backends.kubernetes.watch import Informer, WaitTimeout, WatchLost, wait_for
from rollcall.evidence.endings import Disruption

log = logging.getLogger(__name__)

#: How often the wait reads the run's namespace and Service to see whether someone else deletes them.
OWNED_CHECK_S = 5.0


@dataclass(frozen=True)
class Cleanup:
    """Deletes one run's objects and confirms they are gone (see the module docstring).

    Attributes:
        kube: the API client.
        names: the run's object names.
        timeout_s: how long to wait for them to be gone.
        ledger: where the run's claim was recorded, crossed out once they are gone (None: ``--keep``).
    """

    kube: Kube
    names: Names
    timeout_s: float
    ledger: Ledger | None = None

    @property
    def claim(self) -> Claim:
        """What clean-up deletes: the run's namespace, or its own objects in one it does not own."""
        names = self.names
        return Claim(names.namespace) if names.own_namespace else Claim(names.namespace, names.run_id)

    @property
    def owned(self) -> str:
        """What clean-up deletes, for messages."""
        if self.names.own_namespace:
            return f"namespace {self.names.namespace}"
        what = "JobSet, Job and Service" if self.names.jobset else "Job and Service"
        return f"the {what} of run {self.names.run_id} in namespace {self.names.namespace}"

    def delete(self, pods: list[Obj], nodes: Informer | None) -> None:
        """Ask for the run's objects to be deleted, the ``pods`` of a lost node (``nodes`` says) at once.

        Raises:
            CleanupError: naming what could not be deleted.
        """
        if nodes is not None and nodes.synced.is_set():
            self._force_delete(lost_node_pods(pods, nodes))
        kube, ns = self.kube, self.names.namespace
        try:
            if self.names.own_namespace:
                delete_namespace(kube, ns)
            else:
                delete_labelled(kube, ns, self.names.selector, self.names.secret)
        except Exception as exc:
            raise CleanupError(f"could not delete {self.owned}: {message_of(exc)}", [self.owned]) from exc

    def _force_delete(self, names: list[str]) -> None:
        """Delete the pods ``names`` at once (grace 0), as ``kubectl delete --force`` would.

        No kubelet confirms their deletion, so the namespace would wait for them until the node returns. A
        kubelet that returns ends their containers itself, since their pods are gone.
        """
        ns = self.names.namespace
        for name in names:
            try:
                call(
                    self.kube.core.delete_namespaced_pod,
                    name,
                    ns,
                    body={"gracePeriodSeconds": 0},
                    grace_period_seconds=0,
                )
                log.warning("force-deleted pod %s/%s: its node was lost", ns, name)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("could not force-delete pod %s/%s: %s", ns, name, message_of(exc))

    def watches(self) -> list[Informer]:
        """Started watches of what must go: the namespace, or the run's own objects in it."""
        kube, names = self.kube, self.names
        if names.own_namespace:
            return [
                Informer(
                    kube.core.list_namespace,
                    f"namespace {names.namespace}",
                    field_selector=f"metadata.name={names.namespace}",
                    retry_s=30,
                ).start()
            ]
        lists = [
            ("jobs", kube.batch.list_namespaced_job),
            ("services", kube.core.list_namespaced_service),
            ("pods", kube.core.list_namespaced_pod),
        ]
        if names.jobset is not None:
            lists.append(("jobsets", kube.jobset.list_namespaced_job_set))
        return [
            Informer(
                fn,
                f"{kind} of run {names.run_id}",
                namespace=names.namespace,
                label_selector=names.selector,
                retry_s=30,
            ).start()
            for kind, fn in lists
        ]

    def confirm(self, watches: list[Informer], confirming: Future[None]) -> None:
        """Wait until nothing ``watches`` sees is left, within the bound; settle ``confirming``."""
        try:
            wait_for(
                lambda: True if not any(w.objects() for w in watches) else None,
                *watches,
                timeout_s=self.timeout_s,
                what=f"deletion of {self.owned}",
            )
            if self.ledger is not None:
                self.ledger.remove(self.claim)
            confirming.set_result(None)
        except (WaitTimeout, WatchLost) as exc:
            message = f"{self.owned} is not gone yet ({exc}); the sweep or the session's reaper will retry"
            log.warning(message)
            confirming.set_exception(CleanupError(message, [self.owned]))
        except BaseException as exc:
            confirming.set_exception(exc)
        finally:
            for w in watches:
                w.stop()


def lost_node_pods(pods: list[Obj], nodes: Informer) -> list[str]:
    """Pods whose node is gone or not Ready now (held or not): no kubelet will confirm their deletion."""
    found = []
    for pod in map(Pod, pods):
        node = nodes.get(pod.node_name or "")
        if pod.node_name and not pod.finished and not pod.deleting and (node is None or not_ready(node)):
            found.append(pod.name)
    return found


@dataclass
class UnderRun:
    """Finds the run's objects someone else deletes while it runs (see the module docstring)."""

    kube: Kube
    names: Names
    #: How long before its ``activeDeadlineSeconds`` a Job counts as ended (its controller may be deleting
    #: its pods already).
    slack_s: float
    #: When the namespace and the Service were last read (``time.monotonic``).
    checked: float = 0.0

    def find(
        self,
        job: Obj | None,
        pods: list[Obj],
        now: float,
        jobset: tuple[str, Obj | None] | None = None,
        *,
        job_made: bool = True,
    ) -> Disruption | None:
        """The run's object someone else deletes (:func:`.pod_state.deleted_under_run`), if any.

        ``job``, ``pods`` and ``jobset`` (its name and copy, None: gone; None where the run is a Job) are the
        wait's copies; ``now`` is ``time.monotonic()``. Until ``job_made`` (a JobSet's controller makes the
        Job) neither the Job nor the Service is missed.
        """
        gone = jobset is not None and (jobset[1] is None or View(jobset[1]).deleting)
        seen = gone or job is None or Job(job).deleting or any(Pod(p).deleting for p in pods)
        if not seen and now - self.checked < OWNED_CHECK_S:
            return None
        self.checked = now
        core, names = self.kube.core, self.names
        namespace = read_or_none(core.read_namespace, names.namespace)
        service = read_or_none(core.read_namespaced_service, names.service, names.namespace)
        if job is not None and any(Pod(p).deleting for p in pods) and not ended(job, self.slack_s):
            # The Job controller deletes its own pods once the Job has failed (deadline, pod failure policy)
            # and marks the Job first; the pods' watch can show that before the Jobs' watch does.
            job = read_or_none(self.kube.batch.read_namespaced_job, names.job, names.namespace)
        return deleted_under_run(
            namespace,
            job,
            service,
            pods,
            names=(names.namespace, names.job, names.service),
            job_ended=job is not None and ended(job, self.slack_s),
            jobset=jobset,
            job_made=job_made,
        )


def ended(job: Obj, slack_s: float = 0.0) -> bool:
    """The Job has ended, its controller has marked it failing, or its deadline has passed (less ``slack_s``).

    In each case the controller deletes the Job's own pods (clusters before 1.31 mark the Job afterwards).
    """
    if job_result(job) is not None or Job(job).holds("FailureTarget"):
        return True
    deadline, started = Job(job).active_deadline_s, Job(job).start_time
    if deadline is None or started is None:
        return False
    return (datetime.now(UTC) - started).total_seconds() >= deadline - slack_s


def read_or_none(fn: Callable[..., Any], *args: Any) -> Obj | None:
    """The object ``fn`` reads now, once, without retries (the wait reads it again soon); None when gone.

    A read that fails otherwise gives an object of just its name, so that a flaky read names nothing.
    """
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, CONNECT_TIMEOUT_S))
        body: Obj = json.loads(resp.data) if resp.data else {}
        return body
    except ApiException as exc:
        if exc.status == 404:
            return None
        log.debug("reading %s failed: %s", args[0], message_of(exc))
    except Exception as exc:  # a transport error: not evidence of a deletion
        log.debug("reading %s failed: %s", args[0], exc)
    return {"metadata": {"name": args[0]}}
