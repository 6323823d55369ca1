"""Discovery chooses usable nodes and derives ranks and requests from their allocatable resources."""

import pytest

from rollcall.backends import DiscoveryError
from rollcall.backends.kubernetes.capacity import shape
from rollcall.backends.kubernetes.discovery import (
    ACCELERATOR_RESOURCES,
    Node,
    accelerator_resource,
    check_device_plugins,
    count,
    discover,
    owns_nodes,
    requested_resource,
    tolerates,
)
from rollcall.backends.kubernetes.manifests import job_tolerations

TRN1 = {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "32", "vpc.amazonaws.com/efa": "8"}
P5 = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}
G5 = {"nvidia.com/gpu": "1"}
TYPES = {"trn1": ("trn1.32xlarge", TRN1), "p5": ("p5.48xlarge", P5), "g5": ("g5.xlarge", G5)}


def node(name, kind="trn1", *, ready=True, cordoned=False, taints=(), allocatable=None, labels=None):
    itype, alloc = TYPES[kind]
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletNotReady"}]
    return {
        "metadata": {"name": name, "labels": {"node.kubernetes.io/instance-type": itype, **(labels or {})}},
        "spec": {"unschedulable": cordoned, "taints": list(taints)},
        "status": {"conditions": conditions, "allocatable": {"cpu": "8", **(allocatable or alloc)}},
    }


def run(nodes, n=2, **kw):
    return discover(nodes, nodes=n, tolerations=job_tolerations(), **kw)


def test_trn1_nodes_give_neuroncores_and_all_efa_devices():
    found = run([node("a"), node("b")])
    p = found.placement
    assert (p.accelerator, p.procs_per_node, p.instance_type) == ("neuron", 32, "trn1.32xlarge")
    assert p.resources == {"aws.amazon.com/neuroncore": 32, "vpc.amazonaws.com/efa": 8}
    assert found.usable == ["a", "b"] and found.efa


def test_p5_nodes_give_gpus_and_efa_off_drops_the_request():
    found = run([node("a", "p5"), node("b", "p5")], efa="off")
    assert found.placement.accelerator == "nvidia"
    assert found.placement.resources == {"nvidia.com/gpu": 8}
    assert not found.efa


def test_efa_auto_is_off_when_the_nodes_have_none():
    found = run([node("a", "g5"), node("b", "g5")])
    assert found.placement.resources == {"nvidia.com/gpu": 1} and not found.efa


def test_efa_on_rejects_nodes_without_it():
    with pytest.raises(DiscoveryError) as err:
        run([node("a", "g5"), node("b", "g5")], efa="on")
    assert "no vpc.amazonaws.com/efa allocatable (--efa on): a, b (2)" in str(err.value)


def test_every_other_node_is_listed_with_why():
    nodes = [
        node("good"),
        node("sick", ready=False),
        node("cordoned", cordoned=True),
        node("tainted", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        node("gpu", "g5"),
    ]
    with pytest.raises(DiscoveryError) as err:
        run(nodes, n=3, instance_type="trn1.32xlarge")
    text = str(err.value)
    assert text.startswith("need 3 usable node(s), found 1 for neuron")
    assert "usable: good (1)" in text
    assert "NotReady (KubeletNotReady): sick (1)" in text
    assert "cordoned (spec.unschedulable): cordoned (1)" in text
    assert "tainted dedicated=infra:NoSchedule (not tolerated): tainted (1)" in text
    assert "instance type g5.xlarge, not trn1.32xlarge: gpu (1)" in text


def test_accelerator_taints_are_tolerated_and_prefer_no_schedule_ignored():
    taints = [
        {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ]
    found = run([node("a", taints=taints), node("b", taints=taints)])
    assert found.usable == ["a", "b"]


def test_mixed_instance_types_are_refused_unless_one_is_chosen():
    nodes = [node("a"), node("b"), node("c", "p5"), node("d", "p5")]
    with pytest.raises(DiscoveryError, match="both NVIDIA GPU and Neuron"):
        run(nodes)
    more = [node("a", "p5"), node("b", "p5"), node("c", "g5")]
    with pytest.raises(DiscoveryError, match=r"mixed instance types: g5.xlarge x1, p5.48xlarge x2; choose"):
        run(more)
    assert run(more, instance_type="p5.48xlarge").usable == ["a", "b"]
    assert run(nodes, accelerator="nvidia", instance_type="p5.48xlarge").placement.procs_per_node == 8


def test_auto_never_falls_back_to_cpu():
    with pytest.raises(DiscoveryError, match="use --accelerator cpu"):
        run([node("a", allocatable={"cpu": "4"}), node("b", allocatable={"cpu": "4"})])
    found = run([node("a", allocatable={"cpu": "4"})], n=1, accelerator="cpu")
    assert (found.placement.procs_per_node, found.placement.resources) == (1, {})


def test_nodes_with_fewer_devices_are_left_out():
    nodes = [node("a", "p5"), node("b", "p5"), node("c", "p5", allocatable={"nvidia.com/gpu": "7"})]
    found = run(nodes, efa="off")
    assert found.placement.procs_per_node == 8 and found.usable == ["a", "b"]
    assert found.rejected == {"c": "only 7 nvidia.com/gpu allocatable, 8 needed"}
    # three nodes wanted: the most all three offer
    assert run(nodes, n=3, efa="off").placement.procs_per_node == 7


def test_procs_per_node_option_sets_the_request():
    found = run([node("a", "p5"), node("b", "p5")], procs_per_node=4)
    assert found.placement.resources["nvidia.com/gpu"] == 4 and found.placement.procs_per_node == 4
    with pytest.raises(DiscoveryError, match=r"only 8 nvidia\.com/gpu allocatable, 9 needed"):
        run([node("a", "p5"), node("b", "p5")], procs_per_node=9)


def test_whole_neuron_devices_when_no_neuroncore_is_advertised():
    alloc = {"aws.amazon.com/neuron": "16"}
    found = run([node("a", allocatable=alloc), node("b", allocatable=alloc)])
    assert found.placement.resources == {"aws.amazon.com/neuron": 16}


def test_empty_cluster():
    with pytest.raises(DiscoveryError, match="the cluster has no nodes"):
        run([], accelerator="nvidia")


def test_long_lists_are_shortened():
    nodes = [node(f"n{i:02}", cordoned=True) for i in range(20)]
    with pytest.raises(DiscoveryError) as err:
        run(nodes, accelerator="neuron")
    assert "n07 and 12 more (20)" in str(err.value)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute"},
            {"key": "k", "effect": "NoSchedule"},
            False,
        ),
        ({"value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ],
)
def test_toleration_rules(toleration, taint, expected):
    assert tolerates([toleration], taint) is expected


def test_quantities():
    assert [count(q) for q in ("8", 8, "2k", "1Ki", "junk", "")] == [8, 8, 2000, 1024, 0, 0]


def ds(name, ns="kube-system", desired=2, ready=2):
    return {
        "metadata": {"name": name, "namespace": ns},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


def test_device_plugins_ready_missing_and_not_ready():
    ok = [ds("neuron-device-plugin-daemonset"), ds("aws-efa-k8s-device-plugin-daemonset")]
    assert check_device_plugins(ok, "neuron", efa=True) == []
    problems = check_device_plugins([ds("nvdp-nvidia-device-plugin", "nvidia", 4, 3)], "nvidia", efa=True)
    assert problems == [
        "nvidia device plugin nvidia/nvdp-nvidia-device-plugin: 3 of 4 pod(s) ready",
        "no efa device-plugin DaemonSet (looked for names containing efa-k8s-device-plugin or "
        "efa-device-plugin in every namespace)",
    ]
    assert check_device_plugins([], "cpu", efa=False) == []


def efa_nodes(counts, kind="p5"):
    alloc = TYPES[kind][1]
    return [
        node(f"n{i}", kind, allocatable={**alloc, "vpc.amazonaws.com/efa": str(c)})
        for i, c in enumerate(counts)
    ]


def test_a_node_offering_fewer_efa_devices_than_its_type_has_is_unusable():
    found = run(efa_nodes([32, 16, 32]))
    assert found.placement.resources == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert found.usable == ["n0", "n2"] and found.efa
    assert found.rejected == {"n1": "offers 16 vpc.amazonaws.com/efa, its type p5.48xlarge has 32"}


def test_nodes_all_short_of_their_types_efa_count_fail_naming_both_numbers():
    with pytest.raises(DiscoveryError) as err:
        run(efa_nodes([16, 16]), efa="on")
    text = str(err.value)
    assert text.startswith("need 2 usable node(s), found 0 for nvidia")
    assert "offers 16 vpc.amazonaws.com/efa, its type p5.48xlarge has 32: n0, n1 (2)" in text


def test_efa_auto_refuses_when_only_some_nodes_have_it():
    with pytest.raises(DiscoveryError) as err:
        run(efa_nodes([32, 0, 32, 0]))
    text = str(err.value)
    assert "--efa auto: 2 usable node(s) advertise vpc.amazonaws.com/efa but 2 do not: n1, n3 (2)" in text
    assert "--efa off" in text and "--efa on" in text and "--instance-type" in text


def test_efa_on_leaves_out_the_nodes_without_it():
    found = run(efa_nodes([32, 0, 32]), efa="on")
    assert found.usable == ["n0", "n2"] and found.placement.resources["vpc.amazonaws.com/efa"] == 32
    assert found.rejected == {"n1": "no vpc.amazonaws.com/efa allocatable (--efa on)"}


def test_efa_auto_without_any_efa_says_so_when_the_type_has_it():
    found = run(efa_nodes([0, 0]))
    assert not found.efa and "vpc.amazonaws.com/efa" not in found.placement.resources
    assert "EFA off although p5.48xlarge has 32 interfaces" in found.placement.description
    assert "EFA off" not in run(efa_nodes([32, 32]), efa="off").placement.description


def test_an_unknown_type_requests_what_its_nodes_offer_and_names_the_odd_one():
    alloc = {"nvidia.com/gpu": "4"}
    labels = {"node.kubernetes.io/instance-type": "x9.big"}
    nodes = [
        node(f"n{i}", "g5", allocatable={**alloc, "vpc.amazonaws.com/efa": str(c)}, labels=labels)
        for i, c in enumerate([4, 2, 4])
    ]
    found = run(nodes)
    assert found.placement.resources == {"nvidia.com/gpu": 4, "vpc.amazonaws.com/efa": 4}
    assert found.rejected == {
        "n1": "offers 2 vpc.amazonaws.com/efa, the other x9.big nodes offer 4 "
        "(type not in the instance table)"
    }


def test_neurondevice_is_accepted_after_neuroncores():
    alloc = {"aws.amazon.com/neurondevice": "16", "vpc.amazonaws.com/efa": "8"}
    found = run([node("a", allocatable=alloc), node("b", allocatable=alloc)])
    assert found.placement.resources == {"aws.amazon.com/neurondevice": 16, "vpc.amazonaws.com/efa": 8}
    both = {"aws.amazon.com/neuroncore": "32", **alloc}
    found = run([node("a", allocatable=both), node("b", allocatable=both)])
    assert found.placement.resources["aws.amazon.com/neuroncore"] == 32


def test_eks_auto_mode_nodes_are_recognised():
    auto = {"eks.amazonaws.com/compute-type": "auto"}
    assert run([node("a", labels=auto), node("b", labels=auto)]).auto_mode
    assert not run([node("a", labels=auto), node("b")]).auto_mode


def test_one_table_maps_each_accelerator_to_its_resources():
    assert ACCELERATOR_RESOURCES == {
        "nvidia": ("nvidia.com/gpu",),
        "neuron": ("aws.amazon.com/neuroncore", "aws.amazon.com/neurondevice", "aws.amazon.com/neuron"),
        "cpu": (),
    }
    assert [requested_resource(a) for a in ("nvidia", "neuron", "cpu")] == [
        "nvidia.com/gpu",
        "aws.amazon.com/neuroncore",
        None,
    ]
    devices_only = Node.of(
        {"metadata": {"name": "n"}, "status": {"allocatable": {"aws.amazon.com/neurondevice": "16"}}}
    )
    assert accelerator_resource(devices_only, "neuron") == "aws.amazon.com/neurondevice"
    assert accelerator_resource(devices_only, "nvidia") is None
    assert accelerator_resource(devices_only, "cpu") is None
    # capacity plans a node that does not exist yet with the same table
    p5, trn1 = shape("p5.48xlarge"), shape("trn1.32xlarge")
    assert p5 is not None and p5.resource == requested_resource("nvidia")
    assert trn1 is not None and trn1.resource == requested_resource("neuron")


def test_a_node_advertising_fewer_gpus_than_its_type_is_named_where_it_lowers_the_request():
    """A GPU a node does not advertise is a fault nothing here can produce: its allocatable is written short."""
    short = {"nvidia.com/gpu": "7", "vpc.amazonaws.com/efa": "32"}
    found = run([node("a", "p5"), node("b", "p5", allocatable=short)])
    assert found.usable == ["a", "b"] and found.placement.resources["nvidia.com/gpu"] == 7
    assert [str(s) for s in found.short["b"]] == [
        "advertises 7 nvidia.com/gpu, its instance type p5.48xlarge has 8 GPUs"
    ]
    assert list(found.short) == ["b"]
    lowered = (
        "each pod requests 7 nvidia.com/gpu, fewer than the 8 of its instance type: b (1) advertise fewer "
        "(rule advertised_devices)"
    )
    assert found.warnings() == [
        "node b advertises 7 nvidia.com/gpu, its instance type p5.48xlarge has 8 GPUs (a device lost, or a "
        "device plugin that did not enumerate it): rule advertised_devices names it after a run on it",
        lowered,
    ]
    assert found.placement.description.startswith(
        "2 usable node(s) of 2 (p5.48xlarge); each pod gets 7 nvidia.com/gpu, 32 vpc.amazonaws.com/efa; "
        f"7 rank(s) per node ({lowered})"
    )
    # left out when the others suffice, and not named: the pods request the type's 8
    spare = run([node("a", "p5"), node("b", "p5", allocatable=short), node("c", "p5")])
    assert spare.short == {} and spare.warnings() == [] and "fewer than" not in spare.placement.description
    # --procs-per-node chose the request: the short node is still named, the request is not "lowered"
    chosen = run([node("a", "p5"), node("b", "p5", allocatable=short)], procs_per_node=4)
    assert list(chosen.short) == ["b"] and "fewer than" not in chosen.placement.description
    assert len(chosen.warnings()) == 1


def test_a_trn1_node_advertising_fewer_neuroncores_than_its_type_is_named():
    short = {**TRN1, "aws.amazon.com/neuroncore": "30"}
    found = run([node("a"), node("b", allocatable=short)])
    assert found.placement.resources["aws.amazon.com/neuroncore"] == 30
    assert [str(s) for s in found.short["b"]] == [
        "advertises 30 aws.amazon.com/neuroncore, its instance type trn1.32xlarge has 32 NeuronCores"
    ]
    assert found.lowered.startswith("each pod requests 30 aws.amazon.com/neuroncore, fewer than the 32 of")
    # a type the table does not know is judged by what its nodes advertise: nothing is short
    unknown = node("b", allocatable=short, labels={"node.kubernetes.io/instance-type": "trn9.huge"})
    other = node("a", labels={"node.kubernetes.io/instance-type": "trn9.huge"})
    assert run([other, unknown]).short == {}


def _pod(name, node_name, gpus):
    """A pod of the run placed on ``node_name`` (None: never placed) whose container is given ``gpus``."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node_name, "containers": [{"name": "train", "resources": {"limits": limits}}]},
    }


def test_the_run_owns_its_nodes_only_where_its_pods_requested_every_gpu_each_has_allocatable():
    nodes = {n["metadata"]["name"]: n for n in (node("a", "p5"), node("b", "p5"))}
    whole = [_pod("r-0", "a", 8), _pod("r-1", "b", 8)]
    assert owns_nodes(whole, nodes.get) is True
    assert owns_nodes([_pod("r-0", "a", 8), _pod("r-1", "b", 4)], nodes.get) is False  # b keeps 4 GPUs
    assert owns_nodes([_pod("r-0", "a", 4), _pod("r-1", "a", 4)], nodes.get) is True  # two pods, all of a
    assert owns_nodes([*whole, _pod("r-2", None, 8)], nodes.get) is True  # a pod never placed ran nothing
    assert owns_nodes([_pod("r-0", "gone", 8)], nodes.get) is None  # its node is not known
    assert owns_nodes([_pod("r-0", "gone", 8), _pod("r-1", "b", 1)], nodes.get) is False
    assert owns_nodes([_pod("r-0", None, 8)], nodes.get) is None
