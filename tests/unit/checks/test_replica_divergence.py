"""The replica_divergence check: every replica holds the same parameters after each epoch (silent data corruption)."""

from rollcall.checks.errors import ROOT_CAUSE
from rollcall.checks.replica_divergence import REPLICA_DIVERGENCE, replica_divergence
from rollcall.checks.runview import RunView
from rollcall.evidence.proofs import find_divergence
from rollcall.judge import CHECKS
from rollcall.ranklog import RankError
from rollcall.verdict import Criteria, Layout, Observed, RankState
from tests.unit.test_proofs import BAD, GOOD, run_log, verdict


def test_agreeing_replicas_pass_and_record_one_digest_per_stage():
    v = verdict(run_log())
    assert v.passed, v.problems
    assert v.replicas == {"epoch 1": (GOOD,), "epoch 2": (GOOD,), "complete": (GOOD,)}


def test_a_diverged_replica_is_named_first_with_its_first_epoch_and_is_wrong():
    roll = run_log(digests={1: {2: BAD}}, final={1: BAD})
    v = verdict(roll)
    assert v.findings[0].kind is REPLICA_DIVERGENCE
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
    assert [p.kind for p in v.findings][:2] == [REPLICA_DIVERGENCE, ROOT_CAUSE]
    assert [c.name for c in CHECKS][:3] == [
        "workload_version",
        "gpu_events",
        "replica_divergence",
    ]  # only the image, and a GPU's own word that it failed (an Xid, a lost GPU), before it


def test_on_a_tie_no_replica_is_taken_for_the_right_one_and_every_rank_of_it_is_named():
    """Two replicas that differ: either may be the corrupt one; blaming rank 1 could blame a healthy GPU."""
    found = find_divergence(run_log(world=2, procs=1, final={1: BAD}).ranks, lambda r: r)
    assert [(d.rank, d.epoch, d.digest, d.tied, d.agreeing) for d in found] == [
        (0, None, GOOD, True, 0),
        (1, None, BAD, True, 0),
    ]
    tie = RunView(Observed(run_log(world=2, procs=1, final={1: BAD}), Layout(2, 1)), Criteria())
    [problem] = list(replica_divergence(tie))
    assert set(problem.ranks) == {0, 1} and "which replica is wrong cannot be told" in problem.message
    # three replicas, one off: the two that agree are the replicas', the third is named alone
    found = find_divergence(run_log(world=3, procs=1, final={2: BAD}).ranks, lambda r: r)
    assert [(d.rank, d.tied) for d in found] == [(2, False)]


def test_one_rank_has_no_replica_to_disagree_with():
    assert verdict(run_log(world=1, procs=1), Layout(1, 1)).passed


def test_the_predicate_names_the_diverged_replica_and_nothing_when_the_replicas_agree():
    diverged = RunView(Observed(run_log(digests={1: {2: BAD}}, final={1: BAD}), Layout(2, 2)), Criteria())
    [problem] = list(replica_divergence(diverged))
    assert problem.kind is REPLICA_DIVERGENCE and set(problem.ranks) == {1}
    assert problem.message.startswith(
        "replica divergence (silent data corruption): rank 1 (node 0) from epoch 2"
    )
    assert f"param_digest {BAD} where 3 rank(s) hold {GOOD}" in problem.message
    assert list(replica_divergence(RunView(Observed(run_log(), Layout(2, 2)), Criteria()))) == []
