"""faulthandler's dumps of a rank, read from its stacks file and turned into ``stack`` events.

The rank's watchdog arms faulthandler's C-level timer into ``rank-<rank>.stacks`` (see the contract's
Heartbeat): a ``ROLLCALL-ARMED {json}`` header, then faulthandler's plain text when the timer fires.
:func:`parse_stacks` reads the sections, :func:`stack_lines` turns the last dump of one into events whose
frames carry their source lines (the workload's own named relative to its package, as the watchdog names
them), so the suite reads them as it reads the watchdog's.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass
from typing import Any

from rollcall_workload.contract.heartbeat import STACKS_HEADER
from rollcall_workload.rank.watchdog import encode_stack, frame_entry

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?+) in (.*?)\s*$')
_TIMEOUT = "Timeout ("


@dataclass(frozen=True)
class ThreadText:
    """One thread of a faulthandler dump: its id, its frames ``(file, line, function)`` innermost first."""

    ident: int
    frames: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class FaultDumps:
    """A section of a rank's stacks file: the header written when the timer was armed, the dumps since."""

    header: dict[str, Any]
    dumps: tuple[tuple[ThreadText, ...], ...] = ()


def parse_stacks(text: str) -> tuple[FaultDumps, ...]:
    """A stacks file's sections: each header its watchdog wrote, with faulthandler's dumps after it.

    A section without a whole header line is left out (the file is read while the rank writes it).
    """
    sections: list[FaultDumps] = []
    for part in text.split(STACKS_HEADER)[1:]:
        head, newline, rest = part.partition("\n")
        try:
            header = json.loads(head) if newline else None
        except ValueError:
            header = None
        if isinstance(header, dict):
            sections.append(FaultDumps(header, _dumps(rest)))
    return tuple(sections)


def _dumps(text: str) -> tuple[tuple[ThreadText, ...], ...]:
    """The dumps in ``text``: each ``Timeout (...)!`` and the threads after it."""
    dumps: list[tuple[ThreadText, ...]] = []
    threads: list[ThreadText] | None = None
    current: tuple[int, list[tuple[str, int, str]]] | None = None

    def close_thread() -> None:
        nonlocal current
        if current is not None and threads is not None:
            threads.append(ThreadText(current[0], tuple(current[1])))
        current = None

    for line in text.splitlines():
        if line.startswith(_TIMEOUT):
            close_thread()
            if threads is not None:
                dumps.append(tuple(threads))
            threads = []
        elif (m := _THREAD.match(line)) is not None and threads is not None:
            close_thread()
            current = (int(m.group(1), 16), [])
        elif (f := _FRAME.match(line)) is not None and current is not None:
            number = int(f.group(2)) if f.group(2).isdigit() else 0
            current[1].append((f.group(1), number, f.group(3)))
    close_thread()
    if threads is not None:
        dumps.append(tuple(threads))
    return tuple(dumps)


def frames_of(thread: ThreadText) -> list[list[Any]]:
    """The thread's frames as the watchdog writes them: outermost first, source lines read from the files."""
    return [
        frame_entry(traceback.FrameSummary(file, line, function))
        for file, line, function in reversed(thread.frames)
    ]


def stack_lines(dumps: FaultDumps, rank: int, world_size: int | None) -> list[bytes]:
    """The ``stack`` events of the last dump of ``dumps``: one per thread, the main thread first."""
    if not dumps.dumps:
        return []
    header = dumps.header
    skip = {int(i) for i in header.get("skip", ()) if isinstance(i, int)}
    main = header.get("main")
    threads = [t for t in dumps.dumps[-1] if t.ident not in skip]
    threads.sort(key=lambda t: t.ident != main)
    timeout = _float(header.get("timeout"))
    armed, since = _float(header.get("armed")), _float(header.get("since"))
    stalled = None
    if timeout is not None and armed is not None and since is not None:
        stalled = round(armed + timeout * len(dumps.dumps) - since, 3)
    lines = []
    for t in threads:
        is_main = t.ident == main
        name = str(header.get("main_name") or "MainThread") if is_main else f"thread 0x{t.ident:x}"
        lines.append(
            encode_stack(
                rank,
                world_size if world_size is not None else -1,
                frames_of(t),
                dump=int(header.get("dump", 1)),
                thread=name,
                main=is_main,
                threads=len(threads),
                phase=str(header.get("phase", "")),
                stalled_s=stalled,
                hang_after=_float(header.get("hang_after")),
                source="faulthandler",
            )
        )
    return lines


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
