"""The job's options: where it runs, its size, image, workload, the workload's hang bounds and deadlines."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rollcall.backends import WINGS, auto_help
from rollcall.jobspec import (
    DEFAULT_JOB_TIMEOUT_S,
    DEVICE_OF,
    Accelerator,
    AcceleratorChoice,
    CacheVolume,
    HangBounds,
    check_args,
    check_env,
    check_image,
    parse_compile_cache,
)
from rollcall.options.declare import DURATION, GroupName, Section, option
from rollcall.options.values import (
    Choice,
    OptionError,
    duration_or_auto,
    env_pairs,
    format_duration,
    positive_duration,
    shell_words,
    switch,
    whole,
    whole_or_auto,
)
from rollcall.secrets import SecretSource, parse_secret


def workload_env(pairs: Sequence[str]) -> dict[str, str]:
    """:func:`~rollcall.options.values.env_pairs`, each fault-injection variable checked by the workload."""
    env = env_pairs(pairs)
    check_env(env)
    return env


def workload_secrets(words: Sequence[str]) -> dict[str, SecretSource]:
    """Each ``--workload-secret`` word (:func:`rollcall.secrets.parse_secret`), by the variable it names."""
    secrets: dict[str, SecretSource] = {}
    for word in words:
        try:
            name, source = parse_secret(word)
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        secrets[name] = source
    return secrets


def workload_args(text: str) -> tuple[str, ...]:
    """Shell words that the workload's own parser accepts."""
    words = shell_words(text)
    check_args(words)
    return words


@dataclass(frozen=True, kw_only=True)
class JobOptions(Section):
    """What every backend runs: the layout asked for, the image, the workload, its bounds, the deadlines."""

    GROUP: ClassVar[GroupName] = "job"

    nodes: int = option("--nodes", whole(1), 2, "nodes (pods) to train on", "N")
    procs_per_node: int | None = option(
        "--procs-per-node",
        whole_or_auto(1),
        None,
        "ranks per node; `auto`: the nodes' allocatable GPUs or NeuronCores, 1 on cpu",
        "N",
        shown="auto",
    )
    accelerator: AcceleratorChoice = option(
        "--accelerator", Choice(AcceleratorChoice), "auto", "the device the ranks train on"
    )
    image: str | None = option(
        "--image",
        check_image,
        None,
        "the training image (required by the kubernetes backend; slurm takes `--container-image`); a "
        "reference that no runtime would accept is refused before anything is created",
        "IMAGE",
        backends=("kubernetes",),
    )
    backend: str = option(
        "--backend",
        Choice(choices=("auto", *(wing.name for wing in WINGS))),
        "auto",
        f"where to run: {auto_help()}; printed in the header and recorded in every report",
    )
    job_timeout: float = option(
        "--job-timeout",
        positive_duration,
        DEFAULT_JOB_TIMEOUT_S,
        "how long the training job may run (a test's `@pytest.mark.rollcall(job_timeout_s=...)` over "
        "it); a roll-call test ends at its deadline, this plus a clean-up margin (and on Kubernetes "
        "`--capacity-timeout`), or at a shorter `--timeout`; the header says which",
        DURATION,
    )
    hang_after: float | None = option(
        "--hang-after",
        duration_or_auto,
        None,
        (
            "a rank whose step or phase does not complete within it dumps its stacks, and the run ends at "
            "the hang ([hangs.md](hangs.md)). Passed to the workload as its `--hang-after`; `auto`: the "
            "workload's own (a multiple of the median step time, with a floor); the same bound in "
            "`--workload-args` with another value is refused"
        ),
        DURATION,
        shown="auto",
    )
    first_step_hang_after: float | None = option(
        "--first-step-hang-after",
        duration_or_auto,
        None,
        "`--hang-after` until the first step, which compiles, completes; passed to the workload as its "
        "`--first-step-hang-after`; `auto`: the workload's own, by device (never below `--hang-after`)",
        DURATION,
        shown="auto",
    )
    join_hang_after: float | None = option(
        "--join-hang-after",
        duration_or_auto,
        None,
        (
            "`--hang-after` from entering `init_process_group` until the rank has joined the process "
            "group: a rank that never joins is named within it, a node whose ranks never say a word "
            "within twice it. The imports and device setup before it are held to `--start-skew` plus it; "
            "passed to the workload (and each node's monitor) as `--join-hang-after`; `auto`: the "
            "workload's own"
        ),
        DURATION,
        shown="auto",
    )
    pg_timeout: float | None = option(
        "--pg-timeout",
        duration_or_auto,
        None,
        "how long every rank may take to join the process group (and each collective to complete): "
        "passed to the workload as its `--pg-timeout`, `init_process_group`'s timeout. While every rank "
        "is inside `init_process_group` and none is missing, the ranks are joining, not hung: the run "
        "waits this long, not `--join-hang-after` ([hangs.md](hangs.md)); `auto`: PyTorch's own, 10m on "
        "NCCL, 30m on gloo",
        DURATION,
        shown="auto",
    )
    start_skew: float | None = option(
        "--start-skew",
        duration_or_auto,
        None,
        "how long after the first part of the run is heard from (a node's monitor, its launcher, a "
        "rank's process) another may still be heard for the first time: a node never heard from is "
        "named at it, and each part heard later gets its own bound from when it was heard "
        "([hangs.md](hangs.md)); torchrun's rendezvous timeout follows it. Passed to the workload as its "
        "`--start-skew`: with `--join-hang-after`, each rank's bound from its process start until it enters "
        "`init_process_group` (its imports and device setup, torch_xla's on Neuron; S + J, as for a rank "
        "seen and never heard), a rank still there past it named stuck in its setup; `auto`: twice "
        "`--join-hang-after`",
        DURATION,
        shown="auto",
    )
    compile_cache: CacheVolume | None = option(
        "--compile-cache",
        parse_compile_cache,
        None,
        (
            "keep inductor's and Triton's caches (`train.py --compile-cache`) between runs in this "
            "volume: `host:/PATH`, a directory of each node (local and slurm also take a plain `/PATH`), "
            "or `nfs:SERVER:/PATH` (kubernetes only; e.g. an Amazon EFS file system, shared by all "
            "nodes). On kubernetes it is mounted at `/var/cache/rollcall-compile-cache` (the same mount "
            "rules as `--neuron-cache`); local and slurm take the directory as it is (slurm with "
            "`--container-image` mounts it into the image at the same fixed path), NFS being refused "
            "there. Each rank's `throughput` says whether its compile came from the cache "
            "(`compile_cache`: hit, miss or off, beside `compile_s`), shown in `results.json`'s "
            "`compile_cache` and on the rank's tile"
        ),
        "host:/PATH|nfs:SERVER:/PATH",
    )
    keep: bool = option(
        "--keep",
        switch,
        False,
        "leave namespaces, Jobs and processes in place for debugging",
        switch=True,
        file="a debugging switch of one session; pinned in a file, every run would leave its objects behind",
    )
    unschedulable_grace: float = option(
        "--unschedulable-grace",
        positive_duration,
        60.0,
        "how long a pod may stay Unschedulable (slurm: a job PENDING for a reason that cannot clear) "
        "before the run fails with the scheduler's reason",
        DURATION,
    )
    workload_env: dict[str, str] = option(
        "--workload-env",
        workload_env,
        {},
        "extra environment for the workload (repeatable; the variable takes space-separated pairs); "
        "the fault-injection variables (`ROLLCALL_FAIL_RANK=0,2`, `ROLLCALL_HANG_RANK=1`, ... see "
        "[contract.md](contract.md)) are checked by the workload's own parsing before anything is "
        "created. A value whose name looks secret (`TOKEN`, `KEY`, `PASSWORD`, `SECRET` or `CREDENTIAL` "
        "as a part of it, such as `HF_TOKEN`) is written as `<redacted>` in every artifact and passed "
        "as `--workload-secret` passes its own ([security.md](security.md#secrets-by-reference))",
        "KEY=VALUE",
        multiple=True,
        environment=True,
    )
    workload_secret: dict[str, SecretSource] = option(
        "--workload-secret",
        workload_secrets,
        {},
        "a variable of the workload's environment whose value is a secret, passed by reference and "
        "written in no artifact (repeatable). `NAME` takes the value of the suite's own variable "
        "`NAME` (a CI's secret); `NAME=NAMESPACE/SECRET/KEY` (kubernetes) the key `KEY` of the Secret "
        "`SECRET` in `NAMESPACE`, which a Role there must let the suite read. Kubernetes gives the pods "
        "each value from a Secret of the run's own namespace, Slurm from a file only the job's user can "
        "read, removed as the job starts; local runs keep it in the processes' environment "
        "([security.md](security.md#secrets-by-reference))",
        "NAME[=NAMESPACE/SECRET/KEY]",
        multiple=True,
        environment=True,
    )
    workload_args: tuple[str, ...] = option(
        "--workload-args",
        workload_args,
        (),
        'extra arguments for `train.py`, e.g. `"--model large --seq-len 512 --compile"`; parsed by '
        "`train.py`'s own parser before anything is created",
        "ARGS",
    )

    def __post_init__(self) -> None:
        check_bounds(self.hang_bounds, self.workload_args, self.source("workload_args"), self.sources)

    @property
    def hang_bounds(self) -> HangBounds:
        """The hang and join bounds the workload is given (None of each: its own)."""
        return HangBounds(
            self.hang_after,
            self.first_step_hang_after,
            self.join_hang_after,
            self.pg_timeout,
            self.start_skew,
        )

    def words(self, found: Accelerator | None) -> tuple[str, str]:
        """The header's accelerator and workload in words; ``found``: the accelerator discovery found.

        The accelerator is ``--accelerator``'s, else ``found``, else decided later by the nodes found; the
        workload is the arguments given over its defaults on that accelerator.
        """
        accelerator = found if self.accelerator == "auto" else self.accelerator
        given = f"{shlex.join(self.workload_args)} over " if self.workload_args else ""
        return accelerator or "auto: decided by the nodes found", f"{given}{workload_defaults(accelerator)}"


def workload_defaults(accelerator: Accelerator | None) -> str:
    """The workload's defaults on ``accelerator``: ``its defaults on cpu (BERT-tiny hf, seq 64, ...)``."""
    if accelerator is None:
        return "its defaults for the accelerator found"
    from rollcall_workload.rank.cli import RUN_DEFAULTS

    d = RUN_DEFAULTS[DEVICE_OF[accelerator]]
    compiled = ", compiled" if d["compile"] else ""
    return (
        f"its defaults on {accelerator} (BERT-{d['model']} {d['impl']}, seq {d['seq_len']}, {d['epochs']} "
        f"epochs x {d['steps_per_epoch']} steps, {d['precision']}{compiled})"
    )


def check_bounds(
    bounds: HangBounds, args: Sequence[str], args_from: str, sources: Mapping[str, str] | None = None
) -> None:
    """An :class:`OptionError` naming both when ``args`` (from ``args_from``) set a bound otherwise."""
    conflicts = bounds.conflicts(args)
    if not conflicts:
        return
    flag, (mine, theirs) = next(iter(conflicts.items()))
    source = (sources or {}).get(flag.lstrip("-").replace("-", "_"), flag)
    raise OptionError(
        f"{flag} {format_duration(mine)} (from {source}) and {flag} {theirs:g} in the workload's arguments "
        f"(from {args_from}: {shlex.join(args)}) set one bound twice; give it once: {flag} DURATION, or "
        "leave it to the workload's arguments"
    )
