import os, json, sys
for k, v in {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}.items():
    os.environ.setdefault(k, v)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist
dist.init_process_group("nccl", device_id=torch.device("cuda:0"))
t = torch.ones(4, device="cuda")
dist.all_reduce(t); dist.barrier()
g = dist.new_group([0], group_desc="second")
dist.all_reduce(t, group=g)
torch.cuda.synchronize()
raw = torch._C._distributed_c10d._dump_nccl_trace_json(includeCollectives=True, onlyActive=False)
out = os.environ["OUT"]
open(os.path.join(out, "nccl_flight.json"), "wb").write(raw)
from torch.distributed import distributed_c10d as c
print(json.dumps({str(c._world.pg_names[pg]): sorted(r) for pg, r in c._world.pg_group_ranks.items()}))
print(torch.__version__, torch.cuda.get_device_name(0))
d = json.loads(raw)
for e in d["entries"]:
    print({k: e.get(k) for k in ("collective_seq_id", "process_group", "profiling_name", "state", "retired", "is_p2p", "record_id")})
dist.destroy_process_group()
