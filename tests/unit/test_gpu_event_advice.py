"""What NVIDIA recommends, said in the finding about a GPU event: the catalog's immediate action for its Xid, or
the recovery action the GPU reported with it (Xid 154, NVML's ``nvmlEventTypeGpuRecoveryAction``).

Each test writes the ``gpu_event`` line the node's monitor writes (see ``tests/unit/checks/test_gpu_events.py``)
and judges the whole roll call.
"""

from __future__ import annotations

import pytest

from rollcall.checks.gpu_events import GPU_EVENT
from rollcall.checks.unfit_device import UNFIT_DEVICE
from tests.unit.checks.test_gpu_events import gpu_line, roll_of
from tests.unit.test_fitness import verdict_of

#: NVML's event type bits the monitor writes (``event_type``): an Xid, and a recovery action changed.
XID_EVENT, RECOVERY_EVENT = 0x8, 0x8000
#: Rank 1's error after its first epoch, so that each event falls in a phase of its run.
ERROR = "RuntimeError: CUDA error: unknown error"


@pytest.mark.parametrize(
    ("xid", "what", "advice"),
    [
        (79, "Xid 79 (GPU has fallen off the bus, hardware)", "reboot the node (NVIDIA: RESTART_BM)"),
        (140, "Xid 140 (ECC Unrecovered Error, hardware)", "reset the GPU (NVIDIA: RESET_GPU)"),
        (54, "Xid 54 (Auxiliary power is not connected to the GPU board, hardware)",
         "check that the board is seated and its power connected (NVIDIA: CHECK_MECHANICALS)"),
    ],
)  # fmt: skip
def test_an_unfit_gpu_is_told_with_what_nvidia_recommends(xid, what, advice):
    verdict = verdict_of(roll_of([gpu_line(xid=xid, data=xid, event_type=XID_EVENT)], fails=ERROR))
    [problem] = verdict.of_kind(UNFIT_DEVICE)
    assert problem.message.startswith("unfit device: node 1 (n1) rank 1 GPU 1"), problem.message
    assert problem.message.endswith(f": {what} on rank 1, after epoch 1 (rule hardware_event): {advice}")


def test_a_warning_says_what_nvidia_recommends_and_an_xid_outside_the_catalog_says_nothing_it_does_not_know():
    verdict = verdict_of(roll_of([gpu_line(xid=63, data=63), gpu_line(xid=999, data=999)], fails=ERROR))
    remap, unknown = (w.message for w in verdict.warnings if w.kind is GPU_EVENT)
    assert remap == (
        "GPU event: Xid 63 (GPU memory remapping event, system) on node 1 (n1) GPU 1, UUID GPU-1aaa, serial "
        "165001 on rank 1, after epoch 1: no action needed (NVIDIA: IGNORE)"
    )
    assert unknown.endswith("Xid 999 (not in NVIDIA's Xid catalog, unknown) on node 1 (n1) GPU 1, UUID "
                            "GPU-1aaa, serial 165001 on rank 1, after epoch 1")  # fmt: skip


def test_xid_154_says_the_recovery_action_nvml_reported_with_it_and_a_node_reboot_makes_the_gpu_unfit():
    reported = gpu_line(xid=154, data=2, event_type=RECOVERY_EVENT)  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    verdict = verdict_of(roll_of([reported]))
    assert not verdict.passed and verdict.warnings == ()
    [problem] = verdict.findings
    assert problem.kind is UNFIT_DEVICE and not problem.warning and set(problem.ranks) == {1}
    assert problem.message.startswith("unfit device: node 1 (n1) rank 1 GPU 1, UUID GPU-1aaa")
    assert "Xid 154 (GPU Recovery Action Changed, system)" in problem.message
    assert "(rule hardware_event)" in problem.message
    assert problem.message.endswith(": reboot the node (NVML's recovery action NODE_REBOOT)")
    assert verdict.unfit_nodes == ["n1"]
    [seen] = verdict.gpu_events
    assert (seen.takes_out, seen.used) == ("node", True)
    doc = seen.as_dict()
    assert (doc["recovery_action"], doc["advice"]) == (
        2,
        "reboot the node (NVML's recovery action NODE_REBOOT)",
    )
    assert (doc["immediate_action"], doc["xid_mnemonic"]) == ("XID_154", "GPU_RECOVERY_ACTION_CHANGED")


@pytest.mark.parametrize(
    ("data", "out"),
    [(0, None), (1, "gpu"), (2, "node"), (3, "gpu"), (4, "gpu"), (5, None), (6, "gpu"), (7, "node")],
)
def test_xid_154_takes_out_what_its_recovery_action_says(data, out):
    """NODE_REBOOT/SYSTEM_REBOOT: the node; GPU_RESET, DRAIN_P2P, DRAIN_AND_RESET, BUS_RESET: the GPU; NONE
    and RECOVER_IMEX_DOMAIN: nothing (a warning, the run passes). On a GPU a rank used, either takes its node
    out (docs/nodes.md: a GPU reset of a GPU the run used makes the node unfit)."""
    verdict = verdict_of(roll_of([gpu_line(xid=154, data=data, event_type=RECOVERY_EVENT)]))
    [seen] = verdict.gpu_events
    assert seen.takes_out == out
    assert verdict.passed is (out is None)
    assert verdict.unfit_nodes == ([] if out is None else ["n1"])
    if out is None:
        [warning] = verdict.warnings
        assert warning.kind is GPU_EVENT and verdict.of_kind(UNFIT_DEVICE) == []
    else:
        [problem] = verdict.of_kind(UNFIT_DEVICE)
        assert [u.out for u in problem.detail] == ["node"]


@pytest.mark.parametrize(("xid", "bucket"), [(92, "IGNORE"), (94, "RESTART_APP")])
def test_xid_92_and_94_on_a_ranks_gpu_take_nothing_out_a_warning_or_told_beside_the_error(xid, bucket):
    line = gpu_line(xid=xid, data=xid, event_type=XID_EVENT)
    quiet = verdict_of(roll_of([line]))
    assert quiet.passed and quiet.of_kind(UNFIT_DEVICE) == [] and quiet.unfit == []
    [warning] = quiet.warnings
    assert warning.kind is GPU_EVENT and set(warning.ranks) == {1}
    assert f"Xid {xid} " in warning.message and warning.message.endswith(f"(NVIDIA: {bucket})")
    [seen] = quiet.gpu_events
    assert (seen.klass, seen.takes_out, seen.used) == ("hardware", None, True)
    assert quiet.unfit_nodes == []
    failed = verdict_of(roll_of([line], fails=ERROR))
    assert failed.of_kind(UNFIT_DEVICE) == [] and failed.unfit_nodes == []
    first = failed.findings[0]
    assert first.kind is not UNFIT_DEVICE and f"beside Xid {xid} on GPU 1" in first.message


def test_xid_154_without_its_recovery_action_says_to_follow_it():
    verdict = verdict_of(roll_of([gpu_line(xid=154, data=154, event_type=XID_EVENT)]))
    [warning] = verdict.warnings
    assert warning.message.endswith(": follow the recovery action Xid 154 reports (NVIDIA: XID_154)")
    [seen] = verdict.gpu_events
    assert seen.recovery is None and seen.as_dict()["recovery_action"] is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (0, "no recovery action needed (NVML's recovery action NONE)"),
        (1, "reset the GPU (NVML's recovery action GPU_RESET)"),
        (4, "drain peer-to-peer (P2P) traffic, then reset the GPU (NVML's recovery action DRAIN_AND_RESET)"),
    ],
)
def test_each_recovery_action_is_said_in_words(data, words):
    [seen] = verdict_of(roll_of([gpu_line(xid=154, data=data, event_type=RECOVERY_EVENT)])).gpu_events
    assert seen.advice == words


def test_results_carry_nvidias_immediate_and_investigatory_actions():
    [seen] = verdict_of(roll_of([gpu_line(xid=79, data=79, event_type=XID_EVENT)])).gpu_events
    doc = seen.as_dict()
    assert (doc["immediate_action"], doc["investigatory_action"]) == ("RESTART_BM", "CONTACT_SUPPORT")
    assert (doc["advice"], doc["investigation"]) == (
        "reboot the node (NVIDIA: RESTART_BM)",
        "contact support",
    )
