"""The slurm backend: one sbatch job whose srun starts torchrun on every node.

- :mod:`.conf`: the slurm.conf Slurm's commands read, checked before any of them runs.
- :mod:`.backend`: :class:`~.backend.SlurmBackend` (discover, launch, wait, cancel).
- :mod:`.script`: the batch script rendered from ``manifests/slurm/job.sbatch.j2``.
- :mod:`.state`: what ``scontrol show job|nodes|partition|config`` and srun print, parsed.
- :mod:`.arrivals`: each node's way into the roll call's step (an image import), and its start bound.
- :mod:`.follow`: each node's output file followed into the collector.
- :mod:`.lost`: the job's nodes while it runs; a lost one counts only once held past its bound.
"""
