"""Root cause first: echoes told from a rank's own error, ordered by time, folded by shape."""

import pytest

from rollcall.evidence.rootcause import (
    CLOCK_TOLERANCE_S,
    MAX_GROUPS,
    MAX_ROOTS,
    Failure,
    Termination,
    analyse,
    fold,
    is_echo,
    lines,
    shape,
    summary,
)

GLOO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:{port}"
T0 = 1_764_576_000.0  # 2025-12-01T08:00:00Z


@pytest.mark.parametrize(
    "message",
    [
        GLOO.format(port=40312),
        "RuntimeError: [../gloo/transport/tcp/pair.cc:598] Connection reset by peer [10.0.3.7]:26177",
        "DistBackendError: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600041 milliseconds before timing out.",
        "RuntimeError: NCCL communicator was aborted on rank 7.",
        "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a "
        "network error, NCCL version 2.21.5 ncclRemoteError",
        "DistStoreError: Timed out after 301 seconds waiting for clients. 1/2 clients joined.",
        "RuntimeError: [/pytorch/torch/csrc/distributed/c10d/TCPStore.cpp] Socket Timeout",
        "RuntimeError: monitored barrier timed out after 30000ms",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4127 got signal: 15",
        "KeyboardInterrupt: ",
    ],
)
def test_consequences_of_another_ranks_failure_are_echoes(message):
    assert is_echo(message)


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: injected failure on rank 5",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "ValueError: bad torchrun environment: RANK is not a number",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ],
)
def test_a_ranks_own_error_is_not_an_echo(message):
    assert not is_echo(message)


def test_the_shape_drops_addresses_ports_ranks_and_numbers():
    a = shape(GLOO.format(port=40312))
    assert a == shape(GLOO.format(port=51123)) == shape(GLOO.format(port=1).replace("127.0.0.1", "10.1.2.3"))
    assert "127.0.0.1" not in a and "40312" not in a
    assert shape("injected failure on rank 5") == shape("injected failure on rank 6")
    assert shape("injected failure on rank 5") != shape("CUDA out of memory")
    assert shape("ptr 0xdeadbeef at [fe80::1]:29500") == "ptr <hex> at <addr>"


def two_by_four(root=5, root_time=T0 + 1.0, echo_after=0.5):
    """Rank ``root`` fails on its own; the seven others echo it."""
    out = []
    for r in range(8):
        if r == root:
            out.append(
                Failure(r, r // 4, f"node-{r // 4}", f"RuntimeError: injected failure on rank {r}", root_time)
            )
        else:
            out.append(
                Failure(r, r // 4, f"node-{r // 4}", GLOO.format(port=40000 + r), T0 + 1.0 + echo_after)
            )
    return out


def test_the_earliest_own_error_is_the_root_cause_and_the_echoes_fold_into_one_line():
    analysis = analyse(two_by_four())
    assert analysis.first is not None and analysis.first.rank == 5 and analysis.undecided is None
    lines = summary(analysis)
    assert lines[0] == (
        "first failure: rank 5 (node 1) reported an error: RuntimeError: injected failure on rank 5 "
        "[pod node-1, 08:00:01.000 UTC]"
    )
    assert len(lines) == 2
    assert lines[1].startswith(
        "ranks 0-4, 6-7 (nodes 0-1) [7 echoes of another rank's failure: lost the connection to a peer]: "
    )
    assert "Connection closed by peer" in lines[1]


def test_an_echo_stamped_first_does_not_become_the_root_cause():
    failures = two_by_four(echo_after=-0.2)  # the peers' clocks run 0.2 s behind: still within tolerance
    analysis = analyse(failures)
    assert analysis.first.rank == 5 and analysis.undecided is None


def test_echoes_stamped_well_before_their_cause_on_another_node_say_the_clocks_may_differ():
    failures = two_by_four(echo_after=-5.0)
    analysis = analyse(failures)
    assert analysis.first.rank == 5
    assert "node(s) 0, 1" not in analysis.undecided  # only other nodes are suspect
    assert "echoes on node(s) 0 are stamped up to 5.0 s before" in analysis.undecided
    assert summary(analysis)[1].startswith("order uncertain: ")


def test_two_independent_failures_are_both_named():
    failures = two_by_four()
    failures[2] = Failure(2, 0, "node-0", "torch.OutOfMemoryError: CUDA out of memory", T0 + 3.0)
    analysis = analyse(failures)
    assert [f.rank for f in analysis.roots] == [5, 2]
    lines = summary(analysis)
    assert lines[0].startswith("first failure: rank 5 (node 1")
    assert lines[1] == (
        "independent failure: rank 2 (node 0) reported an error: torch.OutOfMemoryError: CUDA out of memory "
        "[pod node-0, 08:00:03.000 UTC]"
    )
    assert "[6 echoes of another rank's failure" in lines[2]


def test_two_own_errors_within_the_clock_tolerance_are_not_ordered_by_guess():
    failures = two_by_four()
    failures[2] = Failure(
        2, 0, "node-0", "torch.OutOfMemoryError: CUDA out of memory", T0 + 1.0 + CLOCK_TOLERANCE_S / 2
    )
    analysis = analyse(failures)
    assert "rank 5 and rank 2 failed within 1 s of each other" in analysis.undecided


def test_errors_without_a_time_are_ordered_by_rank_and_say_so():
    failures = [Failure(r, 0, None, f.message) for r, f in enumerate(two_by_four())]
    analysis = analyse(failures)
    assert analysis.first.rank == 5
    assert analysis.undecided == "rank 5's error carries no time, so errors were ordered by rank"


def test_when_the_earliest_error_is_an_echo_of_a_silently_killed_pod_the_termination_is_the_root_cause():
    # node 1's pod was OOM-killed: its ranks 4-7 printed nothing; node 0's ranks echo the lost peers.
    failures = [Failure(r, 0, "job-0", GLOO.format(port=40000 + r), T0 + 2.0 + r / 10) for r in range(4)]
    killed = Termination("job-1-abcde", 1, "ip-10-0-1-7", "OOMKilled", 137, T0 + 1.5)
    finished = Termination("job-0-fghij", 0, "ip-10-0-1-6", "Error", 1, T0 + 3.0)  # the echoing pod's own end
    analysis = analyse(failures, [finished, killed])
    assert analysis.termination == killed
    assert analysis.roots == ()
    lines = summary(analysis)
    assert lines[0] == (
        "first failure: pod job-1-abcde (index 1) on node ip-10-0-1-7 ended OOMKilled (exit code 137) at "
        "08:00:01.500 UTC, and none of its ranks reported an error"
    )
    assert lines[1].startswith("ranks 0-3 (node 0) [4 echoes of another rank's failure: lost the connection")
    # without any termination record, the message says every error is an echo, not that one is the cause
    alone = analyse(failures)
    assert summary(alone)[0].startswith(
        "first failure unknown: every error is an echo of another's; the earliest: rank 0"
    )


def test_2048_ranks_one_root_and_2047_echoes_stay_within_the_bound():
    failures = [
        Failure(r, r // 32, f"job-{r // 32}", GLOO.format(port=30000 + r), T0 + 2 + (r % 97) / 100)
        for r in range(2048)
        if r != 1234
    ]
    failures.append(
        Failure(1234, 1234 // 32, "job-38", "RuntimeError: injected failure on rank 1234", T0 + 1)
    )
    lines = summary(analyse(failures))
    assert lines[0].startswith("first failure: rank 1234 (node 38) reported an error: RuntimeError: injected")
    assert len(lines) == 2 and lines[1].startswith("ranks 0-1233, 1235-2047 (nodes 0-63) [2047 echoes")
    assert len(lines) <= 1 + MAX_ROOTS + 1 + MAX_GROUPS + 1


def test_many_shapes_are_cut_off_with_a_count():
    # 20 kinds of own error, each on two ranks: 19 independent failures and 20 groups of the rest
    own = [Failure(r, 0, None, f"ValueError: problem number {'x' * (r // 2)}", T0 + r) for r in range(40)]
    lines = summary(analyse(own))
    assert len(lines) == 1 + MAX_ROOTS + 1 + MAX_GROUPS + 1
    assert lines[MAX_ROOTS + 1] == f"and {20 - 1 - MAX_ROOTS} more independent failure(s)"
    assert lines[-1] == f"and {20 - MAX_GROUPS} more kind(s) of error on {20 - MAX_GROUPS} rank(s)"


def test_every_failure_is_on_exactly_one_line():
    own = [Failure(r, 0, None, f"ValueError: problem number {'x' * (r // 2)}", T0 + r) for r in range(40)]
    echoes = [Failure(100 + r, 1, None, GLOO.format(port=r), T0 + 60) for r in range(10)]
    counted = [f.rank for line in lines(analyse(own + echoes)) for f in line.failures]
    assert sorted(counted) == sorted(f.rank for f in own + echoes)


def test_fold_keeps_own_errors_before_echoes():
    groups = fold(two_by_four())
    assert [g.echo for g in groups] == [False, True]
    assert groups[0].ranks == [5] and groups[1].ranks == [0, 1, 2, 3, 4, 6, 7]


def test_a_departure_leads_only_when_it_came_before_every_own_failure():
    from rollcall.evidence.departures import Departure

    t0 = 1_764_576_000.0
    left = Departure(3, 1, 0, t0 + 1, "epoch_time of epoch 1", "epoch 1 end", "node-1")
    echo = Failure(0, 0, "node-0", "Connection closed by peer [127.0.0.1]:1", t0 + 2)
    own = Failure(1, 0, "node-0", "RuntimeError: injected failure", t0 + 0.5)
    led = analyse([echo], departures=[left])
    assert led.departure == left and led.roots == () and led.undecided is None
    assert summary(led)[0].endswith(
        "before complete [pod node-1, 08:00:01.000 UTC]; the others' errors followed"
    )
    after = analyse([echo, own], departures=[left])
    assert after.departure is None and after.first == own and after.departures == (left,)
    assert [line for line in summary(after) if line.startswith("left early too: rank 3 (node 1)")]
    close = analyse([echo, Failure(1, 0, None, "RuntimeError: x", t0 + 1.5)], departures=[left])
    assert close.departure == left and close.roots[0].rank == 1
    assert close.undecided is not None and "within 1 s" in close.undecided
    killed = Termination("node-2", 2, None, "SIGKILL", -9, t0, rank=5, unit="node")
    first_kill = analyse([echo], [killed], departures=[left])
    assert first_kill.departure is None and first_kill.termination == killed
    alone = analyse([], departures=[left])
    assert alone.departure == left and summary(alone)[0] == f"first failure: {left.describe()}"


def test_a_departure_its_nodes_monitor_saw_leads_and_an_own_error_inside_its_interval_is_undecided():
    """A rank whose process went away (os._exit(0) in a library after the first epoch: no word of its own)."""
    from rollcall.evidence.departures import Departure

    t0 = 1_764_576_000.0
    gone = Departure(
        3, 1, None, t0 + 10, "epoch_time of epoch 1", "", "node-1", False, "node", gone_at=t0 + 11
    )
    echo = Failure(0, 0, "node-0", "Connection closed by peer [127.0.0.1]:1", t0 + 12)
    led = analyse([echo], departures=[gone])
    assert led.departure == gone and led.undecided is None
    assert summary(led)[0] == (
        "first failure: rank 3 (node 1) left after epoch_time of epoch 1, before complete (its process gone "
        "between 08:00:10.000 UTC and 08:00:11.000 UTC, seen by its node's monitor) [log node-1]; the others' "
        "errors followed"
    )
    inside = analyse([echo, Failure(1, 0, "node-0", "RuntimeError: x", t0 + 10.5)], departures=[gone])
    assert inside.departure == gone and inside.roots[0].rank == 1  # both named
    assert inside.undecided is not None and "cannot be decided, both are named" in inside.undecided
    # an own error well before the process went away: the departure is the launcher stopping it, an echo
    earlier = analyse([echo, Failure(1, 0, "node-0", "RuntimeError: x", t0 + 5)], departures=[gone])
    assert earlier.departure is None and earlier.first.rank == 1 and earlier.departures == ()


def test_the_monitors_gone_lines_are_departures_only_before_the_suite_asked_the_job_to_end():
    from rollcall.evidence.departures import departures
    from rollcall_workload import contract
    from tests.unit.helpers import event, roll_heard

    def gone(rank: int, alive: float) -> bytes:
        return contract.encode_event(
            "rank_process",
            rank,
            2,
            state="gone",
            pid=10 + rank,
            node_rank=rank,
            alive_at=alive,
            gone_at=alive + 1,
        )

    done = event("complete", 1, 2).encode() + b"\n"
    timed = [(5.0, done), (6.0, gone(0, 1000.0)), (7.0, gone(1, 1001.0)), (9.0, gone(2, 1002.0))]
    roll = roll_heard(timed, ended=8.0)
    found = departures(roll.ranks, (), lambda r: r, "node", processes=roll.processes, asked_to_end=8.0)
    assert [(d.rank, d.time, d.gone_at, d.exit_code, d.said) for d in found] == [
        (0, 1000.0, 1001.0, None, False)
    ]


# ---------------------------------------------------------------- each rule at its edge (`make mutants`)


def _report(rank: int, *, exited: int | None = None, errors: int = 0, complete: bool = False, sources=()):
    from rollcall.ranklog import Exited, Mark, RankError, RankReport

    report = RankReport(rank, complete=complete, start={"node_rank": rank // 2}, sources=set(sources))
    report.marks["epoch 1"] = Mark("epoch_time", "epoch 1", T0 + 1)
    report.errors = [RankError("RuntimeError: x", T0 + 2)] * errors
    report.exited = Exited(exited, "epoch 1 end", T0 + 3, "node-9") if exited is not None else None
    return report


def _gone(
    rank: int, alive: float | None = T0 + 4, gone: float | None = T0 + 5, *, state="gone", received=None
):
    from rollcall.ranklog import RankProcessHeard

    return RankProcessHeard(
        state, rank, 10 + rank, rank // 2, None, None, alive, gone, None, f"log-{rank}", received
    )


def test_a_rank_that_said_exit_departs_unless_it_completed_or_failed_of_its_own():
    from rollcall.evidence.departures import Departure, departures

    reports = {
        0: _report(0, exited=0),
        1: _report(1, exited=0, errors=1),
        2: _report(2, exited=0, complete=True),
    }
    found = departures(reports, (), lambda r: r // 2)
    assert found == [
        Departure(0, 0, 0, T0 + 3, "epoch_time of epoch 1", "epoch 1 end", "node-9", True, "pod")
    ]
    assert departures(reports, (), lambda r: r // 2, "node")[0].unit == "node"


def test_the_launchers_record_of_a_worker_that_ended_by_its_own_status_is_a_departure():
    from rollcall.evidence.departures import Departure, departures

    reports = {
        0: _report(0, exited=0),
        1: _report(1, errors=1),
        2: _report(2, sources=("node-1", "a-log")),
        3: _report(3),
    }
    ends = [
        Termination("pod-x", 0, None, "Error", 1, T0 + 9),  # the pod's own record: no rank
        Termination("pod-1", 0, None, "Error", 1, T0 + 9, rank=1),  # failed of its own: its error says
        Termination("pod-0", 0, None, "Error", 1, T0 + 9, rank=0),  # it said exit itself
        Termination("pod-2", 1, None, "Error", 128, T0 + 8, rank=2),  # 128: still its own status
        Termination("pod-3", 1, None, "Error", 129, T0 + 8, rank=3),  # above: a signal's
        Termination("pod-5", 2, None, "Error", None, T0 + 8, rank=5),  # no status recorded
        Termination("pod-4", 2, None, "Error", 0, None, rank=4),  # a rank that said nothing at all
    ]
    found = departures(reports, ends, lambda r: r // 2, "node")
    assert found == [
        Departure(0, 0, 0, T0 + 3, "epoch_time of epoch 1", "epoch 1 end", "node-9", True, "node"),
        Departure(2, 1, 128, T0 + 8, "epoch_time of epoch 1", "", "a-log", False, "node"),
        Departure(4, 2, 0, None, None, "", "pod-4", False, "node"),
    ]
    reports[2].sources.clear()
    assert departures(reports, ends, lambda r: r // 2)[1].pod == "pod-2"  # a rank without a log: the pod's


def test_a_rank_process_its_node_saw_gone_departs_only_where_nothing_else_says_how_it_ended():
    from rollcall.evidence.departures import Departure, departures

    reports = {0: _report(0, exited=0), 1: _report(1, errors=1), 3: _report(3, sources=("node-1", "b"))}
    processes = [
        _gone(5, state="seen"),  # a process seen, not gone
        _gone(0),  # it said exit: that says more
        _gone(1),  # it failed of its own
        _gone(2),  # the launcher recorded it killed by a signal
        _gone(6, alive=None),  # an interval without its start
        _gone(7, gone=None),  # or without its end
        _gone(3, alive=T0 + 6, gone=T0 + 7),
        _gone(4, alive=T0 + 5, gone=T0 + 6),  # no word of its own at all
    ]
    killed = [Termination("pod-2", 1, None, "SIGKILL", -9, T0 + 4, rank=2)]
    found = departures(reports, killed, lambda r: r // 2, "node", processes=processes)
    assert found == [
        Departure(0, 0, 0, T0 + 3, "epoch_time of epoch 1", "epoch 1 end", "node-9", True, "node"),
        Departure(4, 2, None, T0 + 5, None, "", "log-4", False, "node", T0 + 6),
        Departure(3, 1, None, T0 + 6, "epoch_time of epoch 1", "", "b", False, "node", T0 + 7),
    ]


def test_a_gone_line_read_once_the_suite_asked_the_job_to_end_or_unread_is_no_departure():
    from rollcall.evidence.departures import departures

    processes = [_gone(0, received=None), _gone(1, received=8.0), _gone(2, received=7.9)]
    assert [d.rank for d in departures({}, (), int, processes=processes, asked_to_end=8.0)] == [2]
    assert [d.rank for d in departures({}, (), int, processes=processes)] == [0, 1, 2]


def test_departures_are_ordered_by_time_then_rank_the_unstamped_last():
    from rollcall.evidence.departures import departures

    ends = [
        Termination(f"pod-{r}", 0, None, "Error", 0, t, rank=r)
        for r, t in ((0, None), (1, T0 + 5), (2, T0 + 5), (3, 0.5), (4, 0.0), (5, T0 + 3))
    ]
    assert [d.rank for d in departures({}, ends, int)] == [4, 3, 5, 1, 2, 0]


def test_a_departure_leads_the_first_own_error_only_strictly_before_it_and_a_kill_only_strictly_before_it():
    from rollcall.evidence.departures import Departure

    left = Departure(3, 1, 0, T0 + 1, "epoch_time of epoch 1", "epoch 1 end", "node-1")
    echo = Failure(0, 0, "node-0", "Connection closed by peer [127.0.0.1]:1", T0 + 2)
    same = analyse([echo, Failure(1, 0, None, "RuntimeError: x", T0 + 1)], departures=[left])
    assert same.departure is None and same.first.rank == 1
    later, sooner = (
        Termination(f"node-{i}", i, None, "SIGKILL", -9, T0 + t, rank=4 + i) for i, t in ((2, 3), (3, 0))
    )
    assert analyse([echo], [later, sooner], departures=[left]).termination == sooner  # the earliest kill
    assert analyse([echo], [later], departures=[left]).departure == left  # killed after it left
    at_once = Termination("node-2", 2, None, "SIGKILL", -9, T0 + 1, rank=5)
    assert analyse([echo], [at_once], departures=[left]).departure == left
    said = analyse([echo, Failure(1, 0, None, "RuntimeError: x", T0 + 5)], departures=[left])
    assert said.departure == left and said.undecided is None  # 4 s apart: the order is certain
    edge = analyse(
        [echo, Failure(1, 0, None, "RuntimeError: x", T0 + 1 + CLOCK_TOLERANCE_S)], departures=[left]
    )
    assert edge.departure == left and edge.undecided is None  # exactly the tolerance apart: certain
    close = analyse([echo, Failure(1, 0, None, "RuntimeError: x", T0 + 1.5)], departures=[left])
    assert close.undecided == (
        f"rank 3 left and rank 1 failed within {CLOCK_TOLERANCE_S:g} s of each other by their clocks; either "
        "may have come first"
    )


def test_a_departure_its_monitor_saw_is_undecided_only_with_an_own_error_inside_its_interval_both_ends_in():
    from rollcall.evidence.departures import Departure

    gone = Departure(3, 1, None, T0 + 10, None, "", "node-1", False, "node", gone_at=T0 + 11)
    echo = Failure(0, 0, "node-0", "Connection closed by peer [127.0.0.1]:1", T0 + 30)

    def undecided(at: float | None) -> str | None:
        analysis = analyse([echo, Failure(1, 0, "node-0", "RuntimeError: x", at)], departures=[gone])
        assert analysis.departure == gone
        return analysis.undecided

    assert undecided(T0 + 11 + CLOCK_TOLERANCE_S) == (
        "rank 1 failed while rank 3's process was leaving (between two looks of its node's monitor, 1.0 s "
        f"apart, and within {CLOCK_TOLERANCE_S:g} s by their clocks): which came first cannot be decided, both "
        "are named"
    )
    assert undecided(T0 + 12.5) is None  # after it: its echo
    # an own error without a time: nothing orders the two, the departure is told beside it
    unstamped = analyse([echo, Failure(1, 0, "node-0", "RuntimeError: x")], departures=[gone])
    assert unstamped.departure is None and unstamped.departures == (gone,)
    # only the last, at the edge of the tolerance, is an echo of the launcher stopping it
    assert analyse([echo, Failure(1, 0, None, "RuntimeError: x", T0 + 9)], departures=[gone]).departures == ()
