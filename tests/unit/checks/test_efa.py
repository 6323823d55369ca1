"""What NCCL's log says of EFA: each pod's evidence, the clues to why it was not used, and the check."""

import pytest

from rollcall.backends import EfaUse, JobState, JobStatus
from rollcall.backends.kubernetes.efa import NET_CLUES, EfaEvidence, check, details, explain
from rollcall.checks.efa import EFA as EFA_KIND
from rollcall.checks.efa import efa
from rollcall.checks.job_state import JOB
from rollcall.checks.runview import RunView
from rollcall.judge import judge
from rollcall.ranklog import RollCall
from rollcall.verdict import Criteria, Layout, Observed
from tests.unit.helpers import node_log, two_by_two


@pytest.mark.parametrize(
    ("line", "efa", "fallback"),
    [
        (b"NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)", True, None),
        (b"NCCL INFO Using network Socket", False, "Using network Socket"),
        (b"NCCL INFO NET/OFI Selected provider is tcp", False, "NET/OFI Selected provider is tcp"),
        (b"NCCL INFO Using network Libfabric", False, None),
        (b"nothing to see", False, None),
    ],
)
def test_efa_evidence(line, efa, fallback):
    e = EfaEvidence()
    e.scan(line + b"\n")
    assert (e.efa, e.fallback) == (efa, fallback)


# Lines as NCCL 2.18-2.27, aws-ofi-nccl 1.16 and libfabric print them, behind torchrun's rank prefix.
H = b"[0]:bert-0:152:386 [0] NCCL INFO "
NO_PLUGIN_226 = H + b"NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."
NO_PLUGIN_219 = (
    H + b"NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory "
    b"No plugin found (libnccl-net.so), using internal implementation"
)
NO_PLUGIN_218 = (
    H + b"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object "
    b"file: No such file or directory"
)
NO_LIBFABRIC = (
    H + b"NET/Plugin : dlerror=libfabric.so.1: cannot open shared object file: No such file or directory "
    b"No plugin found (libnccl-net.so), using internal implementation"
)
NO_DEVICE = [
    H + b"NET/OFI Initializing aws-ofi-nccl 1.16.2",
    H + b"NET/OFI Setting provider_filter to efa",
    H + b"NET/OFI No eligible providers were found",
    b"[0]:bert-0:152:386 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):259 NCCL WARN NET/OFI "
    b"Unable to find a protocol that worked.  Failing initialization.",
]
EMPTY_LIST = b"[0]:libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list"
SOCKET = [H + b"NET/Socket : Using [0]eth0:10.0.4.51<0>", H + b"Using network Socket"]


def causes_of(*lines):
    e = EfaEvidence()
    e.scan(b"\n".join(lines) + b"\n")
    return e


@pytest.mark.parametrize(
    ("lines", "missing", "said"),
    [
        ([NO_PLUGIN_226], "the aws-ofi-nccl network plugin", "NET/Plugin: Could not find: libnccl-net.so"),
        (
            [NO_PLUGIN_219],
            "the aws-ofi-nccl network plugin",
            "NET/Plugin : dlerror=libnccl-net.so: cannot open",
        ),
        (
            [NO_PLUGIN_218],
            "the aws-ofi-nccl network plugin",
            "NET/Plugin : Plugin load (libnccl-net.so) returned",
        ),
        ([NO_LIBFABRIC], "libfabric (libfabric.so.1)", "libfabric.so.1: cannot open shared object file"),
        (NO_DEVICE, "an EFA device in the container", "NET/OFI No eligible providers were found"),
        ([EMPTY_LIST], "an EFA device in the container", "fi_getinfo: provider efa output empty list"),
        (
            [H + b"NET/OFI Selected provider is tcp"],
            "libfabric's efa provider",
            "NET/OFI Selected provider is tcp",
        ),
        (
            [H + b"Failed to initialize any NET plugin"],
            "any network NCCL may use",
            "Failed to initialize any",
        ),
    ],
)
def test_the_line_that_says_why_names_what_was_missing(lines, missing, said):
    e = causes_of(*lines, *SOCKET)
    assert e.fallback == "Using network Socket" or e.fallback.startswith("NET/OFI Selected provider is")
    assert not e.efa
    (cause,) = e.causes  # one cause per kind, the first clue that matches each line
    assert cause.clue.missing.startswith(missing) and cause.line.startswith(said)
    assert str(cause).startswith(f"{cause.clue.missing} ({cause.line!r}): {cause.clue.fix}")


def test_each_fix_points_at_the_remedy():
    fixes = {c.missing.split(" (")[0]: c.fix for c in NET_CLUES}
    assert "efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in fixes["libfabric"]
    assert "/opt/amazon/efa/lib" in fixes["libfabric"]
    assert "/opt/amazon/ofi-nccl/lib" in fixes["the aws-ofi-nccl network plugin"]
    assert "NCCL_NET_PLUGIN=ofi" in fixes["the aws-ofi-nccl network plugin"]
    assert "/dev/infiniband/uverbs" in fixes["an EFA device in the container"]
    assert "FI_PROVIDER=efa" in fixes["libfabric's efa provider"]


def test_a_pod_that_used_efa_has_no_causes_and_harmless_lines_are_no_clue():
    e = causes_of(
        H + b"NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.",
        H + b"NET/Plugin: Loaded net plugin Libfabric (v10)",
        H + b"NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
        H + b"Using network Libfabric",
        H + b"TUNER/Plugin: Could not find: libnccl-tuner.so. Using internal tuner plugin.",
    )
    assert e.efa and e.fallback is None and e.causes == []


def test_a_cause_is_kept_once_in_the_order_seen():
    e = causes_of(NO_PLUGIN_226, NO_PLUGIN_226, *NO_DEVICE)
    assert [c.clue.missing.split(" (")[0] for c in e.causes] == [
        "the aws-ofi-nccl network plugin",
        "an EFA device in the container",
    ]


def test_explain_names_each_cause_once_with_its_pods():
    plugin = str(causes_of(NO_PLUGIN_226).causes[0])
    device = str(causes_of(*NO_DEVICE).causes[0])
    text = explain({"bert-0": (plugin,), "bert-1": (plugin, device)})
    assert text == f"; missing {plugin} [bert-0, bert-1]; missing {device} [bert-1]"
    assert explain({}).startswith("; no NCCL line said why")


def test_the_check_is_an_observation_with_the_failure_text_for_the_judge():
    evidence = {
        "bert-1": causes_of(NO_PLUGIN_226, *SOCKET),
        "bert-0": causes_of(H + b"NET/OFI Selected provider is efa"),
    }
    use = check(evidence, required=True)
    assert use.failed and use.fell_back == {"bert-1": "Using network Socket"} and use.unproven == ()
    assert use.reason.startswith("EFA was requested but NCCL did not use it on 1 pod(s): it fell back to TCP")
    assert "[bert-1]" in use.reason and set(use.causes) == {"bert-1"}
    assert details(use) == ["bert-1: 'Using network Socket'"]
    roll = RollCall()
    for node in (0, 1):
        parser = roll.parser(f"bert-{node}")
        parser.feed(node_log(node, 2, 1).encode())
        parser.close()
    verdict = judge(Observed(roll, Layout(2, 1), JobStatus(JobState.SUCCEEDED, efa=use)))
    # the job succeeded; the efa check alone names the problem, once, in the check's words
    assert [p.kind for p in verdict.findings] == [EFA_KIND] and verdict.problems == [use.reason]


@pytest.mark.parametrize(("required", "failed"), [(True, True), (False, False)])
def test_a_pod_that_never_logged_the_selection_fails_only_where_nccl_logs_it(required, failed):
    use = check({"bert-0": EfaEvidence(efa=True), "bert-1": EfaEvidence()}, required=required)
    assert use.unproven == ("bert-1",) and use.failed is failed
    if failed:
        assert use.reason.startswith("EFA was requested but 1 pod(s) never logged NCCL selecting it")
        assert details(use) == []
    else:
        assert use.reason == ""
        assert details(use) == ["EFA use not proven on 1 pod(s): no 'NET/OFI Selected provider is efa' line"]


def test_efa_used_everywhere_is_no_failure_and_no_detail():
    use = check({"a": EfaEvidence(efa=True), "b": EfaEvidence(efa=True)}, required=True)
    assert not use.failed and use.reason == "" and details(use) == []


def test_efa_not_used_is_its_own_kind_not_a_job_failure():
    reason = "EFA was requested but NCCL did not use it on 1 pod(s): it fell back to TCP sockets"
    efa = EfaUse(fell_back={"x-0": "NET/Socket : Using [0]eth0"}, required=True, reason=reason)
    status = JobStatus(JobState.SUCCEEDED, efa=efa)  # the backend reports EFA; the job itself succeeded
    v = judge(Observed(two_by_two(), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [EFA_KIND]
    assert v.findings[0].detail is efa and v.problems == [reason]
    unproven = EfaUse(unproven=("x-0",), required=False)  # Neuron: not proven is only a detail
    assert judge(Observed(two_by_two(), Layout(2, 2), JobStatus(JobState.SUCCEEDED, efa=unproven))).passed


def test_a_job_that_failed_besides_efa_says_both_once_each():
    efa = EfaUse(fell_back={"x-0": "Using network Socket"}, required=True, reason="EFA was requested but ...")
    status = JobStatus(JobState.FAILED, "pod x-1 (index 1) on node n1: OOMKilled", efa=efa)
    v = judge(Observed(two_by_two(), Layout(2, 2), status))
    assert [p.kind for p in v.findings] == [JOB, EFA_KIND]
    assert v.problems == ["job failed: pod x-1 (index 1) on node n1: OOMKilled", "EFA was requested but ..."]


def test_the_predicate_names_efa_requested_and_not_used_and_nothing_where_it_was():
    reason = "EFA was requested but NCCL did not use it on 1 pod(s): it fell back to TCP sockets"
    fell_back = EfaUse(fell_back={"x-0": "NET/Socket : Using [0]eth0"}, required=True, reason=reason)
    status = JobStatus(JobState.SUCCEEDED, efa=fell_back)
    [problem] = list(efa(RunView(Observed(two_by_two(), Layout(2, 2), status), Criteria())))
    assert problem.kind is EFA_KIND and problem.message == reason and problem.detail is fell_back
    assert problem.ranks == {} and "fell back to TCP" in problem.message
    used = JobStatus(JobState.SUCCEEDED, efa=EfaUse(required=True))
    for sound in (used, JobStatus(JobState.SUCCEEDED), None):
        assert list(efa(RunView(Observed(two_by_two(), Layout(2, 2), sound), Criteria()))) == []
