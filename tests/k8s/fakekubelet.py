"""Serves the log of every rollcall pod on the fake (kwok) nodes, in the rank-log format.

kwok runs no containers; it serves a pod's log from the CRI-format file that a kwok ``Logs`` object names
(the node's monitor sidecar's: one plain line, no event, as a monitor of healthy ranks says nothing).
:class:`FakeKubelet` watches the suite's pods in every namespace and, as each appears, writes the log its
node would print (one torchrun agent's interleaved, prefixed rank lines, for the pod's completion index,
``--nnodes`` and ``--nproc-per-node``), creates the ``Logs`` object, then marks the pod ``log-served``
(:data:`SERVED`). kwok starts a pod of the suite only once it is marked (``hack/kwok/stages.yaml``), as a
real kubelet serves a container's log from its start: a log the suite follows before kwok has it would
come back empty, and at 64 pods and more the suite's watches often won that race.

Pod annotations steer what a pod "prints":

- ``rollcall.test/log-skip``: JSON ``{"<rank>": ["throughput", "complete"], ...}``: events those ranks omit;
- ``rollcall.test/leave``: JSON ``[<rank>, ...]``: those ranks say their first ``epoch_time``, then ``exit``
  with status 0 in ``epoch 1 end`` (the workload's own ``return``), and nothing more;
- ``rollcall.test/nccl-net``: ``efa`` (default when the pod requests EFA), ``socket`` (NCCL found no
  network plugin and fell back to TCP) or ``none``;
- ``rollcall.test/facts``: JSON ``{"<rank>": {"pcie_width": 8, ...}, ...}``: those ranks also print a
  ``facts`` event with these facts, then a ``samples`` event holding them in every one of
  :data:`~tests.unit.sampled.SAMPLES` reads (the PCIe link and clock events sampled under load, as the workload on cuda says
  them), and every rank's ``start`` names the pod's node (``node``, as the workload reads ``NODE_NAME``), so
  a fitness rule a device breaks names the Kubernetes node and takes it out.

Real log rotation, image pulls, crashes and lost nodes are tested on real nodes (tests/real).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

from kubernetes import client

from rollcall.backends.kubernetes.manifests import CONTAINER, JOB_LABEL, MONITOR_CONTAINER
from rollcall.backends.kubernetes.pod_state import index_of
from rollcall.backends.kubernetes.watch import Informer
from rollcall.jobspec import EFA_RESOURCE
from tests.cluster.controlplane import ControlPlane
from tests.unit.helpers import event, node_log
from tests.unit.sampled import held

log = logging.getLogger(__name__)

#: How long the fake kubelets' watch retries a lost API server (the whole session, in practice).
RETRY_S = 3600.0
EVENT_PREFIX = "ROLLCALL "
LOG_SKIP = "rollcall.test/log-skip"
LEAVE = "rollcall.test/leave"
#: What the fake node's monitor sidecar prints.
MONITOR_LINE = "monitor: every rank's heartbeat is fresh"
NCCL_NET = "rollcall.test/nccl-net"
FACTS = "rollcall.test/facts"
#: The mark kwok's pod-running stage waits for on a pod of the suite (hack/kwok/stages.yaml).
SERVED = "rollcall.test/log-served"


def _flag(command: list[str], name: str) -> int:
    for arg in command:
        m = re.match(rf"^--{name}=(\d+)$", arg)
        if m:
            return int(m.group(1))
    raise ValueError(f"no --{name} in {command}")


def pod_log(pod: dict[str, Any]) -> list[str]:
    """The lines the pod's node prints, from its spec and annotations."""
    container = pod["spec"]["containers"][0]
    nodes = _flag(container["command"], "nnodes")
    procs = _flag(container["command"], "nproc-per-node")
    node = int(index_of(pod))
    annotations = pod["metadata"].get("annotations") or {}
    skip = {int(r): tuple(e) for r, e in json.loads(annotations.get(LOG_SKIP, "{}")).items()}
    limits = (container.get("resources") or {}).get("limits") or {}
    net = annotations.get(NCCL_NET, "efa" if EFA_RESOURCE in limits else "none")
    lines = []
    for local in range(procs):
        rank = node * procs + local
        prefix = f"[{rank}]:{pod['metadata']['name']}:{100 + local}:{200 + local} NCCL INFO"
        if net == "efa":
            lines.append(f"{prefix} NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)")
            lines.append(f"{prefix} Using network Libfabric")
        elif net == "socket":
            lines.append(f"{prefix} NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.")
            lines.append(f"{prefix} NET/Socket : Using [0]eth0:10.244.0.{node}<0>")
            lines.append(f"{prefix} Using network Socket")
    mine = range(node * procs, (node + 1) * procs)
    leave = [r for r in json.loads(annotations.get(LEAVE, "[]")) if r in mine]
    for r in leave:
        skip[r] = ("epoch_time", "throughput", "complete")
    ranks = node_log(node, nodes, procs, skip=skip).splitlines()
    for r in leave:
        ranks.append(f"[{r}]:{event('epoch_time', r, nodes * procs, epoch=1, seconds=0.4)}")
        ranks.append(f"[{r}]:{event('exit', r, nodes * procs, code=0, phase='epoch 1 end')}")
    facts = {int(r): f for r, f in json.loads(annotations.get(FACTS, "{}")).items()}
    if facts:
        ranks = [_naming_node(line, pod["spec"].get("nodeName")) for line in ranks]
        for r, f in sorted(facts.items()):
            if r in mine:
                ranks.append(f"[{r}]:{event('facts', r, nodes * procs, **f)}")
                ranks.append(f"[{r}]:{event('samples', r, nodes * procs, **held(f))}")
    return lines + ranks


def _naming_node(line: str, node: str | None) -> str:
    """``line`` with its ``start`` event naming ``node`` (other lines as they are)."""
    head, sep, body = line.partition(EVENT_PREFIX)
    if not sep or json.loads(body).get("event") != "start":
        return line
    return head + sep + json.dumps({**json.loads(body), "node": node}, separators=(",", ":"))


class FakeKubelet:
    """Watches the suite's pods cluster-wide and serves each one's log through kwok."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.api = cp.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.served: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        # A kubelet never gives up on its API server: the watch outlasts any restart of it (the suite's own
        # watches give up after API_RETRY_S; this one would take every later test's logs with it).
        self.pods = Informer(
            client.CoreV1Api(self.api).list_pod_for_all_namespaces,
            "rollcall pods",
            retry_s=RETRY_S,
            label_selector=JOB_LABEL,
        )
        self.pods.subscribe(self._serve_new)

    def start(self) -> FakeKubelet:
        self.pods.start()
        self.pods.synced.wait(30)
        return self

    def stop(self) -> None:
        self.pods.stop()

    def _serve_new(self) -> None:
        with self._lock:
            for pod in self.pods.objects():
                key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                if key in self.served:
                    continue
                if FACTS in (pod["metadata"].get("annotations") or {}) and not pod["spec"].get("nodeName"):
                    continue  # its start events name its node: served once the scheduler has bound it
                try:
                    self._serve(pod)
                except Exception as exc:  # the API server away for a moment: the next change retries
                    log.warning("could not serve the log of %s/%s yet: %s", *key, exc)
                    continue
                self.served.add(key)

    def _serve(self, pod: dict[str, Any]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        path = self.cp.write_log_file(pod_log(pod), f"{ns}/{name}.log")
        # The training container prints the roll call; the node's monitor, with every rank well, no event: one
        # plain line, as kwok's log reader never answers a follow of an empty file.
        quiet = self.cp.write_log_file([MONITOR_LINE], f"{ns}/{name}.{MONITOR_CONTAINER}.log")
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "logs": [
                    {"containers": [CONTAINER], "logsFile": str(path), "follow": False},
                    {"containers": [MONITOR_CONTAINER], "logsFile": str(quiet), "follow": False},
                ]
            },
        }
        try:
            self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", ns, "logs", body)
        except client.exceptions.ApiException as exc:
            if exc.status in (403, 404) and not self._namespace_active(ns):  # terminating or gone
                return
            if exc.status != 409:  # 409: served before, and the mark below failed then
                raise  # e.g. the Logs resource not served yet by an API server that just restarted
        try:
            self.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {SERVED: "true"}}})
        except client.exceptions.ApiException as exc:
            if exc.status != 404:  # 404: the pod was deleted before it ran
                raise

    def _namespace_active(self, ns: str) -> bool:
        try:
            namespace = self.core.read_namespace(ns)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return namespace.status.phase == "Active"
