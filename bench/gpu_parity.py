"""Loss curves of the Hugging Face BERT and the compact one on a GPU: same weights, same batches, bf16.

Usage (on a GPU machine): python bench/gpu_parity.py [--model large] [--seq-len 128] [--batch-size 32]
    [--steps 50] [--lr 1e-4]
One process, no DDP, dropout 0 (dropout masks differ between implementations, nothing else does). The
Hugging Face model's initial weights are copied into the compact model, then each trains on the same
sequence of batches with fused AdamW, in four variants:
    hf-autocast        BertForPreTraining (the workload's masked-head loss), eager, bf16 autocast
    compact-autocast   the compact model, eager, bf16 autocast
    hf-bf16            BertForPreTraining, eager, bf16 parameters with fp32 master weights
    compact-bf16       the compact model, compiled, bf16 parameters with fp32 master weights
Prints the losses every few steps and the largest relative difference of each compact variant from the
Hugging Face one of the same precision (and, for scale, of bf16 weights from autocast). Exit status 1
when a same-precision difference passes --tolerance (default 1%).
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rollcall_workload import compact
from rollcall_workload.model import build_model, make_batch, pretraining_loss
from rollcall_workload.rank.training import MasterWeightAdamW


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="large")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--tolerance", type=float, default=0.01)
    args = ap.parse_args()
    torch.manual_seed(1234)
    margs = argparse.Namespace(pretrained=None, model=args.model, dropout=0.0, impl="hf")
    with torch.device("cuda"):
        hf, shape = build_model(margs)
    initial = {k: v.clone() for k, v in hf.state_dict().items()}
    del hf
    batches = [
        {k: v.cuda() for k, v in make_batch(i, args.batch_size, args.seq_len, shape.vocab).items()}
        for i in range(8)
    ]

    def curve(name: str) -> list[float]:
        if name.startswith("hf-"):
            with torch.device("cuda"):
                model = build_model(margs)[0]
            model.load_state_dict(initial)
            model = model.cuda().train()
            step_fn = pretraining_loss(model, masked_head=True)
        else:
            with torch.device("cuda"):
                model = build_model(argparse.Namespace(**{**vars(margs), "impl": "compact"}))[0]
            compact.load_hf_state_dict(model, initial)
            model = model.cuda().train()
            step_fn = model
        bf16 = name.endswith("-bf16")
        if bf16:
            model = model.to(torch.bfloat16)
            if name.startswith("compact-"):
                step_fn = torch.compile(model, dynamic=False)
            opt = MasterWeightAdamW(model.parameters(), lr=args.lr, fused=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=True)
        losses = []
        started = time.perf_counter()
        for i in range(args.steps):
            if bf16:
                loss = step_fn(batches[i % len(batches)])
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = step_fn(batches[i % len(batches)])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach().float()))
        print(f"{name}: {args.steps} steps in {time.perf_counter() - started:.1f} s", flush=True)
        del model, opt, step_fn
        torch.cuda.empty_cache()
        return losses

    names = ("hf-autocast", "compact-autocast", "hf-bf16", "compact-bf16")
    curves = {n: curve(n) for n in names}
    print(f"model {args.model} seq {args.seq_len} batch {args.batch_size} lr {args.lr} dropout 0")
    print("step " + "".join(f"{n:>18}" for n in names))
    for i in range(args.steps):
        if i % 5 == 0 or i == args.steps - 1:
            print(f"{i + 1:>4} " + "".join(f"{curves[n][i]:>18.4f}" for n in names))
    worst = 0.0
    for n, ref in (
        ("compact-autocast", "hf-autocast"),
        ("compact-bf16", "hf-bf16"),
        ("hf-bf16", "hf-autocast"),
        ("compact-bf16", "hf-autocast"),
    ):
        rel = [abs(a - b) / abs(b) for a, b in zip(curves[n], curves[ref], strict=True)]
        mean = sum(rel) / len(rel)
        if n.split("-")[1] == ref.split("-")[1]:
            worst = max(worst, *rel)
        print(
            f"{n} vs {ref}: largest relative difference {max(rel):.3%} (step {rel.index(max(rel)) + 1}), mean {mean:.3%}"
        )
    drop = curves["hf-autocast"][0] - curves["hf-autocast"][-1]
    print(f"hf-autocast loss fell by {drop:.3f} over {args.steps} steps")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
