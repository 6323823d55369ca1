"""``--drain-unfit`` on Slurm: drain each unfit node with the reason, resume each fit one rollcall drained.

A node rollcall drains carries a reason starting with :data:`PREFIX` (``rollcall: pcie_width 8 of 16 ...``),
so that rollcall resumes only its own drains: a node another administrator drained stays drained, whatever a
run finds. A re-check of drained nodes runs in a maintenance reservation that holds them
(``--slurm-reservation``): :func:`resume_for_recheck` resumes the reservation's nodes that rollcall drained
before the job is submitted (the reservation keeps other jobs off them), and the verdict drains again those
still unfit. Draining and resuming need Slurm's operator rights (:func:`missing_rights`): root, the
``SlurmUser``, or ``AdminLevel`` Operator or Administrator in the accounting database.
"""

from __future__ import annotations

import getpass
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollcall.backends import Marking, NodeMark

#: Runs one Slurm command: its stdout, or a SlurmError (the backend's :class:`~.backend.SlurmCommands`).
Runner = Callable[[Sequence[str], float], str]
#: How every drain reason of rollcall's starts.
PREFIX = "rollcall:"
#: Slurm keeps a reason of this many characters at most (longer ones are cut here, not refused there).
REASON_CHARS = 200
#: How long a node resumed for a re-check may take to answer slurmctld's ping.
ANSWER_S = 60.0
_STATE = re.compile(r"\bState=(\S+)")
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$")
_SLURM_USER = re.compile(r"^SlurmUser\s*=\s*([^(\s]+)", re.M)


@dataclass(frozen=True)
class NodeState:
    """A Slurm node's state words (``IDLE+DRAIN``) and its reason, as ``scontrol -o show node`` says them."""

    state: str
    reason: str

    @property
    def drained_by_rollcall(self) -> bool:
        """Drained (or draining), with a reason of rollcall's."""
        return "DRAIN" in self.state and self.reason.startswith(PREFIX)


def node_state(run: Runner, name: str) -> NodeState:
    """What Slurm says of node ``name`` now."""
    line = run(["scontrol", "-o", "show", "node", name], 30)
    state, reason = _STATE.search(line), _REASON.search(line)
    return NodeState(state.group(1) if state else "", reason.group(1) if reason else "")


def reason_of(mark: NodeMark) -> str:
    """The drain reason of an unfit node: ``rollcall: <why>``, on one line, cut to :data:`REASON_CHARS`."""
    why = " ".join((mark.reason or "unfit").split())
    return f"{PREFIX} {why}"[:REASON_CHARS]


@dataclass(frozen=True)
class Drained:
    """What ``--drain-unfit`` did after one verdict (``results.json``'s ``node_marks``)."""

    drained: tuple[str, ...] = ()
    resumed: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        """``drained unfit node(s) rc1; resumed node(s) rc2, found fit``, for the terminal."""
        parts = []
        if self.drained:
            parts.append(f"drained unfit node(s) {', '.join(self.drained)}")
        if self.resumed:
            parts.append(f"resumed node(s) {', '.join(self.resumed)} that rollcall drained, found fit")
        parts += [f"could not mark node {name}: {why}" for name, why in self.failed.items()]
        return "; ".join(parts) or "no node to drain or resume"

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` form."""
        return {
            "line": self.line(),
            "drained": list(self.drained),
            "resumed": list(self.resumed),
            "failed": dict(self.failed),
        }


def mark_nodes(run: Runner, marks: Iterable[NodeMark], how: Marking, error: type[Exception]) -> Drained:
    """Drain each unfit node of ``marks``, resume each fit one rollcall drained; a refusal is listed."""
    drained: list[str] = []
    resumed: list[str] = []
    failed: dict[str, str] = {}
    if not how.drain:
        return Drained()
    for mark in {m.name: m for m in marks}.values():
        try:
            if mark.verdict == "unfit":
                run(
                    [
                        "scontrol",
                        "update",
                        f"NodeName={mark.name}",
                        "State=DRAIN",
                        f"Reason={reason_of(mark)}",
                    ],
                    30,
                )
                drained.append(mark.name)
            elif mark.verdict == "fit" and node_state(run, mark.name).drained_by_rollcall:
                run(["scontrol", "update", f"NodeName={mark.name}", "State=RESUME"], 30)
                resumed.append(mark.name)
        except error as exc:
            failed[mark.name] = str(exc)
    return Drained(tuple(drained), tuple(resumed), failed)


def resume_for_recheck(
    run: Runner, reservation: str, wait_s: float = ANSWER_S, clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> list[str]:  # fmt: skip
    """Resume the nodes of ``reservation`` that rollcall drained, for a re-check there; their names.

    slurmctld marks a resumed node ``NOT_RESPONDING`` until its slurmd answers the next ping (a second or
    two): each is awaited so, up to ``wait_s``, before discovery reads the nodes (one still silent then is
    named unusable by discovery).
    """
    said = run(["scontrol", "-o", "show", "reservation", reservation], 30)
    found = re.search(r"\bNodes=(\S+)", said)
    if found is None or found.group(1) in ("", "(null)"):
        return []
    names = run(["scontrol", "show", "hostnames", found.group(1)], 30).split()
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
