"""The watchdog's bound before the join, phase by phase: the imports and device setup are held to the start
skew S from the process's start, the join to J from entering init_process_group, and the steps to theirs."""

from __future__ import annotations

import time

import pytest

from rollcall.jobspec import HangBounds
from rollcall.ranklog import StackDump
from rollcall_workload import contract
from rollcall_workload.rank import cli
from rollcall_workload.rank import watchdog as wd
from tests.unit.helpers import LineLog, roll_of_lines

J, S = 10.0, 25.0


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _dog(clock: Clock, since: float | None = None, setup: float | None = S) -> tuple[wd.Watchdog, LineLog]:
    log = LineLog()
    return wd.Watchdog(log, None, 120.0, clock=clock, join=J, setup=setup, since=since), log


def _stall(log: LineLog) -> StackDump:
    stall = roll_of_lines(log.lines).ranks[0].stall
    assert stall is not None
    return stall


def test_the_setup_is_held_to_the_start_skew_from_the_processs_start_not_to_the_join_bound():
    clock = Clock(8.0)  # the watchdog starts 8 s after the process did (torch's import)
    dog, log = _dog(clock, since=0.0)
    assert dog.heartbeat().phase == contract.SETUP_PHASE and dog.bound() == S
    clock.t = J + 5.0  # past J: a slow torch_xla import is no hang
    assert not dog.check() and log.lines == []
    clock.t = S - 0.1
    assert not dog.check()
    clock.t = S
    assert dog.check()
    stall = _stall(log)
    assert (stall.phase, stall.stalled_s, stall.hang_after) == (contract.SETUP_PHASE, S, S)


def test_the_join_bound_counts_from_entering_init_process_group():
    clock = Clock(8.0)
    dog, log = _dog(clock, since=0.0)
    clock.t = 20.0  # 20 s of imports and device setup: past J, within S
    dog.beat(contract.JOIN_PHASE)
    assert dog.bound() == J and dog.heartbeat().hang_after == J
    clock.t = 20.0 + J - 0.1
    assert not dog.check()
    clock.t = 20.0 + J
    assert dog.check()
    stall = _stall(log)
    assert (stall.phase, stall.stalled_s, stall.hang_after) == (contract.JOIN_PHASE, J, J)
    dog.joined()
    dog.beat("warm-up step 1")
    assert dog.bound() == 120.0  # the first step's, once joined


def test_without_a_setup_bound_the_join_bound_holds_the_whole_start_up_and_the_heartbeat_says_since_when():
    clock = Clock(100.0)
    dog, _ = _dog(clock, setup=None)
    assert dog.bound() == J  # one bound before the join, as a simulation that gives none asks
    clock.t = 105.0
    dog, _ = _dog(clock, since=100.0)
    beat = dog.heartbeat()
    assert abs(beat.progress - (time.time() - 5.0)) < 1.0  # the process's start, on the wall clock
    assert (beat.hang_after, beat.joined) == (S, False)


def test_the_start_skew_reaches_the_workload_declared_once():
    assert wd.start_skew_bound() == wd.START_SKEW_JOINS * wd.JOIN_HANG_S
    # the setup's own bound is S + J, what the suite gives a rank it saw and never heard
    assert wd.setup_bound(30.0, 10.0) == 40.0
    assert wd.setup_bound(None, 10.0) == 3 * 10.0
    assert wd.setup_bound() == (wd.START_SKEW_JOINS + 1) * wd.JOIN_HANG_S
    assert cli.start_skew(["--join-hang-after", "10"]) == 2 * 10.0
    assert cli.start_skew(["--join-hang-after", "10", "--start-skew", "30"]) == 30.0
    assert cli.start_skew(["--no-such-flag"]) == wd.start_skew_bound()
    bounds = HangBounds(join_hang_after_s=10.0, start_skew_s=30.0)
    assert bounds.args() == ("--join-hang-after=10", "--start-skew=30")
    assert HangBounds().start_skew(["--start-skew", "45"]) == 45.0  # the workload's args', where set there
    assert HangBounds().start_skew(["--join-hang-after", "15"]) == 30.0
    assert HangBounds(join_hang_after_s=12.0).start_skew() == 24.0  # twice the suite's own J
    assert bounds.conflicts(["--start-skew", "20"]) == {"--start-skew": (30.0, 20.0)}


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_a_bad_start_skew_is_refused_by_the_workloads_parser(value):
    with pytest.raises(cli.CommandLineError, match="argument --start-skew: must be a number > 0"):
        cli.parse_args(["--start-skew", value])
