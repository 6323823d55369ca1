"""The Slurm options: the partition, the account and the container image; what the slurm wing is given."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from rollcall.options.declare import GroupName, Section, option
from rollcall.options.values import word


def slurm_names(text: str) -> str:
    """Slurm names (a partition, an account), several joined by ``,``."""
    if not re.match(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$", text):
        raise ValueError("must be Slurm names (letters, digits, '_', '.', '+', '-') joined by ','")
    return text


@dataclass(frozen=True, kw_only=True)
class SlurmOptions(Section):
    """Where sbatch submits and how each node's torchrun runs."""

    GROUP: ClassVar[GroupName] = "slurm"

    slurm_partition: str | None = option(
        "--slurm-partition",
        slurm_names,
        None,
        "the partition(s) to submit to (none: the cluster's default partition)",
        "PARTITION",
    )
    slurm_account: str | None = option(
        "--slurm-account", slurm_names, None, "the account to charge (none: the user's default)", "ACCOUNT"
    )
    container_image: str | None = option(
        "--container-image",
        word,
        None,
        "run each node's torchrun in this image through pyxis/enroot (srun --container-image)",
        "IMAGE",
        doc=(
            "run each node's torchrun in this image through pyxis/enroot (`srun --container-image`); "
            "without it the nodes run this checkout's `train.py` with this Python's torch (a shared file "
            "system)"
        ),
    )
