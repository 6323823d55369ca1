"""What must hold before it counts on a cluster: a node's ``Ready`` other than True, a pod stuck creating.

Slow is not broken (:mod:`rollcall.backends.held`): each state below is timed by the run's own looks at it
(every change of its pods, and every second) and counts only once it has held, without a break, for its bound.

A node's ``Ready`` not True
    ``False`` (the kubelet says its runtime or network is not ready: often for seconds, a runtime restart),
    ``Unknown`` (the node lifecycle controller's word once the kubelet has not renewed its lease for the
    node-monitor grace period G: 50 s by default since Kubernetes 1.32, 40 s before) or no ``Ready`` at all.
    It ends the run as disrupted (``NodeLost``) once held for R = :data:`READY_HOLD_S` (60 s) while no byte of
    the node's pods' logs arrived: a node whose ranks are still heard is not lost, and hearing them starts the
    count again. A lost kubelet is so counted at G + R (100 to 110 s) after its last word, well inside the
    300 s of ``not-ready``/``unreachable`` tolerations after which Kubernetes itself evicts the pods
    (:data:`NOT_READY_TOLERATION_S`); a kubelet restart or a runtime hiccup shorter than R passes. A node
    deleted counts at once (:func:`.pod_state.node_lost`).
A pod stuck creating
    Scheduled, no container started and its sandbox not ready (``PodReadyToStartContainers`` not True): its
    volumes are not attached and mounted, or its sandbox (the network plugin) is not made; the kubelet makes
    the sandbox only after every volume is mounted, and pulls images only after the sandbox, so an image
    pull is never this (it keeps its own handling: shown late, not hung, up to the job timeout). It fails the
    run once held for C = :data:`CREATING_S`: the attach/detach controller's 6 min before it force-detaches a
    volume still attached to a lost node (a ``Multi-Attach`` error clears then), plus one more of the
    kubelet's 2 min 3 s waits for a pod's volumes. At C the pod's events are read once: those saying its
    image is pulling or its containers were made (an older cluster without the condition) leave it to the
    pull's handling; else the run fails naming the pod, its node and what it waits for (the volumes its
    ``FailedMount``/``FailedAttachVolume`` events name, or its sandbox).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rollcall.backends.held import Held, Holding
from rollcall.backends.kubernetes.kube import Kube, call, message_of
from rollcall.backends.kubernetes.pod_state import not_ready, where
from rollcall.backends.kubernetes.views import Event, Obj, Pod, items

log = logging.getLogger(__name__)

#: kube-controller-manager's ``--node-monitor-grace-period`` by default (40 s before Kubernetes 1.32): how
#: long a kubelet may be silent before its node's ``Ready`` turns ``Unknown``.
NODE_MONITOR_GRACE_S = 50.0
#: The ``not-ready`` and ``unreachable`` tolerations every pod gets by default (DefaultTolerationSeconds):
#: Kubernetes evicts a lost node's pods this long after its ``Ready`` turned.
NOT_READY_TOLERATION_S = 300.0
#: How long a node's ``Ready`` must be other than True, its pods unheard, before the run counts it lost.
READY_HOLD_S = 60.0
#: The kubelet's wait for a pod's volumes to attach and mount, before it reports ``FailedMount`` and retries.
ATTACH_AND_MOUNT_S = 123.0
#: The attach/detach controller's wait before it force-detaches a volume from a node that went away.
FORCE_DETACH_S = 360.0
#: How long a pod may stay creating (volumes, sandbox) before the run fails naming what it waits for.
CREATING_S = FORCE_DETACH_S + ATTACH_AND_MOUNT_S
#: The pod's sandbox is made and its network set: its volumes are mounted; image pulls come after.
SANDBOX_READY = "PodReadyToStartContainers"
#: Events of a pod past its volumes and sandbox: an image pulling, containers made.
PAST_CREATING = frozenset({"Pulling", "Pulled", "Created", "Started", "BackOff", "Failed"})
#: Events that say a pod's volumes do not attach or mount, and its sandbox is not made.
VOLUME_EVENTS = ("FailedMount", "FailedAttachVolume", "FailedMapVolume")
SANDBOX_EVENTS = ("FailedCreatePodSandBox",)
_UNMOUNTED = re.compile(r"unmounted volumes=\[([^\]]*)\]")
_VOLUME = re.compile(r'volume "([^"]+)"')


@dataclass(frozen=True)
class Bounds:
    """How long each state must hold before it counts (see the module docstring).

    Attributes:
        ready_s: a node's ``Ready`` other than True, its pods unheard (R).
        creating_s: a pod creating: its volumes, its sandbox (C).
    """

    ready_s: float = READY_HOLD_S
    creating_s: float = CREATING_S


def creating(pod: Obj) -> bool:
    """Whether the pod is bound to a node and waits for its volumes or sandbox (no container started)."""
    p = Pod(pod)
    if not p.node_name or p.phase != "Pending" or p.deleting:
        return False
    return not p.holds(SANDBOX_READY) and not any(c.started for c in p.all_containers)


def waits_for(events: Iterable[Obj]) -> tuple[bool, str]:
    """From a pod's events: whether it is past creating (an image pulling), and what it waits for else.

    What it waits for: the volumes its newest ``FailedMount``/``FailedAttachVolume``/``FailedMapVolume`` event
    names (``volume data to attach and mount (FailedMount: ...)``), else its sandbox
    (``FailedCreatePodSandBox``), else that no event says.
    """
    newest: dict[str, tuple[str, str]] = {}
    for event in map(Event, events):
        when = event.last_seen
        if event.reason not in newest or when >= newest[event.reason][0]:
            newest[event.reason] = (when, event.message)
    if PAST_CREATING & newest.keys():
        return True, ""
    volume = [(when, reason, text) for reason, (when, text) in newest.items() if reason in VOLUME_EVENTS]
    if volume:
        _, reason, text = max(volume)
        unmounted = _UNMOUNTED.search(text)
        names = sorted(set(unmounted.group(1).split() if unmounted else _VOLUME.findall(text)))
        which = f"volume{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "its volumes"
        return False, f"{which} to attach and mount ({reason}: {text})"
    sandbox = [(when, reason, text) for reason, (when, text) in newest.items() if reason in SANDBOX_EVENTS]
    if sandbox:
        _, reason, text = max(sandbox)
        return False, f"its sandbox: the network plugin ({reason}: {text})"
    return False, "its volumes or its sandbox: no event of the pod says which"


def stuck_creating(pod: Obj, holding: Holding, events: Iterable[Obj]) -> str | None:
    """Why the pod, creating past its bound, fails the run; None when its events show an image pulling."""
    past, waiting = waits_for(events)
    if past:
        return None
    p = Pod(pod)
    said = f"; the pod says: {p.message}" if p.message else ""
    return (
        f"{where(pod)} was still creating its containers after {holding.held_s:.0f}s (bound "
        f"{holding.bound_s:.0f}s: volumes that never attach or mount), waiting for {waiting}{said}"
    )


@dataclass
class Holds:
    """One run's holdings: each node's ``Ready``, each pod creating (see the module docstring)."""

    kube: Kube
    namespace: str
    bounds: Bounds = field(default_factory=Bounds)
    ready: Held[str] = field(init=False)
    creating: Held[str] = field(init=False)
    #: Pods whose events showed them past creating (an image pulling): the pull's own handling holds them.
    past: set[str] = field(default_factory=set)
    #: Each node's ``Ready`` as progress last said it (None: True).
    shown: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.ready = Held(self.bounds.ready_s)
        self.creating = Held(self.bounds.creating_s)

    def look(
        self,
        pods: list[Obj],
        node_of: Callable[[str], Obj | None],
        heard: Callable[[str], float | None],
        now: float,
    ) -> list[str]:
        """One look at the pods and their nodes (``node_of``: None for a node gone or not listed yet).

        ``heard(pod)``: when bytes of the pod's logs last arrived (the same clock as ``now``), None before.
        What changed, for progress: a node's ``Ready`` turned, or True again.
        """
        said = []
        on: dict[str, list[str]] = {}
        for p in map(Pod, pods):
            if p.node_name and not p.finished and not p.deleting:
                on.setdefault(p.node_name, []).append(p.name)
            self.creating.see(p.name, "creating" if creating(p.obj) else None, now)
        for name, names in on.items():
            node = node_of(name)
            state = not_ready(node) if node is not None else None
            last = max((t for t in map(heard, names) if t is not None), default=None)
            held = self.ready.get(name)
            if held is not None and last is not None and last >= held.since:  # its ranks still speak
                self.ready.see(name, None, now)
            self.ready.see(name, state, now)
            shown = self.shown.get(name)
            if state is not None and state != shown:
                bound = f"{self.ready.bound_of(state):g}s"
                said.append(
                    f"node {name} Ready={state}: lost only if that holds {bound} with its pods unheard"
                )
            elif state is None and shown is not None:
                said.append(f"node {name} Ready again: not lost")
            self.shown[name] = state
        self.ready.keep(on)
        self.creating.keep(Pod(p).name for p in pods)
        return said

    def node(self, name: str) -> Holding | None:
        """The node's ``Ready`` other than True, as held so far; None while True (or not looked at)."""
        return self.ready.get(name)

    def stuck(self, pods: list[Obj]) -> str | None:
        """The first pod creating past its bound whose events do not show it pulling: why the run fails."""
        for pod in pods:
            name = Pod(pod).name
            holding = self.creating.get(name)
            if holding is None or not holding.counts or name in self.past:
                continue
            events = self.events_of(name)
            if events is None:  # read again at the next look: no verdict without them
                continue
            why = stuck_creating(pod, holding, events)
            if why is not None:
                return why
            self.past.add(name)
        return None

    def events_of(self, pod: str) -> list[Obj] | None:
        """The pod's events; None when they cannot be read."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        try:
            return items(call(self.kube.core.list_namespaced_event, self.namespace, field_selector=selector))
        except Exception as exc:
            log.warning("could not read the events of pod %s: %s", pod, message_of(exc))
            return None
