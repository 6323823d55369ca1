"""A site's own checks and reports (rollcall.hookspecs): held to their contract, judged as every check, shown
by every report; a plugin that breaks the contract is a usage error naming it."""

import json
import xml.etree.ElementTree as ET

import pytest

from rollcall.backends import JobState, JobStatus
from rollcall.checks.runview import Check, RunView
from rollcall.judge import CHECKS, SITE_CHECK_ERROR, SiteCheck, SiteCheckError, judge, site_checks
from rollcall.verdict import Blame, Kind, Layout, Observed, Owner, Problem, RankState
from tests.unit.helpers import two_by_two
from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]

SHORT = Kind("dataset_too_small", RankState.FAILED, Blame(Owner.CLUSTER, "the site's dataset mount is short"))


def dataset_size(run: RunView) -> list[Problem]:
    return [Problem(SHORT, "dataset mount /data holds 3 bytes", {1: "read a short dataset"})]


def declared(predicate=dataset_size, kinds=(SHORT,), detects="a short dataset", reads="the mount"):
    return Check(predicate, detects=detects, reads=reads, kinds=kinds)


def verdict_of(*site):
    observed = Observed(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED))
    return judge(observed, None, (*CHECKS, *site))


def test_a_site_checks_problem_is_in_the_verdict_as_any_checks_with_its_owner_state_and_ranks():
    assert verdict_of().passed  # the same run, without the site's check
    (site,) = site_checks([("site", [declared()])])
    verdict = verdict_of(site)
    (found,) = verdict.findings
    assert found.kind is SHORT and found.blame == SHORT.owner
    assert verdict.first_failure is not None and verdict.first_failure.owner == "cluster"
    assert verdict.first_failure.summary == "first failure: dataset mount /data holds 3 bytes"
    assert verdict.failed_ranks == {1: ["read a short dataset"]}
    assert verdict.ranks[1].state is RankState.FAILED and verdict.ranks[0].state is RankState.OK
    assert "    whose: the cluster's: the site's dataset mount is short" in verdict.message()


def test_a_site_checks_warning_fails_nothing():
    def noted(run: RunView) -> list[Problem]:
        return [Problem(SHORT, "dataset mount /data is nearly full", warning=True)]

    (site,) = site_checks([("site", [declared(noted)])])
    verdict = verdict_of(site)
    assert verdict.passed and [w.message for w in verdict.warnings] == ["dataset mount /data is nearly full"]


def raises(run: RunView) -> list[Problem]:
    raise OSError("stale file handle")


def other_kind(run: RunView) -> list[Problem]:
    return [Problem(SITE_CHECK_ERROR, "not mine")]


def marks_a_node(run: RunView) -> list[Problem]:
    return [Problem(SHORT, "short", detail=("node 0",))]  # a tuple of Unfit would take a node out


def not_a_problem(run: RunView) -> list[str]:
    return ["short"]


def ranks_without_notes(run: RunView) -> list[Problem]:
    return [Problem(SHORT, "short", {1: 2})]  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("predicate", "said"),
    [
        (raises, "raised OSError: stale file handle"),
        (other_kind, "returned a problem of kind site_check_error, which it does not declare"),
        (marks_a_node, "returned a dataset_too_small problem whose detail is a tuple"),
        (not_a_problem, "returned a str, not a Problem"),
        (
            ranks_without_notes,
            "returned a dataset_too_small problem whose ranks are not rank numbers, each with a note",
        ),
    ],
)
def test_a_site_check_that_breaks_its_contract_fails_the_run_as_the_platforms_naming_no_rank(predicate, said):
    verdict = verdict_of(SiteCheck(declared(predicate), "acme"))
    (found,) = verdict.findings
    assert found.kind is SITE_CHECK_ERROR and found.ranks == {}
    assert found.message.startswith(f"site check {predicate.__name__} (plugin acme) {said}: its findings are")
    assert verdict.first_failure is not None and verdict.first_failure.owner == "platform"
    assert verdict.failed_ranks == {} and verdict.unfit_nodes == []


def test_a_plugin_may_return_none_or_nothing_and_its_checks_keep_its_order():
    def second(run: RunView) -> list[Problem]:
        return []

    other = Kind("mount_missing", RankState.FAILED, Blame(Owner.CLUSTER, "the mount is missing"))
    found = site_checks([("a", None), ("b", []), ("c", (declared(), declared(second, (other,))))])
    assert [(s.plugin, s.name) for s in found] == [("c", "dataset_size"), ("c", "second")]


def unnamed_kind(value="", owner=SHORT.owner):
    return Kind(value, RankState.FAILED, owner)


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (
            "dataset_size",
            "returned str 'dataset_size'; return a list of rollcall.checks.runview.Check (or None)",
        ),
        (declared(), "returned Check Check(predicate=<function dataset_size"),
        ([dataset_size], "returned function <function dataset_size"),
        ([declared(kinds=())], "check dataset_size: declares no kind of problem (()); give kinds=(Kind("),
        ([declared(detects="")], "check dataset_size: say what it detects and what it reads"),
        ([declared(kinds=(unnamed_kind("Short Dataset"),))], "kind 'Short Dataset' is no lower-case name"),
        ([declared(kinds=(unnamed_kind("hung"),))], "kind hung is rollcall's own; name one of its own"),
        ([declared(kinds=(unnamed_kind("short", None),))], "kind short says not whose it is; give it Blame("),
        (
            [Check(CHECKS[0].predicate, "x", "y", (SHORT,))],
            "check workload_version: the name is taken by a built-in",
        ),
        ([declared(), declared()], "check dataset_size: the name is taken by plugin acme"),
    ],
)
def test_what_a_plugin_returns_that_is_no_site_check_is_refused_naming_the_plugin_and_the_fix(returned, said):
    with pytest.raises(SiteCheckError) as refused:
        site_checks([("acme", returned)])
    assert str(refused.value).startswith("plugin acme: pytest_rollcall_checks")
    assert said in str(refused.value)


def test_two_plugins_may_not_declare_one_kind():
    def again(run: RunView) -> list[Problem]:
        return []

    with pytest.raises(
        SiteCheckError,
        match=r"^plugin b: .*check again: kind dataset_too_small is check "
        r"dataset_size's of plugin a; name one of its own$",
    ):
        site_checks([("a", [declared()]), ("b", [declared(again)])])


SITE_CONFTEST = """
from rollcall.checks.runview import Check
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState

SHORT = Kind("dataset_too_small", RankState.FAILED, Blame(Owner.CLUSTER, "the site's dataset mount is short"))
SEEN = []

def dataset_size(run):
    return [Problem(SHORT, "dataset mount /data holds 3 bytes, under the 10 the site requires")]

def pytest_rollcall_checks(config):
    return [Check(dataset_size, detects="a short dataset", reads="the mount", kinds=(SHORT,))]

def pytest_rollcall_report(test_id, verdict, artifacts_dir):
    (artifacts_dir / "site.json").write_text(json.dumps([test_id, verdict.outcome.value, verdict.problems]))
"""


@pytest.fixture
def project(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makepyfile(test_roll="def test_all(rollcall):\n    assert rollcall().result.passed\n")
    return pytester


def test_a_site_check_fails_a_run_in_every_report_and_its_report_hook_receives_the_verdict(project):
    project.makeconftest("import json\n" + SCRIPTED_CONFTEST + SITE_CONFTEST)
    res = project.runpytest("--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    said = "dataset mount /data holds 3 bytes, under the 10 the site requires"
    res.stdout.fnmatch_lines([f"*test_all: first failure: {said}"])
    artifacts = project.path / "artifacts"
    (test,) = json.loads((artifacts / "results.json").read_text())["tests"]
    assert test["root_cause"]["owner"] == "cluster" and test["root_cause"]["kind"] == "dataset_too_small"
    run = ET.parse(artifacts / "ranks.junit.xml").getroot().find(".//testcase[@name='run']/failure")
    assert run is not None and run.get("message") == f"first failure: {said}"
    assert said in (artifacts / "report.html").read_text()
    assert json.loads((artifacts / "site.json").read_text()) == ["test_roll.py::test_all", "failed", [said]]


def test_a_plugin_that_returns_no_check_stops_the_session_as_a_usage_error_naming_it(project):
    project.makeconftest(SCRIPTED_CONFTEST + "\ndef pytest_rollcall_checks(config):\n    return [print]\n")
    res = project.runpytest("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "ERROR: plugin *conftest.py: pytest_rollcall_checks returned builtin_function_or_method <built-in "
            "function print> among its checks; declare each as rollcall.checks.runview.Check(*"
        ]
    )


def test_a_plugins_check_hook_that_raises_is_a_usage_error_naming_it(project):
    project.makeconftest(SCRIPTED_CONFTEST + "\ndef pytest_rollcall_checks(config):\n    return 1 / 0\n")
    res = project.runpytest("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["ERROR: plugin *conftest.py: pytest_rollcall_checks raised ZeroDivisionError: *"]
    )


def test_a_report_hook_that_raises_is_named_and_fails_the_session_after_rollcalls_reports(project):
    hook = "\ndef pytest_rollcall_report(test_id):\n    raise OSError('the wiki is down')\n"
    project.makeconftest(SCRIPTED_CONFTEST + hook)
    res = project.runpytest("--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(
        [
            "rollcall: report not written: plugin *conftest.py's report of test_roll.py::test_all: OSError: the wiki is down"
        ]
    )
    assert json.loads((project.path / "artifacts" / "results.json").read_text())["tests"][0]["passed"]


def test_a_hook_wrapper_is_refused(project):
    wrapper = "\nimport pytest\n@pytest.hookimpl(wrapper=True)\ndef pytest_rollcall_checks(config):\n    return (yield)\n"
    project.makeconftest(SCRIPTED_CONFTEST + wrapper)
    res = project.runpytest("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["ERROR: plugin *conftest.py: pytest_rollcall_checks is a hook wrapper; implement *"]
    )
