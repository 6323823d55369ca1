"""How much the workload's loss falls between the first and the last timed epoch, over many seeds.

Emulates a DDP run of ``--world`` ranks in one process with ``rollcall_workload``'s own model, loss, data and
AdamW: each step averages the ranks' gradients (as DDP's all-reduce does) and each rank's epoch loss is its
own batch's loss at the epoch's last step, as ``epoch_time`` reports it. Prints, per configuration, the
smallest, median and largest fall over every (seed, rank), and how many did not fall at all::

    .venv/bin/python bench/learning.py --world 2 --seeds 20                      # make e2e-local's run
    .venv/bin/python bench/learning.py --world 4 --seeds 20 --seq-len 32 --batch-size 4 \\
        --warmup-steps 1 --steps-per-epoch 2                                     # the suite's short runs
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload.model import batch_pool, build_model, pretraining_loss
from rollcall_workload.rank.cli import apply_defaults, parse_args


def falls(argv: list[str], world: int) -> list[float]:
    """Each rank's first-epoch loss minus its last-epoch loss, for one seed's emulated run."""
    import torch

    args = parse_args(argv)
    apply_defaults(args, "cpu")
    torch.manual_seed(args.seed)
    model, shape = build_model(args)
    model.train()
    step = pretraining_loss(model, masked_head=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    pools = [batch_pool(args, r, shape.vocab, "cpu") for r in range(world)]
    index = 0

    def steps(count: int) -> list[float]:
        nonlocal index
        losses: list[float] = []
        for _ in range(count):
            per_rank = [step(pool[index % len(pool)]) for pool in pools]
            (sum(per_rank) / world).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses = [float(x.detach()) for x in per_rank]
            index += 1
        return losses

    steps(args.warmup_steps)
    epochs = [steps(args.steps_per_epoch) for _ in range(args.epochs)]
    return [first - last for first, last in zip(epochs[0], epochs[-1], strict=True)]


def main() -> None:
    """Print the falls of every (seed, rank) of one configuration."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--seeds", type=int, default=20)
    known, rest = p.parse_known_args()
    torch_threads = __import__("torch").get_num_threads()
    found = [f for seed in range(known.seeds) for f in falls([*rest, "--seed", str(seed)], known.world)]
    print(
        f"world {known.world} {' '.join(rest) or '(cpu defaults)'}: {len(found)} rank-runs, fall of the loss "
        f"min {min(found):.4f} median {statistics.median(found):.4f} max {max(found):.4f}; "
        f"not falling: {sum(f <= 0 for f in found)} (threads {torch_threads})"
    )


if __name__ == "__main__":
    main()
