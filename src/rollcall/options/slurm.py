"""The Slurm options: what the slurm wing is given.

Where sbatch submits and places the job (partition, account, QOS, reservation, features, nodes), sbatch
options of the user's own (``--slurm-arg``, none that rollcall sets: :data:`SET_BY_ROLLCALL`), and the
container image.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from rollcall.options.declare import GroupName, Section, option
from rollcall.options.values import word


def slurm_names(text: str) -> str:
    """Slurm names (a partition, an account), several joined by ``,``."""
    if not re.match(r"^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$", text):
        raise ValueError("must be Slurm names (letters, digits, '_', '.', '+', '-') joined by ','")
    return text


def slurm_name(text: str) -> str:
    """One Slurm name (a QOS)."""
    if not re.match(r"^[A-Za-z0-9_.+-]+$", text):
        raise ValueError("must be one Slurm name (letters, digits, '_', '.', '+', '-')")
    return text


_FEATURES = re.compile(r"^[A-Za-z0-9_.:&|()\[\]*-]+$")


def feature_expression(text: str) -> str:
    """Slurm's ``--constraint``: features joined by ``&`` and ``|``, counts (``*2``), ``[ ]`` and ``( )``."""
    if not _FEATURES.match(text):
        raise ValueError(
            "must be a Slurm feature expression: feature names (letters, digits, '_', '.', ':', '-') "
            "joined by '&' or '|', with counts ('*2'), '[ ]' and '( )'; no spaces"
        )
    depth: list[str] = []
    for c in text:
        if c in "[(":
            depth.append("])"["[(".index(c)])
        elif c in "])" and (not depth or depth.pop() != c):
            raise ValueError("has unbalanced '[ ]' or '( )'")
    if depth:
        raise ValueError("has unbalanced '[ ]' or '( )'")
    return text


_HOST = r"(?:[A-Za-z0-9_.-]|\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\])+"
_HOSTLIST = re.compile(rf"^{_HOST}(?:,{_HOST})*$")


def hostlist(text: str) -> str:
    """Slurm's hostlist: node names and ranges joined by ``,`` (``rc[1-2],gpu7``, ``gpu[01-04,07]``)."""
    if not _HOSTLIST.match(text):
        raise ValueError(
            "must be a Slurm hostlist: node names (letters, digits, '_', '.', '-') with ranges in brackets, "
            "joined by ',' (e.g. rc[1-2],gpu7)"
        )
    return text


class SetByRollcall(NamedTuple):
    """An sbatch option the script sets itself: its short letter (or none), and what to use instead."""

    short: str
    instead: str


_LOGS = "it writes the batch and node logs into the run's artifacts directory: use --artifacts-dir"
_MEM = "it asks all of each node's memory (--mem=0)"
#: sbatch's options that ``manifests/slurm/job.sbatch.j2`` or the options above set, by long name: a
#: ``--slurm-arg`` naming one (or abbreviating it, as sbatch's getopt allows) is refused.
SET_BY_ROLLCALL: dict[str, SetByRollcall] = {
    "nodes": SetByRollcall("N", "use --nodes"),
    "ntasks-per-node": SetByRollcall("", "it runs one task per node: use --procs-per-node for its ranks"),
    "ntasks": SetByRollcall("n", "it runs one task per node: use --nodes and --procs-per-node"),
    "gpus-per-task": SetByRollcall("", "it gives each node's task its ranks' GPUs: use --procs-per-node"),
    "exclusive": SetByRollcall("", "it asks every node to itself"),
    "oversubscribe": SetByRollcall("s", "it asks every node to itself (--exclusive)"),
    "requeue": SetByRollcall("", "it asks --no-requeue: a node failure fails the roll call"),
    "no-requeue": SetByRollcall("", "it asks it already: a node failure fails the roll call"),
    "mem": SetByRollcall("", _MEM),
    "mem-per-cpu": SetByRollcall("", _MEM),
    "mem-per-gpu": SetByRollcall("", _MEM),
    "time": SetByRollcall("t", "use --job-timeout (Slurm's limit is it plus a minute)"),
    "output": SetByRollcall("o", _LOGS),
    "error": SetByRollcall("e", _LOGS),
    "chdir": SetByRollcall("D", _LOGS),
    "export": SetByRollcall("", "it exports only the workload's environment: use --workload-env"),
    "job-name": SetByRollcall("J", "it names each job after its test"),
    "partition": SetByRollcall("p", "use --slurm-partition"),
    "account": SetByRollcall("A", "use --slurm-account"),
    "qos": SetByRollcall("q", "use --slurm-qos"),
    "reservation": SetByRollcall("", "use --slurm-reservation"),
    "constraint": SetByRollcall("C", "use --slurm-constraint"),
    "nodelist": SetByRollcall("w", "use --slurm-nodelist"),
    "nodefile": SetByRollcall("F", "use --slurm-nodelist"),
    "exclude": SetByRollcall("x", "use --slurm-exclude"),
    "wrap": SetByRollcall("", "the batch script is its own"),
    "array": SetByRollcall("a", "it submits one job per run"),
    "wait": SetByRollcall("W", "it follows the job itself"),
    "test-only": SetByRollcall("", "it submits the job: see the script with rollcall render"),
    "clusters": SetByRollcall("M", "it follows the job on the cluster its slurm.conf names: set SLURM_CONF"),
}
#: sbatch's own options that begin another's name (``--gpus``, ``--gpus-per-task``): not abbreviations.
_WHOLE_NAMES = frozenset({"gpus"})
_SHORT = {v.short: k for k, v in SET_BY_ROLLCALL.items() if v.short}
_UNSAFE = re.compile(r"[\s\\#'\"]|[^\x21-\x7e]")


_SET_BY_ROLLCALL_SHOWN = ", ".join(
    f"`--{name}`" + (f"/`-{set_by.short}`" if set_by.short else "")
    for name, set_by in SET_BY_ROLLCALL.items()
)


def sbatch_arg(arg: str) -> str:
    """One ``--slurm-arg``: an sbatch option in one word, none rollcall sets (:data:`SET_BY_ROLLCALL`)."""
    name = arg[2:].split("=", 1)[0] if arg.startswith("--") else arg[1:2]
    if not arg.startswith("-") or not name:
        raise ValueError(f"{arg!r} is not an sbatch option: each starts with '-' (e.g. --gres=gpu:8)")
    if _UNSAFE.search(arg):
        raise ValueError(f"{arg!r} cannot be an #SBATCH line: one word without spaces, quotes, '\\' or '#'")
    if not arg.startswith("--"):
        if name in _SHORT:
            meant = _SHORT[name]
            raise ValueError(
                f"{arg}: -{name} (--{meant}) is rollcall's to set; {SET_BY_ROLLCALL[meant].instead}"
            )
        return arg
    if name in SET_BY_ROLLCALL:
        raise ValueError(f"{arg}: --{name} is rollcall's to set; {SET_BY_ROLLCALL[name].instead}")
    meant_by = [n for n in SET_BY_ROLLCALL if n.startswith(name)]
    if not meant_by or name in _WHOLE_NAMES:
        return arg
    named = " or ".join(f"--{n}" for n in meant_by)
    instead = SET_BY_ROLLCALL[meant_by[0]].instead if len(meant_by) == 1 else "write sbatch's option whole"
    raise ValueError(f"{arg}: --{name} may abbreviate {named}, which rollcall sets; {instead}")


def sbatch_args(words: Sequence[str]) -> tuple[str, ...]:
    """Each ``--slurm-arg`` (:func:`sbatch_arg`)."""
    return tuple(sbatch_arg(w) for w in words)


@dataclass(frozen=True, kw_only=True)
class SlurmOptions(Section):
    """Where sbatch submits and places the job, and how each node's torchrun runs."""

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
    slurm_qos: str | None = option(
        "--slurm-qos", slurm_name, None, "the job's quality of service (sbatch --qos)", "QOS"
    )
    slurm_reservation: str | None = option(
        "--slurm-reservation",
        slurm_names,
        None,
        "run in this reservation (`sbatch --reservation`; several joined by `,`: the one that starts "
        "the job first); re-runs of some nodes keep it",
        "NAME",
    )
    slurm_constraint: str | None = option(
        "--slurm-constraint",
        feature_expression,
        None,
        "only nodes with these features: Slurm's feature expression (`sbatch --constraint`: `h100&ib`, "
        "`a100|h100`, `[rack1|rack2]`, `[rack1*2&rack2*2]`); re-runs of some nodes keep it",
        "EXPR",
    )
    slurm_nodelist: str | None = option(
        "--slurm-nodelist",
        hostlist,
        None,
        "run on these nodes (`sbatch --nodelist`, a Slurm hostlist such as `rc[1-2],gpu7`; Slurm adds "
        "others when it names fewer than `--nodes`); a re-run of some nodes (`--isolate`'s halves) is "
        "pinned to the nodes it re-runs instead, which ran within this list",
        "HOSTLIST",
    )
    slurm_exclude: str | None = option(
        "--slurm-exclude",
        hostlist,
        None,
        "never run on these nodes (`sbatch --exclude`, a Slurm hostlist); re-runs of some nodes keep it",
        "HOSTLIST",
    )
    slurm_arg: tuple[str, ...] = option(
        "--slurm-arg",
        sbatch_args,
        (),
        "one more sbatch option, given to sbatch as it is on an `#SBATCH` line of its own (repeatable; "
        "one word each, written with `=` as it starts with `-`: `--slurm-arg=--gres=gpu:8`; the "
        "variable takes shell-quoted words): `--gres=gpu:8`, `--switches=1`, `--comment=nightly`, "
        "`--cpus-per-task=8`. One that rollcall sets, or an abbreviation of it, is refused, naming the "
        f"option to use instead: {_SET_BY_ROLLCALL_SHOWN}",
        "ARG",
        multiple=True,
    )
    container_image: str | None = option(
        "--container-image",
        word,
        None,
        "run each node's torchrun in this image through pyxis/enroot (`srun --container-image`); "
        "without it the nodes run this checkout's `train.py` with this Python's torch (a shared file "
        "system)",
        "IMAGE",
    )
