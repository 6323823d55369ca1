"""``--taint-unfit`` and ``--label-nodes``: their syntax, their refusal off Kubernetes, the marks a node ends
with (labels, rollcall's taint added to an unfit node and lifted from a fit one, never another's), their rights."""

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from rollcall.backends import Marking, NodeMark
from rollcall.backends.kubernetes import taints
from rollcall.backends.kubernetes.access import Right, rights
from rollcall.backends.kubernetes.kube import call
from rollcall.backends.kubernetes.taints import (
    MERGE_PATCH,
    Marked,
    has_expired,
    label_time,
    mark_node,
    mark_nodes,
    node_change,
    read_label_time,
    with_taint,
    without_taint,
)
from rollcall.jobspec import Taint
from rollcall.options import OptionError, resolve

pytest_plugins = ["pytester"]

UNFIT = Taint("rollcall/unfit", "NoSchedule", "true")


def test_the_taint_takes_kubectls_syntax_from_the_flag_or_the_variable():
    assert resolve({"taint_unfit": "rollcall/unfit=true:NoSchedule"}, {}).recovery.taint_unfit == UNFIT
    env = resolve({}, {"ROLLCALL_TAINT_UNFIT": "rollcall/bad:NoExecute"})
    assert env.recovery.taint_unfit == Taint("rollcall/bad", "NoExecute")
    assert env.sources["taint_unfit"] == "ROLLCALL_TAINT_UNFIT"
    assert resolve({}, {}).recovery.taint_unfit is None  # never without the option
    assert (
        str(UNFIT) == "rollcall/unfit=true:NoSchedule"
        and str(env.recovery.taint_unfit) == "rollcall/bad:NoExecute"
    )
    assert UNFIT.manifest() == {"key": "rollcall/unfit", "value": "true", "effect": "NoSchedule"}
    assert env.recovery.taint_unfit is not None and env.recovery.taint_unfit.manifest() == {
        "key": "rollcall/bad",
        "effect": "NoExecute",
    }


def test_a_taint_of_another_domain_is_refused_so_that_lifting_it_never_lifts_anothers():
    with pytest.raises(OptionError, match=r"the key must be rollcall's own \(rollcall/...\)"):
        resolve({"taint_unfit": "example.com/bad:NoExecute"}, {})
    with pytest.raises(OptionError, match="--recheck-tainted runs on the nodes holding rollcall's taint"):
        resolve({"recheck_tainted": True}, {})


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("rollcall/unfit=true", "has no :EFFECT"),
        ("rollcall/unfit=true:Evict", "'Evict' (in 'rollcall/unfit=true:Evict') is not a taint effect"),
        ("Bad_Prefix/key=x:NoSchedule", "is not a taint key"),
        ("key=two words:NoSchedule", "is not a taint value"),
        ("=true:NoSchedule", "is not a taint key"),
    ],
)
def test_a_malformed_taint_names_the_option_and_the_syntax(value, said):
    with pytest.raises(OptionError) as exc:
        resolve({"taint_unfit": value}, {})
    message = str(exc.value)
    assert message.startswith(f"invalid --taint-unfit value {value!r} (from --taint-unfit): ")
    assert said in message and message.endswith("use --taint-unfit KEY=VALUE:EFFECT")


ROLL_CALL = """
def test_roll_call(rollcall):
    raise AssertionError("a run started despite bad input")
"""


@pytest.mark.parametrize("args", [("--backend", "local"), ("--backend", "slurm")])
def test_off_kubernetes_the_option_is_a_usage_error_before_anything_runs(pytester, args):
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest(
        "-p", "no:cacheprovider", *args, "--taint-unfit", "rollcall/unfit=true:NoSchedule"
    )
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert "Traceback" not in err
    assert (
        "--taint-unfit rollcall/unfit=true:NoSchedule: taints a cluster's nodes, but the backend is "
        f"{args[1]} (--backend {args[1]}), which taints none" in err
    )
    assert "drop --taint-unfit, or run on a backend that does (--backend kubernetes)" in err


def test_a_taint_joins_the_nodes_own_and_tainting_again_changes_nothing():
    own = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    added = with_taint(own, UNFIT)
    assert added == [*own, UNFIT.manifest()]
    assert added is not None and with_taint(added, UNFIT) is None
    assert with_taint([], UNFIT) == [UNFIT.manifest()]
    # the same key and effect with another value: replaced, as kubectl taint --overwrite does
    stale = [{"key": "rollcall/unfit", "value": "old", "effect": "NoSchedule"}, *own]
    assert with_taint(stale, UNFIT) == [*own, UNFIT.manifest()]
    # another effect of the same key is another taint
    other = [{"key": "rollcall/unfit", "value": "true", "effect": "NoExecute"}]
    assert with_taint(other, UNFIT) == [*other, UNFIT.manifest()]


@dataclass
class FakeCore:
    """The calls of core/v1 that marking makes, on nodes held here; ``conflicts`` patches are refused.

    ``refuse``: a node's reads (``"read"``) or patches (``"patch"``) answered with an error, or ``"lost"``: the
    server gone from the read of that node on (every later call fails to connect).
    """

    nodes: dict[str, dict]
    conflicts: int = 0
    patches: list[tuple[str, dict, str]] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)
    lists: list[str] = field(default_factory=list)
    gone: bool = False

    def _answer(self, name, what):
        if self.gone or self.refuse.get(name) == "lost":
            self.gone = True
            raise ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))
        if self.refuse.get(name) == what:
            raise ApiException(status=403, reason="Forbidden")

    def list_node(self, label_selector="", **_):
        if self.gone:
            raise ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))
        self.lists.append(label_selector)
        found = [n for n in self.nodes.values() if label_selector in n["metadata"]["labels"]]
        return SimpleNamespace(data=json.dumps({"items": found}).encode())

    def read_node(self, name, **_):
        self._answer(name, "read")
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=json.dumps(self.nodes[name]).encode())

    def patch_node(self, name, body, _content_type=None, field_manager=None, **_):
        self._answer(name, "patch")
        self.patches.append((name, body, _content_type))
        node = self.nodes[name]
        if self.conflicts:  # another writer changed the node between its read and this patch
            self.conflicts -= 1
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            node["spec"].setdefault("taints", []).append({"key": "other", "effect": "NoSchedule"})
            raise ApiException(status=409, reason="Conflict")
        meta = body["metadata"]
        assert meta["resourceVersion"] == node["metadata"]["resourceVersion"]
        for part in ("labels", "annotations"):  # a JSON merge patch: null removes a key
            held = node["metadata"].setdefault(part, {})
            for key, value in meta.get(part, {}).items():
                held.pop(key, None) if value is None else held.__setitem__(key, value)
        if "taints" in body.get("spec", {}):
            node["spec"]["taints"] = body["spec"]["taints"]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return SimpleNamespace(data=json.dumps(node).encode())


def node(name, *taints, labels=None, annotations=None):
    meta = {"name": name, "resourceVersion": "1", "labels": labels or {}, "annotations": annotations or {}}
    return {"metadata": meta, "spec": {"taints": list(taints)}}


TAINT = Marking(taint=UNFIT)
BOTH = Marking(label=True, taint=UNFIT)


def test_a_node_changed_meanwhile_is_read_again_and_keeps_the_new_taint():
    core = FakeCore({"n1": node("n1")}, conflicts=1)
    kube = SimpleNamespace(core=core)
    unfit = NodeMark("n1", "unfit", "pcie_width 8 of 16")
    assert mark_node(kube, unfit, TAINT).taint == "tainted"
    assert core.nodes["n1"]["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}, UNFIT.manifest()]
    assert core.nodes["n1"]["metadata"]["annotations"] == {"rollcall/unfit-reason": "pcie_width 8 of 16"}
    assert [c for _, _, c in core.patches] == [MERGE_PATCH, MERGE_PATCH]
    assert mark_node(kube, unfit, TAINT).taint == "already" and len(core.patches) == 2  # held: no patch


def test_a_fit_node_loses_rollcalls_taint_and_its_reason_never_another_taint():
    own = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    other_value = {"key": "rollcall/unfit", "value": "old", "effect": "NoSchedule"}
    assert without_taint([own, UNFIT.manifest()], UNFIT) == [own]
    assert without_taint([own, other_value], UNFIT) == [own]  # rollcall's key and effect, whatever its value
    assert without_taint([own], UNFIT) is None
    held = node("n1", own, UNFIT.manifest(), annotations={"rollcall/unfit-reason": "ecc", "x.io/k": "v"})
    change = node_change(held, NodeMark("n1", "fit"), TAINT)
    assert change.taint == "untainted"
    assert change.body == {
        "metadata": {"annotations": {"rollcall/unfit-reason": None}, "resourceVersion": "1"},
        "spec": {"taints": [own]},
    }
    # an unchecked node is left as it is; an undetermined one is labelled so, its taint left as it is
    assert node_change(held, NodeMark("n1", "unchecked", "never reached", 0.0, 1.0), BOTH).body is None
    undetermined = node_change(held, NodeMark("n1", "undetermined", "rank 3 hung", 0.0, 1.0), BOTH)
    assert undetermined.taint == "" and undetermined.body is not None and "spec" not in undetermined.body
    assert undetermined.body["metadata"]["labels"]["rollcall/verdict"] == "undetermined"


def test_labels_say_the_verdict_the_time_and_the_expiry_and_an_unchecked_node_keeps_its_last():
    change = node_change(node("n1"), NodeMark("n1", "fit", "", 1_800_000_000.0, 1_800_090_000.0), BOTH)
    assert change.body is not None and change.body["metadata"]["labels"] == {
        "rollcall/verdict": "fit",
        "rollcall/checked-at": "1800000000",
        "rollcall/valid-until": "1800090000",
    }
    assert "spec" not in change.body  # fit, and it held no taint of rollcall's
    labelled = node("n1", labels=change.body["metadata"]["labels"])
    assert (
        node_change(labelled, NodeMark("n1", "fit", "", 1_800_000_000.0, 1_800_090_000.0), BOTH).body is None
    )
    assert node_change(labelled, NodeMark("n1", "unchecked", "", 1_800_000_000.0, None), BOTH).body is None


def test_each_node_is_marked_once_and_a_refused_one_is_listed():
    own = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    core = FakeCore(
        {"n1": node("n1", own), "n2": node("n2", UNFIT.manifest()), "n3": node("n3", UNFIT.manifest())}
    )
    marks = [
        NodeMark("n1", "unfit", "ecc", 1.0, 2.0),
        NodeMark("n2", "unfit", "ecc", 1.0, 2.0),
        NodeMark("n3", "fit", "", 1.0, 2.0),
        NodeMark("n1", "unfit", "ecc", 1.0, 2.0),
        NodeMark("gone", "unfit", "ecc", 1.0, 2.0),
    ]
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH)
    assert (done.tainted, done.already, done.untainted, list(done.failed)) == (
        ("n1",),
        ("n2",),
        ("n3",),
        ["gone"],
    )
    assert done.failed["gone"].startswith("HTTP 404")
    assert core.nodes["n1"]["spec"]["taints"] == [own, UNFIT.manifest()]
    assert core.nodes["n3"]["spec"]["taints"] == []
    assert done.labelled == {"n1": "unfit", "n2": "unfit", "n3": "fit"}
    assert [name for name, _, _ in core.patches] == ["n1", "n2", "n3"]  # n2: its labels only
    assert done.as_dict()["untainted"] == ["n3"] and done.as_dict()["taint"] == str(UNFIT)
    assert "tainted unfit node(s) n1 with rollcall/unfit=true:NoSchedule" in done.line()
    assert "lifted rollcall/unfit=true:NoSchedule from node(s) n3, found fit" in done.line()
    assert Marked(UNFIT).line() == "no node to mark"


def test_patching_nodes_is_a_right_asked_only_with_the_option():
    assert Right("patch", "", "nodes") not in rights()
    assert Right("get", "", "nodes") in rights()
    assert Right("patch", "", "nodes") in rights(["mark_nodes"])
    assert Right("list", "", "nodes") in rights(["mark_nodes"])  # the expired verdicts are looked for
    assert not any(r.verb == "patch" for r in rights() if r.resource == "nodes")


def test_a_malformed_taint_is_a_usage_error_naming_the_option(pytester):
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest(
        "-p", "no:cacheprovider", "--backend", "kubernetes", "--taint-unfit", "unfit=yes"
    )
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert "invalid --taint-unfit value 'unfit=yes' (from --taint-unfit): 'unfit=yes' has no :EFFECT" in err
    assert "use --taint-unfit KEY=VALUE:EFFECT" in err and "Traceback" not in err


# -- the labels' times: integers a nodeAffinity Gt/Lt compares; expired verdicts cleared ------------------------

NOW = 1_800_000_000.0


def verdict_labels(verdict, checked, until):
    return {"rollcall/verdict": verdict, "rollcall/checked-at": checked, "rollcall/valid-until": until}


def test_the_times_are_integer_epoch_seconds_and_the_old_form_is_still_read():
    assert label_time(1_800_090_000.9) == "1800090000"
    assert label_time(0) == "0"
    assert read_label_time("1800090000") == 1_800_090_000.0
    assert read_label_time("20270116T090000Z") == 1_800_090_000.0  # the form of older versions
    assert [read_label_time(v) for v in ("", "soon", "-5", "1.5", "20271316T090000Z")] == [None] * 5
    expired = node("n1", labels=verdict_labels("fit", "1799990000", "1799999999"))
    assert has_expired(expired, NOW)
    assert not has_expired(node("n1", labels=verdict_labels("fit", "1799990000", "1800000000")), NOW)
    assert has_expired(node("n1", labels=verdict_labels("fit", "20270115T070000Z", "20270115T075959Z")), NOW)
    assert not has_expired(node("n1", labels=verdict_labels("fit", "x", "someday")), NOW)  # not rollcall's
    assert not has_expired(node("n1"), NOW)


def test_expired_verdicts_are_cleared_in_either_form_and_a_taint_is_never_lifted_by_expiry():
    own = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    reason = {"rollcall/unfit-reason": "ecc"}
    stale_unfit = verdict_labels("unfit", "1799900000", "1799990000")
    core = FakeCore(
        {
            "new": node("new", labels={**verdict_labels("fit", "1799900000", "1799990000"), "x.io/k": "v"}),
            "old": node("old", labels=verdict_labels("fit", "20270114T080000Z", "20270115T075959Z")),
            "tainted": node("tainted", own, UNFIT.manifest(), labels=stale_unfit, annotations=reason),
            "fresh": node("fresh", labels=verdict_labels("fit", "1799990000", "1800090000")),
            "plain": node("plain", own, labels={"x.io/k": "v"}),
            "rechecked": node("rechecked", labels=verdict_labels("unfit", "1799900000", "1799990000")),
        }
    )
    marks = [NodeMark("rechecked", "fit", "", NOW, NOW + 3600)]
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH, now=NOW)
    assert core.lists == ["rollcall/valid-until"]
    assert done.expired == ("new", "old", "tainted") and done.failed == {} and done.unlisted == ""
    assert core.nodes["new"]["metadata"]["labels"] == {"x.io/k": "v"}  # every other label kept
    assert core.nodes["old"]["metadata"]["labels"] == {}
    # expiry clears the labels only: the taint and its reason stay, lifted by a fit verdict alone
    assert core.nodes["tainted"]["metadata"]["labels"] == {}
    assert core.nodes["tainted"]["spec"]["taints"] == [own, UNFIT.manifest()]
    assert core.nodes["tainted"]["metadata"]["annotations"] == reason
    assert core.nodes["fresh"]["metadata"]["labels"] == verdict_labels("fit", "1799990000", "1800090000")
    assert core.nodes["plain"]["metadata"] == node("plain", own, labels={"x.io/k": "v"})["metadata"]
    # the node marked now is relabelled in its own patch, not cleared first
    assert core.nodes["rechecked"]["metadata"]["labels"] == verdict_labels("fit", "1800000000", "1800003600")
    assert [name for name, _, _ in core.patches] == ["new", "old", "tainted", "rechecked"]
    gone = {"rollcall/verdict": None, "rollcall/checked-at": None, "rollcall/valid-until": None}
    assert core.patches[0][1] == {"metadata": {"labels": gone, "resourceVersion": "1"}}
    assert done.labelled == {"rechecked": "fit"}
    assert "cleared the expired verdict labels of node(s) new, old, tainted" in done.line()
    assert done.as_dict()["expired"] == ["new", "old", "tainted"]
    # without --label-nodes no label is looked for
    assert mark_nodes(SimpleNamespace(core=core), [], TAINT, now=NOW + 10**6).expired == ()
    assert core.lists == ["rollcall/valid-until"]


def test_a_verdict_written_between_the_list_and_the_clearing_is_kept():
    core = FakeCore({"n1": node("n1", labels=verdict_labels("fit", "1799900000", "1799990000"))})
    listed = core.list_node

    def list_then_relabel(**kw):
        found = listed(**kw)  # another session labels the node anew once it was listed
        core.nodes["n1"]["metadata"]["labels"]["rollcall/valid-until"] = "1800090000"
        core.nodes["n1"]["metadata"]["resourceVersion"] = "2"
        return found

    core.list_node = list_then_relabel
    done = mark_nodes(SimpleNamespace(core=core), [], BOTH, now=NOW)
    assert done.expired == () and core.patches == []
    assert core.nodes["n1"]["metadata"]["labels"]["rollcall/valid-until"] == "1800090000"


def test_a_fit_verdict_lifts_the_taint_only_when_the_check_covered_every_gpu():
    held = node("n1", UNFIT.manifest(), annotations={"rollcall/unfit-reason": "ecc"})
    part = node_change(held, NodeMark("n1", "fit", "", NOW, NOW + 60, whole=False), BOTH)
    assert part.taint == "kept"
    assert part.body is not None and "spec" not in part.body and "annotations" not in part.body["metadata"]
    assert node_change(held, NodeMark("n1", "fit", "", whole=False), TAINT).body is None
    assert node_change(node("n1"), NodeMark("n1", "fit", "", whole=False), TAINT).taint == ""  # none held
    whole = node_change(held, NodeMark("n1", "fit", "", NOW, NOW + 60, whole=True), BOTH)
    assert whole.taint == "untainted" and whole.body is not None and whole.body["spec"]["taints"] == []

    core = FakeCore({"n1": held, "n2": node("n2", UNFIT.manifest())})
    marks = [NodeMark("n1", "fit", "", NOW, NOW + 60, whole=False), NodeMark("n2", "fit", "", NOW, NOW + 60)]
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH, now=NOW)
    assert done.kept == {"n1": "not re-checked whole"} and done.untainted == ("n2",)
    assert core.nodes["n1"]["spec"]["taints"] == [UNFIT.manifest()]
    assert core.nodes["n1"]["metadata"]["annotations"] == {"rollcall/unfit-reason": "ecc"}
    assert core.nodes["n2"]["spec"]["taints"] == []
    assert "node n1 found fit keeps rollcall/unfit=true:NoSchedule: not re-checked whole" in done.line()
    assert done.as_dict()["kept"] == {"n1": "not re-checked whole"}


def test_labels_and_taint_go_in_one_patch_and_a_refused_node_keeps_both_as_they_were():
    core = FakeCore({n: node(n) for n in ("n1", "n2", "n3")}, refuse={"n2": "patch"})
    marks = [NodeMark(n, "unfit", "ecc", NOW, NOW + 60) for n in ("n1", "n2", "n3")]
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH, now=NOW)
    assert [name for name, _, _ in core.patches] == ["n1", "n3"]
    body = core.patches[0][1]
    assert body["metadata"]["labels"]["rollcall/verdict"] == "unfit" and body["spec"]["taints"]
    assert core.nodes["n2"] == node("n2")  # neither label nor taint
    assert (done.tainted, list(done.failed), done.labelled) == (
        ("n1", "n3"),
        ["n2"],
        {"n1": "unfit", "n3": "unfit"},
    )
    assert done.failed["n2"].startswith("HTTP 403")


def test_a_lost_api_server_leaves_the_nodes_left_untried_and_lists_exactly_those_changed(monkeypatch):
    monkeypatch.setattr(taints, "call", lambda *a, **kw: call(*a, **{**kw, "retry_s": 0}))
    core = FakeCore({n: node(n) for n in ("n1", "n2", "n3")}, refuse={"n2": "lost"})
    marks = [NodeMark(n, "unfit", "ecc", NOW, NOW + 60) for n in ("n1", "n2", "n3")]
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH, now=NOW)
    assert (done.tainted, done.labelled) == (("n1",), {"n1": "unfit"})
    assert list(done.failed) == ["n2", "n3"] and "ProtocolError" in done.failed["n2"]
    assert done.failed["n3"].startswith("not tried: the API server was lost (ProtocolError")
    assert core.nodes["n2"] == node("n2") and core.nodes["n3"] == node("n3")
    # lost before the expired labels could be looked for: said, and nothing more is asked of it
    done = mark_nodes(SimpleNamespace(core=core), marks, BOTH, now=NOW)
    assert "ProtocolError" in done.unlisted and list(done.failed) == ["n1", "n2", "n3"]
    assert all(why.startswith("not tried") for why in done.failed.values())
    assert "could not look for expired verdict labels: ProtocolError" in done.line()
