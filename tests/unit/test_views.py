"""Read-only views of API objects: each field read once, absent or null fields read as empty."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from rollcall.backends.kubernetes.backend import _older
from rollcall.backends.kubernetes.nodeviews import DaemonSet, Node, NodePool
from rollcall.backends.kubernetes.views import AccessReview, Event, Job, Pod, View, epoch, items, parse_time

INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01T10:00:00.25Z", datetime(2026, 12, 1, 10, 0, 0, 250000, tzinfo=UTC)),
        ("2026-12-01T12:00:00+02:00", datetime(2026, 12, 1, 12, tzinfo=timezone(timedelta(hours=2)))),
        ("2026-12-01T10:00:00", None),  # no zone: the API never writes one, and it would not compare
        ("yesterday", None),
        ("", None),
        (None, None),
        (1767323045, None),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text) == expected


def test_epoch_is_the_same_instant_in_seconds():
    assert epoch("2026-01-02T03:04:05Z") == 1767323045.0
    assert epoch("2026-01-02T05:04:05+02:00") == 1767323045.0
    assert epoch("not a time") is None


def test_an_empty_object_reads_as_empty_everywhere():
    for obj in ({}, {"metadata": None, "spec": None, "status": None}):
        pod = Pod(obj)
        assert (pod.name, pod.namespace, pod.uid, pod.node_name, pod.phase) == ("", "", "", None, "Pending")
        assert pod.labels == {} and pod.annotations == {} and not pod.deleting and pod.created is None
        assert pod.conditions == [] and pod.containers == [] and list(pod.all_containers) == []
        assert pod.index == "?" and pod.node_rank is None and pod.scheduled_at is None
        assert pod.started_at is None and not pod.finished
        node = Node(obj)
        assert not node.cordoned and node.taints == () and node.allocatable == {}
        assert node.instance_type is None and not Job(obj).suspended
        assert (DaemonSet(obj).desired, DaemonSet(obj).ready) == (0, 0) and not AccessReview(obj).allowed


def pod_obj():
    return {
        "metadata": {
            "name": "bert-1",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {INDEX: "1"},
            "creationTimestamp": "2026-12-01T09:59:00Z",
            "deletionTimestamp": "2026-12-01T10:05:00Z",
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low on memory",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"},
                {"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"},
            ],
            "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [
                {
                    "name": "train",
                    "image": "img:1",
                    "state": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "startedAt": "2026-12-01T10:01:30Z",
                            "finishedAt": "2026-12-01T10:04:00Z",
                        }
                    },
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                },
                {
                    "name": "side",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}},
                },
                {"name": "watch", "state": {"running": {"startedAt": "2026-12-01T10:01:00Z"}}},
            ],
        },
    }


def test_a_pod_view_reads_what_the_code_needs():
    pod = Pod(pod_obj())
    assert (pod.name, pod.namespace, pod.uid, pod.node_name) == ("bert-1", "ns", "u-1", "n1")
    assert (pod.phase, pod.reason, pod.message, pod.finished, pod.deleting) == (
        "Failed",
        "Evicted",
        "low on memory",
        True,
        True,
    )
    assert (pod.index, pod.node_rank) == ("1", 1)
    assert pod.created == datetime(2026, 12, 1, 9, 59, tzinfo=UTC)
    assert pod.holds("PodScheduled") and not pod.holds("DisruptionTarget") and not pod.holds("Ready")
    cond = pod.condition("DisruptionTarget")
    assert cond is not None and (cond.status, cond.reason, cond.message) == (
        "False",
        "EvictionByEvictionAPI",
        "",
    )
    assert pod.scheduled_at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert pod.started_at == datetime(2026, 12, 1, 10, 1, tzinfo=UTC)  # the first container to start
    assert [c.name for c in pod.all_containers] == ["init", "train", "side", "watch"]
    train, side, watch = pod.containers
    assert train.image == "img:1" and train.started and not train.running and train.waiting is None
    term = train.terminated
    assert term is not None and (term.reason, term.exit_code, term.failed) == ("OOMKilled", 137, True)
    assert term.finished_at == "2026-12-01T10:04:00Z" and train.started_at == datetime(
        2026, 12, 1, 10, 1, 30, tzinfo=UTC
    )
    last = train.last_terminated
    assert last is not None and (last.reason, last.exit_code) == ("Error", 1)
    assert side.waiting == ("ImagePullBackOff", "not found") and not side.started
    assert side.terminated is None and side.last_terminated is None
    assert watch.running and watch.started and pod.container("watch") == watch
    assert pod.container("nope") is None


def test_the_index_falls_back_to_the_annotation():
    assert Pod({"metadata": {"annotations": {INDEX: "3"}}}).index == "3"


def test_a_terminated_state_that_exited_zero_is_no_failure():
    term = Pod(pod_obj()).containers[0].terminated
    assert term is not None
    ok = type(term)({"exitCode": 0, "reason": "Completed"})
    assert not ok.failed and ok.exit_code == 0


def test_node_job_daemonset_and_nodepool_views():
    node = Node(
        {
            "metadata": {"name": "n1", "labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert node.cordoned and node.taints == ({"key": "k", "effect": "NoSchedule"},)
    assert node.allocatable == {"nvidia.com/gpu": "8"} and node.instance_type == "p5.48xlarge"
    assert node.holds("Ready")
    assert node.advertised("nvidia.com/gpu") == 8 and node.advertised("vpc.amazonaws.com/efa") is None
    # the lesser of capacity and allocatable: the kubelet leaves an unhealthy device out of allocatable
    both = {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}
    assert Node({"status": both}).capacity == {"nvidia.com/gpu": "8"}
    assert Node({"status": both}).advertised("nvidia.com/gpu") == 7
    assert Node({"status": {"capacity": {"nvidia.com/gpu": "6"}}}).advertised("nvidia.com/gpu") == 6
    assert Job({"spec": {"suspend": True}}).suspended and not Job({"spec": {"suspend": False}}).suspended
    ds = DaemonSet({"metadata": {"name": "d"}, "status": {"desiredNumberScheduled": 3, "numberReady": 2}})
    assert (ds.name, ds.desired, ds.ready) == ("d", 3, 2)
    pool = NodePool(
        {
            "metadata": {"name": "trn"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {
                        "requirements": [{"key": "k", "operator": "In", "values": ["v"]}],
                        "taints": [{"key": "t", "effect": "NoSchedule"}],
                        "nodeClassRef": {"group": "eks.amazonaws.com"},
                    },
                },
                "limits": {"cpu": "100"},
            },
            "status": {"resources": {"cpu": "10"}},
        }
    )
    assert pool.template_labels == {"a": "b"} and pool.requirements[0]["key"] == "k"
    assert pool.taints[0]["key"] == "t" and pool.node_class_group == "eks.amazonaws.com"
    assert pool.limits == {"cpu": "100"} and pool.used == {"cpu": "10"}
    assert AccessReview({"status": {"allowed": True}}).allowed


def test_older_reads_the_creation_time_and_skips_what_is_being_deleted():
    cutoff = datetime(2026, 12, 1, 10, tzinfo=UTC)
    old = {"metadata": {"name": "a", "creationTimestamp": "2026-12-01T09:00:00Z"}}
    assert _older(old, cutoff)
    assert not _older({"metadata": {**old["metadata"], "deletionTimestamp": "2026-12-01T09:30:00Z"}}, cutoff)
    assert not _older({"metadata": {"name": "b", "creationTimestamp": "2026-12-01T10:30:00Z"}}, cutoff)
    assert not _older({"metadata": {"name": "c"}}, cutoff)  # no creation time: not known to be old


def test_a_node_says_its_versions_image_and_group_and_nothing_it_lacks():
    node = Node(
        {
            "metadata": {
                "labels": {
                    "eks.amazonaws.com/nodegroup-image": "ami-0abc",
                    "eks.amazonaws.com/nodegroup": "gpu",
                }
            },
            "status": {
                "nodeInfo": {
                    "kubeletVersion": "v1.34.1-eks-1",
                    "containerRuntimeVersion": "containerd://2.1.4",
                    "kernelVersion": "6.12.40",
                    "osImage": "Amazon Linux 2023",
                }
            },
        }
    )
    assert node.facts == {
        "kubelet": "v1.34.1-eks-1",
        "container_runtime": "containerd://2.1.4",
        "kernel_version": "6.12.40",
        "os_image": "Amazon Linux 2023",
        "image": "ami-0abc",
        "node_group": "gpu",
    }
    assert Node({}).facts == {}


def test_the_versions_deadline_start_template_and_tolerations_read_as_the_callers_need():
    for obj in ({}, {"metadata": None, "spec": None, "status": None}):
        assert View(obj).resource_version == "" and Pod(obj).tolerations == []
        job = Job(obj)
        assert (job.active_deadline_s, job.start_time, job.template.obj) == (None, None, {})
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    job = Job(
        {
            "metadata": {"name": "j", "resourceVersion": "42"},
            "spec": {
                "activeDeadlineSeconds": 3600,
                "template": {
                    "metadata": {"labels": {"app": "bert"}},
                    "spec": {
                        "tolerations": [toleration],
                        "containers": [
                            {"resources": {"limits": {"vpc.amazonaws.com/efa": 4, "memory": "8Gi"}}}
                        ],
                    },
                },
            },
            "status": {"startTime": "2026-12-01T10:00:00Z"},
        }
    )
    assert (job.resource_version, job.active_deadline_s) == ("42", 3600)
    assert job.start_time == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert job.template.labels == {"app": "bert"} and job.template.tolerations == [toleration]
    assert job.template.limits == {"vpc.amazonaws.com/efa": 4}
    assert Job({"spec": {"activeDeadlineSeconds": "3600"}}).active_deadline_s is None  # not a number
    tolerations = job.template.tolerations
    tolerations.append({"key": "x"})
    assert job.template.tolerations == [toleration], "a list of its own: appending changes nothing read"


def test_an_event_and_a_list_read_as_the_callers_need():
    assert (Event({}).reason, Event({}).message, Event({}).last_seen, Event({}).involved) == (
        "",
        "",
        "",
        None,
    )
    event = Event(
        {
            "reason": "TriggeredScaleUp",
            "message": "pod triggered scale-up",
            "eventTime": "2026-12-01T10:00:00.000001Z",
            "involvedObject": {"kind": "Pod", "name": "bert-0"},
        }
    )
    assert (event.reason, event.message, event.involved) == (
        "TriggeredScaleUp",
        "pod triggered scale-up",
        "bert-0",
    )
    assert event.last_seen == "2026-12-01T10:00:00.000001Z"
    assert (
        Event({"lastTimestamp": "2026-12-01T10:00:01Z", "eventTime": "x"}).last_seen == "2026-12-01T10:00:01Z"
    )
    assert items({"items": [{"metadata": {"name": "a"}}, None]}) == [{"metadata": {"name": "a"}}]
    assert items({}) == [] and items({"items": None}) == [] and items(None) == []
