"""The Xid catalog as data: every row of ``xid_catalog.csv`` read, none dropped, and each class that decides a verdict.

The whole table is pinned against the file, read here by the standard library alone; the classes that decide a
verdict (``hardware`` makes a GPU unfit, ``program`` stands beside a rank's error) are pinned by hand, so that
moving any Xid into or out of them in the data fails here.
"""

from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import pytest

from rollcall.evidence import xids
from rollcall.evidence.xids import (
    ACTIONS,
    CATALOG,
    CATALOG_READ,
    CATALOG_URL,
    RECOVERY_ACTIONS,
    XidClass,
    XidPolicy,
    read_catalog,
    recovery_action,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "rollcall" / "evidence" / "xid_catalog.csv"
H, P, S = XidClass.HARDWARE, XidClass.PROGRAM, XidClass.SYSTEM


def _rows() -> list[dict[str, str]]:
    lines = [line for line in DATA.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_every_row_of_the_data_is_an_xid_of_the_catalog_as_written_and_none_is_dropped():
    rows = _rows()
    assert len(rows) == len(CATALOG) == 172
    for row in rows:
        x = CATALOG[int(row["xid"])]
        name = row["mnemonic"] if row["description"] == "Unused" else row["description"]
        assert (x.name, x.klass.value, x.mnemonic) == (name, row["class"], row["mnemonic"])
        assert (x.immediate, x.investigatory, x.linkage) == (
            row["immediate_action"],
            row["investigatory_action"],
            row["xid_154_linkage"],
        )
        assert x.applies_to == tuple(row["applies_to"].split())
        assert XidPolicy().of(x.number) == x  # the policy judges by the data, nothing over it


def test_the_catalog_is_nvidias_whole_list_for_ampere_and_newer_with_its_source_and_date():
    assert sorted(CATALOG) == list(range(1, 173))  # past 154: NVIDIA's list now ends at 172
    assert CATALOG_URL == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert CATALOG_READ == "2026-12-06"
    assert "# spreadsheet: https://docs.nvidia.com/Xid-Catalog.xlsx" in DATA.read_text(encoding="utf-8")


def test_the_data_ships_with_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "evidence/*.csv" in project["tool"]["setuptools"]["package-data"]["rollcall"]


#: Every Xid whose class decides a verdict, with NVIDIA's immediate action, typed here from the catalog's page
#: (not read from the data): a GPU with a ``hardware`` Xid is unfit; a ``program`` Xid stands beside the error
#: of the rank on that GPU. Every other Xid of the catalog is ``system`` (a warning).
DECIDING: dict[int, tuple[XidClass, str]] = {
    46: (H, "RESET_GPU"),
    48: (H, "WORKFLOW_XID_48"),
    54: (H, "CHECK_MECHANICALS"),
    62: (H, "RESET_GPU"),
    64: (H, "RESET_GPU"),
    74: (H, "WORKFLOW_NVLINK_ERR"),
    79: (H, "RESTART_BM"),
    92: (H, "IGNORE"),
    94: (H, "RESTART_APP"),
    95: (H, "RESET_GPU"),
    110: (H, "RESET_GPU"),
    119: (H, "RESET_GPU"),
    120: (H, "RESET_GPU"),
    136: (H, "RESET_GPU"),
    140: (H, "RESET_GPU"),
    143: (H, "RESET_GPU"),
    **{n: (H, "WORKFLOW_NVLINK5_ERR") for n in range(144, 151)},
    156: (H, "RESET_GPU"),
    158: (H, "RESET_GPU"),
    167: (H, ""),
    168: (H, ""),
    169: (H, ""),
    171: (H, ""),
    172: (H, ""),
    13: (P, "RESTART_APP"),
    31: (P, "RESTART_APP"),
    43: (P, "IGNORE"),
    45: (P, "WORKFLOW_XID_45"),
    68: (P, "RESTART_APP"),
    109: (P, "RESET_GPU"),
    137: (P, "IGNORE"),
}


def test_each_xid_that_decides_a_verdict_has_the_class_and_action_pinned_here():
    judged = {n: (x.klass, x.immediate) for n, x in CATALOG.items() if x.klass is not S}
    assert judged == DECIDING


@pytest.mark.parametrize(
    ("xid", "name", "immediate", "action"),
    [
        (8, "GPU stopped processing", "RESTART_APP", "restart the application"),
        (63, "GPU memory remapping event", "IGNORE", "no action needed"),
        (121, "C2C Error", "IGNORE", "no action needed"),  # corrected errors on the link to the CPU
        (142, "NVENC3 Error", "CONTACT_SUPPORT", "contact support"),  # not 140's twin
        (151, "Key rotation Error", "RESTART_VM", "restart the VM that owns the GPU"),
        (154, "GPU Recovery Action Changed", "XID_154", "follow the recovery action Xid 154 reports"),
        (155, "NVLINK: SW Defined Error", "RESET_GPU", "reset the GPU"),  # a link taken down on purpose
        (57, "FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT", "contact support"),  # unused since Ampere
    ],
)
def test_system_xids_whose_name_or_action_a_reader_might_mistake(xid, name, immediate, action):
    x = CATALOG[xid]
    assert (x.klass, x.name, x.immediate, x.action) == (S, name, immediate, action)


def test_140_and_142_are_not_one_xid():
    assert (CATALOG[140].name, CATALOG[140].klass, CATALOG[140].action) == (
        "ECC Unrecovered Error",
        H,
        "reset the GPU",
    )
    assert CATALOG[142].mnemonic == "ROBUST_CHANNEL_NVENC3_ERROR" and CATALOG[142].applies_to == ("GB200",)


def test_every_action_the_catalog_names_is_said_in_words():
    buckets = {b for x in CATALOG.values() for b in (x.immediate, x.investigatory) if b}
    assert buckets <= set(ACTIONS), buckets - set(ACTIONS)
    assert CATALOG[79].action == "reboot the node" and CATALOG[79].investigation == "contact support"
    assert CATALOG[140].action == "reset the GPU"
    assert XidPolicy().of(999).action == ""  # an Xid not in the catalog: NVIDIA recommends nothing


def test_nvmls_recovery_actions_are_nvmls_own_constants():
    import pynvml  # the workload's extra (nvidia-ml-py): a missing one fails here

    for value, (name, _) in RECOVERY_ACTIONS.items():
        assert getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name}") == value
    assert pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == xids.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == 230
    assert pynvml.nvmlEventTypeGpuRecoveryAction == xids.RECOVERY_ACTION_EVENT == 0x8000
    assert recovery_action(2) == "reboot the node (NVML's recovery action NODE_REBOOT)"
    assert recovery_action(9) == "recovery action 9, unknown to rollcall (NVML's recovery action 9)"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("xid,mnemonic\n1,X\n", r"the columns are \['xid', 'mnemonic'\]"),
        ("xid,mnemonic,description,applies_to,immediate_action,investigatory_action,xid_154_linkage,class\n"
         "1,X,D,,IGNORE,,,broken\n", r"row 2 is no Xid of the catalog"),
        ("xid,mnemonic,description,applies_to,immediate_action,investigatory_action,xid_154_linkage,class\n"
         "1,X,D,,IGNORE,,,system\n1,Y,E,,IGNORE,,,system\n", r"row 3: Xid 1 twice"),
    ],
)  # fmt: skip
def test_a_catalog_file_that_is_not_one_is_refused_naming_the_row(text, says):
    with pytest.raises(ValueError, match=says):
        read_catalog(text)
