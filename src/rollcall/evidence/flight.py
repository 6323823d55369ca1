"""The collective a hang stopped in, from the ranks' flight records: who never entered or finished it.

When a rank stalls, its watchdog says its flight record with the stall's first stack dump (``collectives``,
:class:`~rollcall.ranklog.FlightRecord`): each process group's last collectives, by their sequence number in
that group. Python stacks cannot tell apart the ranks that wait inside NCCL or DDP's ``backward()``; the
sequence numbers can. :func:`stuck` aligns the stalled ranks' records group by group and finds the first
sequence number at which they part:

- a rank whose record stops before it while the others entered it **never entered** it;
- a rank that entered another op at that number **entered another op** (it went on without the others: a
  skipped collective, or ranks calling collectives in different orders);
- a rank that entered it but never finished it, while the others finished it, **never finished** it;
- a rank stalled or silent without a record of its own (its Python could not run: the GIL held, the process
  stopped), while every record agrees that the others wait in the default group's last collective and the
  ranks with a record outnumber those without, is named from theirs (**no record**).

A rank is named only where at least :data:`AGREEING` other ranks' records agree, and they outnumber the ranks
named; where the records part evenly, or the most of them never reached the collective, nothing is named.
A record taken while its rank still made progress is withdrawn with its dump (``resumed``); each stall writes
its own, so a rank that stalled, resumed and stalled again is read from its second stall's record.

Each record names its rank's whole dump, which torch's own analyser reads (``fr_trace``): :func:`dumps` says
the command over the dumps of one stall, where they lie on this machine (the directory that holds the nodes'
monitor directories: the artifacts directory, on the backends that write them there).
"""

from __future__ import annotations

import os
import re
import shlex
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from rollcall.ranges import ranges
from rollcall.ranklog import FlightRecord, RankReport
from rollcall_workload.rank.flight import FILE

#: The fewest other ranks whose records must agree before a rank is named from them.
AGREEING = 2
#: The default group's name in a record.
DEFAULT_GROUP = "0"
#: torch's own analyser of the recorder's dumps.
FR_TRACE = "python -m torch.distributed.flight_recorder.fr_trace"
#: A dump's file name: the prefix its stall's dumps share, then its rank (as ``fr_trace`` reads it).
_DUMP_NAME = re.compile(r"(.*\D)(\d+)")
#: A rank's place at a sequence number: absent (its record stops before it), unknown (its record's ring
#: buffer no longer holds it), or the op it entered there and whether it finished.
_ABSENT, _UNKNOWN = "absent", "unknown"

How = Literal["never_entered", "other_op", "unfinished", "no_record"]


@dataclass(frozen=True)
class Culprit:
    """A rank the records name, how it parted from the others, and (``other_op``) the op it entered."""

    rank: int
    how: How
    op: str = ""


@dataclass(frozen=True)
class Stuck:
    """The collective where the records part: ``op`` number ``seq`` of ``group``, who entered it, who did not.

    Attributes:
        group: the group's name in the records (``"0"`` the default group); label: its description.
        seq: the collective's sequence number in the group; op: the op the agreeing ranks entered there.
        entered: the agreeing ranks; finished: whether they finished it (they wait in it when not).
        culprits: the ranks named, by how they parted.
        files: each rank's whole dump in its node's monitor directory, where it wrote one.
    """

    group: str
    label: str
    seq: int
    op: str
    entered: tuple[int, ...]
    finished: bool
    culprits: tuple[Culprit, ...]
    files: tuple[tuple[int, str], ...] = ()

    def collective(self) -> str:
        """``barrier #7 of the default group``, ``all_reduce #1 of group 1 (rollcall_fault)``."""
        label = f" ({self.label})" if self.label and self.label != "undefined" else ""
        group = "the default group" if self.group == DEFAULT_GROUP else f"group {self.group}{label}"
        return f"{self.op} #{self.seq} of {group}"

    def says(self, culprit: Culprit) -> str:
        """What the records say of one culprit: ``never entered barrier #7 of the default group``."""
        if culprit.how == "never_entered":
            return f"never entered {self.collective()}"
        if culprit.how == "other_op":
            return f"entered {culprit.op} as {self.collective().replace(self.op + ' ', '', 1)}"
        if culprit.how == "unfinished":
            return f"entered {self.collective()} but never finished it"
        return "wrote no flight record (its Python could not run)"

    def line(self, culprit: Culprit, node: Callable[[int], int]) -> str:
        """``never entered barrier #7 of the default group, which ranks 0, 2-3 (nodes 0-1) entered ...``."""
        nodes = sorted({node(r) for r in self.entered})
        who = f"rank{'s' if len(self.entered) > 1 else ''} {ranges(self.entered)}"
        who += f" (node {nodes[0]})" if len(nodes) == 1 else f" (nodes {ranges(nodes)})"
        if culprit.how == "other_op":
            return f"{self.says(culprit)}, where {who} entered {self.op} and wait in it"
        if culprit.how == "no_record":
            return f"{self.says(culprit)} while {who} wait in {self.collective()}"
        return f"{self.says(culprit)}, which {who} {'finished' if self.finished else 'entered and wait in'}"


@dataclass(frozen=True)
class Dumps:
    """One stall's whole dumps, as fr_trace reads them: each file under ``directory`` named ``prefix<rank>``.

    Attributes:
        directory: the directory holding the nodes' monitor directories (where the dumps lie on this machine).
        prefix: the name the stall's dumps share before the rank; ranks: the ranks whose dump is read.
        world_size: the run's ranks: a rank without a dump takes ``--allow-incomplete-ranks``.
    """

    directory: str
    prefix: str
    ranks: tuple[int, ...]
    world_size: int

    @property
    def missing(self) -> tuple[int, ...]:
        """The ranks of the run without a dump of this stall."""
        return tuple(sorted(set(range(self.world_size)) - set(self.ranks)))

    def command(self) -> str:
        """``python -m torch.distributed.flight_recorder.fr_trace <dir> --prefix stall-1-rank-``."""
        line = f"{FR_TRACE} {shlex.quote(self.directory)} --prefix {shlex.quote(self.prefix)}"
        return line + (" --allow-incomplete-ranks" if self.missing else "")


def dumps(
    reports: Mapping[int, RankReport], world_size: int, exists: Callable[[str], bool] = os.path.isfile
) -> Dumps | None:
    """The whole dumps of the stall the most records are of, where every one ``exists`` on this machine.

    None where no record names a dump, or one it names is not here (kept in a pod, or on a node's own disk).
    """
    by_stall: dict[str, dict[int, FlightRecord]] = defaultdict(dict)
    for r, report in reports.items():
        rec = report.flight
        if r < world_size and rec is not None and rec.available and rec.file:
            m = _DUMP_NAME.fullmatch(os.path.basename(rec.file))
            if m and int(m[2]) == r:
                by_stall[m[1]][r] = rec
    if not by_stall:
        return None
    # the stall the most ranks' records are of; of two as many, the later
    prefix = max(by_stall, key=lambda p: (len(by_stall[p]), max(rec.dump for rec in by_stall[p].values())))
    files = {r: rec.file for r, rec in by_stall[prefix].items()}
    if not all(exists(f) for f in files.values()):
        return None
    up = FILE.count("/") + 2  # from the file to its node's monitor directory, then the one holding them all
    holders = {_up(f, up) for f in files.values()}
    return Dumps(os.path.commonpath(sorted(holders)) or ".", prefix, tuple(sorted(files)), world_size)


def _up(path: str, levels: int) -> str:
    for _ in range(levels):
        path = os.path.dirname(path)
    return path


def records(reports: Mapping[int, RankReport], ranks: Iterable[int]) -> dict[int, FlightRecord]:
    """The available flight records of ``ranks`` (the stalled ones), by rank."""
    out = {}
    for r in ranks:
        report = reports.get(r)
        if report is not None and report.flight is not None and report.flight.available:
            out[r] = report.flight
    return out


def stuck(
    reports: Mapping[int, RankReport],
    world_size: int,
    stalled: Iterable[int],
    quiet: Iterable[int] = (),
) -> list[Stuck]:
    """Where the stalled ranks' records part, group by group (see the module); empty when they do not.

    ``stalled``: the ranks whose stack dump stands; ``quiet``: the ranks found silent. Either without a
    record of its own may be named ``no_record`` from the others'.
    """
    stalled = sorted(r for r in stalled if r < world_size)
    found = records(reports, stalled)
    if len(found) <= AGREEING:
        return []
    out = []
    for group in _groups(found.values()):
        members = _members(group, found, world_size)
        hit = _part(group, {r: found.get(r) for r in members if r in found})
        if hit is not None:
            out.append(hit)
    if out:
        return out
    silent = sorted({*stalled, *(r for r in quiet if r < world_size)} - set(found))
    return [hit] if silent and (hit := _no_record(found, silent, world_size)) is not None else []


def _groups(found: Iterable[FlightRecord]) -> list[str]:
    names = {g for rec in found for g in (*rec.tails, *rec.members)}
    return sorted(names, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))


def _members(group: str, found: Mapping[int, FlightRecord], world_size: int) -> list[int]:
    """The group's members: as a record says them, else the world (default group) or the ranks that ran it."""
    for rec in found.values():
        if group in rec.members:
            return [r for r in rec.members[group] if r < world_size]
    if group == DEFAULT_GROUP:
        return list(range(world_size))
    return sorted(r for r, rec in found.items() if group in rec.tails)


def _status(rec: FlightRecord, group: str, seq: int) -> tuple[str, bool]:
    tail = {s: (op, done) for s, op, done in rec.tails.get(group, ())}
    if seq in tail:
        return tail[seq]
    if not tail or seq > max(tail):
        return _ABSENT, False
    return _UNKNOWN, False


def _part(group: str, found: Mapping[int, FlightRecord | None]) -> Stuck | None:
    """The first sequence number of ``group`` at which the members' records part, with who parted."""
    present = {r: rec for r, rec in found.items() if rec is not None}
    seqs = sorted({s for rec in present.values() for s, _, _ in rec.tails.get(group, ())})
    for seq in seqs:
        places = {r: _status(rec, group, seq) for r, rec in present.items()}
        places = {r: p for r, p in places.items() if p[0] != _UNKNOWN}
        ops = Counter(op for op, _ in places.values())
        (op, agree), *rest = ops.most_common()
        if rest and rest[0][1] == agree:
            return None  # the records part evenly: nothing can be told
        if op == _ABSENT:
            return None  # the most of them never got here: nobody waits in it
        deviants = [r for r, (o, _) in places.items() if o != op]
        entered = [r for r, (o, _) in places.items() if o == op]
        done = [r for r in entered if places[r][1]]
        if not deviants and done and len(done) < len(entered):
            deviants = [r for r in entered if not places[r][1]]  # entered with the others, never finished
            entered = done
        if not deviants:
            continue
        if len(entered) < AGREEING or len(entered) <= len(deviants):
            return None
        culprits = tuple(
            Culprit(r, "never_entered")
            if places[r][0] == _ABSENT
            else Culprit(r, "other_op", places[r][0])
            if places[r][0] != op
            else Culprit(r, "unfinished")
            for r in sorted(deviants)
        )
        finished = all(places[r][1] for r in entered)
        return _stuck(present, group, (seq, op), entered, finished=finished, culprits=culprits)
    return None


def _no_record(found: Mapping[int, FlightRecord], silent: list[int], world_size: int) -> Stuck | None:
    """Every record waits in the default group's same last collective: the ranks without one are named.

    Only where the ranks with a record outnumber those without (strictly): else none is named on that ground.
    """
    if len(found) <= len(silent):
        return None
    lasts = {r: rec.tails.get(DEFAULT_GROUP, ())[-1:] for r, rec in found.items()}
    if any(not last for last in lasts.values()):
        return None
    places = {last[0][:2] for last in lasts.values()}
    if len(places) != 1 or any(last[0][2] for last in lasts.values()):
        return None  # they part, or one finished its last: no common wait
    ((seq, op),) = places
    named = tuple(Culprit(r, "no_record") for r in silent)
    return _stuck(found, DEFAULT_GROUP, (seq, op), found, finished=False, culprits=named)


def _stuck(
    found: Mapping[int, FlightRecord],
    group: str,
    at: tuple[int, str],
    entered: Iterable[int],
    *,
    finished: bool,
    culprits: tuple[Culprit, ...],
) -> Stuck:
    """The finding at ``at`` (sequence number, op), with the group's label and every record's whole dump."""
    label = next((rec.labels[group] for rec in found.values() if group in rec.labels), "")
    files = tuple((r, rec.file) for r, rec in sorted(found.items()) if rec.file)
    return Stuck(group, label, *at, tuple(sorted(entered)), finished, culprits, files)


__all__ = ["AGREEING", "DEFAULT_GROUP", "FR_TRACE", "Culprit", "Dumps", "Stuck", "dumps", "records", "stuck"]
