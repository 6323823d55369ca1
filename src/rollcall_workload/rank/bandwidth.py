"""The all-reduce phase: its groups (the world, each node, each ring pair of nodes), rounds, bus bandwidth."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from rollcall_workload.contract import BANDWIDTH_SCOPES, RollcallLog
from rollcall_workload.faults import CORRUPT_COLLECTIVE_ENV, SlowLink, corrupted_rank, node_id
from rollcall_workload.rank.dist import Accelerator, DistEnv
from rollcall_workload.rank.proofs import ResultCheck, drop_chunk, expected_row, pattern_row, pattern_tensor
from rollcall_workload.rank.timing import percentile
from rollcall_workload.rank.watchdog import Watchdog


def bus_bandwidth(nbytes: int, seconds: float, members: int) -> tuple[float, float]:
    """All-reduce (algbw, busbw) in GB/s as nccl-tests define them: bytes / time, and algbw x 2(n-1)/n."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (members - 1) / members


def compact_ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` gives ``"0-3,8"``: a group's members, short enough for one line."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class CommGroup:
    """One group of the bandwidth phase: its scope and members."""

    scope: str
    nodes: tuple[int, ...]
    ranks: tuple[int, ...]


def bandwidth_groups(
    node_of_rank: Sequence[int], scopes: Sequence[str] = BANDWIDTH_SCOPES
) -> list[CommGroup]:
    """The world, each node of 2+ ranks, and (3+ nodes) each ring pair; later duplicates dropped.

    ``node_of_rank[r]`` is the node rank ``r`` runs on. Groups of fewer than two ranks measure nothing; only
    the groups of ``scopes`` are made.
    """
    nodes = sorted(set(node_of_rank))
    members = {n: tuple(r for r, m in enumerate(node_of_rank) if m == n) for n in nodes}
    candidates = [CommGroup("world", tuple(nodes), tuple(range(len(node_of_rank))))]
    candidates += [CommGroup("node", (n,), members[n]) for n in nodes]
    if len(nodes) >= 3:
        for i, n in enumerate(nodes):
            pair = tuple(sorted((n, nodes[(i + 1) % len(nodes)])))
            candidates.append(CommGroup("pair", pair, tuple(sorted(members[pair[0]] + members[pair[1]]))))
    groups: list[CommGroup] = []
    for group in candidates:
        if group.scope not in scopes:
            continue
        if len(group.ranks) >= 2 and all(g.ranks != group.ranks for g in groups):
            groups.append(group)
    return groups


def bandwidth_rounds(groups: Sequence[CommGroup]) -> list[list[int]]:
    """Indices of ``groups`` in rounds of groups that share no rank, each group in the first that fits."""
    rounds: list[list[int]] = []
    used: list[set[int]] = []
    for index, group in enumerate(groups):
        for members, chosen in zip(used, rounds, strict=True):
            if members.isdisjoint(group.ranks):
                members.update(group.ranks)
                chosen.append(index)
                break
        else:
            used.append(set(group.ranks))
            rounds.append([index])
    return rounds


def measure_bandwidth(
    acc: Accelerator,
    env: DistEnv,
    log: RollcallLog,
    args: argparse.Namespace,
    link: SlowLink | None,
    *,
    watchdog: Watchdog | None = None,
) -> None:
    """The bandwidth phase (see the docstring): one ``bandwidth`` event per group this rank is in."""
    import torch
    import torch.distributed as dist

    if acc.kind == "xla" or args.bandwidth_mb <= 0 or env.world_size < 2:
        return
    mine = torch.tensor([env.node_rank], dtype=torch.int64, device=acc.device)
    gathered = [torch.zeros_like(mine) for _ in range(env.world_size)]
    dist.all_gather(gathered, mine)
    groups = bandwidth_groups([int(t.item()) for t in gathered], args.bandwidth_scopes)
    handles = [dist.new_group(list(g.ranks)) for g in groups]  # every rank, every group, one order
    sizes = args.bandwidth_sizes or (max(4, int(args.bandwidth_mb * 2**20) // 4 * 4),)
    slowed = link is not None and link.node == node_id(os.environ, env.node_rank)
    delay_s = link.delay_ms / 1000 if link is not None and slowed else 0.0
    corrupt = corrupted_rank(CORRUPT_COLLECTIVE_ENV, os.environ) == env.rank
    # Simulated nodes on one CPU share its cores: there groups take turns, elsewhere disjoint ones overlap.
    rounds = [[i] for i in range(len(groups))] if acc.kind == "cpu" else bandwidth_rounds(groups)
    mine_in = {i: handles[i] for round_ in rounds for i in round_ if env.rank in groups[i].ranks}
    checks = {i: ResultCheck() for i in mine_in}
    warm = torch.zeros(max(sizes) // 4, dtype=torch.float32, device=acc.device)
    for handle in mine_in.values():  # untimed: connections made, buffers warm
        for _ in range(args.bandwidth_iters // 4 + 1):
            dist.all_reduce(warm, group=handle)
    del warm
    acc.synchronize()
    acc.barrier("rollcall-bandwidth")
    # Each size in turn, smallest first; the events report the largest, with the sweep beside it. Each rank
    # sends its own integer pattern and checks, after the clock stopped, that it received the exact sum.
    swept: dict[int, list[tuple[int, float, float, float]]] = {i: [] for i in mine_in}
    for size in sorted(sizes):
        numel = size // 4
        source = pattern_tensor(pattern_row(env.rank), numel, acc.device)  # what this rank sends, every time
        buffer = source.clone()
        expected = {i: pattern_tensor(expected_row(groups[i].ranks), numel, acc.device) for i in mine_in}
        times: dict[int, list[float]] = {i: [] for i in mine_in}
        # Interleaved: each pass visits every round once, so a busy moment of the host hits every group alike.
        for n in range(args.bandwidth_iters):
            for r, round_ in enumerate(rounds):
                if watchdog is not None:
                    watchdog.beat(f"bandwidth {size} bytes pass {n + 1} round {r + 1}")
                for index in round_:
                    if index in mine_in:
                        times[index].append(_time_all_reduce(acc, buffer, source, mine_in[index], delay_s))
                        if corrupt:
                            drop_chunk(
                                buffer
                            )  # ROLLCALL_CORRUPT_COLLECTIVE: this rank receives a chunk short
                        checks[index].check(buffer, expected[index])  # after the clock stopped
                acc.barrier("rollcall-bandwidth-round")
        for index, samples in times.items():
            seconds = percentile(samples, 50)
            algbw, busbw = bus_bandwidth(size, seconds, len(groups[index].ranks))
            swept[index].append((size, seconds, algbw, busbw))
        del source, buffer, expected
    for index, results in swept.items():
        group = groups[index]
        size, seconds, algbw, busbw = results[-1]
        sweep = {"sweep": [[b, float(f"{bw:.6g}")] for b, _, _, bw in results]} if len(results) > 1 else {}
        log.emit(
            "bandwidth",
            scope=group.scope,
            ranks=compact_ranges(group.ranks),
            nodes=compact_ranges(group.nodes),
            bytes=size,
            iters=args.bandwidth_iters,
            seconds=float(f"{seconds:.6g}"),
            algbw_gbps=float(f"{algbw:.6g}"),
            busbw_gbps=float(f"{busbw:.6g}"),
            **sweep,
            **checks[index].fields(),
        )


def _time_all_reduce(acc: Accelerator, buffer: Any, source: Any, group: Any, delay_s: float) -> float:
    """Seconds of one all-reduce of ``source`` (copied into ``buffer``) in ``group``, after an untimed one.

    The untimed all-reduce lines the members up; then ``buffer`` gets this rank's ``source`` again, so the
    timed all-reduce leaves in it the exact sum of the members' sources.
    """
    import torch.distributed as dist

    dist.all_reduce(buffer, group=group)
    buffer.copy_(source)
    acc.synchronize()
    started = time.perf_counter()
    if delay_s:
        time.sleep(delay_s)  # ROLLCALL_SLOW_LINK: this rank posts its part late
    dist.all_reduce(buffer, group=group)
    acc.synchronize()
    return time.perf_counter() - started
