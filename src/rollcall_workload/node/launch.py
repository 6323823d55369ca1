"""The node's launcher where no monitor stands in front of it (Kubernetes): the launch faults, then torchrun.

``python -m rollcall_workload.node.launch --node-rank=N -- torchrun ...`` applies the node's launch faults as
the monitor does on local and Slurm (``ROLLCALL_NO_LAUNCH_NODE``: start nothing; ``ROLLCALL_LATE_NODE``,
``ROLLCALL_SLOW_LAUNCHER_NODE``: start late), then becomes the launcher (``exec``): the pod's sidecar finds
torchrun among the pod's processes, never this wrapper (:func:`rollcall_workload.node.launcher.is_launcher`).
"""

from __future__ import annotations

import os
import sys

from rollcall_workload import faults

MODULE = "rollcall_workload.node.launch"


def main(argv: list[str] | None = None) -> None:
    """Apply the node's launch faults, then exec the launcher's command (the arguments after ``--``)."""
    args = sys.argv[1:] if argv is None else argv
    if "--" not in args or not args[0].startswith("--node-rank="):
        raise SystemExit(f"usage: python -m {MODULE} --node-rank=N -- LAUNCHER [ARGS...]")
    node_rank, command = int(args[0].split("=", 1)[1]), args[args.index("--") + 1 :]
    faults.no_launch(node_rank)
    faults.late_start(node_rank)
    command = faults.slow_launcher(command, node_rank)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
