"""The rank-log contract: what the workload says and writes, declared once as typed records.

Each rank answers the roll call in its own log, one ``ROLLCALL {json}`` line per event (:mod:`.line`); the
events are records (:mod:`.schema`), the rank's own (:mod:`.rank`) and those the node's monitor writes beside
them (:mod:`.node`), each registered under its name by :func:`.events.event`. The files a rank writes for its
node's monitor (:mod:`.heartbeat`) and the environment both sides read (:mod:`.env`) are here too. The
workload writes every line through these records and the suite's parser reads each line through the same
ones. ``docs/contract.md`` renders them (``python -m rollcall_workload.contract --markdown``, ``make
contract-docs``); ``docs/workload.md`` says what the workload does.
"""

from __future__ import annotations

# isort: off
# The rank's events first, then the node's monitor's: EVENTS keeps the order they are declared in.
from rollcall_workload.contract import rank
from rollcall_workload.contract import node

# isort: on
from rollcall_workload.contract.env import (
    MONITOR_DIR_ENV,
    NODE_IDS_ENV,
    NODE_NAME_ENV,
    RUN_ID_ENV,
    SLURM_NODE_ENV,
    STRICT_ENV,
)
from rollcall_workload.contract.events import EVENTS, breaches, event, read
from rollcall_workload.contract.heartbeat import (
    FILES,
    HEARTBEAT_BYTES,
    INTRO,
    STACKS_HEADER,
    Heartbeat,
    heartbeat_path,
    read_heartbeat,
    stacks_path,
)
from rollcall_workload.contract.line import (
    EVENT_PREFIX,
    LINE_RULES,
    MAX_LINE_BYTES,
    RollcallLog,
    check_event,
    encode_event,
)
from rollcall_workload.contract.node import (
    GPU_EVENT_KINDS,
    LAUNCHER_STATES,
    NO_RANK,
    RANK_PROCESS_STATES,
    GpuEvent,
    GpuEventKind,
    Launcher,
    LauncherState,
    RankProcess,
    RankProcessState,
    Silent,
)
from rollcall_workload.contract.rank import (
    BANDWIDTH_SCOPES,
    COMPILE_CACHE_STATES,
    JOIN_PHASE,
    PARAM_DIGEST_HEX,
    PRE_JOIN_PHASES,
    REQUIRED_EVENTS,
    SETUP_PHASE,
    Bandwidth,
    BandwidthScope,
    Collectives,
    CompileCacheState,
    Complete,
    EpochTime,
    Error,
    Exit,
    Facts,
    Kernels,
    Resumed,
    Samples,
    Stack,
    Start,
    Throughput,
)
from rollcall_workload.contract.schema import ABSENT, ContractError, Event, FieldSpec, fields_of, reference

#: The rank-log contract's version: raised when an event or a key the suite reads changes meaning. A
#: workload from before the field existed says none: version 1.
CONTRACT_VERSION = 2
#: The workload's own version (major, minor, patch): raised with each change to what it runs or reports
#: (its defaults, its kernels and their gate), so that a suite can refuse an image holding an older one.
WORKLOAD_VERSION = "0.7.0"


def markdown() -> str:
    """The contract's reference for readers, ``docs/contract.md``: the line's rules, then each event."""
    intro = [
        "# The rank-log contract",
        "",
        "<!-- Generated from the records of src/rollcall_workload/contract/ by `make contract-docs`"
        " (python -m rollcall_workload.contract --markdown); do not edit. -->",
        "",
        f"Contract version {CONTRACT_VERSION}. Each rank of the workload answers the roll call in its own "
        "log. The rules of a line:",
        "",
        *(f"- {rule}" for rule in LINE_RULES),
    ]
    return reference(intro, EVENTS) + reference(INTRO, FILES)


__all__ = [
    "ABSENT",
    "BANDWIDTH_SCOPES",
    "COMPILE_CACHE_STATES",
    "CONTRACT_VERSION",
    "EVENTS",
    "EVENT_PREFIX",
    "FILES",
    "GPU_EVENT_KINDS",
    "HEARTBEAT_BYTES",
    "JOIN_PHASE",
    "LAUNCHER_STATES",
    "LINE_RULES",
    "MAX_LINE_BYTES",
    "MONITOR_DIR_ENV",
    "NODE_IDS_ENV",
    "NODE_NAME_ENV",
    "NO_RANK",
    "PARAM_DIGEST_HEX",
    "PRE_JOIN_PHASES",
    "RANK_PROCESS_STATES",
    "REQUIRED_EVENTS",
    "RUN_ID_ENV",
    "SETUP_PHASE",
    "SLURM_NODE_ENV",
    "STACKS_HEADER",
    "STRICT_ENV",
    "WORKLOAD_VERSION",
    "Bandwidth",
    "BandwidthScope",
    "Collectives",
    "CompileCacheState",
    "Complete",
    "ContractError",
    "EpochTime",
    "Error",
    "Event",
    "Exit",
    "Facts",
    "FieldSpec",
    "GpuEvent",
    "GpuEventKind",
    "Heartbeat",
    "Kernels",
    "Launcher",
    "LauncherState",
    "RankProcess",
    "RankProcessState",
    "Resumed",
    "RollcallLog",
    "Samples",
    "Silent",
    "Stack",
    "Start",
    "Throughput",
    "breaches",
    "check_event",
    "encode_event",
    "event",
    "fields_of",
    "heartbeat_path",
    "markdown",
    "node",
    "rank",
    "read",
    "read_heartbeat",
    "stacks_path",
]

# help() and pydoc show the records too: the docstring above holds what they do not.
__doc__ = f"{__doc__}\nThe records, rendered (docs/contract.md):\n\n{markdown()}"
