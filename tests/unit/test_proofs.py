"""Proof that every rank trained correctly: the rank-log fields the three checks read (their tests: tests/unit/checks/)."""

import math

from rollcall.judge import judge
from rollcall.ranklog import CollectiveMismatch, RollCall
from rollcall.verdict import Layout, Observed
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
    return judge(Observed(roll, layout or Layout(2, 2)))


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
