"""``--drain-unfit`` on Slurm: drain each unfit node with the reason, resume each fit one rollcall drained.

The rules of :func:`mark_nodes`, node by node (each read by ``scontrol -o show node`` just before its update):

- **Rollcall's own drains.** A node rollcall drains carries a reason starting with :data:`PREFIX`
  (``rollcall: pcie_width 8 of 16 ...``); rollcall resumes only a node whose drain reason is its own.
- **Someone else's hold is left as it is** (:func:`held_by`), whatever the verdict, and named in
  :attr:`Drained.left`: a node drained by someone else (a :data:`DRAIN_WORDS` state word with a reason not
  starting with :data:`PREFIX`), down (:data:`DOWN_WORDS`: ``DOWN``, ``FAIL``, ``FAILING``), waiting for a
  reboot an administrator asked for (:data:`REBOOT_WORDS`), or in a maintenance reservation other than the
  run's own ``--slurm-reservation`` (:data:`MAINT_WORDS`: an active reservation with ``Flags=MAINT`` holds
  it, ``State=IDLE+MAINTENANCE+RESERVED``).
  ``RESERVED`` alone (an ordinary reservation, e.g. the run's own) holds nothing: its nodes are drained when
  unfit, like any other. ``NOT_RESPONDING``, ``COMPLETING``, ``POWERED_DOWN`` and the like are Slurm's own
  passing states, not a hold.
- **Unfit**: a node held by no one is drained with the verdict's reason (:func:`reason_of`); one rollcall
  drained already keeps its first reason and is named in :attr:`Drained.already` (not drained twice).
- **Fit**: a node rollcall drained is resumed only when the check covered every GPU of it
  (:attr:`NodeMark.whole <rollcall.backends.NodeMark.whole>`) and nothing else holds it; a fit verdict of
  part of it keeps the drain (:attr:`Drained.kept`: ``not re-checked whole``).
- **Undetermined and unchecked** nodes are neither read nor changed.
- **One node's failure is that node's**: a Slurm command refused for one node (its :class:`SlurmError`) is
  named in :attr:`Drained.failed`, and every other node is still marked; :func:`mark_nodes` never raises for
  one node.

The race: Slurm has no conditional update (no "drain only if not drained"), so another administrator may
drain, down or resume a node between rollcall's read and its ``scontrol update``; that update then replaces
their reason (or resumes their drain). The window is kept as small as the API allows: each node is read
immediately before its own update (not every node first), with no other command in between.

A re-check of drained nodes runs in a maintenance reservation that holds them (``--slurm-reservation``):
:func:`resume_for_recheck` resumes the reservation's nodes that rollcall drained before the job is submitted
(the reservation keeps other jobs off them), and the verdict drains again those still unfit (the run's own
reservation is no one else's hold). Draining and resuming need Slurm's operator rights
(:func:`missing_rights`): root, the ``SlurmUser``, or ``AdminLevel`` Operator or Administrator in the
accounting database.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollcall.backends import Marking, NodeMark
from rollcall.backends.marks import NodeMarks

log = logging.getLogger(__name__)

#: Runs one Slurm command: its stdout, or a SlurmError (the backend's :class:`~.backend.SlurmCommands`).
Runner = Callable[[Sequence[str], float], str]
#: How every drain reason of rollcall's starts.
PREFIX = "rollcall:"
#: Slurm keeps a reason of this many characters at most (longer ones are cut here, not refused there).
REASON_CHARS = 200
#: How long a node resumed for a re-check may take to answer slurmctld's ping.
ANSWER_S = 60.0
#: State words of a drained or draining node (``scontrol`` says ``DRAIN``; ``sinfo`` drained, draining).
DRAIN_WORDS = frozenset({"DRAIN", "DRAINED", "DRAINING"})
#: State words of a node down or failing (``scontrol update State=DOWN`` or ``State=FAIL``; Slurm's own DOWN).
DOWN_WORDS = frozenset({"DOWN", "FAIL", "FAILING"})
#: State words of a node in an active reservation with ``Flags=MAINT`` (Slurm 22.05 says ``MAINTENANCE``).
MAINT_WORDS = frozenset({"MAINT", "MAINTENANCE"})
#: State words of a node waiting for the reboot an administrator asked for (``scontrol reboot``).
REBOOT_WORDS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})
_STATE = re.compile(r"\bState=(\S+)")
_NAME = re.compile(r"^NodeName=(\S+)")
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$")
_SLURM_USER = re.compile(r"^SlurmUser\s*=\s*([^(\s]+)", re.M)


@dataclass(frozen=True)
class NodeState:
    """A Slurm node's state words (``IDLE+DRAIN``) and its reason, as ``scontrol -o show node`` says them."""

    state: str
    reason: str

    @property
    def words(self) -> frozenset[str]:
        """The state's words: ``IDLE+MAINTENANCE+RESERVED`` is IDLE, MAINTENANCE and RESERVED."""
        return frozenset(w for w in self.state.upper().split("+") if w)

    @property
    def drained(self) -> bool:
        """Drained or draining, by anyone."""
        return bool(self.words & DRAIN_WORDS)

    @property
    def drained_by_rollcall(self) -> bool:
        """Drained (or draining), with a reason of rollcall's."""
        return self.drained and self.reason.startswith(PREFIX)


def held_by(state: NodeState, ours: Collection[str] = (), name: str = "") -> str | None:
    """Why someone else holds the node, for rollcall to leave it (:attr:`Drained.left`); None if no one does.

    ``ours`` are the nodes of the run's own reservations (``--slurm-reservation``): their ``MAINT`` is no one
    else's. A drain of rollcall's own (a :data:`PREFIX` reason) is no one else's either.
    """
    words, reason = state.words, state.reason or "no reason given"
    if words & DOWN_WORDS:
        return f"down ({state.state}): {reason}"
    if state.drained and not state.reason.startswith(PREFIX):
        return f"drained by someone else: {reason}"
    if words & REBOOT_WORDS:
        return f"waiting for a reboot an administrator asked for ({state.state})"
    if words & MAINT_WORDS and name not in ours:
        return "in a maintenance reservation"
    return None


def node_state(run: Runner, name: str) -> NodeState:
    """What Slurm says of node ``name`` now."""
    line = run(["scontrol", "-o", "show", "node", name], 30)
    state, reason = _STATE.search(line), _REASON.search(line)
    return NodeState(state.group(1) if state else "", reason.group(1) if reason else "")


def reservation_nodes(run: Runner, reservation: str) -> list[str]:
    """The nodes of ``reservation``, by name (none when it holds none)."""
    said = run(["scontrol", "-o", "show", "reservation", reservation], 30)
    found = re.search(r"\bNodes=(\S+)", said)
    if found is None or found.group(1) in ("", "(null)"):
        return []
    return run(["scontrol", "show", "hostnames", found.group(1)], 30).split()


def reason_of(mark: NodeMark) -> str:
    """The drain reason of an unfit node: ``rollcall: <why>``, on one line, cut to :data:`REASON_CHARS`."""
    why = " ".join((mark.reason or "unfit").split())
    return f"{PREFIX} {why}"[:REASON_CHARS]


@dataclass(frozen=True)
class Drained:
    """What ``--drain-unfit`` did after one verdict (``results.json``'s ``node_marks``).

    Attributes:
        drained: the unfit nodes drained now; already: the unfit ones rollcall had drained already (their
            first reason kept); resumed: the nodes rollcall had drained, found fit on every GPU, resumed.
        kept: the nodes rollcall drained that stay drained although found fit, with why
            (``not re-checked whole``).
        left: each node someone else holds (drained, down, rebooting, in a maintenance reservation), left
            as it is, with their state and reason (:func:`held_by`).
        failed: each node a Slurm command failed for, with what it said; every other node was marked.
    """

    drained: tuple[str, ...] = ()
    resumed: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    already: tuple[str, ...] = ()
    kept: dict[str, str] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """``drained unfit node(s) rc1; resumed node(s) rc2 that rollcall drained, found fit; ...``."""
        parts = []
        if self.drained:
            parts.append(f"drained unfit node(s) {', '.join(self.drained)}")
        if self.already:
            parts.append(f"unfit node(s) {', '.join(self.already)} already drained by rollcall")
        if self.resumed:
            parts.append(f"resumed node(s) {', '.join(self.resumed)} that rollcall drained, found fit")
        parts += [f"kept node {name} drained by rollcall: {why}" for name, why in self.kept.items()]
        parts += [f"left node {name} as it is, {why}" for name, why in self.left.items()]
        parts += [f"could not mark node {name}: {why}" for name, why in self.failed.items()]
        return "; ".join(parts) or "no node to drain or resume"

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        return {
            "line": self.line(),
            "drained": list(self.drained),
            "already": list(self.already),
            "resumed": list(self.resumed),
            "kept": dict(self.kept),
            "left": dict(self.left),
            "failed": dict(self.failed),
        }


def mark_nodes(
    run: Runner,
    marks: Iterable[NodeMark],
    how: Marking,
    error: type[Exception],
    reservations: Sequence[str] = (),
) -> Drained:
    """Drain each unfit node of ``marks``, resume each fit one rollcall drained: the module's rules.

    ``reservations`` are the run's own (``--slurm-reservation``): a maintenance hold of theirs is no one
    else's. Each node is read just before its update; a command that fails (``error``) is that node's alone.
    """
    if not how.drain:
        return Drained()
    ours: set[str] = set()
    for reservation in reservations:
        try:
            ours.update(reservation_nodes(run, reservation))
        except error as exc:  # gone: its nodes' MAINT reads as someone else's (they are left)
            log.warning("slurm: could not read reservation %s: %s", reservation, exc)
    drained: list[str] = []
    already: list[str] = []
    resumed: list[str] = []
    kept: dict[str, str] = {}
    left: dict[str, str] = {}
    failed: dict[str, str] = {}
    for mark in {m.name: m for m in marks}.values():
        if mark.verdict not in ("unfit", "fit"):
            continue
        try:
            state = node_state(run, mark.name)
            holder = held_by(state, ours, mark.name)
            if mark.verdict == "unfit":
                if state.drained_by_rollcall:
                    already.append(mark.name)
                elif holder is not None:
                    left[mark.name] = holder
                else:
                    drain = ["scontrol", "update", f"NodeName={mark.name}", "State=DRAIN"]
                    run([*drain, f"Reason={reason_of(mark)}"], 30)
                    drained.append(mark.name)
            elif holder is not None:
                left[mark.name] = holder
            elif state.drained_by_rollcall and not mark.whole:
                kept[mark.name] = "not re-checked whole"
            elif state.drained_by_rollcall:
                run(["scontrol", "update", f"NodeName={mark.name}", "State=RESUME"], 30)
                resumed.append(mark.name)
        except error as exc:
            failed[mark.name] = str(exc)
    return Drained(tuple(drained), tuple(resumed), failed, tuple(already), kept, left)


def current_drains(run: Runner) -> list[NodeMarks]:
    """Every node drained with a reason of rollcall's (``rollcall nodes``), by name."""
    found = []
    for line in run(["scontrol", "-o", "show", "node"], 30).splitlines():
        name, state, reason = _NAME.search(line), _STATE.search(line), _REASON.search(line)
        said = NodeState(state.group(1) if state else "", reason.group(1) if reason else "")
        if name is not None and said.drained_by_rollcall:
            found.append(NodeMarks(name.group(1), "unfit", marks=("drain",), reason=said.reason))
    return sorted(found, key=lambda n: n.name)


def clear_drains(run: Runner, names: Sequence[str], error: type[Exception]) -> Drained:
    """Resume the nodes of ``names`` (all where empty) that rollcall drained (``rollcall nodes --clear``).

    Only a drain of rollcall's own: another's drain, a node down, is never resumed. Each node is read just
    before it is resumed; a command that fails is that node's alone.
    """
    wanted = list(names) or [n.name for n in current_drains(run)]
    resumed: list[str] = []
    left: dict[str, str] = {}
    failed: dict[str, str] = {}
    for name in dict.fromkeys(wanted):
        try:
            state = node_state(run, name)
            if not state.drained_by_rollcall:
                left[name] = held_by(state, (), name) or "holds no drain of rollcall's"
                continue
            run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], 30)
            resumed.append(name)
        except error as exc:
            failed[name] = str(exc)
    return Drained(resumed=tuple(resumed), failed=failed, left=left)


def resume_for_recheck(
    run: Runner, reservation: str, wait_s: float = ANSWER_S, clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> list[str]:  # fmt: skip
    """Resume the nodes of ``reservation`` that rollcall drained, for a re-check there; their names.

    slurmctld marks a resumed node ``NOT_RESPONDING`` until its slurmd answers the next ping (a second or
    two): each is awaited so, up to ``wait_s``, before discovery reads the nodes (one still silent then is
    named unusable by discovery).
    """
    names = reservation_nodes(run, reservation)
    mine = [n for n in names if node_state(run, n).drained_by_rollcall]
    for name in mine:
        run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], 30)
    deadline = clock() + wait_s
    silent = list(mine)
    while silent and clock() < deadline:
        silent = [n for n in silent if "NOT_RESPONDING" in node_state(run, n).state]
        if silent:
            pause(1.0)
    return mine


def missing_rights(run: Runner, user: str | None = None, euid: int | None = None) -> str | None:
    """Why this user cannot drain and resume nodes (a usage error's words); None when it can."""
    user = user if user is not None else getpass.getuser()
    if (euid if euid is not None else os.geteuid()) == 0:
        return None
    slurm_user = _SLURM_USER.search(run(["scontrol", "show", "config"], 30))
    if slurm_user is not None and slurm_user.group(1) == user:
        return None
    try:
        level = run(["sacctmgr", "-n", "-P", "show", "user", user, "format=AdminLevel"], 30).strip()
    except Exception:  # no accounting database: no AdminLevel to grant the rights
        level = ""
    if level in ("Operator", "Administrator"):
        return None
    owner = slurm_user.group(1) if slurm_user else "SlurmUser"
    return (
        f"--drain-unfit drains and resumes Slurm nodes, which needs Slurm's operator rights; {user} has "
        f"none (AdminLevel {level or 'None'}): run as root or {owner}, or have an administrator run "
        f"`sacctmgr modify user {user} set adminlevel=operator`"
    )
