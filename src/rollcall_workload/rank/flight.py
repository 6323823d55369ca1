"""The flight recorder: torch.distributed's record of each process group's last collectives, read at a stall.

torch.distributed records every collective a process group runs (its sequence number in that group, its op,
whether it finished) in a ring buffer of ``TORCH_FR_BUFFER_SIZE`` entries, on gloo as on NCCL; the size is
read when torch loads, so :func:`enable` runs before the rank imports torch. With each stall's first stack
dump (:meth:`FlightRecorder.record`, called by the watchdog; a stall ends with the rank's ``resumed``,
:meth:`FlightRecorder.resumed`, and the next one writes its own) the rank writes the whole dump into its
node's monitor directory and one ``collectives`` line: each group's last :data:`TAIL` collectives and its
members, which the suite aligns across ranks (:mod:`rollcall.evidence.flight`). Where the recorder holds
nothing (torch_xla's own process group keeps no record; a torch without one) the line says so (``available``
false, with why).

The whole dump is the pickle torch's analyser reads (``python -m torch.distributed.flight_recorder.fr_trace
<dir> --prefix stall-<n>-rank-``): PyTorch's own dump (``_dump_nccl_trace``, ``_dump_fr_trace`` on the other
backends), as torch writes it, in ``flight/stall-<n>-rank-<rank>`` (:data:`FILE`; ``<n>`` the rank's
``n``-th stall, the rank the name's trailing digits, as ``fr_trace`` takes it). One thing is added: the
recorder on gloo keeps no ``pg_config`` (it holds one empty entry), and ``fr_trace`` looks every entry's
group up in it by name, so each group of this rank that the dump's ``pg_config`` lacks is written there from
torch.distributed's own table (its name, description and global ranks, as NCCL's recorder writes them), and
named in :data:`ADDED` beside it.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from rollcall_workload.contract import RollcallLog
from rollcall_workload.rank.bandwidth import compact_ranges
from rollcall_workload.safefs import new_file, private_dir

#: The recorder's settings, set for every backend unless the environment sets them: 2,000 entries, and on
#: NCCL a dump when its watchdog times out. (torch 2.11 warns that NCCL's older name for the size,
#: ``TORCH_NCCL_TRACE_BUFFER_SIZE``, is deprecated: an image with a torch that reads only that one sets it.)
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
#: Each group's last collectives a ``collectives`` line holds.
TAIL = 6
#: The most bytes a line's groups may take (a line holds MAX_LINE_BYTES with its envelope).
BUDGET = 3000
#: The whole dump's file in the node's monitor directory: one name prefix per stall, the rank last.
FILE = "flight/stall-{stall}-rank-{rank}"
#: The key of the dump that names the groups written into its ``pg_config`` from torch's own table.
ADDED = "rollcall_pg_config_added"


@dataclass(frozen=True)
class Group:
    """A process group this rank is in, as torch.distributed's own table holds it.

    Attributes:
        desc: its description (``default_pg``, or as it was made; ``undefined`` when none was given).
        ranks: its members' global ranks, in order.
    """

    desc: str
    ranks: tuple[int, ...]


def enable(environ: MutableMapping[str, str]) -> None:
    """Turn the recorder on for every backend (before torch is imported: it reads the size as it loads)."""
    for name, value in FLIGHT_RECORDER_ENV.items():
        environ.setdefault(name, value)


def summarize(dump: Mapping[str, Any], members: Mapping[str, list[int]]) -> dict[str, Any]:
    """A ``collectives`` line's fields from one decoded dump: each group's last :data:`TAIL` collectives.

    ``members``: each group's global ranks by its name (the dump does not say them on every backend). The
    groups most recently used come first; the others are left out past :data:`BUDGET` bytes (one line).
    """
    raw = [e for e in dump.get("entries") or () if isinstance(e, Mapping)]
    tails: dict[str, list[tuple[int, str, bool]]] = {}
    labels: dict[str, str] = {}
    last: dict[str, int] = {}  # each group's newest entry, to keep the groups in use first
    for e in raw:
        if e.get("is_p2p"):
            continue
        group = e.get("process_group") or ("?", "")
        name, label = str(group[0]), str(group[1]) if len(group) > 1 else ""
        op = str(e.get("profiling_name") or "?").split(":", 1)[-1]  # "gloo:all_reduce" -> "all_reduce"
        done = bool(e.get("retired")) or e.get("state") == "completed"
        tails.setdefault(name, []).append((int(e.get("collective_seq_id") or 0), op, done))
        labels[name] = label
        last[name] = max(last.get(name, -1), int(e.get("record_id") or 0))
    record_ids = [int(e.get("record_id") or 0) for e in raw]
    fields: dict[str, Any] = {
        "tails": {},
        "labels": {},
        "members": {},
        "entries": len(record_ids),
        "wrapped": bool(record_ids) and min(record_ids) > 0,  # the oldest entries were overwritten
    }
    used = sorted(tails, key=lambda n: -last[n])
    for name in [*used, *(n for n in sorted(members) if n not in tails)]:
        if name in tails:
            fields["tails"][name] = sorted(tails[name])[-TAIL:]
            fields["labels"][name] = labels[name]
        if name in members:
            fields["members"][name] = compact_ranges(members[name])
        if len(json.dumps(fields)) > BUDGET:  # one group too many for the line: the rest are left out
            for key in ("tails", "labels", "members"):
                fields[key].pop(name, None)
            break
    return fields


def for_analysis(dump: Mapping[str, Any], groups: Mapping[str, Group]) -> dict[str, Any]:
    """The dump as ``fr_trace`` reads it: torch's own, with each of ``groups`` its ``pg_config`` lacks.

    ``fr_trace`` finds each entry's group by its name (``process_group[0]``) in the rank's ``pg_config``;
    gloo's recorder keeps none, NCCL's only the groups that made a communicator. A group added says what
    NCCL's recorder would (its name, description and global ranks) and is named in :data:`ADDED`.
    """
    out = dict(dump)
    config = dict(out.get("pg_config") or {})
    added = sorted((n for n in groups if n not in config), key=lambda n: (len(n), n))
    for name in added:
        group = groups[name]
        config[name] = {"name": name, "desc": group.desc, "ranks": str(list(group.ranks))}
    out["pg_config"] = config
    if added:
        out[ADDED] = added
    return out


def process_groups() -> dict[str, Group]:
    """Each process group this rank is in, by name, with its description and global ranks (torch's table)."""
    from torch.distributed import distributed_c10d as c10d

    world = c10d._world
    return {
        str(world.pg_names[pg]): Group(str(pg.group_desc), tuple(sorted(ranks)))
        for pg, ranks in world.pg_group_ranks.items()
    }


def read_dump(backend: str) -> dict[str, Any]:
    """The recorder's dump as PyTorch writes it (its pickle, decoded), NCCL's recorder's or the others'."""
    import torch

    c10d: Any = torch._C._distributed_c10d
    dump: Callable[..., Any] = c10d._dump_nccl_trace if backend == "nccl" else c10d._dump_fr_trace
    decoded = pickle.loads(bytes(dump(includeCollectives=True, onlyActive=False)))  # this process's own bytes
    if not isinstance(decoded, dict):
        raise TypeError(f"torch's flight record is a {type(decoded).__name__}, not a dict")
    return decoded


def write(path: str, dump: Mapping[str, Any]) -> None:
    """Pickle ``dump`` to ``path`` whole or not at all (a reader never sees half a file under its name)."""
    directory = private_dir(os.path.dirname(path))  # the node's, this user's alone (safefs)
    part = os.path.join(directory, f".{os.path.basename(path)}.part")
    with os.fdopen(new_file(part), "wb") as f:
        pickle.dump(dict(dump), f)
    os.replace(part, path)  # replaces the name, never what a link there points to


class FlightRecorder:
    """Writes a stalled rank's flight record once a stall: the whole dump for the node, a summary in its log.

    Attributes:
        written: the dump the last record went with (0: none yet).
        ended: the last dump a stall that ended held (the ``resumed`` event's): a record is due again once a
            dump past it comes, and a late call for a dump of a stall already over writes nothing.
        stalls: the stalls recorded so far (the ``n`` of the last one's file).
    """

    def __init__(
        self,
        log: RollcallLog,
        backend: str,
        monitor_dir: str | None,
        *,
        unavailable: str = "",
        read: Callable[[str], Mapping[str, Any]] = read_dump,
        groups: Callable[[], Mapping[str, Group]] = process_groups,
    ) -> None:
        self.log, self.backend, self.monitor_dir = log, backend, monitor_dir
        self.unavailable = unavailable  # why this rank's groups keep no record ("": they do)
        self._read, self._groups = read, groups
        self.written = 0
        self.ended = 0
        self.stalls = 0

    def record(self, dump: int) -> None:
        """Say this rank's last collectives with its ``dump``-th stack dump (once a stall: its first dump)."""
        if dump <= self.ended or self.written > self.ended:
            return  # a dump of a stall already over, or this stall's record is written
        self.written = dump
        self.stalls += 1
        if self.unavailable:
            self.log.emit("collectives", dump=dump, available=False, why=self.unavailable)
            return
        try:
            whole, groups = self._read(self.backend), self._groups()
            fields = summarize(whole, {name: list(g.ranks) for name, g in groups.items()})
        except Exception as exc:  # a torch without the recorder, or one that changed its dump
            self.log.emit("collectives", dump=dump, available=False, why=f"{type(exc).__name__}: {exc}")
            return
        if not fields["entries"]:
            why = "the recorder holds no collective (TORCH_FR_BUFFER_SIZE was 0 or unset when torch loaded)"
            self.log.emit("collectives", dump=dump, available=False, why=why)
            return
        path = ""
        if self.monitor_dir:
            path = os.path.join(self.monitor_dir, FILE.format(stall=self.stalls, rank=self.log.rank))
            write(path, for_analysis(whole, groups))
        self.log.emit("collectives", dump=dump, file=path, **fields)

    def resumed(self, dump: int) -> None:
        """The stall whose last dump was ``dump`` ended (``resumed``): the next stall says it again."""
        self.ended = max(self.ended, dump)
