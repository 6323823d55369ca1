"""The options in groups (``pytest --help``), each option's ini key under the command line and the environment,
and ``pytest --help`` as a user reads it: choices listed, defaults as typed, no Python reprs."""

import re

import pytest

from rollcall.options import GROUPS, OPTIONS, OptionError, resolve

pytest_plugins = ["pytester"]

#: A test that prints what the session resolved: each option named, its value and where it came from.
SHOW = """
from rollcall.options import OPTIONS
from rollcall.plugin import _SUITE

NAMES = {names!r}
GROUP = {{s.name: s.group for s in OPTIONS}}

def test_show(request):
    options = request.config.stash[_SUITE].options
    for name in NAMES:
        value = getattr(options.section(GROUP[name]), name)
        print(f"OPTION {{name}}={{value!r}} FROM {{options.source(name)}}")
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
    # One session's acts cannot live in a file: they have no key, and --help says why.
    assert "rollcall_keep" not in text and "rollcall_write_baseline" not in text
    assert re.search(r"--keep .*no ini key: a debugging switch of one session", " ".join(text.split()))


def test_every_option_that_can_live_in_a_file_has_an_ini_key_and_the_others_say_why():
    keyed = {s.name for s in OPTIONS if s.ini_name}
    assert {
        "backend",
        "kubeconfig",
        "context",
        "namespace",
        "instance_type",
        "node_selector",
        "image",
    } <= keyed
    assert {"nodes", "job_timeout", "retries", "metrics_file", "straggler_ratio", "hang_after"} <= keyed
    unkeyed = {s.name: s.file for s in OPTIONS if not s.ini_name}
    assert sorted(unkeyed) == ["keep", "write_baseline"]
    assert all(why for why in unkeyed.values())


def test_resolve_takes_the_ini_file_after_the_command_line_and_the_environment():
    ini = {
        "context": "from-ini",
        "instance_type": "ini.type",
        "namespace_prefix": "ini",
        "node_selector": ["a=1"],
    }
    o = resolve({}, {}, ini)
    assert (
        o.kubernetes.context,
        o.kubernetes.instance_type,
        o.kubernetes.namespace_prefix,
        o.kubernetes.node_selector,
    ) == (
        "from-ini",
        "ini.type",
        "ini",
        {"a": "1"},
    )
    assert o.source("context") == "ini rollcall_context" and o.given("context")
    o = resolve({"context": "from-cli"}, {"ROLLCALL_INSTANCE_TYPE": "env.type"}, ini)
    assert (o.kubernetes.context, o.kubernetes.instance_type, o.kubernetes.namespace_prefix) == (
        "from-cli",
        "env.type",
        "ini",
    )
    assert (o.source("context"), o.source("instance_type")) == ("--context", "ROLLCALL_INSTANCE_TYPE")


def test_an_ini_value_that_is_not_set_leaves_the_default():
    o = resolve({}, {}, {"context": "", "node_selector": [], "backend": ""})
    assert (o.kubernetes.context, o.kubernetes.node_selector, o.job.backend) == (None, {}, "auto")
    assert o.source("context") == "default" and not o.given("context")


def test_the_job_and_its_deadlines_read_the_ini_file_but_an_option_without_a_key_ignores_it():
    o = resolve({}, {}, {"nodes": "7", "job_timeout": "45m", "keep": "true", "write_baseline": "b.json"})
    assert (o.job.nodes, o.source("nodes")) == (7, "ini rollcall_nodes")
    assert o.job.job_timeout == 2700.0
    assert (o.job.keep, o.source("keep"), o.baselines.write_baseline) == (False, "default", None)


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


def test_help_lists_choices_and_defaults_as_a_user_types_them_never_a_variable_or_a_python_repr(pytester):
    res = pytester.runpytest("--help")
    assert res.ret == pytest.ExitCode.OK
    sections = help_sections(res.stdout.str())
    text = "".join(v for k, v in sections.items() if k.startswith("rollcall,"))
    flat = " ".join(text.split())
    for flag, choices in [
        ("--backend", "auto,kubernetes,local,slurm"),
        ("--accelerator", "auto,nvidia,neuron,cpu"),
        ("--efa", "auto,on,off"),
        ("--drift", "fail,warn,off"),
    ]:
        assert f"{flag}={{{choices}}}" in text, f"pytest --help shows no choices of {flag}"
    assert not re.search(r"=ROLLCALL_\w+", text), "a variable's name as a placeholder"
    assert not re.search(r"default (None|\(\)|\{\}|frozenset|PosixPath|\d+\.0\b)", flat), flat
    for spec in OPTIONS:
        assert f"default {spec.shown_default}]" in flat, f"{spec.flag}: default {spec.shown_default}"
        if spec.metavar == "DURATION":
            assert f"{spec.flag}=DURATION" in text
    assert "--job-timeout=DURATION" in text and "default 30m]" in flat
    assert "--hang-after=DURATION" in text and "--join-hang-after=DURATION" in text


def test_each_option_has_one_text_the_reference_shows_whole_and_help_its_first_sentence_plain(pytester):
    from pathlib import Path

    from rollcall.options.reference import markdown

    reference = markdown()
    assert (Path(__file__).resolve().parents[2] / "docs" / "options.md").read_text() == reference
    res = pytester.runpytest("--help")
    assert res.ret == pytest.ExitCode.OK
    flat = " ".join(res.stdout.str().split())
    for spec in OPTIONS:
        assert spec.text.replace("|", "\\|") in reference, spec.flag
        assert f"{spec.help} [env {spec.env}" in flat, f"pytest --help shows another text of {spec.flag}"
        assert "`" not in spec.help and "](" not in spec.help, spec.help
    by_flag = {s.flag: s for s in OPTIONS}
    ttl = by_flag["--verdict-ttl"]
    assert ttl.help == (
        "how long each node's verdict holds from when it was checked: valid_until in nodes.json, the expiry "
        "label of --label-nodes"
    )
    assert "24 h alone" in ttl.text  # a later sentence: the reference's only
    assert "more than PCT% against the baseline" in flat  # argparse formats help with %: shown as written


def test_the_first_sentence_ends_at_a_full_stop_outside_brackets_before_a_capital_or_code():
    from rollcall.options.declare import first_sentence, plain

    assert (
        first_sentence("a rank (e.g. `6h`. Not here) ends. Then more") == "a rank (e.g. `6h`. Not here) ends"
    )
    assert first_sentence("holds it. `auto`: the default") == "holds it"
    assert (
        first_sentence("e.g. a value, v0.12.0 and 1.4826 x MAD") == "e.g. a value, v0.12.0 and 1.4826 x MAD"
    )
    assert plain("see [hangs.md](hangs.md), [the docs](nodes.md) and `--nodes`") == (
        "see docs/hangs.md, the docs and --nodes"
    )
