"""NVIDIA's Xid catalog as rollcall classes each Xid: whose fault an Xid during the run points to.

The Xids and their names are NVIDIA's published catalog, "Xid Errors" (Ampere and newer, the catalog
spreadsheet; the older listing for the rest): https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
and https://docs.nvidia.com/deploy/xid-errors/index.html#xid-error-listing. Each holds one :class:`XidClass`:

- ``hardware``: the GPU, its memory, its links or its firmware failed (double-bit ECC 48, the row-remap
  recording failure 64, NVLink 74 and 144-150, fallen off the bus 79, GSP 119/120, a high single-bit rate 92,
  contained and uncontained ECC 94/95, unrecovered ECC 140, ...): the GPU is unfit (``unfit_device``, rule
  ``hardware_event``; the fitness options apply);
- ``program``: the set the NVIDIA device plugin leaves to the program that ran (13, 31, 43, 45, 68, 109,
  its ``applicationErrorXids``): evidence beside the error of the rank on that GPU, whose owner the rest of
  the verdict decides;
- ``system``: the rest of the catalog (the driver, its firmware, engines training does not drive,
  recording and informational events, Xids NVIDIA marks unused): a warning naming the GPU;
- an Xid not in the catalog is ``unknown``: a warning, never unfit.

``--xid-class XID=CLASS`` moves an Xid into another class (:func:`parse_xid_classes`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


class XidClass(enum.Enum):
    """Whose fault an Xid points to (see the module's docstring)."""

    HARDWARE = "hardware"
    PROGRAM = "program"
    SYSTEM = "system"
    UNKNOWN = "unknown"


#: The classes ``--xid-class`` may move an Xid into (``unknown`` is only what the catalog lacks).
MOVABLE: tuple[XidClass, ...] = (XidClass.HARDWARE, XidClass.PROGRAM, XidClass.SYSTEM)


@dataclass(frozen=True)
class Xid:
    """One Xid of the catalog: its number, NVIDIA's name for it, and its class."""

    number: int
    name: str
    klass: XidClass


_H, _P, _S = XidClass.HARDWARE, XidClass.PROGRAM, XidClass.SYSTEM
_PUSH = "Invalid or corrupted push buffer stream"
_VIDEO = "Video processor exception"
#: The catalog, by Xid: NVIDIA's name, rollcall's class.
_CATALOG: tuple[tuple[int, str, XidClass], ...] = (
    *((n, _PUSH, _S) for n in (1, 2, 3, 4, 6, 11, 32)),
    (5, "Unused", _S),
    (7, "Invalid or corrupted push buffer address", _S),
    (8, "GPU stopped processing", _S),
    (9, "Driver error programming GPU", _S),
    (10, "Unused", _S),
    (12, "Driver error handling GPU exception", _S),
    (13, "Graphics Engine Exception", _P),
    *((n, "Unused", _S) for n in (14, 15, 17, 23, 39, 40, 41, 49, 50, 51, 52, 53, 55)),
    (16, "Display engine hung", _S),
    (18, "Bus mastering disabled in PCI Config Space", _S),
    (19, "Display Engine error", _S),
    (20, "Invalid or corrupted Mpeg push buffer", _S),
    (21, "Invalid or corrupted Motion Estimation push buffer", _S),
    (22, "Invalid or corrupted Video Processor push buffer", _S),
    (24, "GPU semaphore timeout", _S),
    (25, "Invalid or illegal push buffer stream", _S),
    (26, "Framebuffer timeout", _S),
    *((n, _VIDEO, _S) for n in (27, 28, 29, 34, 35, 36, 42, 47, 60)),
    (30, "GPU semaphore access error", _S),
    (31, "GPU memory page fault", _P),
    (33, "Internal micro-controller error", _S),
    (37, "Driver firmware error", _S),
    (38, "Driver firmware error", _S),
    (43, "GPU stopped processing", _P),
    (44, "Graphics Engine fault during context switch", _S),
    (45, "Preemptive cleanup, due to previous errors", _P),
    (46, "GPU stopped processing", _S),
    (48, "Double Bit ECC Error", _H),
    (54, "Auxiliary power is not connected to the GPU board", _H),
    (56, "Display Engine error", _S),
    (57, "Error programming video memory interface", _H),
    (58, "Unstable video memory interface detected", _H),
    (59, "Internal micro-controller error (older drivers)", _S),
    (61, "Internal micro-controller breakpoint/warning", _S),
    (62, "Internal micro-controller halt", _H),
    (63, "ECC page retirement or row remapping recording event", _S),
    (64, "ECC page retirement or row remapper recording failure", _H),
    (65, _VIDEO, _S),
    (66, "Illegal access by driver", _S),
    (67, "Illegal access by driver", _S),
    (68, "NVDEC0 Exception", _P),
    (69, "Graphics Engine class error", _S),
    *(
        (n, f"CE{c}: Unknown Error", _S)
        for n, c in ((70, 3), (71, 4), (72, 5), (75, 6), (76, 7), (77, 8), (85, 9))
    ),
    (73, "NVENC2 Error", _S),
    (74, "NVLINK Error", _H),
    (78, "vGPU Start Error", _S),
    (79, "GPU has fallen off the bus", _H),
    (80, "Corrupted data sent to GPU", _H),
    (81, "VGA Subsystem Error", _S),
    (82, "NVJPG0 Error", _S),
    *((n, f"NVDEC{d} Error", _S) for n, d in ((83, 1), (84, 2), (88, 3), (89, 4), (96, 5), (97, 6), (98, 7))),
    (86, "OFA Exception", _S),
    *((n, "Reserved", _S) for n in (87, 90, 91, 108, 126, 127, 128, 129, 130, 131, 132, 134, 135, 136, 137)),
    *((n, "Reserved", _S) for n in (138, 139, 141)),
    (92, "High single-bit ECC error rate", _H),
    (93, "Non-fatal violation of provisioned InfoROM wear limit", _S),
    (94, "Contained ECC error", _H),
    (95, "Uncontained ECC error", _H),
    *(
        (n, f"NVJPG{d} Error", _S)
        for n, d in ((99, 1), (100, 2), (101, 3), (102, 4), (103, 5), (104, 6), (105, 7))
    ),
    (106, "SMBPBI Test Message", _S),
    (107, "SMBPBI Test Message Silent", _S),
    (109, "Context Switch Timeout Error", _P),
    (110, "Security Fault Error", _H),
    (111, "Display Bundle Error Event", _S),
    (112, "Display Supervisor Error", _S),
    (113, "DP Link Training Error", _S),
    (114, "Display Pipeline Underflow Error", _S),
    (115, "Display Core Channel Error", _S),
    (116, "Display Window Channel Error", _S),
    (117, "Display Cursor Channel Error", _S),
    (118, "Display Pixel Pipeline Error", _S),
    (119, "GSP RPC Timeout", _H),
    (120, "GSP Error", _H),
    (121, "C2C Link Error", _H),
    (122, "SPI PMU RPC Read Failure", _H),
    (123, "SPI PMU RPC Write Failure", _H),
    (124, "SPI PMU RPC Erase Failure", _H),
    (125, "Inforom FS Failure", _H),
    (140, "Unrecovered ECC Error", _H),
    (142, "Unrecovered ECC Error", _S),
    (143, "GPU Initialization Failure", _H),
    *(
        (n, f"NVLink {what} Error", _H)
        for n, what in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"))
    ),
    *((n, f"NVLink {what} Error", _H) for n, what in ((148, "NVLPW_CTRL"), (149, "NETIR"), (150, "MSE"))),
    (154, "GPU Recovery Action Changed", _S),
)
#: Every Xid of the catalog, by number.
CATALOG: Mapping[int, Xid] = {n: Xid(n, name, klass) for n, name, klass in _CATALOG}
#: The Xids the NVIDIA device plugin leaves to the program (its ``applicationErrorXids``).
PROGRAM_XIDS: frozenset[int] = frozenset(n for n, x in CATALOG.items() if x.klass is XidClass.PROGRAM)


@dataclass(frozen=True)
class XidPolicy:
    """The catalog's classes with the user's moves (``--xid-class``) over them."""

    #: ``(xid, class)`` pairs, as ``--xid-class`` gives them.
    moved: tuple[tuple[int, XidClass], ...] = ()

    def of(self, number: int) -> Xid:
        """The Xid ``number`` as judged: the catalog's, moved where the user said; ``unknown`` outside it."""
        known = CATALOG.get(number)
        name = known.name if known is not None else "not in NVIDIA's Xid catalog"
        klass = dict(self.moved).get(number) or (known.klass if known is not None else XidClass.UNKNOWN)
        return Xid(number, name, klass)


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
    "CATALOG",
    "CATALOG_URL",
    "MOVABLE",
    "PROGRAM_XIDS",
    "Xid",
    "XidClass",
    "XidPolicy",
    "parse_xid_classes",
]
