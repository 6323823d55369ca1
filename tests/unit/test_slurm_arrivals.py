"""Each node's way into the roll call's step on Slurm: the script's lines, the node's first line, the bound."""

import shlex
import subprocess
from pathlib import Path

from rollcall.backends import JobState
from rollcall.backends.slurm.arrivals import (
    STEP_BEGINS,
    Arrivals,
    start_bound_s,
    step_began,
    task_began,
    up,
)
from rollcall.backends.slurm.script import Settings, render, shared_token
from rollcall.jobspec import HangBounds, JobSpec
from tests.unit.test_slurm import RUNNING, ScriptedSlurm, launch

OUT = Path("/shared/artifacts/test_x/slurm")
IMAGE = "nvcr.io#nvidia/pytorch:24.01-py3"


def spec(**kw):
    base = {"name": "two-nodes", "nodes": 2, "procs_per_node": 1, "accelerator": "cpu"}
    return JobSpec(**{**base, **kw})


def test_the_start_bound_is_half_the_job_timeout_and_never_less_than_the_start_skew():
    assert start_bound_s(spec(job_timeout_s=1800)) == 900
    skewed = spec(job_timeout_s=100, hang_bounds=HangBounds(start_skew_s=70))
    assert start_bound_s(skewed) == 70
    assert start_bound_s(spec(job_timeout_s=100)) == 120  # S = 2 J = 120 s by default


def test_the_script_says_each_node_up_and_when_the_roll_calls_step_begins(tmp_path):
    script = render(spec(), Settings(container_image=IMAGE), tmp_path)
    joined = script.replace("\\\n", " ")
    first = next(x for x in joined.splitlines() if "shared-storage" in x)
    words = shlex.split(first)
    argv = words[words.index("bash") : words.index("||")]
    token_file, token = shared_token(spec(), tmp_path)
    token_file.write_text(f"{token}\n")
    node = {"SLURMD_NODENAME": "rc2", "SLURM_NODEID": "1", "PATH": "/usr/bin:/bin"}
    said = subprocess.run(argv, env=node, capture_output=True, text=True, check=True).stdout
    assert said == "rollcall: node rc2 (index 1) is up\n" and up(said) == {1}
    lines = joined.splitlines()
    begins = lines.index(f"echo {shlex.quote(STEP_BEGINS)}")
    assert lines.index(first) < begins < next(i for i, x in enumerate(lines) if x.startswith("exec srun"))
    echoed = subprocess.run(["bash", "-c", lines[begins]], capture_output=True, text=True, check=True)
    assert step_began(echoed.stdout) and not step_began(said)
    assert "once pyxis has imported the image there" in script
    assert "pyxis" not in render(spec(), Settings(), tmp_path)


def test_a_nodes_task_begins_at_its_first_whole_line_that_is_neither_slurms_nor_pyxiss():
    assert not task_began(b"")
    assert not task_began(b"rollcall monitor: no GPU")  # not yet a whole line
    assert not task_began(b"pyxis: importing docker image: img\nslurmstepd: error: x\n")
    assert task_began(b"pyxis: importing docker image: img\nrollcall monitor: no GPU\n")
    assert task_began(b"rollcall: node 1 starts no launcher\n")


def test_a_node_is_on_its_way_until_its_task_begins_and_late_only_past_the_bound_from_the_steps_start():
    arrivals = Arrivals(3, bound_s=100, image=IMAGE)
    arrivals.look("rollcall: node rc1 (index 0) is up\n", (), now=5)
    assert arrivals.on_the_way() == [0, 1, 2] and arrivals.step_since is None
    assert arrivals.overdue(now=10_000) is None  # the bound counts from the step's start only
    assert arrivals.where(["rc1", "rc2", "rc3"]) == (
        "nodes 1 (slurm node rc2), 2 (slurm node rc3) had not run the job's first step (Slurm's prolog, "
        "or the shared-storage check)"
    )
    batch = "".join(f"rollcall: node rc{i + 1} (index {i}) is up\n" for i in range(3)) + STEP_BEGINS + "\n"
    arrivals.look(batch, (), now=10)
    arrivals.look("", [0, 2], now=12)
    assert arrivals.on_the_way() == [1] and arrivals.step_since == 10
    assert arrivals.overdue(now=109.9, hosts=["rc1", "rc2", "rc3"]) is None
    late = arrivals.overdue(now=110, hosts=["rc1", "rc2", "rc3"])
    assert late is not None and late.nodes == (1,)
    assert late.line() == (
        f"node 1 (slurm node rc2) did not begin its task within 100s of the roll call's step (waited 100s): "
        f"pyxis still importing image {IMAGE} (or Slurm's task prolog still running); the start bound is "
        "max(--start-skew, --job-timeout / 2)"
    )
    assert arrivals.where(["rc1", "rc2", "rc3"]).startswith("node 1 (slurm node rc2) had not begun its task")
    arrivals.look("", [1], now=111)
    assert arrivals.on_the_way() == [] and arrivals.overdue(now=500) is None and arrivals.where() == ""


QUICK = HangBounds(start_skew_s=0.5)
BATCH = f"rollcall: node rc1 (index 0) is up\nrollcall: node rc2 (index 1) is up\n{STEP_BEGINS}\n"


def test_the_backend_tells_the_collector_which_nodes_are_on_their_way_and_fails_one_late_naming_it(tmp_path):
    slurm = ScriptedSlurm([RUNNING], batch_log=BATCH)
    job, collector = launch(tmp_path, slurm, job=spec(job_timeout_s=0.3, hang_bounds=QUICK))
    (tmp_path / "slurm" / "node-0.out").write_text("rollcall monitor: no GPU\n")
    status = job.wait(60)
    job.cleanup()
    collector.close()
    assert status.state is JobState.FAILED
    assert status.reason.startswith(
        "node 1 (slurm node rc2) did not begin its task within 0.5s of the roll call's step (waited "
    )
    assert "Slurm's task prolog or the node's monitor still starting" in status.reason
    assert status.reason.endswith("; slurm job 42 is cancelled")
    roll = collector.roll
    assert roll.arriving_now == frozenset({1})  # node 0's task had begun, node 1 still on its way
    assert roll.arriving[1].last - roll.arriving[1].first >= 0.5


def test_nodes_whose_tasks_began_pass_and_torchrun_waits_at_the_rendezvous_for_the_job_timeout(tmp_path):
    slurm = ScriptedSlurm([RUNNING, RUNNING, RUNNING, ("COMPLETED", "None", "rc[1-2]")], batch_log=BATCH)
    job, collector = launch(tmp_path, slurm, job=spec(job_timeout_s=3000, hang_bounds=QUICK))
    for i in range(2):
        (tmp_path / "slurm" / f"node-{i}.out").write_text("rollcall monitor: no GPU\n")
    assert job.wait(60).state is JobState.SUCCEEDED
    job.cleanup()
    collector.close()
    assert "--rdzv-conf=timeout=3000" in (tmp_path / "slurm" / "job.sbatch").read_text()


def test_a_job_timeout_names_the_nodes_still_on_their_way_and_what_they_waited_for(tmp_path):
    slurm = ScriptedSlurm([RUNNING], batch_log="rollcall: node rc1 (index 0) is up\n")
    job, collector = launch(tmp_path, slurm)
    status = job.wait(0.3)
    job.cleanup()
    collector.close()
    assert status.state is JobState.TIMED_OUT
    assert status.reason.endswith(
        "is cancelled; node 1 (slurm node rc2) had not run the job's first step (Slurm's prolog, or the "
        "shared-storage check)"
    )


def test_a_node_whose_task_did_not_begin_in_time_is_the_platforms():
    from rollcall.checks.blame import blame
    from rollcall.checks.job_state import JOB
    from rollcall.verdict import Owner, Problem

    late = Arrivals(2, bound_s=10, image=IMAGE)
    late.look(STEP_BEGINS, [0], now=0)
    line = late.overdue(now=10, hosts=["rc1", "rc2"]).line()
    assert blame(Problem(JOB, f"job failed: {line}")).owner is Owner.PLATFORM
