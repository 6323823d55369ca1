"""The slurm backend's pure parts: the sbatch script, Slurm's records, srun's errors and discovery."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from rollcall.backends import DiscoveryError, JobState
from rollcall.backends.slurm.script import (
    UNSHARED_EXIT,
    Settings,
    asks_exclusive,
    render,
    shared_token,
    time_limit,
    unseen,
)
from rollcall.backends.slurm.state import (
    STUCK_REASONS,
    JobInfo,
    Partition,
    SlurmError,
    SlurmNode,
    discover,
    gres_gpus,
    parse_record,
    srun_errors,
)
from rollcall.cli import main
from rollcall.jobspec import CacheVolume, JobSpec
from rollcall.options import OptionError, resolve
from rollcall.options.slurm import SET_BY_ROLLCALL

OUT = Path("/shared/artifacts/test_x/slurm")
# Lines as Slurm 22.05's scontrol prints them (one record per line, -o).
JOB = (
    "JobId=7 JobName=crash-1a2b3c UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
    "Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode={exit} RunTime=00:00:01 TimeLimit=00:02:00 NodeList={nodes} "
    "BatchHost=rc1 NumNodes=2 Command=/shared/artifacts/test x/slurm/job.sbatch WorkDir=/shared "
    "StdOut=/shared/artifacts/test_x/slurm/batch.out Power="
)
NODE = (
    "NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=96 CPULoad=9.80 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} NodeAddr=10.0.0.{n} NodeHostName={name} "
    "Version=22.05.8 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=6026 AllocMem=0 Sockets=1 "
    "State={state} ThreadsPerCore=1 Partitions={parts}  BootTime=2026-12-01T07:30:25 CfgTRES=cpu=1{reason}"
)
PARTITION = "PartitionName={name} AllowGroups=ALL Default={default} MaxNodes=UNLIMITED Nodes=rc[1-2] State={state} TotalCPUs=2"


def spec(**kw):
    base = {"name": "two-nodes", "nodes": 2, "procs_per_node": 1, "accelerator": "cpu"}
    return JobSpec(**{**base, **kw})


def directives(script):
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def srun_command(script):
    """The command each node's task runs: the argument of ``bash -c`` on the srun line."""
    joined = script.replace("\\\n", " ")
    line = next(x for x in joined.splitlines() if x.startswith("exec srun "))
    words = shlex.split(line)
    return words[words.index("-c") + 1]


def test_cpu_script_asks_for_one_task_per_node_and_exports_nothing_of_the_caller():
    script = render(spec(workload_args=("--epochs", "1")), Settings(), OUT)
    d = directives(script)
    assert "--nodes=2" in d and "--ntasks-per-node=1" in d and "--export=NONE" in d
    assert "--exclusive" in d and "--mem=0" in d
    assert asks_exclusive(script)  # the job has its nodes, every GPU of them, to itself
    assert "--no-requeue" in d  # a node failure fails the roll call; it is not silently run again
    assert f"--output={OUT}/batch.out" in d
    assert not any(x.startswith(("--gpus", "--partition", "--account")) for x in d)
    assert f"--output={OUT}/node-%n.out" in script
    assert "--export=ALL --kill-on-bad-exit=1" in script  # the step gets the script's (clean) environment
    assert "NCCL_" not in script and "FI_" not in script
    assert "OMP_NUM_THREADS=$(( SLURM_CPUS_ON_NODE / 1" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_nvidia_script_gives_each_task_the_nodes_gpus_and_pyxis_runs_the_image():
    settings = Settings(
        partition="gpu,gpu-spot", account="ml", container_image="nvcr.io#nvidia/pytorch:24.01-py3"
    )
    script = render(spec(nodes=4, procs_per_node=8, accelerator="nvidia"), settings, OUT)
    d = directives(script)
    assert "--gpus-per-task=8" in d and "--partition=gpu,gpu-spot" in d and "--account=ml" in d
    assert "--container-image='nvcr.io#nvidia/pytorch:24.01-py3'" in script
    command = srun_command(script)
    assert command.startswith("exec python3 -m rollcall_workload.node.monitor --dir /tmp/rollcall-monitor-")
    assert " -- torchrun " in command and "/workspace/train.py --device cuda" in command
    assert "--container-workdir=/workspace" in script  # the monitor's python -m finds the package there
    assert "OMP_NUM_THREADS" not in script


def test_the_compile_cache_is_the_nodes_directory_itself_or_mounted_into_the_image():
    cache = CacheVolume("host", "/shared/compile")
    bare = srun_command(render(spec(compile_cache=cache), Settings(), OUT))
    assert "--compile-cache /shared/compile" in bare and "--container-mounts" not in bare
    image = Settings(container_image="nvcr.io#nvidia/pytorch:24.01-py3")
    script = render(spec(compile_cache=cache, accelerator="nvidia"), image, OUT)
    assert "--container-mounts=/shared/compile:/var/cache/rollcall-compile-cache" in script
    assert "--compile-cache /var/cache/rollcall-compile-cache" in srun_command(script)
    assert "--container-mounts" not in render(spec(accelerator="nvidia"), image, OUT)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_time_limit_is_the_job_timeout_plus_the_margin():
    script = render(spec(job_timeout_s=90.5), Settings(margin_s=60), OUT)
    assert "--time=0-00:02:31" in directives(script)
    assert time_limit(0.2) == "0-00:00:01"
    assert time_limit(2 * 86400 + 3661) == "2-01:01:01"


def test_each_node_runs_torchrun_with_slurms_node_count_rank_and_the_first_hosts_address():
    script = render(spec(env={"ODD": "a b'c $HOME"}), Settings(), OUT)
    command = srun_command(script).replace("exec ", "printf '%s\\n' ", 1)
    env = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "20042"}
    argv = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, check=True)
    args = argv.stdout.splitlines()
    assert {"--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.7", "--master-port=20042"} <= set(args)
    assert "--nproc-per-node=1" in args and args[-2:] == ["--device", "cpu"]
    # the batch script's own exports, run by bash, give back the values exactly
    exports = "\n".join(x for x in script.splitlines() if x.startswith("export ") and "$((" not in x)
    shown = subprocess.run(
        ["bash", "-c", exports + '\nprintf "%s" "$ODD"'], env={}, capture_output=True, text=True, check=True
    )
    assert shown.stdout == "a b'c $HOME"
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${rank}]:'" in script


def test_each_node_runs_its_torchrun_behind_its_monitor_reading_a_directory_of_its_own():
    script = render(spec(), Settings(python=("/opt/py/bin/python",), pythonpath="/opt/src"), OUT)
    command = srun_command(script).replace("exec ", "printf '%s\\n' ", 1)
    for node in ("0", "1"):
        env = {"SLURM_NNODES": "2", "SLURM_NODEID": node, "MASTER_ADDR": "h", "MASTER_PORT": "1"}
        argv = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, check=True)
        args = argv.stdout.splitlines()
        monitor = [
            "/opt/py/bin/python",
            "-m",
            "rollcall_workload.node.monitor",
            "--dir",
            f"{OUT}/node-{node}-monitor",
            f"--node-rank={node}",  # it watches its launcher at the launchers' rendezvous
            "--join-hang-after=60",
        ]
        assert args[: len(monitor) + 1] == [*monitor, "--"], args
        assert args[len(monitor) + 1 : len(monitor) + 4] == [*Settings().launcher]
    assert "export PYTHONPATH=/opt/src" in script  # the nodes import the workload the suite imported
    mine = render(spec(env={"PYTHONPATH": "/mine"}), Settings(pythonpath="/opt/src"), OUT)
    assert "export PYTHONPATH=/mine" in mine and "/opt/src" not in mine
    image = Settings(container_image="nvcr.io#nvidia/pytorch:24.01-py3")
    command = srun_command(render(spec(), image, OUT)).replace("exec ", "printf '%s\\n' ", 1)
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_NODEID": "1",
        "SLURM_NNODES": "2",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "1",
    }
    argv = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, check=True)
    assert "/tmp/rollcall-monitor-77/node-1-monitor" in argv.stdout.splitlines()  # no other job's files there


def test_the_monitor_waits_for_the_launchers_in_steps_of_the_ranks_own_join_bound():
    def monitor_args(*workload_args: str) -> list[str]:
        argv = spec(workload_args=workload_args).node_command(
            monitor_dir="/m", python=("py",), node_rank="3", master_addr="h"
        )
        return argv[: argv.index("--")]

    assert monitor_args() == ["py", "-m", "rollcall_workload.node.monitor", "--dir", "/m", "--node-rank=3",
                              "--join-hang-after=60"]  # fmt: skip
    assert monitor_args("--join-hang-after", "12.5")[-1] == "--join-hang-after=12.5"
    assert monitor_args("--join-hang-after=7", "--hang-after", "5")[-1] == "--join-hang-after=7"


def test_the_master_is_the_first_host_of_the_allocation():
    script = render(spec(), Settings(), OUT)
    assert 'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert "export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 12000 ))" in script


def test_an_artifacts_path_that_sbatch_lines_cannot_carry_is_refused():
    with pytest.raises(ValueError, match="--artifacts-dir"):
        render(spec(), Settings(), Path("/tmp/with space"))


def test_records_split_on_keys_and_keep_values_with_spaces():
    r = parse_record(JOB.format(state="RUNNING", reason="None", exit="0:0", nodes="rc[1-2]"))
    assert r["Command"] == "/shared/artifacts/test x/slurm/job.sbatch"
    assert r["Power"] == "" and r["NodeList"] == "rc[1-2]"


@pytest.mark.parametrize(
    ("state", "reason", "ended", "stuck"),
    [
        ("PENDING", "Priority", None, False),
        ("PENDING", "Resources", None, False),
        ("PENDING", "PartitionDown", None, True),
        ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:rc2", None, True),
        ("PENDING", "QOSMaxNodePerJobLimit", None, True),
        ("PENDING", "QOSGrpNodeLimit", None, False),
        ("RUNNING", "None", None, False),
        ("COMPLETING", "None", None, False),
        ("COMPLETED", "None", JobState.SUCCEEDED, False),
        ("FAILED", "NonZeroExitCode", JobState.FAILED, False),
        ("NODE_FAIL", "None", JobState.FAILED, False),
        ("OUT_OF_MEMORY", "OutOfMemory", JobState.FAILED, False),
        ("TIMEOUT", "TimeLimit", JobState.TIMED_OUT, False),
        ("CANCELLED+", "None", JobState.FAILED, False),
    ],
)
def test_job_states_and_pending_reasons(state, reason, ended, stuck):
    info = JobInfo.parse(JOB.format(state=state, reason=reason, exit="1:0", nodes="(null)"))
    assert (info.ended, info.stuck) == (ended, stuck)
    assert info.nodes == "" and info.job_id == "7"


def test_the_documented_stuck_reasons_include_the_issues_examples():
    assert {"ReqNodeNotAvail", "PartitionConfig"} <= STUCK_REASONS


def test_a_line_that_is_not_a_job_is_an_error():
    with pytest.raises(RuntimeError, match="not a job record"):
        JobInfo.parse("slurm_load_jobs error: Invalid job id specified")


def test_srun_errors_name_node_and_task():
    text = (
        "rollcall: job 3 on rc[1-2]\n"
        "srun: error: rc2: task 1: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=3.0\n"
        "srun: error: rc1: tasks 0,2-3: Terminated\n"
    )
    assert srun_errors(text) == [
        "node rc2 (task 1): Exited with exit code 1",
        "node rc1 (task 0,2-3): Terminated",
    ]


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("(null)", 0), ("gpu:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,gpu:v100:2", 6), ("gpu", 1)],
)
def test_gres_gpus(gres, gpus):
    assert gres_gpus(gres) == gpus


def node(name, n, state="IDLE", gres="gpu:h100:8(S:0-1)", parts="gpu", reason=""):
    return SlurmNode.parse(
        NODE.format(
            name=name, n=n, state=state, gres=gres, parts=parts, reason=f" Reason={reason}" if reason else ""
        )
    )


PARTS = [
    Partition.parse(PARTITION.format(name="gpu", default="YES", state="UP")),
    Partition.parse(PARTITION.format(name="held", default="NO", state="DOWN")),
]


def test_discovery_takes_the_default_partitions_usable_nodes_and_says_why_others_are_not():
    nodes = [
        node("a", 1),
        node("b", 2, state="MIXED"),
        node("c", 3, state="IDLE+DRAIN", reason="bad dimm [root@2026-12-01T07:47:57]"),
        node("d", 4, state="DOWN*", reason="Not responding"),
        node("e", 5, gres="gpu:h100:4"),
        node("f", 6, parts="cpu"),
    ]
    placement, usable, rejected = discover(nodes, PARTS, want=2, accelerator="auto")
    assert (placement.accelerator, placement.procs_per_node) == ("nvidia", 8)
    assert usable == ["a", "b"]
    assert rejected == {
        "c": "state IDLE+DRAIN (bad dimm [root@2026-12-01T07:47:57])",
        "d": "state DOWN* (Not responding)",
        "e": "only 4 gpu GRES, 8 needed",
    }
    assert "1 idle" in placement.description
    with pytest.raises(DiscoveryError) as exc:
        discover(nodes, PARTS, want=3, accelerator="nvidia", procs_per_node=8)
    message = str(exc.value)
    assert "need 3 usable node(s), found 2 for nvidia" in message
    assert "state DOWN* (Not responding): d (1)" in message and "only 4 gpu GRES, 8 needed: e (1)" in message


def test_discovery_on_cpu_and_with_fewer_gpus_per_node():
    nodes = [node("a", 1, gres="(null)"), node("b", 2, gres="(null)")]
    placement, usable, _ = discover(nodes, PARTS, want=2, accelerator="cpu", procs_per_node=2)
    assert (placement.accelerator, placement.procs_per_node, usable) == ("cpu", 2, ["a", "b"])
    with pytest.raises(DiscoveryError, match="no usable node has GPU GRES"):
        discover(nodes, PARTS, want=2, accelerator="auto")
    placement, _, _ = discover(
        [node("a", 1), node("b", 2, gres="gpu:4")], PARTS, want=2, accelerator="nvidia"
    )
    assert placement.procs_per_node == 4  # what both nodes offer


def test_discovery_refuses_a_partition_that_is_down_or_unknown():
    with pytest.raises(DiscoveryError, match="partition held is DOWN"):
        discover([node("a", 1, parts="held")], PARTS, want=1, partition="held")
    with pytest.raises(DiscoveryError, match=re.escape("partition 'nope' does not exist (have: gpu, held)")):
        discover([], PARTS, want=1, partition="nope")


def test_render_prints_the_script_from_the_suites_options(capsys, monkeypatch):
    monkeypatch.setenv("ROLLCALL_SLURM_ACCOUNT", "ml")
    args = [
        "render",
        "--backend",
        "slurm",
        "--accelerator",
        "nvidia",
        "--procs-per-node",
        "8",
        "--nodes",
        "4",
    ]
    assert main([*args, "--slurm-partition", "gpu", "--job-timeout", "600"]) == 0
    d = directives(capsys.readouterr().out)
    assert {"--nodes=4", "--gpus-per-task=8", "--partition=gpu", "--account=ml", "--time=0-00:11:00"} <= set(
        d
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--backend", "slurm"], "--accelerator auto needs discovery"),
        (["--backend", "local", "--accelerator", "cpu"], "use --backend kubernetes or slurm"),
        (["--backend", "slurm", "--accelerator", "nvidia"], "pass --procs-per-node"),
        (
            ["--backend", "slurm", "--accelerator", "cpu", "--slurm-partition", "a b"],
            "invalid --slurm-partition",
        ),
        (["--backend", "slurm", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_render_usage_errors_exit_4_naming_the_fix(capsys, args, said):
    assert main(["render", *args]) == 4
    assert said in capsys.readouterr().err


class ScriptedSlurm:
    """Answers the backend's Slurm commands from a list of job states, recording every command.

    ``batch_log`` None: the job wrote no batch log where the suite reads it.
    """

    def __init__(self, states, batch_log="", exit_code="1:0", nodes=None, config="SlurmdTimeout = 60 sec"):
        self.states = list(states)
        self.batch_log = batch_log
        self.exit_code = exit_code
        self.calls = []
        self.cancelled = False
        #: The job's nodes' states, look by look (the last one stays): {name: state}, healthy by default.
        self.nodes = list(nodes or [{"rc1": "ALLOCATED", "rc2": "ALLOCATED"}])
        self.config = config

    def __call__(self, argv, timeout_s):
        self.calls.append(list(argv))
        if argv[0] == "sbatch":
            if self.batch_log is not None:
                Path(argv[-1]).with_name("batch.out").write_text(self.batch_log)
            return "42\n"
        if argv[:3] == ["scontrol", "show", "job"]:
            now = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            if now is None:
                raise SlurmError("scontrol show job exited 1: Socket timed out on send/recv operation")
            state, reason, nodes = now
            return JOB.format(state=state, reason=reason, exit=self.exit_code, nodes=nodes) + "\n"
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return "rc1\nrc2\n"
        if argv[:3] == ["scontrol", "show", "config"]:
            return f"Configuration data as of 2026-12-01T07:30:25\n{self.config}\n"
        if argv[:4] == ["scontrol", "show", "node", "-o"]:
            now = self.nodes.pop(0) if len(self.nodes) > 1 else self.nodes[0]
            lines = []
            for i, (name, said) in enumerate(now.items()):
                state, reason = said if isinstance(said, tuple) else (said, "")
                why = f" Reason={reason}" if reason else ""
                lines.append(
                    NODE.format(name=name, n=i, state=state, gres="(null)", parts="rollcall", reason=why)
                )
            return "\n".join(lines) + "\n"
        if argv[0] == "scancel":
            self.cancelled = True
            return ""
        if argv[0] == "squeue":
            return "" if self.cancelled else "42\n"
        raise AssertionError(f"unexpected command {argv}")


def launch(tmp_path, slurm, job=None, **backend):
    from rollcall.backends.slurm.backend import SlurmBackend
    from rollcall.collect import Collector

    collector = Collector(tmp_path)
    b = SlurmBackend(run=slurm, poll_s=0.01, **backend)
    return b.launch(job or spec(), collector), collector


RUNNING = ("RUNNING", "None", "rc[1-2]")


@pytest.mark.parametrize(
    ("script", "exclusive"),
    [
        ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --exclusive\nsrun x\n", True),
        ("#!/bin/bash\n#SBATCH --nodes=2\nsrun x\n", False),
        ("#!/bin/bash\n#SBATCH --exclusive=user\nsrun x\n", False),  # shared with the user's other jobs
        ("#!/bin/bash\n#SBATCH --nodes=2\nsrun x\n#SBATCH --exclusive\n", False),  # past the first command
        ("#!/bin/bash\n# SBATCH --exclusive\nsrun x\n", False),  # a comment, no directive
    ],
)
def test_the_job_owns_its_nodes_where_its_script_asks_exclusive_among_its_directives(script, exclusive):
    assert asks_exclusive(script) is exclusive


@pytest.mark.parametrize(
    ("end", "state", "words"),
    [
        ("NODE_FAIL", JobState.FAILED, "ended NODE_FAIL"),
        ("OUT_OF_MEMORY", JobState.FAILED, "ended OUT_OF_MEMORY"),
        ("TIMEOUT", JobState.TIMED_OUT, "ended TIMEOUT"),
    ],
)
def test_an_end_state_ends_the_wait_naming_srun_s_node_and_the_node_indexes(tmp_path, end, state, words):
    slurm = ScriptedSlurm(
        [("PENDING", "Priority", "(null)"), RUNNING, (end, "None", "rc[1-2]")],
        batch_log="srun: error: rc2: task 1: Killed\n",
    )
    job, collector = launch(tmp_path, slurm)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is state and words in status.reason
    assert status.owns_nodes is True  # the script asked --exclusive
    assert "srun: node rc2 (task 1): Killed" in status.reason
    assert status.details[:2] == [
        "node 0 ran on slurm node rc1 (log rc1.log)",
        "node 1 ran on slurm node rc2 (log rc2.log)",
    ]
    assert ["scancel", "42"] in slurm.calls
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["rc1.log", "rc2.log"]


def test_a_clearable_pending_reason_waits_until_the_timeout_and_a_stuck_one_only_the_grace(tmp_path):
    job, _ = launch(tmp_path / "a", ScriptedSlurm([("PENDING", "Resources", "(null)")]), pending_grace_s=0.05)
    status = job.wait(0.3)
    assert status.state is JobState.TIMED_OUT and "was PENDING" in status.reason
    job, _ = launch(
        tmp_path / "b", ScriptedSlurm([("PENDING", "ReqNodeNotAvail", "(null)")]), pending_grace_s=0.05
    )
    status = job.wait(60)
    assert (
        status.state is JobState.FAILED
        and "with reason ReqNodeNotAvail, which waiting does not clear" in status.reason
    )


def test_cleanup_cancels_once_and_waits_until_squeue_no_longer_lists_the_job(tmp_path):
    slurm = ScriptedSlurm([RUNNING])
    job, _ = launch(tmp_path, slurm)
    job.cleanup()
    job.cleanup()
    assert [c for c in slurm.calls if c[0] == "scancel"] == [["scancel", "42"]]
    assert slurm.calls[-1][0] == "squeue"


def test_an_interrupted_submission_cancels_the_job_by_its_name(tmp_path):
    from rollcall.backends.slurm.backend import SlurmBackend
    from rollcall.collect import Collector

    calls = []

    def interrupted(argv, timeout_s):
        calls.append(list(argv))
        if argv[0] == "sbatch":
            raise KeyboardInterrupt
        return ""

    with pytest.raises(KeyboardInterrupt):
        SlurmBackend(run=interrupted).launch(spec(), Collector(tmp_path))
    assert calls[-1] == ["scancel", "--name", "two-nodes"]


def test_a_slurmctld_that_does_not_answer_for_a_moment_is_asked_again(tmp_path):
    slurm = ScriptedSlurm([RUNNING, None, None, ("COMPLETED", "None", "rc[1-2]")])
    job, collector = launch(tmp_path, slurm)
    assert job.wait(60).state is JobState.SUCCEEDED
    job.cleanup()
    collector.close()


def test_a_stop_reason_ends_the_wait_as_stopped_and_clean_up_cancels_the_job(tmp_path):
    slurm = ScriptedSlurm([RUNNING])
    job, collector = launch(tmp_path, slurm)
    asked = []

    def stop():
        asked.append(1)
        return "rank(s) 1 hung" if len(asked) >= 3 else None

    status = job.wait(60, stop=stop)
    job.cleanup()
    collector.close()
    assert status.state is JobState.STOPPED and status.reason.startswith("rank(s) 1 hung; slurm job 42")
    assert len(asked) == 3 and ["scancel", "42"] in slurm.calls


# -- placement options, --slurm-arg, the shared-storage step -------------------------------------------------

PLACED = Settings(
    qos="high",
    reservation="maint-7",
    constraint="[rack1|rack2]&ib",
    nodelist="rc[1-4],gpu7",
    exclude="rc3",
    sbatch_args=("--gres=gpu:8", "--comment=nightly|h100"),
)


def test_each_placement_option_and_each_slurm_arg_is_an_sbatch_directive():
    script = render(spec(), PLACED, OUT)
    d = directives(script)
    assert "--qos=high" in d and "--reservation=maint-7" in d
    assert "--constraint='[rack1|rack2]&ib'" in d  # sbatch reads quotes as the shell does: [rack1|rack2]&ib
    assert "--nodelist='rc[1-4],gpu7'" in d and "--exclude=rc3" in d
    assert d[-2:] == ["--gres=gpu:8", "'--comment=nightly|h100'"]  # each word as it is, after rollcall's own
    assert [shlex.split(x) for x in d[-2:]] == [["--gres=gpu:8"], ["--comment=nightly|h100"]]
    assert asks_exclusive(script)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_no_placement_option_no_directive():
    d = directives(render(spec(), Settings(), OUT))
    assert not any(
        x.startswith(("--qos", "--reservation", "--constraint", "--nodelist", "--exclude")) for x in d
    )


def test_the_options_reach_the_script():
    options = resolve(
        {
            "slurm_qos": "high",
            "slurm_reservation": "maint-7,maint-8",
            "slurm_constraint": "h100&ib",
            "slurm_nodelist": "gpu[01-04,07]",
            "slurm_exclude": "gpu03",
            "slurm_arg": ["--switches=1", "--cpus-per-task=8"],
        },
        {},
    )
    d = directives(render(spec(), Settings.from_options(options.slurm), OUT))
    assert {"--qos=high", "--reservation=maint-7,maint-8", "--constraint='h100&ib'"} <= set(d)
    assert {"--nodelist='gpu[01-04,07]'", "--exclude=gpu03"} <= set(d)
    assert d[-2:] == ["--switches=1", "--cpus-per-task=8"]
    from_env = resolve({}, {"ROLLCALL_SLURM_ARG": "--gres=gpu:8 '--comment=a|b'"})
    assert from_env.slurm.slurm_arg == ("--gres=gpu:8", "--comment=a|b")


def test_a_re_run_of_some_nodes_is_pinned_to_them_and_keeps_the_users_exclusions():
    d = directives(render(spec(nodes=1, machines=("rc2",)), PLACED, OUT))
    assert "--nodelist=rc2" in d and not any("rc[1-4]" in x for x in d)  # the re-run's nodes, not the user's
    assert {"--exclude=rc3", "--reservation=maint-7", "--qos=high", "--constraint='[rack1|rack2]&ib'"} <= set(
        d
    )


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("slurm_qos", "a,b", "one Slurm name"),
        ("slurm_qos", "hi gh", "one Slurm name"),
        ("slurm_reservation", "maint 7", "Slurm names"),
        ("slurm_constraint", "h100 & ib", "no spaces"),
        ("slurm_constraint", "h100;reboot", "Slurm feature expression"),
        ("slurm_constraint", "h100\n#SBATCH --qos=x", "Slurm feature expression"),
        ("slurm_constraint", "[rack1|rack2", "unbalanced"),
        ("slurm_constraint", "(a&b))", "unbalanced"),
        ("slurm_nodelist", "rc1 rc2", "Slurm hostlist"),
        ("slurm_nodelist", "rc[1-", "Slurm hostlist"),
        ("slurm_nodelist", "/etc/nodes", "Slurm hostlist"),
        ("slurm_exclude", "rc1,,rc2", "Slurm hostlist"),
        ("slurm_exclude", "$(reboot)", "Slurm hostlist"),
    ],
)
def test_a_bad_placement_value_is_refused_naming_the_option(name, value, said):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(OptionError) as exc:
        resolve({name: value}, {})
    message = str(exc.value)
    assert message.startswith(f"invalid {flag} value ") and said in message and f"; use {flag} " in message


#: Each option rollcall sets, as --slurm-arg would give it: its long form, and its short one where it has one.
SET_FORMS = [f"--{name}=1" for name in SET_BY_ROLLCALL] + [
    f"-{v.short}1" for v in SET_BY_ROLLCALL.values() if v.short
]


@pytest.mark.parametrize("arg", SET_FORMS)
def test_a_slurm_arg_that_rollcall_sets_is_refused_naming_what_to_use_instead(arg):
    with pytest.raises(OptionError) as exc:
        resolve({"slurm_arg": ["--gres=gpu:8", arg]}, {})
    message = str(exc.value)
    assert message.startswith("invalid --slurm-arg value ") and f": {arg}: " in message
    assert "is rollcall's to set; " in message


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("--qos=high", "--qos=high: --qos is rollcall's to set; use --slurm-qos"),
        ("-q", "-q: -q (--qos) is rollcall's to set; use --slurm-qos"),
        ("--reservation=r", "use --slurm-reservation"),
        ("-Cib", "-C (--constraint) is rollcall's to set; use --slurm-constraint"),
        ("-wrc1", "use --slurm-nodelist"),
        ("--exclude=rc1", "use --slurm-exclude"),
        ("--partition=gpu", "use --slurm-partition"),
        ("-Aml", "use --slurm-account"),
        ("-N4", "use --nodes"),
        ("--time=10", "use --job-timeout"),
        ("--chdir=/scratch", "use --artifacts-dir"),
        ("--exclusive=user", "--exclusive is rollcall's to set"),
        ("--part=gpu", "--part may abbreviate --partition, which rollcall sets; use --slurm-partition"),
        ("--ex", "--ex may abbreviate --exclusive or --export or --exclude, which rollcall sets"),
        ("gres=gpu:8", "is not an sbatch option: each starts with '-'"),
        ("--comment=a b", "cannot be an #SBATCH line"),
        ("--comment=a#b", "cannot be an #SBATCH line"),
        ("--comment='a'", "cannot be an #SBATCH line"),
    ],
)
def test_a_refused_slurm_arg_says_why_and_the_fix(arg, said):
    with pytest.raises(OptionError, match=re.escape(said)):
        resolve({"slurm_arg": [arg]}, {})


@pytest.mark.parametrize(
    "arg",
    [
        "--gres=gpu:8",
        "--switches=1",
        "--comment=x",
        "--licenses=fs:1",
        "--cpus-per-task=8",
        "-c8",
        "--dependency=afterok:41",
        "--gpus=8",  # sbatch's own option, not an abbreviation of --gpus-per-task
        "--signal=B:USR1@60",
    ],
)
def test_any_other_slurm_arg_passes_through_to_its_own_directive(arg):
    options = resolve({"slurm_arg": [arg]}, {})
    assert directives(render(spec(), Settings.from_options(options.slurm), OUT))[-1] == shlex.quote(arg)


def test_render_refuses_a_slurm_arg_rollcall_sets_with_exit_4(capsys):
    args = ["render", "--backend", "slurm", "--accelerator", "cpu", "--slurm-arg=--partition=gpu"]
    assert main(args) == 4
    err = capsys.readouterr().err
    assert "invalid --slurm-arg" in err and "use --slurm-partition" in err


def shared_check(script):
    """The batch script's first step: the argv of its ``bash -c`` on the node."""
    joined = script.replace("\\\n", " ")
    line = next(x for x in joined.splitlines() if x.startswith("srun ") and "shared-storage" in x)
    words = shlex.split(line)
    bash = words.index("bash")
    return words[bash : words.index("||")]


def test_the_first_step_has_every_node_read_the_token_the_suite_wrote(tmp_path):
    script = render(spec(), Settings(), tmp_path)
    first = script.index("srun --export=ALL --nodes=")
    assert first < script.index("exec srun")  # before the roll call's own step
    joined = script.replace("\\\n", " ")
    step = next(x for x in joined.splitlines() if "shared-storage" in x)
    assert '--nodes="$SLURM_NNODES" --ntasks-per-node=1 ' in step and step.endswith(" || exit $?")
    argv = shared_check(script)
    token_file, token = shared_token(spec(), tmp_path)
    assert argv[-3:] == [str(token_file), token, str(UNSHARED_EXIT)] and token == "two-nodes"
    node = {"SLURMD_NODENAME": "rc2", "SLURM_NODEID": "1", "PATH": "/usr/bin:/bin"}

    def on_node():
        return subprocess.run(argv, env=node, capture_output=True, text=True, check=False)

    unseen_here = on_node()  # no token written: the node does not see it
    assert unseen_here.returncode == UNSHARED_EXIT
    host = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    assert unseen(unseen_here.stdout) == [("rc2", host)]
    assert unseen_here.stdout == f"rollcall: node rc2 (host {host}) does not see {token_file}\n"
    token_file.write_text("another-job\n")  # a directory of the same path that is not the suite's
    assert on_node().returncode == UNSHARED_EXIT
    token_file.write_text(f"{token}\n")
    seen = on_node()
    assert (seen.returncode, seen.stdout) == (0, "rollcall: node rc2 (index 1) is up\n")


def test_launch_writes_the_token_before_sbatch(tmp_path):
    seen = []

    def slurm(argv, timeout_s):
        if argv[0] == "sbatch":
            token_file, _ = shared_token(spec(), Path(argv[-1]).parent)
            seen.append(token_file.read_text())
            return "42\n"
        return ""

    from rollcall.backends.slurm.backend import SlurmBackend
    from rollcall.collect import Collector

    SlurmBackend(run=slurm).launch(spec(), Collector(tmp_path))
    assert seen == ["two-nodes\n"]


def test_a_job_ended_by_its_first_step_names_the_nodes_that_do_not_see_the_artifacts_directory(tmp_path):
    said = (
        "rollcall: job 42 on rc[1-3], master rc1 (10.0.0.1:20042)\n"
        f"rollcall: node rc2 (host gpu-b) does not see {tmp_path}/slurm/shared-storage.token\n"
        f"rollcall: node rc3 (host rc3) does not see {tmp_path}/slurm/shared-storage.token\n"
        f"srun: error: rc2: task 1: Exited with exit code {UNSHARED_EXIT}\n"
    )
    slurm = ScriptedSlurm([RUNNING, ("FAILED", "NonZeroExitCode", "rc[1-2]")], said, f"{UNSHARED_EXIT}:0")
    job, collector = launch(tmp_path, slurm)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.FAILED
    assert status.reason == (
        f"the artifacts directory {tmp_path}/slurm is not on storage every node shares: node(s) rc2 (host "
        "gpu-b), rc3 do not see it; point --artifacts-dir at a shared file system (slurm job 42 ended at its "
        f"first step, exit code {UNSHARED_EXIT}:0)"
    )


def test_a_batch_host_that_could_not_write_the_batch_log_is_named_as_not_sharing_it(tmp_path):
    slurm = ScriptedSlurm([("FAILED", "JobLaunchFailure", "rc[1-2]")], batch_log=None, exit_code="0:53")
    job, collector = launch(tmp_path, slurm)
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.FAILED
    assert status.reason == (
        f"the artifacts directory {tmp_path}/slurm is likely not on storage every node shares: slurm job 42 "
        "failed to launch on rc1 (JobLaunchFailure), which wrote no batch log there; point --artifacts-dir "
        "at a shared file system"
    )
    other = ScriptedSlurm([("FAILED", "JobLaunchFailure", "rc[1-2]")], exit_code="0:53")  # its log is here
    job, collector = launch(tmp_path / "b", other)
    assert "ended FAILED (exit code 0:53, reason JobLaunchFailure)" in job.wait(60).reason
    job.cleanup()
    collector.close()
