"""Builders of rank logs for the unit tests."""

import json

from rollcall.ranklog import RollCall
from rollcall_workload import contract


def event(name, rank, world, **kw):
    if name == "start":  # the workload of the suite's own version, unless the test says otherwise
        from rollcall_workload.contract import CONTRACT_VERSION, WORKLOAD_VERSION

        kw = {**kw, "workload_version": kw.get("workload_version", WORKLOAD_VERSION)}
        kw["contract_version"] = kw.get("contract_version", CONTRACT_VERSION)
    obj = {"event": name, "rank": rank, "world_size": world, **kw}
    return "ROLLCALL " + json.dumps(obj, separators=(",", ":"))


def rank_lines(rank, world, procs_per_node, tp=50.0, epochs=(0.4, 0.5), skip=()):
    node, local = divmod(rank, procs_per_node)
    out = []
    if "start" not in skip:
        out.append(
            event("start", rank, world, local_rank=local, node_rank=node, host=f"n{node}", device="cpu")
        )
    if "epoch_time" not in skip:
        out += [event("epoch_time", rank, world, epoch=i + 1, seconds=s) for i, s in enumerate(epochs)]
    if "throughput" not in skip:
        out.append(event("throughput", rank, world, samples_per_sec=tp))
    if "complete" not in skip:
        out.append(event("complete", rank, world))
    return out


def node_log(node, nodes, procs_per_node, skip=None, tp=None):
    """One pod's log, as torchrun's agent prints it: prefixed, ranks interleaved."""
    world = nodes * procs_per_node
    skip = skip or {}
    tp = tp or {}
    per_rank = [
        [
            f"[{r}]:{line}"
            for line in rank_lines(r, world, procs_per_node, tp=tp.get(r, 50.0), skip=skip.get(r, ()))
        ]
        for r in range(node * procs_per_node, (node + 1) * procs_per_node)
    ]
    lines = ["[default0]:INFO torchrun starting"]
    for i in range(max(map(len, per_rank))):
        lines += [lines_of[i] for lines_of in per_rank if i < len(lines_of)]
    return "\n".join(lines) + "\n"


def judged(roll, spec, status=None, artifacts="a", duration=1.0, **criteria):
    """An attempt of ``spec`` whose roll call is judged once, against the session's default criteria
    (the options' defaults) with ``criteria`` replacing some of them."""
    from dataclasses import replace
    from pathlib import Path

    from rollcall.backends import JobState, JobStatus
    from rollcall.gate import criteria_of
    from rollcall.judge import judge
    from rollcall.options import DEFAULTS
    from rollcall.runner import Attempt
    from rollcall.verdict import Layout, Observed

    status = status or JobStatus(JobState.SUCCEEDED)
    observed = Observed(roll, Layout(spec.nodes, spec.procs_per_node), status, spec)
    verdict = judge(observed, replace(criteria_of(DEFAULTS), **criteria))
    return Attempt(spec, status, verdict, Path(artifacts), duration)


def roll_of(*logs):
    roll = RollCall()
    for i, text in enumerate(logs):
        p = roll.parser(f"pod-{i}")
        p.feed(text.encode())
        p.close()
    return roll


def roll_of_lines(lines, source="node-0"):
    """A roll call of one log: ``lines`` (bytes, each a whole line) as the node ``source`` wrote them."""
    roll = RollCall()
    parser = roll.parser(source)
    parser.feed(b"".join(lines))
    parser.close()
    return roll


class LineLog:
    """A rank's log for the watchdog to write to, keeping each line it wrote (bytes) in :attr:`lines`."""

    def __init__(self, rank=0, world_size=1):
        self.rank, self.world_size = rank, world_size
        self.lines = []

    def write(self, data):
        self.lines.append(data)

    def emit(self, event, **fields):
        self.write(contract.encode_event(event, self.rank, self.world_size, **fields))


def two_by_two(**kw):
    return roll_of(node_log(0, 2, 2, **kw), node_log(1, 2, 2, **kw))


class Clock:
    """A clock a test sets by hand (the suite's monotonic clock, a monitor's)."""

    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def on_the_way(roll, *looks):
    """The backend's looks at ``roll``: at each ``(t, nodes)`` it saw ``nodes`` on their way, and no other."""
    for t, nodes in looks:
        roll.clock.t = t
        roll.on_the_way(nodes)
    return roll


def roll_heard(timed, ended=None, source="node-0"):
    """A roll call that read each ``(t, line)`` of ``timed`` at ``t`` on its own clock; ``ended``: the job's end.

    Each part is heard on that clock when its first line is read (:mod:`rollcall.evidence.clocks`).
    """
    clock = Clock()
    roll = RollCall(clock=clock)
    parser = roll.parser(source)
    for t, line in timed:
        clock.t = t
        parser.feed(line)
    parser.close()
    roll.ended = ended if ended is not None else clock.t
    return roll
