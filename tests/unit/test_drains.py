"""``--drain-unfit`` on Slurm, against a scripted ``scontrol``: what is drained, what is resumed, whose rights.

The real Slurm's drains and resumes, and a re-check through a reservation, are tests/slurm's.
"""

from __future__ import annotations

import pytest

from rollcall.backends import Marking, NodeMark
from rollcall.backends.slurm import drains
from rollcall.options import OptionError


class Refused(Exception):
    pass


class Scontrol:
    """``scontrol`` over nodes held here: ``-o show node``, ``update``, ``-o show reservation``, hostnames."""

    def __init__(self, **nodes: tuple[str, str]):
        self.nodes = dict(nodes)
        self.calls: list[list[str]] = []
        self.config = "SlurmUser               = slurm(64030)\n"
        self.admin = ""
        #: Nodes whose ``scontrol update`` slurmctld refuses (a node's own failure).
        self.refuse: set[str] = set()
        #: The reservation's nodes (``-o show reservation``).
        self.reserved = "rc[1-3]"

    def updates(self) -> list[list[str]]:
        """Every ``scontrol update`` run, in order."""
        return [c for c in self.calls if c[:2] == ["scontrol", "update"]]

    def __call__(self, argv, timeout_s=60.0):
        argv = list(argv)
        self.calls.append(argv)
        if argv[:4] == ["scontrol", "-o", "show", "node"]:
            if argv[4] not in self.nodes:
                raise Refused(f"scontrol -o show node {argv[4]} exited 1: Node {argv[4]} not found")
            state, reason = self.nodes[argv[4]]
            said = f" Reason={reason} [root@2026-12-06T17:00:00]" if reason else ""
            return f"NodeName={argv[4]} Arch=x86_64 State={state} Weight=1{said}\n"
        if argv[:2] == ["scontrol", "update"]:
            name = argv[2].split("=", 1)[1]
            if name not in self.nodes:
                raise Refused(f"scontrol update exited 1: Invalid node name specified: {name}")
            if name in self.refuse:
                raise Refused(f"scontrol update exited 1: Unable to contact slurm controller (update {name})")
            words = [w for w in self.nodes[name][0].split("+") if w != "DRAIN"]
            if argv[3] == "State=DRAIN":
                self.nodes[name] = ("+".join([*words, "DRAIN"]), argv[4].split("=", 1)[1])
            else:
                self.nodes[name] = ("+".join(words), "")
            return ""
        if argv[:4] == ["scontrol", "-o", "show", "reservation"]:
            return f"ReservationName={argv[4]} StartTime=now Nodes={self.reserved} NodeCnt=3 Flags=MAINT,IGNORE_JOBS\n"
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            assert argv[3] == "rc[1-3]", argv
            return "rc1\nrc2\nrc3\n"
        if argv == ["scontrol", "show", "config"]:
            return self.config
        if argv[0] == "sacctmgr":
            if not self.admin:
                raise Refused("sacctmgr exited 1: You are not running a supported accounting_storage plugin")
            return self.admin + "\n"
        raise AssertionError(argv)


DRAIN = Marking(drain=True)


def test_an_unfit_node_is_drained_with_its_reason_and_a_fit_one_rollcall_drained_is_resumed():
    run = Scontrol(
        rc1=("IDLE", ""), rc2=("IDLE+DRAIN", "rollcall: ecc"), rc3=("IDLE+DRAIN", "bad fan, ticket 12")
    )
    marks = [
        NodeMark("rc1", "unfit", "node 0 (rc1) GPU 3: pcie_width=8 below 16\n(rule pcie_width)"),
        NodeMark("rc2", "fit"),
        NodeMark("rc3", "fit"),  # drained by someone else: stays drained
        NodeMark("rc4", "unfit", "ecc"),
    ]
    done = drains.mark_nodes(run, marks, DRAIN, Refused)
    assert (done.drained, done.resumed, list(done.failed)) == (("rc1",), ("rc2",), ["rc4"])
    assert run.nodes["rc1"] == (
        "IDLE+DRAIN",
        "rollcall: node 0 (rc1) GPU 3: pcie_width=8 below 16 (rule pcie_width)",
    )
    assert run.nodes["rc2"] == ("IDLE", "") and run.nodes["rc3"] == ("IDLE+DRAIN", "bad fan, ticket 12")
    assert done.left == {"rc3": "drained by someone else: bad fan, ticket 12"}
    assert "Node rc4 not found" in done.failed["rc4"]
    assert done.as_dict()["line"].startswith("drained unfit node(s) rc1; resumed node(s) rc2")
    assert (
        drains.mark_nodes(run, marks, Marking(), Refused) == drains.Drained()
    )  # without the option: nothing
    assert len(drains.reason_of(NodeMark("x", "unfit", "y" * 500))) == drains.REASON_CHARS


def test_a_node_someone_else_drained_keeps_their_reason_and_is_never_resumed():
    """Unfit: their drain is not replaced by rollcall's; a later fit verdict does not resume it (no update)."""
    run = Scontrol(rc1=("IDLE+DRAIN", "admin: fan"), rc2=("ALLOCATED+DRAIN", "Reboot ASAP"))
    done = drains.mark_nodes(
        run, [NodeMark("rc1", "unfit", "ecc"), NodeMark("rc2", "unfit", "ecc")], DRAIN, Refused
    )
    later = drains.mark_nodes(run, [NodeMark("rc1", "fit"), NodeMark("rc2", "fit")], DRAIN, Refused)
    assert run.updates() == []
    assert run.nodes == {"rc1": ("IDLE+DRAIN", "admin: fan"), "rc2": ("ALLOCATED+DRAIN", "Reboot ASAP")}
    assert done.drained == () and later.resumed == ()
    assert (
        done.left
        == later.left
        == {
            "rc1": "drained by someone else: admin: fan",
            "rc2": "drained by someone else: Reboot ASAP",
        }
    )
    assert done.line() == (
        "left node rc1 as it is, drained by someone else: admin: fan; "
        "left node rc2 as it is, drained by someone else: Reboot ASAP"
    )
    assert done.as_dict()["left"] == done.left


def test_down_failing_rebooting_and_maintenance_nodes_are_left_and_an_ordinary_reservation_is_no_hold():
    run = Scontrol(
        rc1=("DOWN+NOT_RESPONDING", "Not responding"),
        rc2=("IDLE+FAIL", "psu"),
        rc3=("IDLE+MAINTENANCE+RESERVED", ""),
        rc4=("IDLE+REBOOT_REQUESTED", ""),
        rc5=("IDLE+RESERVED", ""),
        rc6=("IDLE+NOT_RESPONDING", ""),
        rc7=("DOWN", ""),
    )
    marks = [NodeMark(f"rc{i}", "unfit", "ecc") for i in range(1, 7)] + [NodeMark("rc7", "fit")]
    done = drains.mark_nodes(run, marks, DRAIN, Refused)
    assert done.left == {
        "rc1": "down (DOWN+NOT_RESPONDING): Not responding",
        "rc2": "down (IDLE+FAIL): psu",
        "rc3": "in a maintenance reservation",
        "rc4": "waiting for a reboot an administrator asked for (IDLE+REBOOT_REQUESTED)",
        "rc7": "down (DOWN): no reason given",
    }
    assert done.drained == ("rc5", "rc6") and done.failed == {}
    assert [u[2] for u in run.updates()] == ["NodeName=rc5", "NodeName=rc6"]
    assert run.nodes["rc3"] == ("IDLE+MAINTENANCE+RESERVED", "") and run.nodes["rc1"][1] == "Not responding"


def test_the_runs_own_maintenance_reservation_is_no_one_elses_hold():
    """A re-check in --slurm-reservation: its nodes still unfit are drained again, others' MAINT is left."""
    run = Scontrol(rc1=("IDLE+MAINTENANCE+RESERVED", ""), rc9=("IDLE+MAINTENANCE+RESERVED", ""))
    done = drains.mark_nodes(
        run, [NodeMark("rc1", "unfit", "ecc"), NodeMark("rc9", "unfit", "ecc")], DRAIN, Refused, ["maint"]
    )
    assert done.drained == ("rc1",) and done.left == {"rc9": "in a maintenance reservation"}
    assert run.nodes["rc1"] == ("IDLE+MAINTENANCE+RESERVED+DRAIN", "rollcall: ecc")
    run = Scontrol(rc1=("IDLE+MAINTENANCE+RESERVED", ""))
    run.reserved = "(null)"  # a reservation holding no node: its name makes no node ours
    done = drains.mark_nodes(run, [NodeMark("rc1", "unfit", "ecc")], DRAIN, Refused, ["maint"])
    assert done.left == {"rc1": "in a maintenance reservation"} and run.updates() == []


def test_rollcalls_own_drain_is_kept_while_unfit_and_resumed_only_by_a_check_of_every_gpu():
    run = Scontrol(
        rc1=("IDLE+DRAIN", "rollcall: ecc"),
        rc2=("IDLE+DRAIN", "rollcall: ecc"),
        rc3=("MIXED+DRAIN", "rollcall: pcie"),
        rc4=("IDLE", ""),
    )
    marks = [
        NodeMark("rc1", "unfit", "ecc again"),
        NodeMark("rc2", "fit", whole=False),
        NodeMark("rc3", "fit", whole=True),
        NodeMark("rc4", "fit", whole=False),  # not drained: nothing to do, nothing said
    ]
    done = drains.mark_nodes(run, marks, DRAIN, Refused)
    assert (done.drained, done.already, done.resumed) == ((), ("rc1",), ("rc3",))
    assert done.kept == {"rc2": "not re-checked whole"} and done.left == {} and done.failed == {}
    assert run.updates() == [["scontrol", "update", "NodeName=rc3", "State=RESUME"]]
    assert run.nodes["rc1"] == ("IDLE+DRAIN", "rollcall: ecc") and run.nodes["rc2"] == (
        "IDLE+DRAIN",
        "rollcall: ecc",
    )
    assert done.line() == (
        "unfit node(s) rc1 already drained by rollcall; resumed node(s) rc3 that rollcall drained, found fit; "
        "kept node rc2 drained by rollcall: not re-checked whole"
    )
    assert done.as_dict()["already"] == ["rc1"] and done.as_dict()["kept"] == done.kept
    undecided = [NodeMark("rc2", "undetermined"), NodeMark("rc4", "unchecked")]
    run.calls.clear()
    assert drains.mark_nodes(run, undecided, DRAIN, Refused) == drains.Drained() and run.calls == []


def test_a_node_slurm_refuses_is_named_and_every_other_node_is_still_marked():
    run = Scontrol(
        rc1=("IDLE", ""),
        rc2=("IDLE", ""),
        rc3=("IDLE+DRAIN", "rollcall: ecc"),
        rc4=("IDLE+DRAIN", "rollcall: x"),
    )
    run.refuse = {"rc2", "rc3"}
    marks = [
        NodeMark("rc1", "unfit", "ecc"),
        NodeMark("rc2", "unfit", "ecc"),
        NodeMark("rc3", "fit"),
        NodeMark("rc4", "fit"),
        NodeMark("gone", "unfit", "ecc"),
    ]
    done = drains.mark_nodes(run, marks, DRAIN, Refused)
    assert (done.drained, done.resumed) == (("rc1",), ("rc4",))
    assert list(done.failed) == ["rc2", "rc3", "gone"]
    assert "Unable to contact slurm controller (update rc2)" in done.failed["rc2"]
    assert "Node gone not found" in done.failed["gone"]
    assert run.nodes["rc1"] == ("IDLE+DRAIN", "rollcall: ecc") and run.nodes["rc4"] == ("IDLE", "")
    line = done.line()
    assert line.startswith(
        "drained unfit node(s) rc1; resumed node(s) rc4 that rollcall drained, found fit; "
    )
    assert "could not mark node rc2: " in line and "could not mark node gone: " in line


def test_each_node_is_read_just_before_its_own_update():
    """The race's window: no other command between a node's read and its update."""
    run = Scontrol(rc1=("IDLE", ""), rc2=("IDLE+DRAIN", "rollcall: ecc"))
    drains.mark_nodes(run, [NodeMark("rc1", "unfit", "ecc"), NodeMark("rc2", "fit")], DRAIN, Refused)
    assert [c[:5] for c in run.calls] == [
        ["scontrol", "-o", "show", "node", "rc1"],
        ["scontrol", "update", "NodeName=rc1", "State=DRAIN", "Reason=rollcall: ecc"],
        ["scontrol", "-o", "show", "node", "rc2"],
        ["scontrol", "update", "NodeName=rc2", "State=RESUME"],
    ]


def test_the_real_scontrol_lines_are_read():
    """Lines as Slurm 22.05's ``scontrol -o show node`` writes them (tests/slurm runs the real one)."""
    said = (
        "NodeName=rc1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 State=DOWN+DRAIN ThreadsPerCore=1 TmpDisk=0 "
        "Weight=1 Owner=N/A ExtSensorsTemp=n/s Reason=admin: fan [root@2026-12-07T21:07:08]\n"
    )
    state = drains.node_state(lambda argv, timeout_s: said, "rc1")
    assert state == drains.NodeState("DOWN+DRAIN", "admin: fan")
    assert drains.held_by(state) == "down (DOWN+DRAIN): admin: fan" and not state.drained_by_rollcall


def test_a_recheck_resumes_only_the_reservations_nodes_that_rollcall_drained():
    run = Scontrol(
        rc1=("IDLE+DRAIN", "rollcall: ecc"),
        rc2=("IDLE+DRAIN", "bad fan"),
        rc3=("DOWN+DRAIN", "rollcall: lost"),
    )
    assert drains.resume_for_recheck(run, "maint") == ["rc1", "rc3"]
    assert run.nodes["rc2"] == ("IDLE+DRAIN", "bad fan")


def test_draining_needs_operator_rights_and_says_how_to_get_them():
    run = Scontrol()
    assert drains.missing_rights(run, user="root", euid=0) is None
    assert drains.missing_rights(run, user="slurm", euid=64030) is None
    run.admin = "Operator"
    assert drains.missing_rights(run, user="ana", euid=1000) is None
    run.admin = ""
    why = drains.missing_rights(run, user="ana", euid=1000)
    assert why is not None and "needs Slurm's operator rights; ana has none" in why
    assert "run as root or slurm" in why and "sacctmgr modify user ana set adminlevel=operator" in why


def test_drain_unfit_off_slurm_and_taints_off_kubernetes_are_usage_errors():
    from rollcall.options import resolve
    from rollcall.suite import Suite, choose_backend

    options = resolve({"drain_unfit": True, "backend": "kubernetes"}, {})
    with pytest.raises(OptionError, match=r"--drain-unfit: drains a cluster's nodes, .* \(--backend slurm\)"):
        Suite(options, *choose_backend(options, {})).prepare(connect=False)
    options = resolve({"label_nodes": True, "backend": "slurm"}, {})
    with pytest.raises(
        OptionError, match=r"--label-nodes: labels a cluster's nodes, .* \(--backend kubernetes\)"
    ):
        Suite(options, *choose_backend(options, {})).prepare(connect=False)


def test_a_session_without_the_rights_stops_before_any_run(monkeypatch):
    from rollcall.backends import BackendSettings
    from rollcall.backends.slurm.backend import SlurmBackend, SlurmCommands
    from rollcall.options import DEFAULTS

    monkeypatch.setattr(SlurmCommands, "configured", classmethod(lambda cls, environ=None: Scontrol()))
    monkeypatch.setattr(drains.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(drains.getpass, "getuser", lambda: "ana")
    with pytest.raises(OptionError, match="--drain-unfit drains and resumes Slurm nodes"):
        SlurmBackend.from_options(DEFAULTS.slurm, BackendSettings(marks=Marking(drain=True)))
    assert SlurmBackend.from_options(DEFAULTS.slurm, BackendSettings()).drain is False  # no check without it
