"""Where the GPUs' events during the run are judged: a GPU lost or failing in hardware is unfit, named first.

The nodes' monitors listen to NVML's events of every GPU (:mod:`rollcall_workload.node.gpu_listener`);
:mod:`rollcall.evidence.gpu_events` ties each to its rank and classifies it. This check runs before the
ranks' errors, so a GPU that fell off the bus stands first in the verdict, ahead of the errors it caused:

- an event that takes its GPU or its node out of service by NVIDIA's word
  (:attr:`~rollcall.evidence.gpu_events.GpuEventSeen.takes_out`: a GPU lost, ``gpu_lost``; a double-bit ECC
  error, an Xid of the hardware class whose immediate action resets the GPU or reboots the node, a recovery
  action NVML reported, ``hardware_event``): one ``unfit_device`` problem per GPU, the fitness options
  deciding whether it fails, warns or is off, here and in every mark alike;
- an Xid of the hardware class that NVIDIA ignores or answers by restarting the application (92, 94), one of
  the program's own class, one of the system class or not in the catalog: on the GPU of a rank that reported
  an error (the hardware's and the program's), evidence beside that error (the ``errors`` check names it in
  the rank's note); elsewhere a ``gpu_event`` warning, never unfit;
- single-bit ECC errors and clock changes are shown in every report, not judged here (the fitness rules
  judge the counters and the throttle reasons the ranks read).

Whose GPU it is decides whether it fails this run: only an event on a GPU a rank of the run used or may
have used does (:attr:`~rollcall.evidence.gpu_events.GpuEventSeen.used`: tied to a rank, named by one as its
UUID, ``all`` or a MIG instance, or where nothing can tell). On a GPU no rank used (another tenant's, or one
the run left idle on a node it owns), it warns, naming the GPU and its node, and the
finding still takes out what it takes out (:func:`~rollcall.evidence.fitness.takes_out`): a node-wide action
(a GPU lost, a node reboot) its node, whoever used the GPU; a GPU-scoped one that GPU alone, on its line of
``nodes.json``, the node not marked.

Each finding says what NVIDIA recommends for the event (``: reboot the node (NVIDIA: RESTART_BM)``,
:attr:`~rollcall.evidence.gpu_events.GpuEventSeen.advice`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rollcall.checks.runview import Check, RunView
from rollcall.checks.unfit_device import UNFIT_DEVICE
from rollcall.evidence.fitness import Unfit, takes_out
from rollcall.evidence.gpu_events import GpuEventSeen
from rollcall.evidence.nodefacts import Device
from rollcall.evidence.xids import Scope
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

#: A GPU said something during the run that takes it out of nothing: an Xid NVIDIA ignores or answers by
#: restarting the application, of the catalog's system class, one not in the catalog, or a program's own Xid
#: no rank's error carries (a warning).
GPU_EVENT = Kind(
    "gpu_event",
    RankState.SLOW,
    Blame(Owner.UNDETERMINED, "a GPU event that takes no GPU out (no reset or reboot NVIDIA asks for)"),
)


def gpu_events(run: RunView) -> Iterable[Problem]:
    """A GPU lost or failing in hardware is unfit; the other Xids warn unless a rank's error carries them."""
    policy = run.criteria.fitness
    unfit: dict[tuple[int | None, str, int], list[tuple[GpuEventSeen, Unfit]]] = defaultdict(list)
    warnings: list[GpuEventSeen] = []
    for seen in run.gpu_events:
        rule, scope = seen.rule, seen.takes_out
        if rule is not None and scope is not None:
            chosen = policy.severity(rule)
            # a GPU no rank of the run used fails no run: its event warns, and takes out what it takes out
            severity = "warn" if chosen == "fail" and not seen.used else chosen
            if severity != "off":
                key = (seen.node, seen.node_name, seen.heard.gpu)
                out = takes_out(chosen, scope, used=seen.rank is not None)  # marks: only what is known
                finding = Unfit(_device(run, seen), rule, "gpu_event", seen.what, _when(seen), severity, out)
                unfit[key].append((seen, finding))
        elif seen.klass in ("program", "hardware") and _erred(run, seen.rank):
            continue  # beside the rank's error
        elif seen.klass in ("program", "system", "unknown", "hardware"):
            warnings.append(seen)
    for found in unfit.values():
        first = found[0][0]
        warn = all(u.severity == "warn" for _, u in found)
        what = "; ".join(f"{s.what} {_when(s)} (rule {u.rule}){_advice(s)}" for s, u in found)
        out = _out(u.out for _, u in found)
        whose = {"node": "; takes its node out of service", "gpu": "; takes this GPU out of service"}
        yield Problem(
            UNFIT_DEVICE,
            f"unfit device{' (warning)' if warn else ''}: {found[0][1].device.label}: {what}"
            f"{whose[out] if warn and out else ''}",
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


def _erred(run: RunView, rank: int | None) -> bool:
    """The rank (of the event's GPU) reported an error: the event stands beside it."""
    return rank is not None and bool(run.reports[rank].errors)


def _out(outs: Iterable[Scope | None]) -> Scope | None:
    """The most that any of ``outs`` takes out of service: the node, else the GPU, else nothing."""
    found = set(outs)
    return "node" if "node" in found else ("gpu" if "gpu" in found else None)


def _when(seen: GpuEventSeen) -> str:
    """``on rank 1, after epoch 1``, ``(no rank on that GPU)``, or that the GPU is not this run's."""
    if not seen.run_gpu:
        return "(not this run's GPU: no rank of this run named it, on a node the run shares)"
    if not seen.used:
        return "(a GPU of the run's node no rank of it used)"
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
        "double-bit ECC error) whose NVIDIA action takes the GPU or node out, named first, as an "
        "`unfit_device`; the other Xids warn, or stand beside the error of the rank on that GPU; on a GPU no "
        "rank of the run used, a warning that still takes out what it takes out"
    ),
    reads=(
        "`evidence/gpu_events.py` (the nodes' monitors' `gpu_event` events), `evidence/gpu_owners.py` (the "
        "GPUs the ranks named), `evidence/xids.py`, the backend's `JobStatus.owns_nodes`"
    ),
    kinds=(GPU_EVENT,),
)


__all__ = ["CHECK", "GPU_EVENT", "gpu_events"]
