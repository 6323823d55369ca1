"""The job's nodes while it runs on Slurm: a lost state ends the run only once it has held past its bound."""

import pytest

from rollcall.backends import JobState
from rollcall.backends.slurm.lost import NODE_LOST_S, LostNodes
from rollcall.backends.slurm.state import SLURMD_TIMEOUT_S, SlurmNode, failed_nodes, slurmd_timeout_s
from tests.unit.test_slurm import NODE, RUNNING, ScriptedSlurm, launch


def slurm_node(name, state, reason=""):
    why = f" Reason={reason}" if reason else ""
    return SlurmNode.parse(NODE.format(name=name, n=1, state=state, gres="(null)", parts="p", reason=why))


@pytest.mark.parametrize(
    ("state", "lost"),
    [
        ("ALLOCATED", None),
        ("ALLOCATED+NOT_RESPONDING", "NOT_RESPONDING"),
        ("DOWN+NOT_RESPONDING", "DOWN"),  # the most decided of the two
        ("MIXED+DRAIN", None),  # draining: the running job goes on to its end
        ("ALLOCATED+FAILING", None),
        ("ALLOCATED+REBOOT_REQUESTED", None),  # the reboot waits for the job
        ("ALLOCATED+REBOOT_ISSUED", "REBOOT_ISSUED"),
        ("IDLE+POWERING_DOWN", "POWERING_DOWN"),
    ],
)
def test_the_states_in_which_a_node_no_longer_runs_its_job(state, lost):
    assert slurm_node("rc2", state).lost() == lost


def test_slurmd_timeout_is_read_from_the_config_and_slurms_default_where_it_says_none_or_zero():
    assert slurmd_timeout_s("SlurmctldTimeout        = 120 sec\nSlurmdTimeout           = 60 sec\n") == 60
    assert slurmd_timeout_s("SlurmdTimeout = 0 sec\n") == SLURMD_TIMEOUT_S == 300
    assert slurmd_timeout_s("") == 300


def test_srun_names_the_nodes_that_failed_under_the_step():
    said = "srun: error: Node failure on rc2\nsrun: error: rc2: task 1: Terminated\nsrun: error: Node failure on rc2\n"
    assert failed_nodes(said) == ["rc2"]


def test_not_responding_counts_only_past_slurmd_timeout_and_its_margin_and_down_past_its_bound():
    lost = LostNodes(slurmd_timeout_s=60)
    assert lost.look([slurm_node("rc1", "ALLOCATED"), slurm_node("rc2", "ALLOCATED+NOT_RESPONDING")], 0) == [
        f"slurm node rc2: NOT_RESPONDING (counts past {60 + NODE_LOST_S:g}s)"
    ]
    hosts = ["rc1", "rc2"]
    for t in (10, 50, 89):
        assert lost.look([slurm_node("rc2", "ALLOCATED+NOT_RESPONDING")], t) == []
        assert lost.lost(hosts) is None  # slurmctld still gives it time to answer
    assert lost.seen(hosts) == "node 1 (slurm node rc2) lost: NOT_RESPONDING for 89s (counts past 90s)"
    lost.look([slurm_node("rc2", "ALLOCATED+NOT_RESPONDING")], 90)
    assert lost.lost(hosts) == "node 1 (slurm node rc2) lost: NOT_RESPONDING for 90s (counts past 90s)"
    # slurmctld decides: DOWN starts a holding of its own, with its own bound
    changed = lost.look([slurm_node("rc2", "DOWN+NOT_RESPONDING", "Not responding")], 95)
    assert changed == ["slurm node rc2: DOWN (counts past 30s)"] and lost.lost(hosts) is None
    lost.look([slurm_node("rc2", "DOWN+NOT_RESPONDING", "Not responding")], 125)
    assert lost.lost(hosts) == "node 1 (slurm node rc2) lost: DOWN (Not responding) for 30s (counts past 30s)"


def test_a_state_that_clears_starts_again_and_one_look_never_counts():
    lost = LostNodes(slurmd_timeout_s=60, bound_s=0)
    lost.look([slurm_node("rc2", "DOWN")], 0)
    assert lost.lost(["rc1", "rc2"]) is None  # one look, even past a bound of 0
    assert lost.look([slurm_node("rc2", "ALLOCATED")], 1) == ["slurm node rc2: DOWN no more"]
    lost.look([slurm_node("rc2", "DOWN")], 2)
    assert lost.lost(["rc1", "rc2"]) is None and lost.seen(["rc1", "rc2"]).endswith(
        "DOWN for 0s (counts past 0s)"
    )


def test_a_node_that_stops_answering_for_a_while_fails_nothing_and_its_states_are_said(tmp_path):
    flicker = [
        {"rc1": "ALLOCATED", "rc2": "ALLOCATED"},
        {"rc1": "ALLOCATED", "rc2": "ALLOCATED+NOT_RESPONDING"},
        {"rc1": "ALLOCATED", "rc2": "ALLOCATED+NOT_RESPONDING"},
        {"rc1": "ALLOCATED", "rc2": "ALLOCATED"},
    ]
    slurm = ScriptedSlurm([RUNNING] * 6 + [("COMPLETED", "None", "rc[1-2]")], nodes=flicker)
    said = []
    job, collector = launch(tmp_path, slurm, node_look_s=0, node_lost_s=0, progress=said.append)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.SUCCEEDED, status.reason
    assert "slurm node rc2: NOT_RESPONDING (counts past 60s)" in said  # SlurmdTimeout 60 s, + 0 here
    assert "slurm node rc2: NOT_RESPONDING no more" in said
    assert slurm.calls.count(["scontrol", "show", "config"]) == 1
    assert ["scontrol", "show", "node", "-o", "rc[1-2]"] in slurm.calls


def test_a_node_down_past_its_bound_ends_the_run_naming_it_the_clusters(tmp_path):
    from rollcall.checks.blame import blame
    from rollcall.checks.job_state import JOB
    from rollcall.verdict import Owner, Problem

    down = [{"rc1": "ALLOCATED", "rc2": ("DOWN+NOT_RESPONDING", "Not responding")}]
    slurm = ScriptedSlurm([RUNNING], nodes=down)
    job, collector = launch(tmp_path, slurm, node_look_s=0, node_lost_s=0.05)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.FAILED
    assert status.reason.startswith("node 1 (slurm node rc2) lost: DOWN (Not responding) for ")
    assert status.reason.endswith("(counts past 0.05s); slurm job 42 is cancelled")
    assert blame(Problem(JOB, f"job failed: {status.reason}")).owner is Owner.CLUSTER


def test_a_job_ended_node_fail_names_the_node_srun_says_failed_and_the_state_seen(tmp_path):
    nodes = [{"rc1": "ALLOCATED", "rc2": "ALLOCATED+NOT_RESPONDING"}]
    batch = "srun: error: Node failure on rc2\nsrun: error: rc2: task 1: Terminated\n"
    slurm = ScriptedSlurm([RUNNING, RUNNING, ("NODE_FAIL", "NodeDown", "rc[1-2]")], batch, nodes=nodes)
    job, collector = launch(tmp_path, slurm, node_look_s=0)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.FAILED
    assert status.reason.startswith("slurm job 42 ended NODE_FAIL (exit code 1:0, reason NodeDown); srun: ")
    assert "; node 1 (slurm node rc2) lost: srun says Node failure on rc2; " in status.reason
    assert "node 1 (slurm node rc2) lost: NOT_RESPONDING for " in status.reason
