"""The rank's place in the world (torchrun's environment), its device, and the process group around it."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands in the job, from torchrun's environment."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    local_world_size: int
    launched: bool  # False when started without torchrun (single process)


def read_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """Ranks and sizes from torchrun's environment."""

    def num(*names: str, default: int) -> int:
        for name in names:
            value = environ.get(name, "").strip()
            if value:
                return int(value)
        return default

    return DistEnv(
        rank=num("RANK", default=0),
        local_rank=num("LOCAL_RANK", default=0),
        world_size=num("WORLD_SIZE", default=1),
        node_rank=num("GROUP_RANK", "NODE_RANK", "JOB_COMPLETION_INDEX", default=0),
        local_world_size=num("LOCAL_WORLD_SIZE", default=1),
        launched=bool(environ.get("WORLD_SIZE", "").strip()),
    )


def resolve_device(requested: str, cuda_available: bool, xla_importable: bool, xla_configured: bool) -> str:
    """``auto`` -> cuda if available, else xla if torch_xla imports and a device is configured, else cpu."""
    if requested != "auto":
        return requested
    if cuda_available:
        return "cuda"
    if xla_importable and xla_configured:
        return "xla"
    return "cpu"


class Accelerator:
    """What differs between cuda, xla and cpu: device, synchronise, step boundary, barrier."""

    #: Each device's process-group backend, unless ``--dist-backend`` says otherwise.
    BACKENDS: ClassVar[dict[str, str]] = {"cuda": "nccl", "xla": "xla", "cpu": "gloo"}

    def __init__(self, kind: str, local_rank: int, backend: str | None = None) -> None:
        import torch

        self.kind = kind
        self.backend = backend or self.BACKENDS[kind]
        self._xm: Any = None
        self._sync: Callable[[], Any] = lambda: None
        self.host_collectives = False  # xla whose runtime spans one process: gloo on the host instead
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda but no CUDA device is available")
            if local_rank >= torch.cuda.device_count():
                count = torch.cuda.device_count()
                raise RuntimeError(f"LOCAL_RANK is {local_rank} but only {count} CUDA devices are visible")
            torch.cuda.set_device(local_rank)
            torch.set_float32_matmul_precision("high")  # TF32 for any matmul left outside autocast
            self.device = torch.device("cuda", local_rank)
            self.name = torch.cuda.get_device_name(self.device)
            self.bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        elif kind == "xla":
            if glob.glob("/dev/neuron[0-9]*"):
                os.environ.setdefault("PJRT_DEVICE", "NEURON")
            import torch_xla
            import torch_xla.core.xla_model as xm
            import torch_xla.distributed.xla_backend  # registers the "xla" process-group backend

            self._xm = xm
            self._sync = getattr(torch_xla, "sync", xm.mark_step)
            self.device = torch_xla.device() if hasattr(torch_xla, "device") else xm.xla_device()
            self.name = os.environ.get("PJRT_DEVICE", "xla")
            # torch-xla's CPU runtime spans one process: see "Replicas" for why its ranks reduce on the host.
            self.host_collectives = self.name.upper() == "CPU"
            if self.host_collectives:
                self.backend = "gloo"
            self.bf16 = False  # the Neuron compiler picks matmul precision itself
        else:
            self.device = torch.device("cpu")
            self.name = "cpu"
            self.bf16 = False

    def init_process_group(self, env: DistEnv, timeout_s: float | None = None) -> None:
        """Join the default process group (torchrun's env:// rendezvous, or xla://).

        ``timeout_s``: how long every rank may take to join, and each collective to complete (None:
        PyTorch's own, by backend).
        """
        import datetime

        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s) if timeout_s else None

        if self.kind == "xla" and not self.host_collectives:
            dist.init_process_group("xla", init_method="xla://")
        elif env.launched:
            device_id = self.device if self.backend == "nccl" else None
            dist.init_process_group(self.backend, device_id=device_id, timeout=timeout)
        else:  # plain `python train.py`: a one-rank group needing no rendezvous
            dist.init_process_group(
                self.backend,
                store=dist.HashStore(),  # type: ignore[attr-defined]
                rank=0,
                world_size=1,
            )

    def synchronize(self) -> None:
        """Wait until the device has finished all queued work."""
        import torch

        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.kind == "xla":
            self._xm.wait_device_ops()

    def data_parallel(self, module: Any, ddp: Callable[..., Any], local_rank: int) -> Any:
        """DDP on cuda and cpu; on xla the module as it is, its gradients reduced in :meth:`optimizer_step`.

        torch-xla's own recipe all-reduces gradients in ``xm.optimizer_step``; DDP's reducer on XLA tensors
        failed here with "Expected to have finished reduction in the prior iteration".
        """
        if self.kind == "xla":
            return module
        device_ids = [local_rank] if self.kind == "cuda" else None
        return ddp(module, device_ids=device_ids, gradient_as_bucket_view=True, broadcast_buffers=False)

    def optimizer_step(self, optimizer: Any) -> None:
        """One optimizer step; on xla, all-reduce the gradients across ranks first."""
        if self.host_collectives:
            self._host_reduce_gradients(optimizer)
            optimizer.step()
        elif self.kind == "xla":
            self._xm.optimizer_step(optimizer)
        else:
            optimizer.step()

    def _host_reduce_gradients(self, optimizer: Any) -> None:
        """Average the gradients across ranks over gloo through host memory (one flat buffer)."""
        import torch
        import torch.distributed as dist

        if dist.get_world_size() < 2:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self._sync()  # run the traced backward: the gradients exist only once the graph has run
        flat = torch.cat([g.detach().reshape(-1).cpu() for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g).to(g.device))
            offset += g.numel()

    def step_boundary(self) -> None:
        """End of one training step: XLA compiles and runs the traced graph here."""
        if self.kind == "xla":
            self._sync()

    def barrier(self, tag: str) -> None:
        """Wait until every rank gets here."""
        import torch.distributed as dist

        if self.kind == "xla" and not self.host_collectives:
            self._xm.rendezvous(tag)  # the xla process group's barrier() does not wait
        else:
            dist.barrier()

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on cuda (when the GPU has bf16), nothing elsewhere."""
        import torch

        if self.kind == "cuda" and self.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def xla_configured(environ: Mapping[str, str]) -> bool:
    """Whether an XLA device is set up: PJRT_DEVICE set, or Neuron devices present."""
    return bool(environ.get("PJRT_DEVICE") or glob.glob("/dev/neuron[0-9]*"))


def xla_importable() -> bool:
    """Whether torch_xla is installed (without importing it)."""
    return importlib.util.find_spec("torch_xla") is not None


def no_sync(acc: Accelerator, model: Any) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync()`` (no gradient all-reduce in the backward); on xla nothing is reduced anyway."""
    if acc.kind != "xla" and hasattr(model, "no_sync"):
        return model.no_sync()  # type: ignore[no-any-return]
    return contextlib.nullcontext()
