"""``--drain-unfit``'s marks against the real slurmctld (hack/slurm.sh): the backend's ``mark_nodes`` called
with verdicts directly, no job run; the test drains and reserves nodes as another administrator would.

Every test hands the cluster on as it found it: no reservation, both nodes resumed and answering.
"""

import getpass
import json
import re
import subprocess
import sys

import pytest

from rollcall.backends import Marking, NodeMark
from rollcall.backends.slurm.backend import SlurmBackend
from rollcall.backends.slurm.script import Settings
from tests.waiting import wait_until

#: They need the real Slurm, whose start takes more than a few seconds (no test here trains).
pytestmark = pytest.mark.slow

DRAIN = Marking(drain=True)
#: The maintenance reservation another administrator makes.
THEIRS = "rollcall-theirs"


def state_of(slurm, node):
    line = slurm.run("scontrol", "-o", "show", "node", node)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", line)
    return re.search(r"\bState=(\S+)", line)[1], reason[1] if reason else ""


@pytest.fixture
def nodes(slurm):
    """The test cluster; after the test no reservation of its, and rc1, rc2 resumed and answering again."""
    yield slurm
    delete = ["scontrol", "delete", f"ReservationName={THEIRS}"]
    subprocess.run(delete, env=slurm.env, capture_output=True, check=False)  # refused when there is none
    for node in ("rc1", "rc2"):
        resume = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
        subprocess.run(resume, env=slurm.env, capture_output=True, check=False)  # refused when not drained
    # A resumed node reads IDLE+NOT_RESPONDING until slurmctld hears from its slurmd again (a ping).
    wait_until(
        lambda: f"rc1, rc2 idle again: {state_of(slurm, 'rc1')}, {state_of(slurm, 'rc2')}",
        lambda: all(state_of(slurm, n)[0] == "IDLE" for n in ("rc1", "rc2")),
        timeout=120,
        every=0.5,
    )


def test_a_node_another_admin_drained_keeps_their_reason_whatever_the_verdict_and_is_never_resumed(nodes):
    """rc2 drained by an administrator: an unfit verdict leaves their reason, a fit one does not resume it.
    rc1, drained by rollcall, stays drained while unfit and after a fit check of part of it, and is resumed
    by a fit check of all of it."""
    nodes.run("scontrol", "update", "NodeName=rc2", "State=DRAIN", "Reason=admin: fan")
    backend = SlurmBackend()
    unfit = [NodeMark("rc1", "unfit", "ecc 3 on GPU 1"), NodeMark("rc2", "unfit", "ecc 5 on GPU 0")]
    done = backend.mark_nodes(unfit, DRAIN)
    assert (done.drained, done.failed) == (("rc1",), {}), done.line()
    assert done.left == {"rc2": "drained by someone else: admin: fan"}
    assert state_of(nodes, "rc1") == ("IDLE+DRAIN", "rollcall: ecc 3 on GPU 1")
    assert state_of(nodes, "rc2") == ("IDLE+DRAIN", "admin: fan")

    again = backend.mark_nodes(unfit, DRAIN)
    assert (again.drained, again.already, again.left) == ((), ("rc1",), done.left), again.line()

    part = backend.mark_nodes([NodeMark("rc1", "fit", whole=False), NodeMark("rc2", "fit")], DRAIN)
    assert (part.resumed, part.kept, part.left) == ((), {"rc1": "not re-checked whole"}, done.left)
    assert state_of(nodes, "rc1") == ("IDLE+DRAIN", "rollcall: ecc 3 on GPU 1")

    fit = backend.mark_nodes([NodeMark("rc1", "fit"), NodeMark("rc2", "fit")], DRAIN)
    assert (fit.resumed, fit.left, fit.failed) == (("rc1",), done.left, {}), fit.line()
    assert "DRAIN" not in state_of(nodes, "rc1")[0]
    assert state_of(nodes, "rc2") == ("IDLE+DRAIN", "admin: fan")


def test_a_node_down_or_in_anothers_maintenance_reservation_is_left_and_the_runs_own_is_marked(nodes):
    """rc1 down, rc2 in a maintenance reservation: both left. rc2 in the run's own (--slurm-reservation)
    maintenance reservation is drained (a re-check there drains again a node still unfit)."""
    nodes.run("scontrol", "update", "NodeName=rc1", "State=DOWN", "Reason=admin: psu")
    nodes.run(
        "scontrol", "create", "reservation", f"ReservationName={THEIRS}", f"Users={getpass.getuser()}", "Nodes=rc2",
        "StartTime=now", "Duration=10", "Flags=MAINT,IGNORE_JOBS",
    )  # fmt: skip
    # slurmctld flags a reserved node MAINTENANCE on its next pass over the reservations (a few seconds).
    wait_until(
        lambda: f"rc2 in maintenance: {state_of(nodes, 'rc2')}",
        lambda: "MAINT" in state_of(nodes, "rc2")[0],
        timeout=60,
        every=0.5,
    )
    marks = [NodeMark("rc1", "unfit", "ecc"), NodeMark("rc2", "unfit", "ecc")]
    done = SlurmBackend().mark_nodes(marks, DRAIN)
    assert done.drained == () and done.failed == {}, done.line()
    assert done.left == {
        "rc1": f"down ({state_of(nodes, 'rc1')[0]}): admin: psu",
        "rc2": "in a maintenance reservation",
    }
    assert state_of(nodes, "rc1")[1] == "admin: psu" and "DRAIN" not in state_of(nodes, "rc2")[0]

    ours = SlurmBackend(Settings(reservation=THEIRS))  # the same reservation, now the run's own
    done = ours.mark_nodes([NodeMark("rc2", "unfit", "ecc")], DRAIN)
    assert (done.drained, done.left, done.failed) == (("rc2",), {}, {}), done.line()
    assert state_of(nodes, "rc2")[1] == "rollcall: ecc"


def test_rollcall_nodes_lists_rollcalls_drains_and_clear_resumes_them_never_anothers(nodes, tmp_path):
    """``rollcall nodes`` lists rc1 (drained by rollcall) and not rc2 (drained by an administrator);
    ``--clear`` resumes rc1 and leaves rc2 with their reason."""
    nodes.run("scontrol", "update", "NodeName=rc2", "State=DRAIN", "Reason=admin: fan")
    SlurmBackend().mark_nodes([NodeMark("rc1", "unfit", "rule pcie_gen")], DRAIN)

    def rollcall(*args):
        command = [sys.executable, "-m", "rollcall.cli", "nodes", "--backend", "slurm", *args]
        return subprocess.run(
            command, env=nodes.env, capture_output=True, text=True, timeout=120, check=False
        )

    listed = rollcall("--json")
    assert listed.returncode == 0, listed.stderr
    [rc1] = json.loads(listed.stdout)["nodes"]
    assert (rc1["name"], rc1["marks"], rc1["reason"]) == ("rc1", ["drain"], "rollcall: rule pcie_gen"), rc1
    table = rollcall()
    assert "rc1" in table.stdout and "rc2" not in table.stdout, table.stdout

    cleared = rollcall("--clear", "--node", "rc1", "--node", "rc2", "--json")
    assert cleared.returncode == 0, cleared.stderr
    done = json.loads(cleared.stdout)
    assert done["resumed"] == ["rc1"] and done["left"] == {"rc2": "drained by someone else: admin: fan"}, done
    assert "DRAIN" not in state_of(nodes, "rc1")[0]
    assert state_of(nodes, "rc2") == ("IDLE+DRAIN", "admin: fan")
    assert json.loads(rollcall("--json").stdout)["nodes"] == []
