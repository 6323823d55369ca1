"""The slurm backend: one sbatch job whose srun starts torchrun on every node.

- :mod:`.conf`: the slurm.conf Slurm's commands read, checked before any of them runs.
- :mod:`.backend`: :class:`~.backend.SlurmBackend` (discover, launch, wait, cancel).
- :mod:`.script`: the batch script rendered from ``manifests/slurm/job.sbatch.j2``.
- :mod:`.state`: what ``scontrol show job|nodes|partition`` and srun print, parsed.
"""
