"""A scripted backend for driving the plugin end to end through pytester.

``SCRIPTED_CONFTEST`` is a conftest for pytester projects: each launch pops a step from ``PLAN``
(``{"skip": {rank: events}, "tp": {rank: samples_per_sec}, "state": JobState, "disruption": Disruption, "wedge": True,
"extra": {node: lines}}``; a wedged job's ``wait`` never returns) and writes that step's
rank logs, one per node, as the workload would print them; ``CLEANED`` records the jobs cleaned up.
"""

SCRIPTED_CONFTEST = """
import threading
import pytest
from rollcall.backends import CleanupError, JobState, JobStatus, Placement
from tests.unit.test_baseline import workload_log

PLAN = []
CLEANED = []

class ScriptedJob:
    def __init__(self, spec, collector):
        step = PLAN.pop(0) if PLAN else {}
        for node in range(spec.nodes):
            sink = collector.sink(f"{spec.name}-{node}")
            text = workload_log(node, spec.nodes, spec.procs_per_node, skip=step.get("skip"), tp=step.get("tp"))
            text += step.get("extra", {}).get(node, "")
            sink.write(text.encode())
            sink.close()
        self.state = step.get("state", JobState.SUCCEEDED)
        self.disruption = step.get("disruption")
        self.wedged = step.get("wedge", False)
        self.left = step.get("left", [])
        self.name = spec.name
    def wait(self, timeout_s, stop=None):
        if self.wedged:  # a watch or API call that never returns
            threading.Event().wait()
        if self.disruption is not None:
            return JobStatus.disrupted(self.disruption)
        return JobStatus(self.state, "" if self.state is JobState.SUCCEEDED else "pod job-1 failed")
    def cleanup(self):
        CLEANED.append(self.name)
        if self.left:
            raise CleanupError(f"{', '.join(self.left)} is not gone yet", self.left)

class ScriptedBackend:
    name = "scripted"
    unit = "pod"
    def launch(self, spec, collector):
        return ScriptedJob(spec, collector)

@pytest.fixture(scope="session", autouse=True)
def scripted(rollcall_suite):
    rollcall_suite.__dict__["backend"] = ScriptedBackend()
    rollcall_suite.__dict__["placement"] = Placement("cpu", 2)
    rollcall_suite.backend_name = "scripted"
"""
