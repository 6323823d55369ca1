"""The xla CPU runtime's gradient reduction over gloo: two real ranks on loopback end with the same average.

The test hosts the ranks' store, as torchrun's agent does for the workload's ranks: where rank 0 hosted it,
rank 0 once aborted while leaving the process group ("terminate called without an active exception", on a
loaded CI machine, its result already printed), which no rank under torchrun can do that way.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch
import torch.distributed as dist

RANK_SCRIPT = """
import os, torch, torch.distributed as dist
from rollcall_workload.rank.dist import Accelerator
acc = Accelerator("cpu", 0)
acc.host_collectives = True
rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
store = dist.TCPStore("127.0.0.1", port, is_master=False)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
params = [torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(2, 3))]
generator = torch.Generator().manual_seed(dist.get_rank())
for p in params:
    p.grad = torch.randn(p.shape, generator=generator)
acc._host_reduce_gradients(torch.optim.SGD(params, lr=0.1))
print(torch.cat([p.grad.reshape(-1) for p in params]).numpy().tobytes().hex())
dist.barrier()  # as train.py leaves
dist.destroy_process_group()
"""


def _expected() -> str:
    grads = []
    for rank in range(2):
        generator = torch.Generator().manual_seed(rank)
        grads.append(torch.cat([torch.randn(5, generator=generator), torch.randn(6, generator=generator)]))
    return ((grads[0] + grads[1]) / 2).numpy().tobytes().hex()


def test_host_reduce_gives_every_rank_the_same_average():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port), "WORLD_SIZE": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            env={**base, "RANK": str(rank), "LOCAL_RANK": "0"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs == [_expected()] * 2
