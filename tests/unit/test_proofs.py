"""Proof that every rank trained correctly: the rank-log fields, rollcall.checks.proofs and the judge's three checks."""

import math

from rollcall.checks.proofs import LEARNING_STEPS, find_bad_losses, find_divergence
from rollcall.judge import CHECKS, judge
from rollcall.ranklog import CollectiveMismatch, RankError, RollCall
from rollcall.verdict import Evidence, Kind, Layout, RankState
from tests.unit.helpers import event

GOOD, BAD = "9f86d081884c7d65", "0b1c2d3e4f506172"


def run_log(world=4, procs=2, digests=None, final=None, losses=(9.8, 9.6), steps=2, mismatch=None):
    """A whole run's log: each rank's start, epochs (loss, steps, digest), throughput, bandwidth, complete."""
    digests, final, mismatch = digests or {}, final or {}, mismatch or {}
    lines = []
    for r in range(world):
        node = r // procs
        lines.append(event("start", r, world, local_rank=r % procs, node_rank=node, host=f"n{node}"))
        for e, loss in enumerate(losses, 1):
            digest = digests.get(r, {}).get(e, f"{GOOD}")
            lines.append(
                event(
                    "epoch_time", r, world, epoch=e, seconds=0.4, steps=steps, loss=loss, param_digest=digest
                )
            )
        lines.append(event("throughput", r, world, samples_per_sec=50.0))
        for scope, ranks, nodes in (("world", f"0-{world - 1}", f"0-{world // procs - 1}"),):
            lines.append(
                event(
                    "bandwidth",
                    r,
                    world,
                    scope=scope,
                    ranks=ranks,
                    nodes=nodes,
                    bytes=4096,
                    iters=10,
                    seconds=0.001,
                    algbw_gbps=1.0,
                    busbw_gbps=1.5,
                    checked=10,
                    mismatch=mismatch.get(r),
                )
            )
        lines.append(event("complete", r, world, param_digest=final.get(r, GOOD)))
    roll = RollCall()
    parser = roll.parser("pod-0")
    parser.feed(("\n".join(lines) + "\n").encode())
    parser.close()
    return roll


def verdict(roll, layout=None):
    return judge(Evidence(roll, layout or Layout(2, 2)))


# ------------------------------------------------------------------------------------------------ ranklog


def test_the_parser_keeps_losses_steps_digests_and_mismatches():
    wrong = {"iters": 10, "elements": 1024, "index": 341, "expected": 10.0, "got": 0.0}
    roll = run_log(losses=(9.8, None), mismatch={1: wrong})
    rep = roll.ranks[1]
    assert rep.losses[1] == 9.8 and math.isnan(rep.losses[2])  # null: the workload's non-finite loss
    assert rep.epoch_steps == {1: 2, 2: 2}
    assert rep.digests == {1: GOOD, 2: GOOD} and rep.final_digest == GOOD
    (record,) = rep.bandwidth.values()
    assert record.checked == 10
    assert record.mismatch == CollectiveMismatch(iters=10, elements=1024, index=341, expected=10.0, got=0.0)
    assert roll.ranks[0].bandwidth[("world", (0, 1))].mismatch is None


def test_a_garbled_mismatch_still_counts_as_one_and_a_garbled_digest_is_dropped():
    text = "\n".join(
        [
            event("epoch_time", 0, 2, epoch=1, seconds=0.4, loss="high", param_digest=7),
            event(
                "bandwidth",
                0,
                2,
                scope="world",
                ranks="0-1",
                nodes="0",
                bytes=8,
                algbw_gbps=1.0,
                busbw_gbps=1.0,
                mismatch={"iters": "x", "elements": 3},
            ),
        ]
    )
    roll = RollCall()
    roll.parser("p").feed((text + "\n").encode())
    rep = roll.ranks[0]
    assert rep.losses == {} and rep.digests == {} and rep.epoch_times == {1: 0.4}
    assert rep.bandwidth[("world", (0,))].mismatch == CollectiveMismatch(elements=3)


# ------------------------------------------------------------------------------------------ replicas


def test_agreeing_replicas_pass_and_record_one_digest_per_stage():
    v = verdict(run_log())
    assert v.passed, v.problems
    assert v.replicas == {"epoch 1": (GOOD,), "epoch 2": (GOOD,), "complete": (GOOD,)}


def test_a_diverged_replica_is_named_first_with_its_first_epoch_and_is_wrong():
    roll = run_log(digests={1: {2: BAD}}, final={1: BAD})
    v = verdict(roll)
    assert v.findings[0].kind is Kind.REPLICA_DIVERGENCE
    assert v.problems[0] == (
        f"replica divergence (silent data corruption): rank 1 (node 0) from epoch 2 on: parameters unlike "
        f"the replicas' (param_digest {BAD} where 3 rank(s) hold {GOOD})"
    )
    assert v.failed_ranks == {
        1: [f"replica diverged from epoch 2 on (param_digest {BAD}, the replicas' {GOOD})"]
    }
    assert v.ranks[1].state is RankState.WRONG and v.ranks[0].state is RankState.OK
    assert v.replicas["epoch 1"] == (GOOD,) and v.replicas["epoch 2"] == tuple(sorted((GOOD, BAD)))


def test_a_divergence_comes_before_an_error_in_the_listing():
    roll = run_log(digests={2: {1: BAD}})
    roll.rank(0).errors.append(RankError("boom", 1.0))
    v = verdict(roll)
    assert [p.kind for p in v.findings][:2] == [Kind.REPLICA_DIVERGENCE, Kind.ROOT_CAUSE]
    assert [c.__name__ for c in CHECKS][:2] == [
        "workload_version",
        "replica_divergence",
    ]  # only the image before it


def test_on_a_tie_rank_0s_digest_is_the_replicas():
    found = find_divergence(run_log(world=2, procs=1, final={1: BAD}).ranks, lambda r: r)
    assert [(d.rank, d.epoch, d.digest, d.reference) for d in found] == [(1, None, BAD, GOOD)]


def test_one_rank_has_no_replica_to_disagree_with():
    assert verdict(run_log(world=1, procs=1), Layout(1, 1)).passed


# ---------------------------------------------------------------------------------------- collectives


def test_wrong_all_reduce_data_names_the_group_the_rank_what_and_the_node():
    wrong = {"iters": 10, "elements": 1024, "index": 1365, "expected": 14.0, "got": 0.0}
    v = verdict(run_log(mismatch={2: wrong}))
    assert [p.kind for p in v.findings] == [Kind.COLLECTIVE_MISMATCH] * 2
    assert v.problems == [
        "collective mismatch: world all-reduce (ranks 0-3, nodes 0-1): rank 2 (node 1) received 1024 of 1024 "
        "elements wrong in 10 timed all-reduce(s), first at index 1365 (expected 14, got 0)",
        "collective mismatch: every rank that received wrong data (2) is on node 1: its device or its link",
    ]
    assert v.failed_ranks == {2: ["wrong data from the world all-reduce (ranks 0-3, nodes 0-1)"]}
    assert v.ranks[2].state is RankState.WRONG


def test_wrong_data_on_two_nodes_names_no_single_node():
    wrong = {"iters": 1, "elements": 1, "index": 0, "expected": 4.0, "got": 5.0}
    v = verdict(run_log(mismatch={0: wrong, 3: wrong}))
    assert len(v.findings) == 1 and sorted(v.findings[0].ranks) == [0, 3]
    assert (
        "rank 0 (node 0) received 1 of 1024" in v.problems[0]
        and "; rank 3 (node 1) received" in v.problems[0]
    )


# ---------------------------------------------------------------------------------------------- loss


def test_a_loss_that_is_not_finite_fails_by_rank_and_value():
    roll = run_log(losses=(9.8, None))
    v = verdict(roll)
    assert [p.kind for p in v.findings] == [Kind.LOSS]
    assert v.problems[0].startswith(
        "loss not finite on ranks 0-1 (node 0); 2-3 (node 1): rank 0 loss not finite: "
    )
    assert v.failed_ranks[3] == ["loss not finite: epoch 2 nan"]


def test_a_loss_that_does_not_fall_fails_only_over_a_run_long_enough_to_learn():
    short = run_log(losses=(9.6, 9.7), steps=LEARNING_STEPS - 1)
    assert verdict(short).passed
    long = run_log(losses=(9.6, 9.7), steps=LEARNING_STEPS)
    v = verdict(long)
    assert [p.kind for p in v.findings] == [Kind.LOSS]
    assert v.failed_ranks[0] == [
        f"loss did not fall over {LEARNING_STEPS} steps: 9.6000 (epoch 1) -> 9.7000 (epoch 2)"
    ]
    assert verdict(run_log(losses=(9.7, 9.6), steps=LEARNING_STEPS)).passed


def test_the_steps_counted_are_those_after_the_first_epoch():
    found = find_bad_losses(
        run_log(losses=(9.6, 9.6, 9.6), steps=2).ranks, lambda r: r // 2, learning_steps=4
    )
    assert [(f.rank, f.steps) for f in found] == [(0, 4), (1, 4), (2, 4), (3, 4)]


def test_wrong_data_on_every_rank_of_the_groups_crossing_one_link_names_that_link():
    wrong = {"iters": 10, "elements": 512, "index": 0, "expected": 10.0, "got": 12.0}
    lines = []
    for r in range(4):
        node = r // 2
        lines.append(event("start", r, 4, local_rank=r % 2, node_rank=node))
        for scope, ranks, nodes, bad in (
            ("world", "0-3", "0-1", wrong),
            ("node", f"{2 * node}-{2 * node + 1}", str(node), None),
        ):
            lines.append(
                event(
                    "bandwidth",
                    r,
                    4,
                    scope=scope,
                    ranks=ranks,
                    nodes=nodes,
                    bytes=4096,
                    algbw_gbps=1.0,
                    busbw_gbps=1.5,
                    checked=10,
                    mismatch=bad,
                )
            )
    roll = RollCall()
    roll.parser("p").feed(("\n".join(lines) + "\n").encode())
    found = [p for p in verdict(roll).findings if p.kind is Kind.COLLECTIVE_MISMATCH]
    assert sorted(found[0].ranks) == [0, 1, 2, 3]
    assert found[-1].message == (
        "collective mismatch: every group that received wrong data crosses the link between nodes 0 and 1, "
        "and no group that was right does"
    )
    assert found[-1].detail == (0, 1) and len(found) == 2
