"""The live roll call: how far the ranks have got, and the line the plugin writes while a job runs."""

import pytest

from rollcall.live.view import LiveRollCall
from rollcall.ranklog import RollCall
from tests.unit.helpers import event
from tests.unit.scripted import SCRIPTED_CONFTEST

pytest_plugins = ["pytester"]


def roll_of(lines_by_node):
    roll = RollCall()
    for node, lines in lines_by_node.items():
        parser = roll.parser(f"node-{node}")
        parser.feed(("\n".join(f"[{r}]:{line}" for r, line in lines) + "\n").encode())
    return roll


def start(rank, node):
    return rank, event("start", rank, 4, local_rank=rank % 2, node_rank=node, host=f"n{node}")


def test_the_live_roll_call_counts_each_stage_out_of_the_world_and_names_the_slowest_rank():
    assert LiveRollCall.of(RollCall(), 4).line() == (
        "roll call: 0/4 started, epochs done -, throughput 0/4, complete 0/4"
    )
    roll = roll_of(
        {
            0: [start(0, 0), start(1, 0), (0, event("epoch_time", 0, 4, epoch=1, seconds=0.5))],
            1: [start(2, 1), (2, event("epoch_time", 2, 4, epoch=1, seconds=0.9))],
        }
    )
    assert LiveRollCall.of(roll, 4).line() == (
        "roll call: 3/4 started, epochs done 0-1, throughput 0/4, complete 0/4; "
        "slowest so far: rank 2 on node 1 (0.90 s per epoch)"
    )
    roll = roll_of(
        {
            0: [
                start(0, 0),
                (0, event("throughput", 0, 4, samples_per_sec=40.0)),
                (0, event("complete", 0, 4)),
            ],
            1: [start(3, 1), (3, event("throughput", 3, 4, samples_per_sec=12.5))],
            2: [(7, event("start", 7, 8, node_rank=3))],  # outside the world: the judge's to name
        }
    )
    live = LiveRollCall.of(roll, 4)
    assert (live.started, live.throughput, live.complete) == (2, 2, 1)
    assert live.line().endswith("; slowest so far: rank 3 on node 1 (12.5 samples/s)")


class FakeReporter:
    def __init__(self, tty):
        self.tty = tty
        self.out = []

    def isatty(self):
        return self.tty

    def ensure_newline(self):
        pass

    def rewrite(self, line, erase=False):
        self.out.append(("rewrite", line))

    def write(self, text):
        self.out.append(("write", text))

    def write_line(self, line):
        self.out.append(("line", line))


class FakeConfig:
    def __init__(self, reporter):
        plugins = {"terminalreporter": reporter}
        self.pluginmanager = type("PM", (), {"getplugin": staticmethod(plugins.get)})()


def states():
    return [LiveRollCall(4, started=n) for n in (1, 1, 2, 4)]


def test_on_a_terminal_the_line_is_rewritten_when_it_changes_and_ended_with_a_newline():
    from rollcall.live.terminal import LiveLine

    reporter = FakeReporter(tty=True)
    view = LiveLine(FakeConfig(reporter), every=30)
    for s in states():
        view.update(s)
    view.finish(LiveRollCall(4, started=4, complete=4))
    kinds = [k for k, _ in reporter.out]
    assert kinds == ["rewrite", "rewrite", "rewrite", "rewrite", "write"]
    assert reporter.out[-2][1].endswith("complete 4/4") and reporter.out[-1] == ("write", "\n")


def test_without_a_terminal_a_plain_line_every_so_often_and_the_final_one(monkeypatch):
    from rollcall.live import terminal

    clock = iter([0.0, 0.0, 5.0, 31.0, 31.0, 32.0, 32.0, 40.0])
    monkeypatch.setattr(terminal.time, "monotonic", lambda: next(clock))
    reporter = FakeReporter(tty=False)
    view = terminal.LiveLine(FakeConfig(reporter), every=30)
    for s in states():
        view.update(s)
    view.finish(LiveRollCall(4, started=4, complete=4))
    lines = [line for _, line in reporter.out]
    assert [k for k, _ in reporter.out] == ["line", "line", "line"]
    assert lines[0].startswith("roll call: 1/4 started") and lines[1].startswith("roll call: 2/4 started")
    assert lines[2].endswith("complete 4/4")


@pytest.mark.parametrize("flags", [["-q"], ["-s"], ["-q", "-s"]])
def test_the_final_line_shows_in_a_session_quiet_or_not(pytester, flags):
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile("def test_roll(rollcall):\n    assert rollcall().result.passed\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--artifacts-dir", "art", *flags)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["roll call: 4/4 started, epochs done 2, throughput 4/4, complete 4/4*"])


def test_progress_every_0_turns_the_live_roll_call_off(pytester):
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile("def test_roll(rollcall):\n    assert rollcall().result.passed\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--artifacts-dir", "art", "--progress-every", "0")
    result.assert_outcomes(passed=1)
    assert "roll call: 4/4 started" not in result.stdout.str()
