"""What a simulated rank's dump holds: its stack, and torch.distributed's record of its last collectives.

Each rank of a fleet (:mod:`tests.sim.fleet`) has a :class:`Place`: the frames its main thread stands in now,
and where it is in the run's collectives (how many it finished, whether it entered the next and waits in
it). The simulation moves it as the rank goes; the rank's real
:class:`~rollcall_workload.rank.watchdog.Watchdog` reads its frames at a dump, and its real
:class:`~rollcall_workload.rank.flight.FlightRecorder` reads its record through :func:`recorder`, as
torch's recorder would hold it: the default group's collectives in order (:func:`collectives`), one
``all_reduce`` per training step (DDP's gradients) and one ``barrier`` at each epoch's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollcall_workload.contract import RollcallLog
from rollcall_workload.rank.flight import FlightRecorder, Group

if TYPE_CHECKING:
    from tests.sim.fleet import Plan

#: Frames a dump holds, by what the rank does (as the workload's own would name them).
SLEEP = [["rank/run.py", 270, "run", "faults.inject_fault(env.rank)", True],
         ["faults.py", 412, "inject_fault", "time.sleep(3600)", True]]  # fmt: skip
GIL = [["rank/run.py", 270, "run", "faults.inject_fault(env.rank)", True],
       ["faults.py", 440, "hold_the_gil", "libc.sleep(seconds)", True]]  # fmt: skip
BARRIER = [["rank/run.py", 225, "run", 'acc.barrier(f"rollcall-epoch-{epoch}")', True],
           ["/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 4600, "barrier",
            "work.wait()", False]]  # fmt: skip
JOINING = [["rank/run.py", 112, "run", "acc.init_process_group(env, args.pg_timeout)", True],
           ["/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 1520,
            "init_process_group", "store, rank, world_size = next(rendezvous_iterator)", False]]  # fmt: skip
NOT_JOINING = [["rank/run.py", 108, "run", "faults.never_join(env.rank)", True],
               ["faults.py", 452, "never_join", "time.sleep(3600)", True]]  # fmt: skip
SYNCHRONIZE = [["rank/run.py", 200, "train_steps", "acc.synchronize()", True],
               ["/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", 985, "synchronize",
                "return torch._C._cuda_synchronize()", False]]  # fmt: skip
#: In its imports and device setup (torch_xla's import, from a cold filesystem).
SETTING_UP = [["rank/run.py", 124, "run", "acc = Accelerator(device, env.local_rank, args.dist_backend)", True],
              ["<frozen importlib._bootstrap>", 1176, "_find_and_load", "", False],
              ["/venv/lib/python3.11/site-packages/torch_xla/__init__.py", 7, "<module>", "import _XLAC", False]]  # fmt: skip
#: In its own step's compute (a slow batch), before the step's all_reduce.
OWN_STEP = [["rank/run.py", 190, "train_steps", "batch = next(batches)", True],
            ["data.py", 64, "__next__", "return self.make(self.seed + self.step)", True]]  # fmt: skip
#: In backward, where DDP waits for the step's gradient all_reduce (no Python frame of torch.distributed).
BACKWARD = [["rank/run.py", 198, "train_steps", "loss.backward()", True],
            ["/venv/lib/python3.11/site-packages/torch/_tensor.py", 626, "backward",
             "torch.autograd.backward(", False]]  # fmt: skip


def collectives(plan: Plan) -> list[tuple[str, int]]:
    """The default group's collectives of a run, in order, each ``(op, step)``: the step's ``all_reduce``,
    and a ``barrier`` after each step that ends an epoch. Collective ``n`` (its sequence number) is the
    ``n``-th."""
    ops = []
    for k in range(plan.steps):
        ops.append(("all_reduce", k))
        done = k + 1 - plan.warmup_steps
        if done > 0 and done % plan.steps_per_epoch == 0:
            ops.append(("barrier", k))
    return ops


def seq_of(plan: Plan, op: str, step: int) -> int:
    """The sequence number of the ``op`` of ``step`` (the barrier: the one after it)."""
    return collectives(plan).index((op, step)) + 1


@dataclass
class Place:
    """Where a rank stands now: its main thread's frames, and the collectives it finished and entered."""

    frames: list[list[Any]] = field(default_factory=lambda: SETTING_UP)
    #: How many of the run's collectives it finished; whether it entered the next one (and waits in it).
    done: int = 0
    entered: bool = False

    def at(self, frames: list[list[Any]], done: int | None = None, entered: bool = False) -> None:
        """It stands in ``frames`` now, having finished ``done`` collectives (None: as before)."""
        self.frames, self.entered = frames, entered
        if done is not None:
            self.done = done

    def stacks(self) -> list[tuple[str, bool, list[list[Any]]]]:
        """What its watchdog's dump holds (the watchdog's ``stacks``)."""
        return [("MainThread", True, self.frames)]

    def dump(self, plan: Plan) -> dict[str, Any]:
        """torch's recorder's dump of its default group (decoded), as it stands now."""
        ops = collectives(plan)
        shown = ops[: self.done + (1 if self.entered else 0)]
        entries = [
            {
                "process_group": ["0", "default_pg"],
                "collective_seq_id": seq,
                "profiling_name": f"gloo:{op}",
                "retired": seq <= self.done,
                "record_id": seq - 1,
            }
            for seq, (op, _) in enumerate(shown, start=1)
        ]
        return {"entries": entries, "pg_config": {}}


def recorder(log: RollcallLog, plan: Plan, place: Place) -> FlightRecorder:
    """The rank's real flight recorder, reading ``place``'s record (on gloo, its dump kept on no disk)."""
    world = Group("default_pg", tuple(range(plan.world)))
    return FlightRecorder(log, "gloo", None, read=lambda _: place.dump(plan), groups=lambda: {"0": world})


__all__ = ["BACKWARD", "BARRIER", "GIL", "JOINING", "NOT_JOINING", "OWN_STEP", "SETTING_UP", "SLEEP",
           "SYNCHRONIZE", "Place", "collectives", "recorder", "seq_of"]  # fmt: skip
