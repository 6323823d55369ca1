"""The plugin end to end through pytester, with a scripted backend that writes rank logs."""

import json
import re
import xml.etree.ElementTree as ET
from html import unescape

import pytest

from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]

TEST = """
from conftest import PLAN, CLEANED

def test_all(rollcall):
    r = rollcall()
    assert r.result.passed, r.result.message()

def test_missing(rollcall):
    PLAN.append({"skip": {3: ("throughput", "complete")}})
    r = rollcall()
    assert r.result.passed, r.result.message()

def test_cleaned():
    assert len(CLEANED) == 2
"""


@pytest.fixture
def project(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(test_roll=TEST)
    return pytester


def test_reports_and_verdicts(project):
    res = project.runpytest("--nodes", "2", "--junitxml", "junit.xml", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2, failed=1)
    res.stdout.fnmatch_lines(
        [
            "rollcall: backend=local*nodes=2*",
            "*throughput missing on 1 rank(s): 3 (node 1)*",
            "*complete missing on 1 rank(s): 3 (node 1)*",
            "*  logs: artifacts*test_missing*",
            "*= rollcall =*",
            "test*backend*ranks*samples/s total*",
            "test_all*scripted*4/4*200.0*PASS",
            "test_missing*scripted*3/4*150.0*FAIL",
        ]
    )
    doc = json.loads((project.path / "artifacts" / "results.json").read_text())
    first, second = doc["tests"]
    assert first["passed"] and not second["passed"]
    assert second["missing"] == {"throughput": [3], "epoch_time": [], "complete": [3]}
    assert second["world_size"] == 4 and second["procs_per_node"] == 2
    assert first["throughput"]["total"] == 200.0
    assert first["backend"] == "scripted"
    # pytest's junit has the figures as properties
    props = {p.get("name"): p.get("value") for p in ET.parse(project.path / "junit.xml").iter("property")}
    assert props["world_size"] == "4" and props["backend"] == "scripted"
    # the per-rank junit: one case per rank, rank 3 failed
    ranks = ET.parse(project.path / "artifacts" / "ranks.junit.xml").getroot()
    suites = ranks.findall("testsuite")
    assert [len(s.findall("testcase")) for s in suites] == [4, 4]
    failed = [c.get("name") for c in suites[1].findall("testcase") if c.find("failure") is not None]
    assert failed == ["rank 3 (node 1)"]
    # per-pod logs were kept
    assert len(list((project.path / "artifacts").glob("test_missing/*.log"))) == 2


def test_retries_mark_a_late_pass_flaky(project):
    project.makepyfile(
        test_roll="""
from conftest import PLAN
def test_flaky(rollcall):
    PLAN.append({"skip": {0: ("complete",)}})
    r = rollcall()
    assert r.result.passed and r.result.flaky
"""
    )
    res = project.runpytest("--job-retries", "1", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*PASS (flaky)"])
    doc = json.loads((project.path / "artifacts" / "results.json").read_text())
    assert doc["tests"][0]["attempts"] == 2 and doc["tests"][0]["flaky"]


def test_the_former_retries_flag_is_answered_with_its_new_name_and_its_variable_still_sets_it(
    project, monkeypatch
):
    project.makepyfile(
        test_roll="""
from conftest import PLAN
def test_flaky(rollcall):
    PLAN.append({"skip": {0: ("complete",)}})
    assert rollcall().result.flaky
"""
    )
    res = project.runpytest("--retries", "1", "-p", "no:cacheprovider")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["ERROR: --retries is now --job-retries *ROLLCALL_RETRIES*rollcall_retries*"])
    assert "Traceback" not in res.stderr.str()
    monkeypatch.setenv("ROLLCALL_RETRIES", "1")
    res = project.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)


def test_a_pass_after_a_disruption_is_reported_as_such_not_as_flaky(project):
    project.makepyfile(
        test_roll="""
from conftest import PLAN
from rollcall.evidence.endings import Disruption

def test_disrupted(rollcall):
    evicted = Disruption("job-1", 1, "trn1-1", "EvictionByEvictionAPI", "Eviction API: evicting")
    PLAN.append({"skip": {2: ("complete",)}, "disruption": evicted})
    r = rollcall()
    assert r.result.passed and not r.result.flaky
    assert r.result.outcome == "passed_after_disruption"
    assert r.result.attempts[0].verdict.disruption == evicted
"""
    )
    res = project.runpytest("--job-retries", "1", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(["*PASS (after disruption)"])
    (test,) = json.loads((project.path / "artifacts" / "results.json").read_text())["tests"]
    assert test["attempts"] == 2 and not test["flaky"] and test["outcome"] == "passed_after_disruption"
    assert test["disruptions"] == [
        {
            "attempt": 1,
            "pod": "job-1",
            "node": 1,
            "host": "trn1-1",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
            "time": None,
            "kind": "pod",
        }
    ]


def test_a_disruption_on_the_last_attempt_fails_as_one(project):
    project.makepyfile(
        test_roll="""
from conftest import PLAN
from rollcall.evidence.endings import Disruption

def test_disrupted(rollcall):
    PLAN.append({"disruption": Disruption("job-0", 0, "trn1-0", "DeletionByPodGC", "node gone")})
    r = rollcall()
    assert r.result.passed, r.result.message()
"""
    )
    res = project.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "*first failure: infrastructure disruption: pod job-0 (index 0) on node trn1-0 was disrupted "
            "(DeletionByPodGC): node gone",
            "*FAIL (disrupted)",
        ]
    )
    (test,) = json.loads((project.path / "artifacts" / "results.json").read_text())["tests"]
    assert test["outcome"] == "disrupted" and test["findings"][0]["kind"] == "disruption"
    assert test["root_cause"]["disruption"]["reason"] == "DeletionByPodGC"


def test_a_hangs_first_failure_leads_the_terminal_and_every_report(project):
    """No rank said an error: the terminal's first-failure line, results.json's root_cause and the per-rank
    JUnit's first_failure name the hung rank alike."""
    project.makepyfile(
        test_roll="""
from conftest import PLAN
from rollcall.backends import JobState
from tests.unit.test_flight import SLEEPS, WAITS, _stack

def test_hung(rollcall):
    every = ("epoch_time", "throughput", "complete")
    lines = {0: (_stack(1, SLEEPS) + _stack(0, WAITS)).decode(), 1: (_stack(2, WAITS) + _stack(3, WAITS)).decode()}
    PLAN.append({"skip": {r: every for r in range(4)}, "extra": lines, "state": JobState.STOPPED})
    r = rollcall()
    assert r.result.passed, r.result.message()
"""
    )
    res = project.runpytest("--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    (test,) = json.loads((project.path / "artifacts" / "results.json").read_text())["tests"]
    summary = test["root_cause"]["summary"]
    assert test["root_cause"]["kind"] == "hung" and test["root_cause"]["ranks"] == [1], summary
    assert summary.startswith("first failure: rank 1 (node 0, pod ") and " hung in a sleep" in summary
    assert f"test_roll.py::test_hung: {summary}" in res.stdout.str()
    junit = ET.parse(project.path / "artifacts" / "ranks.junit.xml")
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["first_failure"] == summary


#: A failed run of each class, as the scripted backend's plan step that makes it (a Python expression).
FAILURE_CLASSES = {
    "hung": (
        '{"skip": {r: EVERY for r in range(4)}, "state": JobState.STOPPED, "extra": {'
        "0: (_stack(1, SLEEPS) + _stack(0, WAITS)).decode(), 1: (_stack(2, WAITS) + _stack(3, WAITS)).decode()}}"
    ),
    "root_cause": (
        '{"skip": {2: EVERY}, "state": JobState.FAILED, "extra": {1: "[2]:" + encode_event('
        '"error", 2, 4, message="RuntimeError: injected failure on rank 2").decode()}}'
    ),
    "undetermined": '{"skip": {3: ("throughput", "complete")}}',
    "job": '{"state": JobState.TIMED_OUT}',
}


@pytest.mark.parametrize("kind", sorted(FAILURE_CLASSES))
def test_each_failure_classs_first_failure_is_said_alike_by_every_report(project, kind):
    """The terminal's first-failure line, results.json's root_cause, the page's first box and the per-rank
    JUnit's first_failure say the same first failure, whatever its class (a hang, a crash, events missing
    with no cause told, a job-level fault)."""
    project.makepyfile(
        test_roll=f"""
from conftest import PLAN
from rollcall.backends import JobState
from rollcall_workload.contract import encode_event
from tests.unit.test_flight import SLEEPS, WAITS, _stack

EVERY = ("epoch_time", "throughput", "complete")

def test_failing(rollcall):
    PLAN.append({FAILURE_CLASSES[kind]})
    r = rollcall()
    assert r.result.passed, r.result.message()
"""
    )
    res = project.runpytest("--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    artifacts = project.path / "artifacts"
    (test,) = json.loads((artifacts / "results.json").read_text())["tests"]
    summary = test["root_cause"]["summary"]
    assert test["root_cause"]["kind"] == kind, summary
    assert summary.startswith("first failure undetermined: " if kind == "undetermined" else "first failure: ")
    assert f"test_roll.py::test_failing: {summary}" in res.stdout.str()
    junit = ET.parse(artifacts / "ranks.junit.xml")
    assert {p.get("name"): p.get("value") for p in junit.iter("property")}["first_failure"] == summary
    page = (artifacts / "report.html").read_text()
    box = re.search(r'<p class="root-cause">(.*?)</p>', page, re.S)
    assert box is not None and unescape(box[1]) == summary


def test_bad_option_is_a_usage_error_naming_the_fix(pytester):
    res = pytester.runpytest("--nodes", "0")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*invalid --nodes value '0' (from --nodes): must be >= 1; use --nodes N*"])


def test_bad_environment_value_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv("ROLLCALL_BACKEND", "lsf")
    res = pytester.runpytest()
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*(from ROLLCALL_BACKEND): must be one of auto, kubernetes, local, slurm*"])


def test_help_lists_every_option_with_its_env_var(pytester):
    res = pytester.runpytest("--help")
    res.stdout.fnmatch_lines(
        [
            "*--procs-per-node=N*",
            "*ROLLCALL_PROCS_PER_NODE*",
            "*--backend={auto,kubernetes,local,slurm}*",
            "*--job-timeout=DURATION*",
            "*--workload-env=KEY=VALUE*",
        ]
    )


def test_xdist_workers_results_are_merged(project, monkeypatch, request):
    monkeypatch.setenv("PYTHONPATH", str(request.config.rootpath))
    project.makepyfile(
        test_roll="""
import pytest
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_job(rollcall, n):
    assert rollcall().result.passed
"""
    )
    res = project.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=4)
    doc = json.loads((project.path / "artifacts" / "results.json").read_text())
    assert len(doc["tests"]) == 4 and doc["workers"] == 2
    assert sorted(t["test_id"] for t in doc["tests"]) == [f"test_roll.py::test_job[{n}]" for n in range(1, 5)]


REFUSING = """
from rollcall.backends import DiscoveryError

def _refuse(self, spec, collector):
    raise DiscoveryError("need 3 usable node(s), found 2\\n  not usable:\\n    state DOWN: rc3 (1)")

ScriptedBackend.launch = _refuse
"""


def test_a_cluster_that_cannot_run_the_job_fails_the_test_saying_why_without_a_traceback(
    pytester, monkeypatch, request
):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST + REFUSING)
    pytester.makepyfile(test_roll="def test_all(rollcall):\n    rollcall()\n")
    res = pytester.runpytest("-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*DiscoveryError: need 3 usable node(s), found 2", "*state DOWN: rc3 (1)"])
    assert "raise DiscoveryError" not in res.stdout.str()


MISSING_NAMESPACE = """
from rollcall.options import OptionError

def _missing(self, spec, collector):
    raise OptionError("--namespace team-ml: there is no such namespace (kubeconfig); create it first")

ScriptedBackend.launch = _missing
"""


def test_an_option_the_cluster_refutes_stops_the_session_as_a_usage_error(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST + MISSING_NAMESPACE)
    pytester.makepyfile(
        test_roll="def test_a(rollcall):\n    rollcall()\n\ndef test_b(rollcall):\n    rollcall()\n"
    )
    res = pytester.runpytest("-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR == 4
    res.stdout.fnmatch_lines(["*--namespace team-ml: there is no such namespace*"])
    assert "test_b" not in res.stdout.str(), "the session stops at the first"


MARKED = """
import pytest

@pytest.mark.rollcall(nodes=1, procs_per_node=4)
def test_marked(rollcall):
    r = rollcall()
    assert (r.result.last.spec.nodes, r.result.last.spec.procs_per_node) == (1, 4)

@pytest.mark.rollcall(nodes=1)
def test_the_call_overrides_the_marker(rollcall):
    assert rollcall(nodes=3).result.last.spec.nodes == 3
"""


def test_the_marker_sets_the_tests_job_and_the_call_overrides_it(project):
    project.makepyfile(test_marked=MARKED)
    res = project.runpytest("test_marked.py", "--nodes", "2", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)


def test_a_typo_in_the_marker_is_a_usage_error_before_any_run(project):
    project.makepyfile(
        test_typo="""
import pytest
from conftest import CLEANED

def test_first(rollcall):
    rollcall()

@pytest.mark.rollcall(nodez=2)
def test_typo(rollcall):
    rollcall()
"""
    )
    res = project.runpytest("test_typo.py", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*test_typo.py::test_typo: @pytest.mark.rollcall: no such job setting 'nodez'*"]
    )
    assert "procs_per_node" in res.stderr.str() and "Traceback" not in res.stderr.str()
    assert not (project.path / "artifacts" / "results.json").exists()  # nothing ran


def test_a_typo_in_the_call_is_a_usage_error(project):
    project.makepyfile(test_call="def test_call(rollcall):\n    rollcall(nodez=2)\n")
    res = project.runpytest("test_call.py", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(["*rollcall(nodez=...): no such job setting 'nodez'; a test may override*"])


WEDGED = """
from conftest import PLAN, CLEANED

def test_wedged(rollcall):
    PLAN.append({"wedge": True})
    rollcall()

def test_cleaned_after_the_deadline():
    assert len(CLEANED) == 1
"""


def test_a_wedged_wait_ends_at_the_tests_own_deadline_which_the_failure_names(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    monkeypatch.setattr("rollcall.suite.CLEAN_UP_MARGIN_S", 0.5)  # pytester runs in this process
    pytester.makepyfile(test_roll=WEDGED)
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    res = pytester.runpytest(
        "--backend", "local", "--job-timeout", "1", "--capacity-timeout", "1", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(passed=1, failed=1)  # the second test saw the wedged job cleaned up
    res.stdout.fnmatch_lines(
        [
            "*Timeout (>1.5s) from pytest-timeout*",
            "*rollcall deadline*",
            "*the test's own deadline fired: 1.5s = --job-timeout 1s + 0.5s clean-up margin*",
        ]
    )


def test_a_timeout_the_user_set_wins_over_the_derived_one(pytester, monkeypatch, request):
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(test_roll=WEDGED)
    pytester.makeini("[pytest]\ntimeout = 600\n")  # the suite's own unit tests' timeout: never a roll call's
    res = pytester.runpytest("--backend", "local", "--timeout", "1.5", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)  # the second test saw the wedged job cleaned up
    # the header says the one timer armed, and the failure says the same
    res.stdout.fnmatch_lines(
        [
            "rollcall: deadline: each roll-call test ends at its deadline, 35m: --job-timeout 30m + 5m clean-up "
            "margin (a job timeout counts from when the job starts; *); --timeout 1.5s given: ends at 1.5s, *",
            "*Timeout (>1.5s) from pytest-timeout*",
            "*rollcall deadline*",
            "*--timeout 1.5s given ended the test before its own deadline (35m = --job-timeout 30m + 5m*",
        ]
    )


WHEEL = """
from conftest import PLAN
from rollcall.e2e.test_roll_call import test_every_rank_answers_the_roll_call

PLAN.append({"wedge": True})
"""


def test_the_wheels_roll_call_ends_at_its_deadline_not_the_ini_timeout(pytester, monkeypatch, request):
    """The installed roll call is armed at the deadline the header says, whatever the ini's timeout."""
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    monkeypatch.setattr("rollcall.suite.CLEAN_UP_MARGIN_S", 0.5)  # pytester runs in this process
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    pytester.makeini("[pytest]\ntimeout = 600\n")
    pytester.makepyfile(test_wheel=WHEEL)
    res = pytester.runpytest("--backend", "local", "--job-timeout", "1", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "rollcall: deadline: each roll-call test ends at its deadline, 1.5s: --job-timeout 1s + 0.5s *",
            "*Timeout (>1.5s) from pytest-timeout*",
            "*the test's own deadline fired: 1.5s = --job-timeout 1s + 0.5s clean-up margin*",
        ]
    )


def test_clean_up_that_leaves_something_fails_the_session_naming_it_not_the_verdict(project):
    project.makepyfile(
        test_left="""
from conftest import PLAN

def test_left(rollcall):
    PLAN.append({"left": ["namespace rollcall-abc123"]})
    assert rollcall().result.passed
"""
    )
    res = project.runpytest("test_left.py", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)  # the roll call itself passed
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.stdout.fnmatch_lines(
        [
            "rollcall: clean-up left something behind: test_left.py::test_left: namespace rollcall-abc123 is not gone yet"
        ]
    )
    (test,) = json.loads((project.path / "artifacts" / "results.json").read_text())["tests"]
    assert test["passed"] and test["cleanup_errors"] == [
        "test_left.py::test_left: namespace rollcall-abc123 is not gone yet"
    ]
    # with --keep nothing is cleaned up, so nothing is held against the session
    keep = project.runpytest("test_left.py", "--keep", "-p", "no:cacheprovider")
    assert keep.ret == pytest.ExitCode.OK


MARKED_LONGER = """
import pytest
from conftest import PLAN

@pytest.mark.rollcall(job_timeout_s=2)
def test_marked(rollcall):
    PLAN.append({"wedge": True})
    rollcall()

def test_called(rollcall):
    PLAN.append({"wedge": True})
    rollcall(job_timeout_s=2)
"""


def test_a_tests_own_longer_job_timeout_lengthens_its_deadline_marker_or_call(pytester, monkeypatch, request):
    """A job timeout of the test's own, longer than --job-timeout, is not cut short at --job-timeout's."""
    monkeypatch.syspath_prepend(str(request.config.rootpath))
    pytester.makeconftest(SCRIPTED_CONFTEST)
    monkeypatch.setattr("rollcall.suite.CLEAN_UP_MARGIN_S", 0.5)  # pytester runs in this process
    pytester.makepyfile(test_roll=MARKED_LONGER)
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    res = pytester.runpytest(
        "--backend", "local", "--job-timeout", "0.5", "--capacity-timeout", "0.5", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(failed=2)
    out = res.stdout.str()
    # 2s of the test's own + 0.5s margin (no capacity wait on local), not the 1s --job-timeout 0.5 would give
    assert "Timeout (>1.0s)" not in out
    res.stdout.fnmatch_lines(
        [
            "*the test's own deadline fired: 2.5s = the test's job_timeout_s 2s + 0.5s clean-up margin*",
            "FAILED test_roll.py::test_marked - Failed: Timeout (>2.5s) from pytest-timeout*",
            "FAILED test_roll.py::test_called - Failed: Timeout (>2.5s) from pytest-timeout*",
        ]
    )


def test_the_header_states_what_ends_a_roll_call_on_each_backend(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_TIMEOUT", raising=False)
    pytester.makeini("[pytest]\ntimeout = 600\n")  # never a roll call's: not said
    pytester.makepyfile("def test_nothing():\n    pass\n")
    res = pytester.runpytest("--job-timeout", "20m", "--backend", "local", "-p", "no:cacheprovider")
    res.stdout.fnmatch_lines(
        [
            "rollcall: deadline: each roll-call test ends at its deadline, 25m: --job-timeout 20m + 5m clean-up "
            "margin (a job timeout counts from when the job starts; a test's job_timeout_s lengthens it)"
        ]
    )
    said = [line for line in res.outlines if line.startswith("rollcall:")]
    assert not [line for line in said if "600" in line or "capacity" in line]
    res = pytester.runpytest(
        "--job-timeout", "20m", "--backend", "local", "--timeout", "3600", "-p", "no:cacheprovider"
    )
    res.stdout.fnmatch_lines(["rollcall: deadline: *; --timeout 1h given: longer, so the deadline ends it"])


def test_a_kubernetes_deadline_counts_its_capacity_wait_and_a_shorter_timeout_ends_it():
    from rollcall.options import resolve
    from rollcall.suite import deadline_of

    options = resolve({"job_timeout": "30m", "capacity_timeout": "15m"}, {})
    deadline = deadline_of(options, backend="kubernetes", given=(60.0, "--timeout"))
    assert (deadline.seconds, deadline.ends_at) == (3000.0, 60.0)
    assert deadline.words() == (
        "each roll-call test ends at its deadline, 50m: --capacity-timeout 15m (kubernetes) + --job-timeout 30m "
        "+ 5m clean-up margin (a job timeout counts from when its pods are scheduled; a test's job_timeout_s "
        "lengthens it); --timeout 1m given: ends at 1m, with its clean-up"
    )
    local = deadline_of(options, backend="local")
    assert (local.seconds, local.ends_at, local.capacity_timeout_s) == (2100.0, 2100.0, 0.0)


def test_the_header_says_the_accelerator_and_the_workloads_defaults_in_words():
    from rollcall.backends import Placement
    from rollcall.options import resolve
    from rollcall.suite import Suite
    from rollcall_workload.rank.cli import RUN_DEFAULTS

    unknown = Suite(resolve({}, {}), "local", "--backend local").header()
    assert unknown == (
        "rollcall: backend=local (--backend local), nodes=2, accelerator=auto: decided by the nodes found, "
        "artifacts=artifacts, workload=its defaults for the accelerator found"
    )
    cpu = RUN_DEFAULTS["cpu"]
    given = Suite(resolve({"accelerator": "cpu"}, {}), "local", "--backend local").header()
    assert given.endswith(
        f", accelerator=cpu, artifacts=artifacts, workload=its defaults on cpu (BERT-{cpu['model']} {cpu['impl']}, "
        f"seq {cpu['seq_len']}, {cpu['epochs']} epochs x {cpu['steps_per_epoch']} steps, {cpu['precision']})"
    )
    found = Suite(resolve({"workload_args": "--epochs 1"}, {}), "local", "--backend local")
    found.__dict__["placement"] = Placement("nvidia", 8)  # discovery ran: its accelerator is known
    assert found.header().endswith(
        ", accelerator=nvidia, artifacts=artifacts, workload=--epochs 1 over its defaults on nvidia "
        "(BERT-large compact, seq 128, 3 epochs x 15 steps, bf16, compiled)"
    )
    assert "RUN_DEFAULTS" not in unknown + given + found.header()
