"""``--taint-unfit``: its syntax, its refusal off Kubernetes, the taints a node ends with, and its rights."""

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.access import Right, rights
from rollcall.backends.kubernetes.taints import MERGE_PATCH, Tainted, taint_node, taint_nodes, with_taint
from rollcall.jobspec import Taint
from rollcall.options import OptionError, resolve

pytest_plugins = ["pytester"]

UNFIT = Taint("rollcall/unfit", "NoSchedule", "true")


def test_the_taint_takes_kubectls_syntax_from_the_flag_or_the_variable():
    assert resolve({"taint_unfit": "rollcall/unfit=true:NoSchedule"}, {}).recovery.taint_unfit == UNFIT
    env = resolve({}, {"ROLLCALL_TAINT_UNFIT": "example.com/bad:NoExecute"})
    assert env.recovery.taint_unfit == Taint("example.com/bad", "NoExecute")
    assert env.sources["taint_unfit"] == "ROLLCALL_TAINT_UNFIT"
    assert resolve({}, {}).recovery.taint_unfit is None  # never without the option
    assert (
        str(UNFIT) == "rollcall/unfit=true:NoSchedule"
        and str(env.recovery.taint_unfit) == "example.com/bad:NoExecute"
    )
    assert UNFIT.manifest() == {"key": "rollcall/unfit", "value": "true", "effect": "NoSchedule"}
    assert env.recovery.taint_unfit is not None and env.recovery.taint_unfit.manifest() == {
        "key": "example.com/bad",
        "effect": "NoExecute",
    }


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
    """The two calls of core/v1 that tainting makes, on nodes held here; ``conflicts`` patches are refused."""

    nodes: dict[str, dict]
    conflicts: int = 0
    patches: list[tuple[str, dict, str]] = field(default_factory=list)

    def read_node(self, name, **_):
        if name not in self.nodes:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=json.dumps(self.nodes[name]).encode())

    def patch_node(self, name, body, _content_type=None, field_manager=None, **_):
        self.patches.append((name, body, _content_type))
        node = self.nodes[name]
        if self.conflicts:  # another writer changed the node between its read and this patch
            self.conflicts -= 1
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            node["spec"].setdefault("taints", []).append({"key": "other", "effect": "NoSchedule"})
            raise ApiException(status=409, reason="Conflict")
        assert body["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]
        node["spec"]["taints"] = body["spec"]["taints"]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return SimpleNamespace(data=json.dumps(node).encode())


def node(name, *taints):
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {"taints": list(taints)}}


def test_a_node_changed_meanwhile_is_read_again_and_keeps_the_new_taint():
    core = FakeCore({"n1": node("n1")}, conflicts=1)
    kube = SimpleNamespace(core=core)
    assert taint_node(kube, "n1", UNFIT) is True
    assert core.nodes["n1"]["spec"]["taints"] == [{"key": "other", "effect": "NoSchedule"}, UNFIT.manifest()]
    assert [c for _, _, c in core.patches] == [MERGE_PATCH, MERGE_PATCH]
    assert taint_node(kube, "n1", UNFIT) is False and len(core.patches) == 2  # held already: no patch


def test_each_unfit_node_is_tainted_once_and_a_refused_one_is_listed():
    own = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    core = FakeCore({"n1": node("n1", own), "n2": node("n2", UNFIT.manifest())})
    done = taint_nodes(SimpleNamespace(core=core), ["n1", "n2", "n1", "gone"], UNFIT)
    assert (done.applied, done.already, list(done.failed)) == (("n1",), ("n2",), ["gone"])
    assert done.failed["gone"].startswith("HTTP 404")
    assert core.nodes["n1"]["spec"]["taints"] == [own, UNFIT.manifest()]
    assert [name for name, _, _ in core.patches] == ["n1"]
    assert done.nodes == ("n1", "n2")
    assert done.as_dict() == {
        "taint": "rollcall/unfit=true:NoSchedule",
        "key": "rollcall/unfit",
        "value": "true",
        "effect": "NoSchedule",
        "applied": ["n1"],
        "already": ["n2"],
        "failed": {"gone": done.failed["gone"]},
    }
    assert done.line().startswith("tainted unfit node(s) n1 with rollcall/unfit=true:NoSchedule; node(s) n2 ")
    assert Tainted(UNFIT).line() == "no unfit node to taint with rollcall/unfit=true:NoSchedule"


def test_patching_nodes_is_a_right_asked_only_with_the_option():
    assert Right("patch", "", "nodes") not in rights()
    assert Right("get", "", "nodes") in rights()
    assert Right("patch", "", "nodes") in rights(["taint_unfit"])
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
