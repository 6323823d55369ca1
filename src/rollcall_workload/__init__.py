"""The roll call's workload: distributed BERT pre-training that every rank must finish and say so.

torchrun starts it once per accelerator: ``python -m rollcall_workload``, or the images' entry point
``/workspace/train.py``.
Each module holds one thing: :mod:`~rollcall_workload.contract` the rank-log contract the suite reads,
:mod:`~rollcall_workload.rank.cli` the command line and each device's defaults,
:mod:`~rollcall_workload.rank.run` the rank's phases, :mod:`~rollcall_workload.compact` the compact BERT and
its kernels. It imports nothing of the suite (:mod:`rollcall`), and nothing of torch until a rank needs it,
so that the suite can check a command line with the workload's own parser without torch.
"""
