"""NCCL's flight-recorder dump from a one-rank run on a GPU, for tests/unit/data/nccl-flight-record.json.

Run on a machine with one CUDA GPU: ``OUT=<dir> python hack/gpu/nccl_flight_dump.py``. One rank joins an NCCL
process group, runs an all_reduce, a barrier and an all_reduce in a second group, and writes the dump
torch.distributed's recorder holds (``nccl_flight.json`` in ``$OUT``); it prints each entry's fields that the
workload's summary reads (``rollcall_workload.rank.flight.summarize``).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # before torch loads: it reads the size then
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")

import torch
import torch.distributed as dist

FIELDS = ("collective_seq_id", "process_group", "profiling_name", "state", "retired", "is_p2p", "record_id")


def main() -> None:
    """Run the three collectives and write the dump."""
    dist.init_process_group("nccl", device_id=torch.device("cuda:0"))
    t = torch.ones(4, device="cuda")
    dist.all_reduce(t)
    dist.barrier()
    dist.all_reduce(t, group=dist.new_group([0], group_desc="second"))
    torch.cuda.synchronize()
    c10d: object = torch._C._distributed_c10d
    raw = bytes(c10d._dump_nccl_trace_json(includeCollectives=True, onlyActive=False))  # type: ignore[attr-defined]
    with open(os.path.join(os.environ["OUT"], "nccl_flight.json"), "wb") as f:
        f.write(raw)
    print(torch.__version__, torch.cuda.get_device_name(0))
    for entry in json.loads(raw)["entries"]:
        print({k: entry.get(k) for k in FIELDS})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
