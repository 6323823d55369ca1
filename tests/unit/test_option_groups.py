"""The options in groups (``pytest --help``) and a cluster's settings from the ini file, under the command line
and the environment."""

import re

import pytest

from rollcall.options import GROUPS, OPTIONS, OptionError, resolve

pytest_plugins = ["pytester"]

#: A test that prints what the session resolved: each option named, its value and where it came from.
SHOW = """
from rollcall.plugin import _SUITE

NAMES = {names!r}

def test_show(request):
    options = request.config.stash[_SUITE].options
    for name in NAMES:
        print(f"OPTION {{name}}={{getattr(options, name)!r}} FROM {{options.source(name)}}")
"""


def shown(pytester: pytest.Pytester, *args: str, names: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """Run pytest in ``pytester`` with ``args``; each of ``names``' value (repr) and source, as resolved."""
    pytester.makepyfile(test_show=SHOW.format(names=names))
    res = pytester.runpytest("-p", "no:cacheprovider", "-s", *args)
    assert res.ret == pytest.ExitCode.OK, res.stdout.str() + res.stderr.str()
    found = re.findall(r"OPTION (\w+)=(.*) FROM (.*)$", res.stdout.str(), re.M)
    return {name: (value, source) for name, value, source in found}


def help_sections(text: str) -> dict[str, str]:
    """``pytest --help``'s sections by heading (a line ending in ``:`` at column 0), each its text."""
    sections: dict[str, str] = {}
    heading = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = ""
        elif heading:
            sections[heading] += line + "\n"
    return sections


def test_every_option_has_a_group_and_every_group_options():
    names = [name for name, _ in GROUPS]
    assert len(names) == len(set(names)) == 7
    assert {s.group for s in OPTIONS} == set(names)
    assert all(s.group in names for s in OPTIONS)


def test_help_shows_each_option_under_its_group_in_the_groups_order(pytester):
    res = pytester.runpytest("--help")
    assert res.ret == pytest.ExitCode.OK
    sections = help_sections(res.stdout.str())
    headings = [f"rollcall, {title}" for _, title in GROUPS]
    assert [h for h in sections if h.startswith("rollcall,")] == headings
    for spec in OPTIONS:
        heading = f"rollcall, {dict(GROUPS)[spec.group]}"
        assert re.search(rf"^  {re.escape(spec.flag)}(?=[= ]|$)", sections[heading], re.M), (
            f"{spec.flag} is not under '{heading}' in pytest --help"
        )
        others = [
            h
            for h in headings
            if h != heading and re.search(rf"^  {re.escape(spec.flag)}(?=[= ]|$)", sections[h], re.M)
        ]
        assert others == [], f"{spec.flag} is also under {others}"


def test_help_names_each_ini_key_and_the_ini_options_section_lists_them(pytester):
    res = pytester.runpytest("--help")
    text = res.stdout.str()
    ini_keys = [s.ini_name for s in OPTIONS if s.ini_name]
    assert ini_keys, "no option reads the ini file"
    for key in ini_keys:
        assert re.search(rf"^  {key} \(", text, re.M), f"pytest --help's ini options do not list {key}"
    # A switch or a judging threshold is no description of the cluster: not in the ini file.
    assert "rollcall_keep" not in text and "rollcall_straggler_ratio" not in text


def test_the_cluster_settings_read_the_ini_file():
    ini_names = {s.name for s in OPTIONS if s.ini}
    assert {
        "backend",
        "kubeconfig",
        "context",
        "namespace",
        "instance_type",
        "node_selector",
        "image",
    } <= ini_names
    assert {"accelerator", "slurm_partition", "slurm_account", "container_image"} <= ini_names
    assert not ini_names & {"nodes", "job_timeout", "keep", "retries", "baseline", "straggler_ratio"}


def test_resolve_takes_the_ini_file_after_the_command_line_and_the_environment():
    ini = {
        "context": "from-ini",
        "instance_type": "ini.type",
        "namespace_prefix": "ini",
        "node_selector": ["a=1"],
    }
    o = resolve({}, {}, ini)
    assert (o.context, o.instance_type, o.namespace_prefix, o.node_selector) == (
        "from-ini",
        "ini.type",
        "ini",
        {"a": "1"},
    )
    assert o.source("context") == "ini rollcall_context" and o.given("context")
    o = resolve({"context": "from-cli"}, {"ROLLCALL_INSTANCE_TYPE": "env.type"}, ini)
    assert (o.context, o.instance_type, o.namespace_prefix) == ("from-cli", "env.type", "ini")
    assert (o.source("context"), o.source("instance_type")) == ("--context", "ROLLCALL_INSTANCE_TYPE")


def test_an_ini_value_that_is_not_set_leaves_the_default():
    o = resolve({}, {}, {"context": "", "node_selector": [], "backend": ""})
    assert (o.context, o.node_selector, o.backend) == (None, {}, "auto")
    assert o.source("context") == "default" and not o.given("context")


def test_an_option_that_is_not_a_clusters_setting_ignores_the_ini_file():
    o = resolve({}, {}, {"nodes": "7", "job_timeout": "5"})
    assert (o.nodes, o.source("nodes")) == (2, "default")


def test_a_bad_ini_value_names_the_ini_key():
    with pytest.raises(OptionError) as exc:
        resolve({}, {}, {"backend": "lsf"})
    assert "invalid --backend value 'lsf' (from ini rollcall_backend): must be one of" in str(exc.value)


NAMES = ("backend", "namespace_prefix", "instance_type", "node_selector", "context", "slurm_partition")


def test_the_ini_file_sets_a_clusters_settings_and_the_command_line_and_environment_win(
    pytester, monkeypatch
):
    pytester.makeini(
        """
        [pytest]
        rollcall_backend = local
        rollcall_namespace_prefix = from-ini
        rollcall_instance_type = ini.type
        rollcall_node_selector = a=1 'b=two'
        rollcall_context = ini-context
        """
    )
    monkeypatch.setenv("ROLLCALL_INSTANCE_TYPE", "env.type")
    monkeypatch.delenv("ROLLCALL_CONTEXT", raising=False)
    got = shown(pytester, "--context", "cli-context", names=NAMES)
    assert got == {
        "backend": ("'local'", "ini rollcall_backend"),
        "namespace_prefix": ("'from-ini'", "ini rollcall_namespace_prefix"),
        "instance_type": ("'env.type'", "ROLLCALL_INSTANCE_TYPE"),
        "node_selector": ("{'a': '1', 'b': 'two'}", "ini rollcall_node_selector"),
        "context": ("'cli-context'", "--context"),
        "slurm_partition": ("None", "default"),
    }


def test_pyproject_toml_sets_them_too_lists_as_lists(pytester, monkeypatch):
    pytester.makepyprojecttoml(
        """
        [tool.pytest.ini_options]
        rollcall_backend = "local"
        rollcall_node_selector = ["karpenter.sh/nodepool=gpu", "zone=a"]
        rollcall_slurm_partition = "h100,a100"
        """
    )
    for name in NAMES:
        monkeypatch.delenv("ROLLCALL_" + name.upper(), raising=False)
    got = shown(pytester, names=NAMES)
    assert got["node_selector"] == (
        "{'karpenter.sh/nodepool': 'gpu', 'zone': 'a'}",
        "ini rollcall_node_selector",
    )
    assert got["slurm_partition"] == ("'h100,a100'", "ini rollcall_slurm_partition")
    assert got["backend"] == ("'local'", "ini rollcall_backend")


def test_a_bad_ini_value_is_a_usage_error_naming_the_key(pytester, monkeypatch):
    monkeypatch.delenv("ROLLCALL_BACKEND", raising=False)
    pytester.makeini("[pytest]\nrollcall_backend = lsf\n")
    res = pytester.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*(from ini rollcall_backend): must be one of auto, kubernetes, local, slurm*"])
