"""The workload's entry point: ``torchrun ... train.py [ARGS]`` runs one rank of :mod:`rollcall_workload`.

The images put this file at ``/workspace/train.py`` with the package beside it; the local and Slurm backends
run it from the checkout, where the package is installed with the suite. The rank-log contract, the
command line and everything else live in the package (``src/rollcall_workload``).
"""

from rollcall_workload.main import end_process, main

if __name__ == "__main__":
    end_process(main())
