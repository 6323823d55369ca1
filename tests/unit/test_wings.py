"""A backend is declared once: its wing, and one line of the registry (``rollcall.backends.WINGS``).

The session finds a wing by name or by detection through the registry, and asks a backend's class what it
can do (its capabilities, protocols beside ``ConfirmsLater``), never its name or type.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from rollcall import backends
from rollcall.backends import (
    WINGS,
    BackendSettings,
    ChecksAtStart,
    MarksNodes,
    MountsSharedCache,
    Placement,
    RendersManifest,
    SchedulesTheSuite,
    Wing,
    able,
    auto_help,
    choose,
    wing_named,
)
from rollcall.options import OptionError, resolve
from rollcall.suite import Suite, choose_backend


def test_each_wing_loads_its_backend_class_which_makes_its_backend_and_carries_its_name():
    assert [w.name for w in WINGS] == ["kubernetes", "local", "slurm"]
    for wing in WINGS:
        cls = wing.load()
        assert callable(cls.from_options), wing.name
        assert cls.name == wing.name  # the name the reports record is the registry's
    assert wing_named("local").load()().name == "local"
    with pytest.raises(KeyError, match="no backend 'lsf'; there are kubernetes, local, slurm"):
        wing_named("lsf")


def test_what_each_backend_can_do_is_a_capability_of_its_class():
    assert able(ChecksAtStart) == ["kubernetes", "slurm"]
    assert able(RendersManifest) == ["kubernetes", "slurm"]
    assert able(SchedulesTheSuite) == ["kubernetes"]
    assert able(MountsSharedCache) == ["kubernetes"]
    assert able(MarksNodes) == ["kubernetes", "slurm"]


def test_auto_finds_a_wing_by_its_detection_else_the_fallback(tmp_path):
    options = resolve({}, {})
    home = {"HOME": str(tmp_path)}
    wing, why = choose("auto", options.section, {**home, "KUBECONFIG": "/k"})
    assert (wing.name, why) == ("kubernetes", "KUBECONFIG=/k")
    wing, why = choose("auto", options.section, home)
    assert (wing.name, why) == ("local", "no kubeconfig or in-cluster config found")
    assert choose("slurm", options.section, {"KUBECONFIG": "/k"})[0].name == "slurm"
    assert auto_help() == (
        "auto = kubernetes when a kubeconfig or in-cluster config exists, else local, unless an option only "
        "another backend reads is given (a usage error); slurm only when asked for"
    )


class Recorder:
    """A backend of a wing declared by one registry line, in this module."""

    name = "recorder"
    unit = "node"
    made: ClassVar[list[tuple[object, BackendSettings]]] = []

    @classmethod
    def from_options(cls, section: object, session: BackendSettings) -> Recorder:
        cls.made.append((section, session))
        return cls()

    def discover(self, request):  # pragma: no cover - no job runs here
        return Placement("cpu", 1)

    def launch(self, spec, collector):  # pragma: no cover - no job runs here
        raise NotImplementedError

    MARKS = ("label", "taint")

    def mark_nodes(self, marks, how):  # pragma: no cover - no job runs here
        raise NotImplementedError


def test_a_backend_is_its_wing_and_one_registry_line(monkeypatch, tmp_path):
    line = Wing("recorder", f"{__name__}:Recorder", "slurm")
    monkeypatch.setattr(backends, "WINGS", (*WINGS, line))
    given = {"slurm_partition": "gpu", "taint_unfit": "rollcall/unfit=true:NoSchedule"}
    options = resolve({**given, "artifacts_dir": str(tmp_path)}, {})
    assert choose("recorder", options.section, {})[0] is line
    suite = Suite(options, "recorder", "--backend recorder")
    suite.prepare(
        connect=True
    )  # it taints nodes: --taint-unfit is no usage error; it checks nothing at start
    assert isinstance(suite.backend, Recorder) and isinstance(suite.backend, MarksNodes)
    section, session = Recorder.made[-1]
    assert section is options.slurm  # given its own section only
    assert session.marks.taint is not None and session.unschedulable_grace_s == 60.0
    assert able(MarksNodes) == ["kubernetes", "slurm", "recorder"]


def test_a_backend_without_a_capability_is_refused_the_option_that_needs_it_naming_those_with_it():
    options = resolve({"taint_unfit": "rollcall/unfit=true:NoSchedule", "backend": "local"}, {})
    name, why = choose_backend(options, {})
    with pytest.raises(OptionError, match=r"which taints none; .* \(--backend kubernetes\)"):
        Suite(options, name, why).prepare(connect=False)
    options = resolve({"compile_cache": "nfs:fs-1.efs.example.com:/cache", "backend": "slurm"}, {})
    with pytest.raises(OptionError, match="the slurm backend mounts no volume"):
        Suite(options, *choose_backend(options, {})).prepare(connect=False)
