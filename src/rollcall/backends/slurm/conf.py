"""The slurm.conf that Slurm's commands read, found and checked before any of them runs.

Slurm's client commands read ``$SLURM_CONF``, else ``/etc/slurm/slurm.conf``; with neither they look their
controller up in DNS (an SRV record), a query to the machine's resolver. :func:`find_conf` looks where they
would, and refuses (:class:`~rollcall.options.values.OptionError`, a usage error) a session whose Slurm is not
configured: no file, an unreadable one, or one naming no controller (no ``SlurmctldHost``, nor the older
``ControlMachine``, in it or a file it includes). Every Slurm command is then run with the file found as
its ``SLURM_CONF``, so none of them falls back to DNS.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rollcall.options.values import OptionError

CONF_ENV = "SLURM_CONF"
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
#: The keys that name the controller (``ControlMachine`` before Slurm 18.08), as Slurm spells them.
CONTROLLER_KEYS = ("SlurmctldHost", "ControlMachine")
#: How deep ``Include`` lines are followed.
MAX_INCLUDE_DEPTH = 8


@dataclass(frozen=True)
class SlurmConf:
    """The slurm.conf found: its path, where that came from, and the controllers it names."""

    path: Path
    source: str
    controllers: tuple[str, ...]


def find_conf(environ: Mapping[str, str] | None = None) -> SlurmConf:
    """The slurm.conf Slurm's commands would read; :class:`OptionError` naming what was looked for."""
    environ = os.environ if environ is None else environ
    fix = (
        f"set {CONF_ENV} to the cluster's slurm.conf, or run on a host of the cluster that has {DEFAULT_CONF}"
    )
    given = environ.get(CONF_ENV, "").strip()
    if given:
        path, source = Path(given), f"{CONF_ENV}={given}"
    else:
        path, source = DEFAULT_CONF, f"{CONF_ENV} is not set; the default {DEFAULT_CONF}"
    if not path.is_file():
        raise OptionError(
            f"--backend slurm: no Slurm configuration: {source}: no such file "
            f"(Slurm's commands would look their controller up in DNS); {fix}"
        )
    try:
        controllers = controllers_of(path)
    except OSError as exc:
        raise OptionError(f"--backend slurm: {source}: cannot be read ({exc}); {fix}") from None
    if not controllers:
        raise OptionError(
            f"--backend slurm: {source}: names no controller (no {' or '.join(CONTROLLER_KEYS)} line); {fix}"
        )
    return SlurmConf(path, source, controllers)


def controllers_of(path: Path, depth: int = 0) -> tuple[str, ...]:
    """The hosts the ``SlurmctldHost``/``ControlMachine`` lines of ``path`` (and its includes) name."""
    keys = {k.lower() for k in CONTROLLER_KEYS}
    found: list[str] = []
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        words = line.split()
        if not words:
            continue
        if words[0].lower() == "include" and len(words) == 2 and depth < MAX_INCLUDE_DEPTH:
            included = Path(words[1]) if Path(words[1]).is_absolute() else path.parent / words[1]
            if included.is_file():
                found += controllers_of(included, depth + 1)
            continue
        for word in words:
            key, eq, value = word.partition("=")
            if eq and key.lower() in keys and value:
                found.append(value.split("(", 1)[0])  # SlurmctldHost=name(address)
    return tuple(found)
