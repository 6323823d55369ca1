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

    def __call__(self, argv, timeout_s=60.0):
        argv = list(argv)
        self.calls.append(argv)
        if argv[:4] == ["scontrol", "-o", "show", "node"]:
            state, reason = self.nodes[argv[4]]
            return f"NodeName={argv[4]} Arch=x86_64 State={state} Weight=1 Reason={reason} [root@2026-12-06T17:00:00]\n"
        if argv[:2] == ["scontrol", "update"]:
            name = argv[2].split("=", 1)[1]
            if name not in self.nodes:
                raise Refused(f"scontrol update exited 1: Invalid node name specified: {name}")
            if argv[3] == "State=DRAIN":
                self.nodes[name] = ("IDLE+DRAIN", argv[4].split("=", 1)[1])
            else:
                self.nodes[name] = ("IDLE", "")
            return ""
        if argv[:4] == ["scontrol", "-o", "show", "reservation"]:
            return (
                f"ReservationName={argv[4]} StartTime=now Nodes=rc[1-3] NodeCnt=3 Flags=MAINT,IGNORE_JOBS\n"
            )
        if argv[:3] == ["scontrol", "show", "hostnames"]:
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
    assert "Invalid node name" in done.failed["rc4"]
    assert done.as_dict()["line"].startswith("drained unfit node(s) rc1; resumed node(s) rc2")
    assert (
        drains.mark_nodes(run, marks, Marking(), Refused) == drains.Drained()
    )  # without the option: nothing
    assert len(drains.reason_of(NodeMark("x", "unfit", "y" * 500))) == drains.REASON_CHARS


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
