"""``--backend auto`` falls back to local only when nothing asks for a cluster.

An option, a ``ROLLCALL_*`` variable or an ini key that only a cluster's backend reads (its own section's,
or one declared as read by it alone: ``--image``) asks for a cluster. Given with no cluster found, the run
is a usage error naming it, what was not found, and the fix; a release gate never goes green on a run that
trained on the runner's CPU. Every case here has an empty environment and a home without a kubeconfig.
"""

from __future__ import annotations

import os

import pytest

from rollcall.backends import WINGS
from rollcall.options import OPTIONS, OptionError, resolve
from rollcall.suite import Suite, choose_backend, cluster_asks, read_by

FIX = "set KUBECONFIG / --kubeconfig, or --backend local to run here on purpose"
NOT_FOUND = "--backend auto found no cluster (no kubeconfig or in-cluster config found"


@pytest.fixture
def home(tmp_path) -> dict[str, str]:
    """An environment of a home only, with no kubeconfig in it."""
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home")}


def refused(cli: dict, environ: dict[str, str], ini: dict | None = None) -> str:
    """The refusal of ``--backend auto`` for these options; fails when a backend is chosen."""
    with pytest.raises(OptionError) as exc:
        choose_backend(resolve(cli, environ, ini), environ)
    return str(exc.value)


def test_a_kubernetes_option_given_by_flag_is_refused_naming_it_the_kubeconfig_missing_and_the_fix(home):
    assert refused({"instance_type": "p5.48xlarge"}, home) == (
        f"{NOT_FOUND}), but --instance-type p5.48xlarge (the kubernetes backend's option) asks for one; {FIX}"
    )


def test_the_same_option_by_its_variable_or_ini_key_is_named_by_where_it_came_from(home):
    err = refused({}, {**home, "ROLLCALL_INSTANCE_TYPE": "p5.48xlarge"})
    assert "--instance-type p5.48xlarge (from ROLLCALL_INSTANCE_TYPE; the kubernetes backend's option)" in err
    assert FIX in err
    err = refused({}, home, {"node_selector": ["karpenter.sh/nodepool=gpu"]})
    assert "--node-selector (from ini rollcall_node_selector; the kubernetes backend's option)" in err


def test_a_value_equal_to_the_default_still_asks(home):
    assert "--efa auto (from ROLLCALL_EFA; the kubernetes backend's option)" in refused(
        {}, {**home, "ROLLCALL_EFA": "auto"}
    )


def test_image_lives_in_the_job_section_but_only_the_kubernetes_backend_reads_it(home):
    assert read_by(next(s for s in OPTIONS if s.name == "image")) == ("kubernetes",)
    assert read_by(next(s for s in OPTIONS if s.name == "nodes")) == ()  # every backend's
    err = refused({"image": "registry.example/bert:1"}, home)
    assert "--image registry.example/bert:1 (the kubernetes backend's option) asks for one" in err


def test_a_slurm_option_names_slurm_and_asks_for_it_by_name(home):
    assert refused({"slurm_partition": "gpu"}, home) == (
        f"{NOT_FOUND}; slurm is chosen only when asked for), but --slurm-partition gpu (the slurm backend's "
        "option) asks for one; pass --backend slurm, or --backend local to run here on purpose"
    )


def test_every_option_asking_is_named_with_each_wings_fix(home):
    err = refused(
        {"instance_type": "p5.48xlarge", "slurm_account": "ml"}, {**home, "ROLLCALL_CONTEXT": "eks"}
    )
    assert (  # in the options' order
        "but --context eks (from ROLLCALL_CONTEXT; the kubernetes backend's option), --instance-type "
        "p5.48xlarge (the kubernetes backend's option), --slurm-account ml (the slurm backend's option) ask "
        "for one"
    ) in err
    assert "set KUBECONFIG / --kubeconfig or pass --backend slurm, or --backend local" in err


def test_nothing_asking_for_a_cluster_runs_here_as_before_and_the_header_says_why(home):
    options = resolve({"nodes": "3", "job_timeout": "5m"}, home)
    assert cluster_asks(options) == ()
    name, why = choose_backend(options, home)
    assert (name, why) == (
        "local",
        "--backend auto: no kubeconfig or in-cluster config found, and nothing asks for a cluster",
    )
    assert (
        Suite(options, name, why)
        .header()
        .startswith(
            "rollcall: backend=local (--backend auto: no kubeconfig or in-cluster config found, and nothing asks "
            "for a cluster), nodes=3"
        )
    )


def test_backend_local_given_is_never_refused_by_this_rule(home):
    options = resolve({"backend": "local", "instance_type": "p5.48xlarge"}, home)
    assert choose_backend(options, home) == ("local", "--backend local")
    options = resolve({"instance_type": "p5.48xlarge"}, {**home, "ROLLCALL_BACKEND": "local"})
    assert choose_backend(options, home)[0] == "local"


def test_a_cluster_found_is_chosen_as_before(home, tmp_path):
    options = resolve({"instance_type": "p5.48xlarge", "slurm_partition": "gpu"}, home)
    assert choose_backend(options, {**home, "KUBECONFIG": "/k"}) == ("kubernetes", "KUBECONFIG=/k")
    kube = tmp_path / "home" / ".kube"
    kube.mkdir()
    (kube / "config").write_text("{}")
    assert choose_backend(options, home) == ("kubernetes", f"kubeconfig {kube / 'config'}")
    given = resolve({"kubeconfig": "/nonexistent", "image": "bert:1"}, home)  # checked at start, not here
    assert choose_backend(given, home) == ("kubernetes", "kubeconfig /nonexistent")
    assert choose_backend(options, {**home, "KUBERNETES_SERVICE_HOST": "10.0.0.1"})[0] == "kubernetes"


def test_the_fallback_reads_no_option_of_a_cluster_section():
    fallback = next(w for w in WINGS if w.fallback)
    assert fallback.section is None
    assert {s.flag for s in OPTIONS if read_by(s) and fallback.name not in read_by(s)} >= {
        "--image",
        "--instance-type",
        "--node-selector",
        "--efa",
        "--slurm-partition",
        "--container-image",
    }


def test_rollcall_nodes_follows_the_same_rule(monkeypatch, tmp_path, capsys):
    from rollcall.cli import main

    for name in [k for k in os.environ if k.startswith("ROLLCALL_") or k.startswith("KUBE")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    assert main(["nodes", "--slurm-partition", "gpu"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("rollcall nodes: --backend auto found no cluster (no kubeconfig"), err
    assert "--slurm-partition gpu (the slurm backend's option) asks for one; pass --backend slurm" in err
    assert main(["nodes"]) == 4  # nothing asks: local, which leaves no mark, as before
    assert "the local backend (--backend auto: no kubeconfig" in capsys.readouterr().err
