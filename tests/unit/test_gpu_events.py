"""The node's GPU event listener, at the NVML boundary.

An Xid, an ECC error and a GPU lost are faults nothing here can produce (no GPU on this machine), so each test
feeds them through a fake ``pynvml`` module that answers as NVML does: an event set whose wait returns the
queued events, then raises NVML's timeout; a lost GPU raises GPU_IS_LOST. Everything past that boundary is the
real listener, its contract lines and the suite's parser.
"""

from __future__ import annotations

import io
import json
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from rollcall.evidence.gpu_events import events_seen
from rollcall.ranklog import RollCall
from rollcall_workload.contract import EVENT_PREFIX, breaches
from rollcall_workload.node import monitor
from rollcall_workload.node.gpu_listener import (
    CLOCK_EVERY_S,
    LOST,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_TIMEOUT,
    RECOVERY_SAME_S,
    GpuEvents,
)
from tests.unit.monitors import monitor_env


class NVMLError(Exception):
    """What pynvml raises: its ``value`` is NVML's return code."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeNvml:
    """NVML with ``count`` GPUs; ``queue`` holds the events the set's wait returns, ``lost`` the lost GPUs."""

    count: int = 2
    supported: int = 0x1 | 0x2 | 0x8 | 0x10
    queue: deque[Any] = field(default_factory=deque)
    lost: set[int] = field(default_factory=set)
    gone_at_end: set[int] = field(default_factory=set)
    registered: list[tuple[int, int]] = field(default_factory=list)
    in_set: dict[str, set[int]] = field(default_factory=dict)  # each set's GPUs
    sets: int = 0
    reasons: int = 0
    freed: bool = False
    ended: bool = False

    nvmlEventTypeSingleBitEccError = 0x1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8
    nvmlEventTypeClock = 0x10

    def nvmlDeviceGetCount(self) -> int:
        return self.count - (len(self.gone_at_end) if self.ended else 0)

    def nvmlEventSetCreate(self) -> str:
        self.sets += 1
        return f"set-{self.sets}"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.ended:  # the GPUs left after the end are renumbered from 0
            index = [i for i in range(self.count) if i not in self.gone_at_end][index]
        return 100 + index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle - 100:04d}".encode()

    def nvmlDeviceGetSerial(self, handle: int) -> str:
        return f"165000{handle - 100}"

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        return self.supported

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, event_set: str) -> None:
        self.registered.append((handle - 100, mask))
        self.in_set.setdefault(event_set, set()).add(handle - 100)

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        if self.lost & self.in_set.get(event_set, set()):  # a set holding a lost GPU answers so
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if not self.queue:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        return self.queue.popleft()

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        if handle - 100 in self.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self.reasons

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.freed = True

    def deliver(self, gpu: int, event_type: int, data: int) -> None:
        self.queue.append(SimpleNamespace(device=100 + gpu, eventType=event_type, eventData=data))


def _events(lines: list[bytes]) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        assert line.startswith(EVENT_PREFIX.encode()) and line.endswith(b"\n")
        obj = json.loads(line[len(EVENT_PREFIX) :])
        assert breaches("gpu_event", obj) == []
        found.append(obj)
    return found


def test_the_set_is_registered_on_every_gpu_for_each_kind_it_supports():
    nvml = FakeNvml(count=2, supported=0x8 | 0x2)
    events = GpuEvents.open(lambda: nvml, node="gpu-a")
    assert events.off is None
    assert nvml.registered == [(0, 0x2), (0, 0x8), (1, 0x2), (1, 0x8)]
    assert events.registered == {0: ["double_bit_ecc", "xid"], 1: ["double_bit_ecc", "xid"]}
    assert events.describe() == (
        "GPU events of 2 GPUs on gpu-a: double_bit_ecc, xid; "
        "recovery action cannot be read (this pynvml has no nvmlDeviceGetFieldValues)"
    )


def test_an_xid_delivered_becomes_one_line_naming_the_gpu_its_uuid_serial_node_and_time():
    nvml = FakeNvml()
    events = GpuEvents.open(lambda: nvml, node="gpu-a")
    nvml.deliver(1, 0x8, 31)
    nvml.deliver(0, 0x2, 0)
    (xid, dbe) = _events(events.poll(1000.5))
    assert xid == {
        "event": "gpu_event",
        "rank": -1,
        "world_size": -1,
        "kind": "xid",
        "gpu": 1,
        "uuid": "GPU-0001",
        "serial": "1650001",
        "node": "gpu-a",
        "time": 1000.5,
        "event_type": 8,
        "data": 31,
        "xid": 31,
    }
    assert (dbe["kind"], dbe["gpu"], dbe["uuid"]) == ("double_bit_ecc", 0, "GPU-0000")
    assert events.poll(1001.0) == []  # drained


def test_clock_changes_are_written_only_when_the_reasons_change_and_not_more_often_than_the_bound():
    nvml = FakeNvml(count=1)
    events = GpuEvents.open(lambda: nvml, node="n")
    nvml.reasons = 0x20  # sw_thermal
    nvml.deliver(0, 0x10, 0)
    nvml.deliver(0, 0x10, 0)
    (first,) = _events(events.poll(10.0))
    assert (first["kind"], first["data"]) == ("clock", 0x20)
    nvml.reasons = 0x40
    nvml.deliver(0, 0x10, 0)
    assert events.poll(10.0 + CLOCK_EVERY_S / 2) == []  # too soon
    nvml.deliver(0, 0x10, 0)
    (later,) = _events(events.poll(10.0 + CLOCK_EVERY_S))
    assert later["data"] == 0x40
    nvml.deliver(0, 0x10, 0)
    assert events.poll(10.0 + 3 * CLOCK_EVERY_S) == []  # the same reasons


def test_a_wait_answering_gpu_is_lost_names_the_gpu_that_is_lost_once():
    nvml = FakeNvml(count=3)
    events = GpuEvents.open(lambda: nvml, node="n")
    nvml.lost = {2}
    (lost,) = _events(events.poll(5.0))
    assert (lost["kind"], lost["gpu"], lost["uuid"], lost["reason"]) == ("lost", 2, "GPU-0002", LOST)
    assert events.poll(6.0) == []
    nvml.deliver(0, 0x8, 48)  # the other GPUs are still heard, through a new set
    (xid,) = _events(events.poll(7.0))
    assert (xid["gpu"], xid["xid"]) == (0, 48)


def test_fewer_gpus_at_the_end_than_at_the_start_names_each_gone_and_frees_the_set():
    nvml = FakeNvml(count=4)
    events = GpuEvents.open(lambda: nvml, node="n")
    nvml.ended, nvml.gone_at_end = True, {1}
    (lost,) = _events(events.close(9.0))
    assert (lost["kind"], lost["gpu"], lost["uuid"]) == ("lost", 1, "GPU-0001")
    assert lost["reason"] == "3 GPUs at the end, 4 at the start"
    assert nvml.freed


def test_the_same_count_at_the_end_names_nothing():
    nvml = FakeNvml(count=2)
    events = GpuEvents.open(lambda: nvml, node="n")
    assert events.close(9.0) == [] and nvml.freed


def test_without_nvml_the_listener_is_off_and_says_why():
    def no_nvml() -> Any:
        raise ImportError("No module named 'pynvml'")

    events = GpuEvents.open(no_nvml, node="n")
    assert events.off == "no NVML: ImportError: No module named 'pynvml'"
    assert events.describe() == "GPU events off: no NVML: ImportError: No module named 'pynvml'"
    assert events.poll(1.0) == [] and events.close(2.0) == []


def test_no_gpu_counted_is_off_too():
    events = GpuEvents.open(lambda: FakeNvml(count=0), node="n")
    assert events.off == "NVML counts no GPU"


def test_the_monitor_writes_the_events_and_closes_the_listener_after_its_last_poll(tmp_path):
    nvml = FakeNvml(count=2)
    events = GpuEvents.open(lambda: nvml, node="gpu-a")
    nvml.deliver(0, 0x8, 79)
    nvml.ended, nvml.gone_at_end = True, {0}
    out = tmp_path / "log"
    with open(out, "wb") as f:
        monitor.watch_once([monitor.RankFiles(str(tmp_path / "mon")), events], f.fileno(), last=True)
    roll = RollCall()
    roll.read_file(out, source="node-0.log")
    assert [(e.kind, e.gpu, e.xid, e.source) for e in roll.gpu_events] == [
        ("xid", 0, 79, "node-0.log"),
        ("lost", 0, None, "node-0.log"),
    ]
    assert roll.ranks == {}  # the monitor's lines name no rank


@pytest.mark.parametrize("code", [NVML_ERROR_GPU_IS_LOST, 999])
def test_a_gpu_whose_handle_nvml_cannot_give_is_counted_and_named_lost_only_when_nvml_says_so(code):
    nvml = FakeNvml(count=2)

    def handle(index: int) -> int:
        if index == 1:
            raise NVMLError(code)
        return 100 + index

    nvml.nvmlDeviceGetHandleByIndex = handle  # type: ignore[method-assign]
    events = GpuEvents.open(lambda: nvml, node="n")
    said = _events(events.poll(1.0))
    assert [(e["kind"], e["gpu"]) for e in said] == ([("lost", 1)] if code == NVML_ERROR_GPU_IS_LOST else [])


@dataclass
class RecoveryNvml(FakeNvml):
    """NVML that reads each GPU's recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``) as ``action``.

    ``answer`` is NVML's return code for the field (0 success, 3 not supported); ``raises`` an error the call
    itself raises (an older driver without the function). Like an older ``nvidia-ml-py``, it has no names for
    the event type or the field: the listener uses nvml.h's numbers.
    """

    supported: int = 0x8 | 0x8000
    action: int = 0
    answer: int = 0
    raises: int | None = None
    asked: list[tuple[int, list[int]]] = field(default_factory=list)

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[int]) -> list[Any]:
        self.asked.append((handle - 100, list(field_ids)))
        if self.raises is not None:
            raise NVMLError(self.raises)
        value = SimpleNamespace(uiVal=self.action, ullVal=self.action)
        return [
            SimpleNamespace(fieldId=f, nvmlReturn=self.answer, valueType=1, value=value) for f in field_ids
        ]


def test_a_recovery_action_event_is_written_as_xid_154_with_the_action_nvml_reads_and_the_suite_advises_it():
    nvml = RecoveryNvml(count=2)
    events = GpuEvents.open(lambda: nvml, node="gpu-a")
    assert (0, 0x8000) in nvml.registered and (1, 0x8000) in nvml.registered
    assert events.describe() == (
        "GPU events of 2 GPUs on gpu-a: xid; recovery action read on its event and on Xid 154"
    )
    nvml.action = 2  # NODE_REBOOT
    nvml.deliver(1, 0x8000, 0)
    nvml.deliver(1, 0x8, 154)  # the same change, as the driver's Xid 154: written once
    (line,) = _events(events.poll(100.0))
    assert {k: line[k] for k in ("kind", "gpu", "uuid", "xid", "event_type", "data")} == {
        "kind": "xid",
        "gpu": 1,
        "uuid": "GPU-0001",
        "xid": 154,
        "event_type": 0x8000,
        "data": 2,
    }
    assert nvml.asked[-1] == (1, [230])
    nvml.action = 1  # GPU_RESET, later: a change of its own
    nvml.deliver(1, 0x8, 154)
    (later,) = _events(events.poll(100.0 + RECOVERY_SAME_S))
    assert (later["event_type"], later["data"]) == (0x8000, 1)

    roll = RollCall()
    roll.read_stream(io.BytesIO(events_line(line)), "node-0.log")
    [seen] = events_seen(roll.gpu_events, roll.ranks, lambda r: r)
    assert seen.recovery == 2 and seen.advice == "reboot the node (NVML's recovery action NODE_REBOOT)"


def events_line(obj: dict[str, Any]) -> bytes:
    return (EVENT_PREFIX + json.dumps(obj) + "\n").encode()


def test_where_the_gpu_has_no_recovery_event_an_xid_154_still_carries_the_action_read():
    nvml = RecoveryNvml(count=1, supported=0x8, action=4)
    events = GpuEvents.open(lambda: nvml, node="n")
    assert all(mask != 0x8000 for _, mask in nvml.registered)
    assert events.describe().endswith("; recovery action read on Xid 154 (its event not supported)")
    nvml.deliver(0, 0x8, 154)
    (line,) = _events(events.poll(5.0))
    assert (line["xid"], line["event_type"], line["data"]) == (154, 0x8000, 4)


@pytest.mark.parametrize(
    ("nvml", "why"),
    [
        (FakeNvml(count=1, supported=0x8), "this pynvml has no nvmlDeviceGetFieldValues"),
        (RecoveryNvml(count=1, answer=3), "NVML answered not supported for field 230"),
        (RecoveryNvml(count=1, raises=13), "NVML answered NVMLError: NVML error 13"),
    ],
    ids=["old-pynvml", "field-not-supported", "old-driver"],
)
def test_where_the_action_cannot_be_read_the_listener_says_why_and_writes_xid_154_as_delivered(nvml, why):
    events = GpuEvents.open(lambda: nvml, node="n")
    assert events.off is None
    assert events.describe() == f"GPU events of 1 GPUs on n: xid; recovery action cannot be read ({why})"
    nvml.deliver(0, 0x8, 154)
    nvml.deliver(0, 0x8, 79)  # the other events go on
    (xid_154, xid_79) = _events(events.poll(5.0))
    assert (xid_154["xid"], xid_154["event_type"], xid_154["data"]) == (154, 0x8, 154)
    assert xid_79["xid"] == 79
    if 0x8000 & nvml.supported:  # the event delivered, its action unread: said without a value
        nvml.deliver(0, 0x8000, 0)
        (changed,) = _events(events.poll(6.0))
        assert (changed["xid"], changed["event_type"]) == (154, 0x8000) and "data" not in changed


FAKE_PYNVML = '''
"""A fake pynvml for the monitor's process: 2 GPUs; one Xid 31 on GPU 1; GPU 0 gone from the count once the
command has made the file GONE names."""
import os, types

GONE = os.environ["FAKE_NVML_GONE"]
nvmlEventTypeXidCriticalError = 0x8
_waits = []

class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value

def nvmlInit(): pass
def nvmlDeviceGetCount(): return 1 if os.path.exists(GONE) else 2
def nvmlEventSetCreate(): return "set"
def nvmlEventSetFree(s): pass
def nvmlDeviceGetHandleByIndex(i): return 101 if os.path.exists(GONE) else 100 + i
def nvmlDeviceGetUUID(h): return f"GPU-{h - 100}"
def nvmlDeviceGetSerial(h): return f"serial-{h - 100}"
def nvmlDeviceGetSupportedEventTypes(h): return 0x8
def nvmlDeviceRegisterEvents(h, mask, s): pass
def nvmlEventSetWait_v2(s, timeout_ms):
    _waits.append(1)
    if len(_waits) == 1:
        return types.SimpleNamespace(device=101, eventType=0x8, eventData=31)
    raise NVMLError(10)
'''


def test_the_monitor_registers_before_the_command_and_counts_again_after_it_ended(tmp_path):
    """The monitor as a backend starts it, in front of a command, with a fake ``pynvml`` on its path: an Xid
    and a GPU gone are faults nothing here can produce. The command removes the GPU; the monitor, which
    outlives it, writes the Xid and, at its end, the GPU missing from the count."""
    import os
    import subprocess
    import sys

    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "pynvml.py").write_text(FAKE_PYNVML)
    gone = tmp_path / "gone"
    path = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env = monitor_env(path, nvml=tmp_path / "fake", FAKE_NVML_GONE=str(gone), NODE_NAME="gpu-a")
    command = [sys.executable, "-c", f"open({str(gone)!r}, 'w').close()"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollcall_workload.node.monitor",
            "--dir",
            str(tmp_path / "mon"),
            "--",
            *command,
        ],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"rollcall monitor: GPU events of 2 GPUs on gpu-a: xid" in done.stderr
    roll = RollCall()
    parser = roll.parser("node-0.log")
    parser.feed(done.stdout)
    parser.close()
    assert [(e.kind, e.gpu, e.uuid, e.xid, e.node) for e in roll.gpu_events] == [
        ("xid", 1, "GPU-1", 31, "gpu-a"),
        ("lost", 0, "GPU-0", None, "gpu-a"),
    ]
    assert roll.gpu_events[1].reason == "1 GPUs at the end, 2 at the start"
