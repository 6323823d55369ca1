"""The sbatch script of a JobSpec: ``manifests/slurm/job.sbatch.j2`` filled with typed, shell-quoted values.

The template environment quotes every value itself (:func:`shlex.quote`; only :class:`Shell` text goes in
as it is), so nothing the user passes (arguments, environment, image) can change the script's structure.
Each node runs :meth:`JobSpec.node_command`, its torchrun behind the node's monitor, with Slurm's node count,
node id and the first host's address and port in place of the spec's (:data:`FROM_SLURM`); the monitor reads a
directory of the node's own (:func:`monitor_dir`). Its first step proves the artifacts directory is on storage
every node shares: each node reads the token the suite wrote there before sbatch (:func:`shared_token`); one
that does not see it says so (:func:`unseen`) and the job ends with :data:`UNSHARED_EXIT`; one that does says
it is up, and the script says when the roll call's step begins (:mod:`.arrivals`: what the suite reads of a
node before its task begins, outside any container).

The workload's secret variables (:mod:`rollcall.secrets`: a ``--workload-env`` whose name looks secret, each
``--workload-secret``) are never in the script: the suite writes them to a file of the job's directory that
only the job's user may read (:func:`write_secrets`, :data:`SECRETS_FILE`), which the script reads and removes
before anything else runs. In a container image, each node's monitor directory and torchrun's logs lie under
``/tmp/rollcall-monitor-$SLURM_JOB_ID``, made for the job's user alone by the monitor before torchrun starts
(:mod:`rollcall_workload.safefs`).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from rollcall.backends.slurm.arrivals import STEP_BEGINS
from rollcall.jobspec import (
    COMPILE_CACHE_DIR,
    IMAGE_DIR,
    IMAGE_PYTHON,
    IMAGE_SCRIPT,
    PACKAGE_ENTRY,
    JobSpec,
    manifests_dir,
)
from rollcall.options.slurm import SlurmOptions
from rollcall.secrets import no_kubernetes_secret, secret_env
from rollcall_workload import contract
from rollcall_workload.safefs import new_file

#: The batch script's template, in the manifests' directory.
TEMPLATE = "slurm/job.sbatch.j2"
#: Seconds past ``--job-timeout`` that Slurm's own time limit allows (the suite's deadline comes first).
TIME_LIMIT_MARGIN_S = 60.0
#: torchrun arguments taken from Slurm on each node, not from the JobSpec.
FROM_SLURM = {
    "--nnodes=": "$SLURM_NNODES",
    "--node-rank=": "$SLURM_NODEID",
    "--master-addr=": "$MASTER_ADDR",
    "--master-port=": "$MASTER_PORT",
}
#: The directory the workload's package was imported from here: each node without a container image imports
#: that one too (``PYTHONPATH``), the package beside the script it runs, not whatever its Python finds first.
WORKLOAD_PATH = str(Path(contract.__file__).resolve().parents[1])
#: Where each node's monitor directory is inside a container image: the node's own ``/tmp`` (the task's).
IMAGE_MONITOR_ROOT = "/tmp/rollcall-monitor"
#: Each job's rendezvous port is ``PORT_BASE + job id % PORT_SPAN`` (unprivileged, below the ephemeral range).
PORT_BASE, PORT_SPAN = 20000, 12000
#: The file of the job's directory that every node must read its token from (:func:`shared_token`).
SHARED_TOKEN_FILE = "shared-storage.token"
#: The file of the job's directory holding the workload's secret variables (:func:`write_secrets`).
SECRETS_FILE = "workload-secrets.env"
#: The batch script's exit code when some node does not see the artifacts directory (its first step).
UNSHARED_EXIT = 93
#: What such a node says in the batch log: its Slurm name, its host name and the token's path.
UNSEEN = re.compile(
    r"^rollcall: node (?P<node>\S+) \(host (?P<host>[^)]*)\) does not see (?P<path>\S+)$", re.M
)


class Shell(str):
    """Text that is already shell syntax; the template puts it in unquoted."""

    __slots__ = ()


def _shell_value(value: object) -> str:
    if isinstance(value, Shell):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(f"the sbatch template takes str and int values, got {type(value).__name__}")
    return shlex.quote(str(value))


def shell_word(arg: str) -> str:
    """``arg`` quoted for bash; the values :data:`FROM_SLURM` names become Slurm's variables.

    So do the ``$SLURM_JOB_ID`` and ``$SLURM_NODEID`` it names (:func:`expanding`).
    """
    for prefix, var in FROM_SLURM.items():
        if arg.startswith(prefix):
            return f'{prefix}"{var}"'
    return expanding(arg)


_NODE_VARS = re.compile(r"\$(SLURM_JOB_ID|SLURM_NODEID)\b")


def expanding(text: str) -> Shell:
    """``text`` quoted for bash but for its ``$SLURM_JOB_ID`` and ``$SLURM_NODEID``, which bash expands."""
    parts = _NODE_VARS.split(text)  # text, variable, text, ...
    return Shell("".join(f'"${p}"' if i % 2 else shlex.quote(p) if p else "" for i, p in enumerate(parts)))


def monitor_dir(root: str) -> tuple[str, str]:
    """The node's monitor directory under ``root``: as :meth:`JobSpec.node_command` takes it, and in bash.

    ``root/node-<i>-monitor``, ``<i>`` the task's ``$SLURM_NODEID``, which only the node's own shell knows;
    ``root`` may name ``$SLURM_JOB_ID`` too (a node's ``/tmp`` outlives the job: no other job's files there).
    """
    path = f"{root}/node-$SLURM_NODEID-monitor"
    return path, expanding(path)


def secret_values(spec: JobSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The workload's secret variables of ``spec``, by name; ValueError naming one Slurm cannot pass.

    Its ``--workload-env`` that looks secret, and each ``--workload-secret`` from ``environ``.
    """
    _, values = secret_env(spec.env, spec.secrets)
    no_kubernetes_secret(spec.secrets, "slurm")
    for name in spec.secrets:
        if name not in environ:
            raise ValueError(f"--workload-secret {name}: the suite's environment has no {name}; set it")
        values[name] = environ[name]
    return values


def write_secrets(spec: JobSpec, out_dir: Path, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Write the workload's secret variables (:func:`secret_values`) to :data:`SECRETS_FILE` in ``out_dir``.

    A new file (``O_EXCL``, never through a link), its user's alone (0600), of ``export`` lines the batch
    script reads and removes first; None where the job has no secret.
    """
    values = secret_values(spec, environ)
    if not values:
        return None
    path = out_dir.resolve() / SECRETS_FILE
    with os.fdopen(new_file(path), "w") as f:
        f.writelines(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(values.items()))
    return path


def asks_exclusive(script: str) -> bool:
    """Whether an sbatch script asks for its nodes to itself: ``#SBATCH --exclusive`` among its directives.

    sbatch reads ``#SBATCH`` lines until the first command; ``--exclusive=user`` or ``=mcs`` (nodes shared
    with the user's or the group's other jobs) do not count.
    """
    for line in script.splitlines():
        text = line.strip()
        if text.startswith("#SBATCH"):
            if "--exclusive" in text[len("#SBATCH") :].split("#")[0].split():
                return True
        elif text and not text.startswith("#"):
            return False  # the first command: sbatch reads no directive past it
    return False


def shared_token(spec: JobSpec, out_dir: Path) -> tuple[Path, str]:
    """The file every node of ``spec``'s job must read in ``out_dir``, and what it holds: the job's name."""
    return out_dir.resolve() / SHARED_TOKEN_FILE, spec.name


def unseen(batch_log: str) -> list[tuple[str, str]]:
    """The nodes that said the artifacts directory is not theirs to see: Slurm name and host name, by name.

    Their tasks print at once, in either order.
    """
    return sorted({(m["node"], m["host"]) for m in UNSEEN.finditer(batch_log)})


def time_limit(seconds: float) -> str:
    """Slurm's ``--time`` as ``D-HH:MM:SS``, rounded up to a whole second."""
    total = max(1, math.ceil(seconds))
    days, rest = divmod(total, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"


@dataclass(frozen=True)
class Settings:
    """What the script needs besides the JobSpec.

    Attributes:
        partition: ``--partition`` (one or several, comma-separated); the cluster's default when None.
        account: ``--account``.
        qos: ``--qos``.
        reservation: ``--reservation`` (one or several, comma-separated).
        constraint: ``--constraint``, Slurm's feature expression.
        nodelist: ``--nodelist``, a hostlist; a job pinned to some nodes (:attr:`JobSpec.machines`) names
            those instead.
        exclude: ``--exclude``, a hostlist; pinned jobs keep it.
        sbatch_args: more sbatch options, one ``#SBATCH`` line each, none that the script sets itself
            (:data:`rollcall.options.slurm.SET_BY_ROLLCALL`).
        container_image: run each node's task in this image (pyxis/enroot); torchrun and the workload are
            then the image's (``torchrun``, ``/workspace/train.py``).
        launcher: how torchrun is started without a container image (default: this Python's torch).
        python: the Python that starts the node's monitor without a container image (default: this one).
        entry: how torchrun starts the workload on the nodes without a container image (default: as the
            installed package, ``--module rollcall_workload``, from :attr:`pythonpath`).
        pythonpath: where the nodes without a container image import the workload's package from (default:
            where this process imported it).
        margin_s: seconds Slurm's time limit allows past the job timeout.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    nodelist: str | None = None
    exclude: str | None = None
    sbatch_args: tuple[str, ...] = ()
    container_image: str | None = None
    launcher: tuple[str, ...] = (sys.executable, "-m", "torch.distributed.run")
    python: tuple[str, ...] = (sys.executable,)
    entry: tuple[str, ...] = PACKAGE_ENTRY
    pythonpath: str = WORKLOAD_PATH
    margin_s: float = TIME_LIMIT_MARGIN_S

    @classmethod
    def from_options(cls, options: SlurmOptions) -> Settings:
        """From the ``--slurm-*`` options and ``--container-image``."""
        return cls(
            partition=options.slurm_partition,
            account=options.slurm_account,
            qos=options.slurm_qos,
            reservation=options.slurm_reservation,
            constraint=options.slurm_constraint,
            nodelist=options.slurm_nodelist,
            exclude=options.slurm_exclude,
            sbatch_args=options.slurm_arg,
            container_image=options.container_image,
        )


def _template_source(name: str) -> str:
    return (manifests_dir() / name).read_text()


_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(_template_source),
    undefined=jinja2.StrictUndefined,
    finalize=_shell_value,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)


_PATH_SAFE = re.compile(r"^[\w@%+=:,./-]+$")


_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _nodelist(machines: Sequence[str]) -> str:
    """``--nodelist`` of a job pinned to ``machines`` (a re-run of some nodes); empty when not pinned.

    The re-run's nodes ran within the user's ``--slurm-nodelist``: they replace it.
    """
    bad = [m for m in machines if not _NODE_NAME.match(m)]
    if bad:
        raise ValueError(f"node name(s) {', '.join(map(repr, bad))} cannot be passed to --nodelist")
    return ",".join(machines)


def render(spec: JobSpec, settings: Settings, out_dir: Path) -> str:
    """The sbatch script of ``spec``; ``out_dir`` (absolute, shared with the nodes) gets its logs."""
    out = out_dir.resolve()
    if not _PATH_SAFE.match(str(out)):
        raise ValueError(
            f"the artifacts directory {out} has characters #SBATCH lines cannot carry; "
            "use --artifacts-dir with letters, digits and / . _ - only"
        )
    mounts = []
    path: dict[str, str] = {}
    if settings.container_image:
        launcher: Sequence[str] = ("torchrun",)
        python: Sequence[str] = IMAGE_PYTHON
        entry: Sequence[str] = (IMAGE_SCRIPT,)
        monitors = f"{IMAGE_MONITOR_ROOT}-$SLURM_JOB_ID"  # the monitor makes it this user's alone (safefs)
        log_dir = f"{monitors}/logs"  # torchrun's, inside it
        if spec.compile_cache is not None:  # the node's directory, where the pods would mount it
            mounts.append(f"{spec.compile_cache.path}:{COMPILE_CACHE_DIR}")
    else:
        launcher, python, entry = settings.launcher, settings.python, settings.entry
        log_dir, monitors = str(out / "ranks"), str(out)
        path = {"PYTHONPATH": settings.pythonpath}
    token_file, token = shared_token(spec, out)
    node_monitor, _ = monitor_dir(monitors)
    argv = spec.node_command(
        monitor_dir=node_monitor,
        python=python,
        node_rank="$SLURM_NODEID",
        master_addr="$MASTER_ADDR",
        launcher=launcher,
        entry=entry,
        log_dir=log_dir,
        compile_cache_dir=COMPILE_CACHE_DIR if mounts else None,
    )
    command = "exec " + " ".join(shell_word(a) for a in argv)
    # the user's own PYTHONPATH wins; the secret variables are never in the script (write_secrets)
    no_kubernetes_secret(spec.secrets, "slurm")
    env, secrets = secret_env({**path, **spec.workload_env(log_dir)}, spec.secrets)
    env = {k: expanding(v) if _NODE_VARS.search(v) else v for k, v in env.items()}
    threads = spec.accelerator == "cpu" and "OMP_NUM_THREADS" not in env
    values: dict[str, Any] = {
        "name": spec.name,
        "nodes": spec.nodes,
        "procs_per_node": spec.procs_per_node,
        "accelerator": spec.accelerator,
        "gpus_per_task": spec.procs_per_node if spec.accelerator == "nvidia" else 0,
        "time_limit": time_limit(spec.job_timeout_s + settings.margin_s),
        "partition": settings.partition,
        "account": settings.account,
        "qos": settings.qos,
        "reservation": settings.reservation,
        "constraint": settings.constraint,
        "nodelist": _nodelist(spec.machines) or settings.nodelist,
        "exclude": settings.exclude,
        "sbatch_args": settings.sbatch_args,
        "batch_log": str(out / "batch.out"),
        "node_log": str(out / "node-%n.out"),
        "env": sorted(env.items()),
        "omp_threads_per": spec.procs_per_node if threads else 0,
        "container_image": settings.container_image,
        "container_mounts": ",".join(mounts),
        "container_workdir": IMAGE_DIR,  # the workload's package lies there, for the monitor's python -m
        "command": command,
        "port_base": PORT_BASE,
        "port_span": PORT_SPAN,
        "token_file": str(token_file),
        "secrets_file": str(out / SECRETS_FILE) if secrets or spec.secrets else "",
        "token": token,
        "unshared_exit": UNSHARED_EXIT,
        "step_begins": STEP_BEGINS,
    }
    return _ENV.get_template(TEMPLATE).render(values)
