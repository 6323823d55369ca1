"""NVIDIA's Xid catalog as rollcall judges it: each Xid's name, NVIDIA's recommended actions, and its class.

The catalog is data, ``xid_catalog.csv`` beside this module (package data): every Xid of NVIDIA's published
Xid catalog for Ampere and newer GPUs (:data:`CATALOG_URL`, read on :data:`CATALOG_READ`), each with NVIDIA's
mnemonic and description, the products it applies to, the resolution buckets of NVIDIA's immediate and
investigatory action (:data:`ACTIONS` says each in words: ``RESTART_BM``, "reboot the node"), and the
:class:`XidClass` rollcall judges it by:

- ``hardware``: the GPU, its memory, its links or its firmware failed: the event is the cluster's, and an
  error of the rank on that GPU is told as caused by it (46, 48, 54, 62, 64, 74, 79, 92, 94, 95, 110, 119,
  120, 136, 140, 143, 144-150, 156, 158 and 167-169, 171, 172). Whether it takes anything out of service is
  NVIDIA's **immediate action** (:attr:`Xid.takes_out`, :data:`TAKES_OUT`): a GPU reset or NVIDIA's
  double-bit ECC and NVLink workflows (``RESET_GPU``, ``WORKFLOW_XID_48``, ``WORKFLOW_NVLINK_ERR``,
  ``WORKFLOW_NVLINK5_ERR``) take the GPU out; a node reboot or a look at the board (``RESTART_BM``: 79 fallen
  off the bus; ``CHECK_MECHANICALS``: 54) the node. 92 (a high single-bit rate, ``IGNORE``) and 94 (a
  contained error, ``RESTART_APP``) take nothing out: they stay on the GPU's line as facts. The Xids the
  catalog gives no action yet (162-172) have one pinned here (:data:`PINNED`, each with why: the power
  smoothing and confidential-computing notices ``IGNORE``, 167-169 ``RESET_GPU``, 171 and 172 as Xid 48);
- ``program``: the set the NVIDIA device plugin leaves to the program that ran (13, 31, 43, 45, 68, 109, its
  ``applicationErrorXids``; 109 although NVIDIA resets the GPU) and 137, an illegal NVLink peer access
  (NVIDIA: "typically application-level bugs", as 31): evidence beside the error of the rank on that GPU,
  whose owner the rest of the verdict decides;
- ``system``: the rest (the driver, its firmware, engines training does not drive, recording and informational
  events, Xids NVIDIA marks unused), 155 too (a link taken down on purpose, though NVIDIA resets the GPU) and
  154: a warning naming the GPU. Xid 154 reports the recovery action of the Xid it comes with: that action
  (NVML's, below) takes the GPU or the node out as :data:`RECOVERY_TAKES_OUT` says, whatever the class;
- an Xid not in the catalog is ``unknown``: a warning, never unfit.

``--xid-class XID=CLASS`` moves an Xid into another class (:func:`parse_xid_classes`): out of the hardware
class, it takes nothing out; into it, it takes at least its GPU out.

Xid 154's recovery action is NVML's own field and event too (:data:`RECOVERY_ACTIONS`): the node's monitor
reads ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` when NVML delivers ``nvmlEventTypeGpuRecoveryAction`` or an
Xid 154 and writes it as the ``data`` of a ``gpu_event`` of Xid 154 whose ``event_type`` is that event's bit
(:data:`RECOVERY_ACTION_EVENT`; the contract declares both).
"""

from __future__ import annotations

import csv
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib.resources import files
from typing import Any, Literal

# NVML's field and event type of the recovery action, and Xid 154: declared by the contract's gpu_event
from rollcall_workload.contract.node import (
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    RECOVERY_ACTION_EVENT,
    RECOVERY_XID,
)

#: The catalog's file, package data beside this module.
CATALOG_FILE = "xid_catalog.csv"
#: Its columns, in order.
COLUMNS = (
    "xid",
    "mnemonic",
    "description",
    "applies_to",
    "immediate_action",
    "investigatory_action",
    "xid_154_linkage",
    "class",
)


class XidClass(enum.Enum):
    """Whose fault an Xid points to (see the module's docstring)."""

    HARDWARE = "hardware"
    PROGRAM = "program"
    SYSTEM = "system"
    UNKNOWN = "unknown"


#: The classes ``--xid-class`` may move an Xid into (``unknown`` is only what the catalog lacks).
MOVABLE: tuple[XidClass, ...] = (XidClass.HARDWARE, XidClass.PROGRAM, XidClass.SYSTEM)

#: NVIDIA's resolution buckets (the catalog's "Fault Resolution Buckets" sheet), each in words.
ACTIONS: Mapping[str, str] = {
    "RESTART_APP": "restart the application",
    "RESET_GPU": "reset the GPU",
    "RESTART_BM": "reboot the node",
    "RESTART_VM": "restart the VM that owns the GPU",
    "CONTACT_SUPPORT": "contact support",
    "IGNORE": "no action needed",
    "CHECK_MECHANICALS": "check that the board is seated and its power connected",
    "UPDATE_SWFW": "update the driver and the firmware",
    "CHECK_UVM": "reset the GPU if UVM or vGPU is in use, else no action",
    "XID_154": "follow the recovery action Xid 154 reports",
    "WORKFLOW_XID_45": "follow the other Xids' action; alone, restart Fabric Manager",
    "WORKFLOW_XID_48": "reset the GPU (drain, then reset, where Xid 63 or 64 came with it)",
    "WORKFLOW_NVLINK_ERR": "decode the Xid's NVLink registers (NVIDIA's NVLink workflow); "
    "a GPU reset or a node reboot clears it",
    "WORKFLOW_NVLINK5_ERR": "decode the Xid's NVLink fields (NVIDIA's Xid 144-150 table): most reset the GPU",
    "CHECK_APP/CUDA": "check the application's CUDA calls",
    "WORKFLOW_XID_13": "run the application under compute-sanitizer or cuda-gdb; repeated on one GPU, run "
    "DCGM's diagnostics",
    "WORKFLOW_XID_31": "run the application under compute-sanitizer or cuda-gdb; repeated on one GPU, run "
    "DCGM's diagnostics",
    "XID_137_FLOW": "run the application under compute-sanitizer or cuda-gdb (an illegal NVLink peer access)",
    "INVESTIGATE_SW": "investigate the software (the application's or NVIDIA's)",
    "INVESTIGATE_SW_USER": "investigate the software, or who took the link down, if unexpected",
    "INVESTIGATE_LINK_SI": "investigate the link's signal integrity",
    "IGNORE (sympathetic)": "follow the other errors' resolution first (a sympathetic error)",
    "SYMPATHETIC_REPORT_SOLO": "follow the other errors' resolution first; alone, report it",
    "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)": "alone, restart Fabric Manager; else follow the "
    "other Xids",
    "N/A; Unused": "none (unused on Ampere and newer)",
    "N/A Informational only regarding another Xid": "none (informational: the other Xid's action applies)",
}

#: What an event takes out of service until it is acted on: its node (every GPU of it), or its GPU alone.
Scope = Literal["node", "gpu"]

#: The resolution buckets whose immediate action takes a GPU or its node out of service, and which: a GPU
#: reset (``RESET_GPU``; the double-bit ECC and NVLink workflows, whose text resets the GPU), a node reboot or
#: the board's power checked by hand (``RESTART_BM``, ``RESTART_VM``: the VM is the node;
#: ``CHECK_MECHANICALS``). Every other bucket (``IGNORE``, ``RESTART_APP``, ``CONTACT_SUPPORT``,
#: ``UPDATE_SWFW``, the program's and the sympathetic workflows ...) leaves the GPU in service: its event is a
#: fact on the GPU's line, never a mark.
TAKES_OUT: Mapping[str, Scope] = {
    "RESET_GPU": "gpu",
    "WORKFLOW_XID_48": "gpu",
    "WORKFLOW_NVLINK_ERR": "gpu",
    "WORKFLOW_NVLINK5_ERR": "gpu",
    "RESTART_BM": "node",
    "RESTART_VM": "node",
    "CHECK_MECHANICALS": "node",
}

#: rollcall's own immediate action for the Xids NVIDIA's catalog gives none yet (162-172), each with why:
#: pinned here, so that what they take out of service is decided, not left to chance. NVIDIA's own action,
#: once published, takes precedence (a newer catalog's ``immediate_action``).
PINNED: Mapping[int, tuple[str, str]] = {
    162: ("IGNORE", "the power smoothing circuit engaged again: informational"),
    163: ("IGNORE", "the power smoothing circuit disengaged: the GPU still computes"),
    164: ("IGNORE", "the power smoothing circuit's lifetime runs low: a warning, the GPU still computes"),
    165: ("IGNORE", "the power smoothing circuit's lifetime is spent: the GPU computes without it"),
    166: ("IGNORE", "confidential-computing traffic before the link was set up: the configuration's"),
    167: ("RESET_GPU", "a fatal PCIe timeout: the GPU no longer answers on its bus until reset"),
    168: ("RESET_GPU", "errors in the write-protected region: the GPU's memory capacity is reduced"),
    169: ("RESET_GPU", "an internal micro-controller halted, as Xid 62's, which NVIDIA resets"),
    170: ("IGNORE", "an interrupt in confidential-computing mode: informational"),
    171: ("WORKFLOW_XID_48", "an uncorrectable DRAM error, the detail of Xid 48"),
    172: ("WORKFLOW_XID_48", "an uncorrectable SRAM error, the detail of Xid 48"),
}

#: NVML's GPU recovery actions (``nvmlDeviceGpuRecoveryAction_t``; pynvml's ``NVML_GPU_RECOVERY_ACTION_*``):
#: the value of the field :data:`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`, by value: its name and what to do.
RECOVERY_ACTIONS: Mapping[int, tuple[str, str]] = {
    0: ("NONE", "no recovery action needed"),
    1: ("GPU_RESET", "reset the GPU"),
    2: ("NODE_REBOOT", "reboot the node"),
    3: ("DRAIN_P2P", "drain peer-to-peer (P2P) traffic"),
    4: ("DRAIN_AND_RESET", "drain peer-to-peer (P2P) traffic, then reset the GPU"),
    5: ("RECOVER_IMEX_DOMAIN", "recover the IMEX domain"),
    6: ("BUS_RESET", "reset the GPU's PCIe bus"),
    7: ("SYSTEM_REBOOT", "reboot the system"),
}
#: What each recovery action takes out of service: the GPU's resets and drains the GPU, the reboots its node;
#: none for ``NONE`` and for the IMEX domain's recovery, a domain every node of it shares (never one node's).
RECOVERY_TAKES_OUT: Mapping[int, Scope] = {1: "gpu", 2: "node", 3: "gpu", 4: "gpu", 6: "gpu", 7: "node"}


def said(bucket: str) -> str:
    """A resolution bucket in words (:data:`ACTIONS`); the bucket itself where none are known, '' for none."""
    return ACTIONS.get(bucket, bucket)


def recovery_takes_out(value: int) -> Scope | None:
    """What NVML's recovery action ``value`` takes out of service (:data:`RECOVERY_TAKES_OUT`)."""
    return RECOVERY_TAKES_OUT.get(value)


def recovery_action(value: int) -> str:
    """NVML's recovery action ``value`` in words: ``reboot the node (NVML's recovery action NODE_REBOOT)``."""
    name, words = RECOVERY_ACTIONS.get(value, (str(value), f"recovery action {value}, unknown to rollcall"))
    return f"{words} (NVML's recovery action {name})"


@dataclass(frozen=True)
class Xid:
    """One Xid: its number, name and class, and NVIDIA's entry for it (empty for an Xid not in the catalog).

    ``immediate`` and ``investigatory`` are NVIDIA's resolution buckets (``RESTART_BM``); :attr:`action` and
    :attr:`investigation` say them in words.
    """

    number: int
    name: str
    klass: XidClass
    mnemonic: str = ""
    immediate: str = ""
    investigatory: str = ""
    applies_to: tuple[str, ...] = ()
    linkage: str = ""
    #: The user moved it into its class (``--xid-class``).
    moved: bool = False

    @property
    def bucket(self) -> str:
        """The immediate action judged by: NVIDIA's, else rollcall's pinned one (:data:`PINNED`), else ''."""
        return self.immediate or PINNED.get(self.number, ("", ""))[0]

    @property
    def takes_out(self) -> Scope | None:
        """What the Xid takes out of service: its node, its GPU, or nothing (None).

        Only an Xid of the hardware class takes anything out (the program's and the system's are not the
        node's own fault), and then as its immediate action says (:data:`TAKES_OUT`); one the user moved into
        the hardware class (``--xid-class XID=hardware``) takes at least its GPU out.
        """
        if self.klass is not XidClass.HARDWARE:
            return None
        scope = TAKES_OUT.get(self.bucket)
        return scope if scope is not None or not self.moved else "gpu"

    @property
    def action(self) -> str:
        """NVIDIA's immediate action in words (``reboot the node``), '' where the catalog gives none."""
        return said(self.immediate)

    @property
    def investigation(self) -> str:
        """NVIDIA's investigatory action in words, '' where the catalog gives none."""
        return said(self.investigatory)

    def as_dict(self) -> dict[str, Any]:
        """The Xid, JSON-ready."""
        return {
            "xid": self.number,
            "name": self.name,
            "class": self.klass.value,
            "mnemonic": self.mnemonic,
            "immediate_action": self.immediate,
            "investigatory_action": self.investigatory,
            "action": self.action,
            "investigation": self.investigation,
            "applies_to": list(self.applies_to),
            "xid_154_linkage": self.linkage,
        }


def read_catalog(text: str) -> tuple[dict[str, str], dict[int, Xid]]:
    """The catalog file's ``# key: value`` lines (``source``, ``spreadsheet``, ``read``) and its Xids.

    An Xid's name is NVIDIA's description, its mnemonic where the description is ``Unused``.

    Raises:
        ValueError: naming the row that is no Xid of the catalog (a column missing, a class that is none,
            an Xid twice).
    """
    meta: dict[str, str] = {}
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            key, colon, value = line[1:].partition(":")
            if colon and key.strip() in ("source", "spreadsheet", "read"):
                meta[key.strip()] = value.strip()
        elif line.strip():
            rows.append(line)
    reader = csv.DictReader(rows)
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise ValueError(f"{CATALOG_FILE}: the columns are {reader.fieldnames}, not {', '.join(COLUMNS)}")
    catalog: dict[int, Xid] = {}
    for n, row in enumerate(reader, start=2):
        values = {k: (row.get(k) or "").strip() for k in COLUMNS}
        if None in row or not values["xid"].isdigit() or values["class"] not in [c.value for c in MOVABLE]:
            raise ValueError(f"{CATALOG_FILE}: row {n} is no Xid of the catalog: {row}")
        number = int(values["xid"])
        if number in catalog:
            raise ValueError(f"{CATALOG_FILE}: row {n}: Xid {number} twice")
        description = values["description"]
        catalog[number] = Xid(
            number,
            values["mnemonic"] if description == "Unused" and values["mnemonic"] else description,
            XidClass(values["class"]),
            values["mnemonic"],
            values["immediate_action"],
            values["investigatory_action"],
            tuple(values["applies_to"].split()),
            values["xid_154_linkage"],
        )
    return meta, catalog


_META, _READ = read_catalog(files("rollcall.evidence").joinpath(CATALOG_FILE).read_text(encoding="utf-8"))
#: Where NVIDIA publishes the catalog, and the day rollcall's copy was read from it.
CATALOG_URL: str = _META["source"]
CATALOG_READ: str = _META["read"]
#: Every Xid of the catalog, by number.
CATALOG: Mapping[int, Xid] = _READ
#: The Xids of the program's class (:class:`XidClass`): the device plugin's ``applicationErrorXids`` and 137.
PROGRAM_XIDS: frozenset[int] = frozenset(n for n, x in CATALOG.items() if x.klass is XidClass.PROGRAM)


@dataclass(frozen=True)
class XidPolicy:
    """The catalog's classes with the user's moves (``--xid-class``) over them."""

    #: ``(xid, class)`` pairs, as ``--xid-class`` gives them.
    moved: tuple[tuple[int, XidClass], ...] = ()

    def of(self, number: int) -> Xid:
        """The Xid ``number`` as judged: the catalog's, moved where the user said; ``unknown`` outside it."""
        known = CATALOG.get(number)
        moved = dict(self.moved).get(number)
        klass = moved or (known.klass if known is not None else XidClass.UNKNOWN)
        if known is None:
            return Xid(number, "not in NVIDIA's Xid catalog", klass, moved=moved is not None)
        return replace(known, klass=klass, moved=moved is not None)


def parse_xid_classes(words: Iterable[str]) -> dict[int, XidClass]:
    """``("31=hardware", "13=system,43=system")`` as ``{31: HARDWARE, ...}``.

    Raises:
        ValueError: naming the pair that is no ``XID=CLASS``, or the class that is not one.
    """
    moved: dict[int, XidClass] = {}
    for word in words:
        for pair in (p.strip() for p in word.split(",")):
            if not pair:
                continue
            number, eq, klass = (s.strip() for s in pair.partition("="))
            if not eq or not number.isdigit() or int(number) <= 0:
                raise ValueError(f"{pair!r} is not XID=CLASS (an Xid is a positive number, e.g. 31=hardware)")
            names = [c.value for c in MOVABLE]
            if klass not in names:
                raise ValueError(f"{pair!r}: unknown class {klass!r}; the classes are {', '.join(names)}")
            moved[int(number)] = XidClass(klass)
    return moved


__all__ = [
    "ACTIONS",
    "CATALOG",
    "CATALOG_FILE",
    "CATALOG_READ",
    "CATALOG_URL",
    "COLUMNS",
    "MOVABLE",
    "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
    "PINNED",
    "PROGRAM_XIDS",
    "RECOVERY_ACTIONS",
    "RECOVERY_ACTION_EVENT",
    "RECOVERY_TAKES_OUT",
    "RECOVERY_XID",
    "TAKES_OUT",
    "Scope",
    "Xid",
    "XidClass",
    "XidPolicy",
    "parse_xid_classes",
    "read_catalog",
    "recovery_action",
    "recovery_takes_out",
    "said",
]
