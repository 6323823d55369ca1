"""A run's JobSet (``--job-kind jobset``): created after a dry run, watched, and read until its Job is made.

The JobSet controller (sigs.k8s.io/jobset) makes the run's Job (``<jobset>-node-0``) and its headless Service
from the JobSet; from then on the wait reads the Job as it reads an Indexed Job of its own
(:mod:`.job`). Before then, the JobSet is what there is to read: a JobSet deleted is a disruption (the wait's
:class:`~.deletion.UnderRun`), a Failed one fails the run with its condition's message, and no Job within
:data:`JOB_MADE_S` of its creation names the JobSet controller, with the JobSet's warning events.
"""

from __future__ import annotations

from datetime import datetime

from rollcall.backends import JobState, JobStatus
from rollcall.backends.kubernetes.kube import Kube, create
from rollcall.backends.kubernetes.manifests import JOB_LABEL, Names
from rollcall.backends.kubernetes.scheduling import warning_events
from rollcall.backends.kubernetes.views import Obj, View
from rollcall.backends.kubernetes.watch import Informer

#: How long a JobSet's controller may take to make its Job (it takes well under a second) before the run
#: fails naming the controller: a bound of the platform's, not of the nodes' or the run's.
JOB_MADE_S = 120.0


def start(kube: Kube, names: Names, body: Obj) -> tuple[Informer, datetime | None]:
    """Create the JobSet ``body`` (after a dry run); its started watch and its creation time."""
    ns = names.namespace
    create(kube.jobset.create_namespaced_job_set, ns, body=body, dry_run="All")
    made = create(kube.jobset.create_namespaced_job_set, ns, body=body)
    watch = Informer(
        kube.jobset.list_namespaced_job_set,
        f"jobset {ns}/{names.jobset}",
        namespace=ns,
        field_selector=f"metadata.name={names.jobset}",
    ).start()
    return watch, View(made).created


def pod_selector(names: Names) -> str:
    """The label selector of a JobSet's pods: the run's labels, which its template gives them."""
    return f"{names.selector},{JOB_LABEL}={names.job}"


def copy_of(watch: Informer, names: Names) -> tuple[str, Obj | None]:
    """The JobSet's name and its newest copy (None: gone); before the watch has listed, not gone."""
    assert names.jobset is not None
    if not watch.synced.is_set():
        return names.jobset, {"metadata": {"name": names.jobset}}
    return names.jobset, watch.get(names.jobset)


def before_the_job(kube: Kube, names: Names, jobset: Obj | None, elapsed_s: float) -> JobStatus | None:
    """What the JobSet says ``elapsed_s`` after its creation, while it has made no Job; None while it may."""
    failed = View(jobset).condition("Failed") if jobset is not None else None
    if failed is not None and failed.true:
        return JobStatus(
            JobState.FAILED,
            f"{names.workload} failed before making its Job: {failed.reason}: {failed.message}",
        )
    if elapsed_s < JOB_MADE_S:
        return None
    events = warning_events(kube, names.namespace, "JobSet", names.run)
    said = f"; its events: {'; '.join(events)}" if events else "; it has no warning event"
    return JobStatus(
        JobState.FAILED,
        f"{names.workload} made no Job within {JOB_MADE_S:g}s of its creation: the JobSet controller "
        f"(sigs.k8s.io/jobset) is not running or cannot create Jobs here{said}",
    )
