"""Where the GPUs' events during the run are judged: a GPU lost or failing in hardware is unfit, named first.

The nodes' monitors listen to NVML's events of every GPU (:mod:`rollcall_workload.node.gpu_listener`);
:mod:`rollcall.evidence.gpu_events` ties each to its rank and classifies it. This check runs before the
ranks' errors, so a GPU that fell off the bus stands first in the verdict, ahead of the errors it caused:

- a GPU lost (``gpu_lost``), or an Xid of the catalog's hardware class or a double-bit ECC error
  (``hardware_event``): one ``unfit_device`` problem per GPU, the fitness options deciding whether it
  fails, warns or is off; a GPU no rank used names no rank;
- an Xid of the program's own class on the GPU of a rank that reported an error is evidence beside that
  error (the ``errors`` check names it in the rank's note); elsewhere, and an Xid of the system class or
  not in the catalog, it is a ``gpu_event`` warning, never unfit;
- single-bit ECC errors and clock changes are shown in every report, not judged here (the fitness rules
  judge the counters and the throttle reasons the ranks read).

Whose GPU it is decides whether it fails this run. An event on a GPU no rank of the run named as its own, on
a node the run shares (the backend says it did not own its nodes: ``JobStatus.owns_nodes`` False), is
another tenant's (:attr:`~rollcall.evidence.gpu_events.GpuEventSeen.run_gpu` False): it warns, naming the
GPU, its node and that it is not this run's GPU, and the GPU stays unfit in the verdict's record of its node
(a warning's :class:`~rollcall.evidence.fitness.Unfit`). Where the run owns its nodes, or the backend does
not say, or the ranks did not name their GPUs, every GPU of the run's nodes is judged as the run's.

Each finding says what NVIDIA recommends for the event (``: reboot the node (NVIDIA: RESTART_BM)``,
:attr:`~rollcall.evidence.gpu_events.GpuEventSeen.advice`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import Unfit
from rollcall.evidence.gpu_events import GpuEventSeen
from rollcall.evidence.nodefacts import Device
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A GPU said something during the run that makes it no unfit device: an Xid of the catalog's system class,
#: one not in the catalog, or a program's own Xid no rank's error carries (a warning).
GPU_EVENT = Kind(
    "gpu_event",
    RankState.SLOW,
    Blame(Owner.UNDETERMINED, "a GPU event that makes no GPU unfit (an Xid of no hardware class)"),
)


def gpu_events(run: RunView) -> Iterable[Problem]:
    """A GPU lost or failing in hardware is unfit; the other Xids warn unless a rank's error carries them."""
    policy = run.criteria.fitness
    unfit: dict[tuple[int | None, str, int], list[tuple[GpuEventSeen, Unfit]]] = defaultdict(list)
    warnings: list[GpuEventSeen] = []
    for seen in run.gpu_events:
        rule = seen.rule
        if rule is not None:
            severity = policy.severity(rule)
            if severity == "fail" and not seen.run_gpu:
                severity = "warn"  # another tenant's GPU: unfit, not this run's failure
            if severity != "off":
                key = (seen.node, seen.node_name, seen.heard.gpu)
                unfit[key].append(
                    (seen, Unfit(_device(run, seen), rule, "gpu_event", seen.what, _when(seen), severity))
                )
        elif seen.klass == "program" and seen.rank is not None and run.reports[seen.rank].errors:
            continue  # beside the rank's error
        elif seen.klass in ("program", "system", "unknown"):
            warnings.append(seen)
    for found in unfit.values():
        first = found[0][0]
        warn = all(u.severity == "warn" for _, u in found)
        what = "; ".join(f"{s.what} {_when(s)} (rule {u.rule}){_advice(s)}" for s, u in found)
        yield Problem(
            UNFIT_DEVICE,
            f"unfit device{' (warning)' if warn else ''}: {found[0][1].device.label}: {what}",
            {first.rank: f"unfit device: {first.what}"} if first.rank is not None else {},
            detail=tuple(u for _, u in found),
            warning=warn,
        )
    for seen in warnings:
        yield Problem(
            GPU_EVENT,
            f"GPU event: {seen.what} on {seen.gpu_label} {_when(seen)}{_advice(seen)}",
            {seen.rank: f"GPU event: {seen.what}"} if seen.rank is not None else {},
            detail=seen,
            warning=True,
        )


def _when(seen: GpuEventSeen) -> str:
    """``on rank 1, after epoch 1``, ``(no rank on that GPU)``, or that the GPU is not this run's."""
    if not seen.run_gpu:
        return "(not this run's GPU: no rank of this run named it, on a node the run shares)"
    if seen.rank is None:
        return "(no rank on that GPU)"
    return f"on rank {seen.rank}, {seen.phase}"


def _advice(seen: GpuEventSeen) -> str:
    """``: reboot the node (NVIDIA: RESTART_BM)``: what NVIDIA recommends for it, or ''."""
    return f": {seen.advice}" if seen.advice else ""


def _device(run: RunView, seen: GpuEventSeen) -> Device:
    """The device the event names: the rank's as its facts read it, else the GPU as the event names it."""
    for node in run.nodes_detail:
        for device in node.devices:
            if seen.rank is not None and device.rank == seen.rank:
                return device
    h = seen.heard
    known = {"device_index": h.gpu, "gpu_uuid": h.uuid, "gpu_serial": h.serial}
    gpu = {k: v for k, v in known.items() if v is not None}
    where = seen.node if seen.node is not None else -1
    if seen.rank is not None:
        return Device(where, seen.rank, seen.node_name, gpu)
    return Device(where, -1, seen.node_name, gpu, on_rank=False)


CHECK = Check(
    gpu_events,
    detects=(
        "a GPU lost or failing in hardware during the run (an Xid of the catalog's hardware class, a "
        "double-bit ECC error), named first, as an `unfit_device`; the other Xids warn, or stand beside the "
        "error of the rank on that GPU; on a GPU no rank of the run named, on a node the run shares, a "
        "warning"
    ),
    reads=(
        "`evidence/gpu_events.py` (the nodes' monitors' `gpu_event` events), `evidence/gpu_owners.py` (the "
        "GPUs the ranks named), `evidence/xids.py`, the backend's `JobStatus.owns_nodes`"
    ),
    kinds=(GPU_EVENT,),
)


__all__ = ["CHECK", "GPU_EVENT", "gpu_events"]
