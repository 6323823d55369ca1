"""Whose each failure is: the cluster's, the platform's, rollcall's own, or undetermined. One table.

rollcall is a release gate: what it reports is taken as the cluster's fault unless it says otherwise. Each
problem of the verdict carries an :class:`Owner` and why:

- **the cluster's**: the hardware and what runs on the node for it (an ECC error or an Xid, a GPU lost, an
  out-of-memory on a GPU another process held before the run,
  driver errors, NCCL's and the network's errors, a node lost, a device unfit, a slow GPU or link, replicas
  or collectives computed wrong);
- **the platform's**: what brought the job to the node (the image, scheduling, capacity, the API, a node
  image that differs from its peers');
- **rollcall's own** (the workload's): an exception in the workload's own code that is no device or
  communication error, an out-of-memory from the batch it chose itself, a kernel of its own that does not
  hold on a GPU;
- **undetermined**: what the table cannot place (an illegal address, a compile failure inside torch, a hang
  or a signal with no cause of its own, a run interrupted from outside before its verdict).

A rank that left before ``complete`` without an error (any status, 0 included) is rollcall's own when it said
``exit`` itself: only code running in the rank takes that path (a ``return`` or ``sys.exit`` in the workload
or a library it called; an outside stop is a signal, which says no ``exit`` and is a termination); it is
undetermined when only the launcher recorded it (the process ended without running Python's exit path:
``os._exit`` in native code, or a workload that does not say ``exit``).

A problem of a kind that has one owner takes it from its kind (:attr:`~rollcall.verdict.Kind.owner`, which
the check that declares the kind gives it); an error (the root cause and each rank's own) is placed by what
it says, the first rule of :data:`~rollcall.checks.error_texts.ERROR_RULES` that matches its message: the
table of rules and of the real errors each places, in CUDA's, NCCL's, PyTorch's and the Neuron runtime's own
wording (generated into ``docs/blame.md``). A hardware event on the rank's GPU is told beside its error, and
makes it the cluster's, only within :data:`~rollcall.evidence.gpu_events.BESIDE_BEFORE_S` before the error
(:func:`~rollcall.evidence.gpu_events.beside_error`).
Only the cluster's problems may name a node unfit (the fitness rules are all the cluster's).
"""

from __future__ import annotations

import re

from rollcall.checks.error_texts import ERROR_RULES, Rule
from rollcall.checks.errors import DISRUPTION
from rollcall.checks.expectations import EXPECTATION, expectation_blame
from rollcall.checks.job_state import JOB
from rollcall.evidence.departures import Departure
from rollcall.evidence.endings import Termination
from rollcall.evidence.kernels import KernelFallback
from rollcall.evidence.rootcause import Analysis, Failure, Line
from rollcall.verdict import Blame, Owner, Problem

#: How the job ended (a ``job`` problem), by the backend's reason: what kept it from running is the
#: platform's, a node that went away the cluster's; a job that failed because a rank did is explained by
#: that rank's problem, named before it.
JOB_RULES: tuple[Rule, ...] = (
    Rule(r"ImagePull|ErrImage|InvalidImageName|Unschedulable|FailedScheduling|Insufficient|quota|capacity|"
         r"CreateContainer|forbidden|Unauthorized|PENDING|did not begin (its|their) task", Owner.PLATFORM,
         "the job could not be placed or started"),
    Rule(r"Evicted|NodeLost|not ready|node .*(lost|gone|deleted)|preempt|reclaim", Owner.CLUSTER,
         "a node went away under the job"),
    # a pod bound to its node past the creating bound: its storage or network plugin never made it ready
    Rule(r"still creating its containers", Owner.CLUSTER,
         "a node could not mount the pod's volumes or make its sandbox (its storage or network plugin)"),
    Rule(r"not on storage every node shares", Owner.PLATFORM,
         "the artifacts directory is not on storage every node of the job shares"),
)  # fmt: skip

_COMPILED = tuple((re.compile(r.pattern, re.IGNORECASE), r) for r in ERROR_RULES)
_JOB = tuple((re.compile(r.pattern, re.IGNORECASE), r) for r in JOB_RULES)


def _first_match(rules: tuple[tuple[re.Pattern[str], Rule], ...], text: str, otherwise: str) -> Blame:
    rule = next((r for pattern, r in rules if pattern.search(text)), None)
    return Blame(rule.owner, rule.why) if rule else Blame(Owner.UNDETERMINED, otherwise)


def error_blame(message: str) -> Blame:
    """Whose an error is, by its own words (:data:`.error_texts.ERROR_RULES`); undetermined if none does."""
    return _first_match(_COMPILED, message, "no rule places this error")


#: An error that echoes another rank's failure (:func:`rollcall.evidence.rootcause.is_echo`), alone: placed by
#: the failure it follows, which no rank reported.
ECHO = Blame(Owner.UNDETERMINED, "an echo of another rank's failure")
#: An out-of-memory on a GPU another process held before the run (:attr:`Failure.held`): not the batch's.
HELD_OOM = Blame(Owner.CLUSTER, "an out-of-memory on a GPU another process held before the run")


def failure_blame(failure: Failure) -> Blame:
    """Whose a rank's error is: the held memory it names, the hardware event beside it, else what it says.

    An out-of-memory on a GPU others held before the run is the cluster's; so is an error beside a hardware
    event on the rank's GPU (:attr:`Failure.gpu`: an Xid of the catalog's hardware class, a double-bit ECC
    error, the GPU lost); the rest is placed by its own words (:func:`error_blame`).
    """
    if failure.held is not None:
        return HELD_OOM
    if failure.gpu is not None and failure.gpu.klass == "hardware":
        return Blame(Owner.CLUSTER, f"the GPU failed beside the error: {failure.gpu.what}")
    return error_blame(failure.message)


def _termination_blame(t: Termination) -> Blame:
    if t.signal == "SIGKILL" or t.exit_code == 137:
        return Blame(
            Owner.UNDETERMINED, "killed (the node's out-of-memory killer, a memory limit, or a person)"
        )
    return Blame(Owner.UNDETERMINED, f"exited with code {t.exit_code}" if t.signal is None else f"{t.signal}")


def _departure_blame(d: Departure) -> Blame:
    if d.said:
        return Blame(
            Owner.WORKLOAD,
            "the rank's own code ended it before complete (a return or sys.exit), without an error",
        )
    return Blame(
        Owner.UNDETERMINED,
        f"ended before complete with status {d.exit_code}, without running its exit path or saying why",
    )


def blame(problem: Problem) -> Blame:
    """Whose ``problem`` is: its kind's owner, else placed by what it says or holds."""
    if problem.kind.owner is not None:
        return problem.kind.owner
    if problem.kind is EXPECTATION:
        return expectation_blame(problem.detail)
    if problem.kind is JOB:
        return _first_match(_JOB, problem.message, "the job failed: its cause is the problem named before it")
    detail = problem.detail
    if isinstance(detail, KernelFallback):
        return (
            Blame(Owner.WORKLOAD, "a kernel of the workload's own does not hold on this GPU")
            if detail.everywhere
            else Blame(Owner.CLUSTER, "a GPU computed the workload's kernel wrong")
        )
    if isinstance(detail, Analysis):  # the root cause
        if detail.disruption is not None and DISRUPTION.owner is not None:
            return DISRUPTION.owner
        if detail.departure is not None:
            return _departure_blame(detail.departure)
        if detail.first is not None and not detail.first.echo:
            return failure_blame(detail.first)
        if detail.termination is not None:
            return _termination_blame(detail.termination)
        if detail.first is not None:
            return ECHO
    if isinstance(detail, Line) and detail.departure is not None and not detail.failures:
        return _departure_blame(detail.departure)
    if isinstance(detail, Line) and detail.failures:
        if all(f.echo for f in detail.failures):
            return ECHO
        return failure_blame(next(f for f in detail.failures if not f.echo))
    if isinstance(detail, Termination):
        return _termination_blame(detail)
    return Blame(Owner.UNDETERMINED, "no rule places this problem")
