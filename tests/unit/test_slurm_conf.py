"""``--backend slurm`` without a configured Slurm is a usage error before any Slurm command runs.

Slurm's commands are stood in for by scripts on ``PATH`` that record each call and the ``SLURM_CONF`` it
got: none may run when the configuration is refused, and each gets the checked file when it is not.
"""

from pathlib import Path

import pytest

from rollcall.backends.slurm import conf
from rollcall.backends.slurm.backend import SlurmBackend, SlurmCommands
from rollcall.options import OptionError

pytest_plugins = ["pytester"]

COMMANDS = ("scontrol", "sbatch", "squeue", "scancel", "sinfo", "srun")
ROLL_CALL = """
def test_roll_call(rollcall):
    raise AssertionError("a run started despite bad input")
"""


@pytest.fixture
def calls(tmp_path, monkeypatch) -> Path:
    """Every Slurm command on PATH records ``argv SLURM_CONF`` in the file returned, then prints SLURM_CONF."""
    bin_dir, record = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in COMMANDS:
        script = bin_dir / name
        script.write_text(
            f'#!/bin/sh\necho "{name} $* SLURM_CONF=$SLURM_CONF" >> {record}\necho "$SLURM_CONF"\n'
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(conf, "DEFAULT_CONF", tmp_path / "etc" / "slurm.conf")
    return record


def slurm_conf(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def usage_error(pytester: pytest.Pytester, calls: Path) -> str:
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest("-p", "no:cacheprovider", "--backend", "slurm")
    out, err = res.stdout.str(), res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, out + err
    assert "Traceback" not in out + err and "a run started" not in out
    assert not calls.exists(), f"a Slurm command ran: {calls.read_text()}"
    return err


def test_no_slurm_conf_anywhere_names_both_places(pytester, calls, tmp_path):
    err = usage_error(pytester, calls)
    assert (
        f"ERROR: --backend slurm: no Slurm configuration: SLURM_CONF is not set; the default "
        f"{tmp_path / 'etc' / 'slurm.conf'}: no such file (Slurm's commands would look their controller up in "
        f"DNS); set SLURM_CONF to the cluster's slurm.conf, or run on a host of the cluster that has "
        f"{tmp_path / 'etc' / 'slurm.conf'}"
    ) in err


def test_a_slurm_conf_variable_naming_no_file(pytester, calls, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "nowhere.conf"))
    err = usage_error(pytester, calls)
    assert (
        f"ERROR: --backend slurm: no Slurm configuration: SLURM_CONF={tmp_path / 'nowhere.conf'}: no such file"
        in err
    )


def test_a_slurm_conf_naming_no_controller(pytester, calls, monkeypatch, tmp_path):
    path = slurm_conf(
        tmp_path / "slurm.conf", "ClusterName=rc\n# SlurmctldHost=commented-out\nNodeName=rc1 CPUs=2\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(path))
    err = usage_error(pytester, calls)
    assert (
        f"ERROR: --backend slurm: SLURM_CONF={path}: names no controller (no SlurmctldHost or ControlMachine "
        "line); set SLURM_CONF"
    ) in err


def test_every_slurm_command_gets_the_checked_conf(calls, monkeypatch, tmp_path):
    path = slurm_conf(tmp_path / "etc" / "slurm.conf", "SlurmctldHost=ctl(127.0.0.1)\n")
    backend = SlurmBackend()  # finds the default file: SLURM_CONF is unset
    assert backend.run(["scontrol", "show", "nodes", "-o"], 10).strip() == str(path)
    assert calls.read_text() == f"scontrol show nodes -o SLURM_CONF={path}\n"
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "elsewhere.conf"))  # changed after the check: not read
    assert SlurmCommands(path)(["squeue", "-h"]).strip() == str(path)


def test_the_controller_lines_slurm_reads(tmp_path):
    slurm_conf(tmp_path / "ctl.conf", "slurmctldhost=backup\n")
    path = slurm_conf(
        tmp_path / "slurm.conf",
        "SlurmctldHost=ctl1(10.0.0.1)  # primary\nInclude ctl.conf\nControlMachine=old\nInclude missing.conf\n",
    )
    assert conf.controllers_of(path) == ("ctl1", "backup", "old")
    found = conf.find_conf({"SLURM_CONF": str(path)})
    assert (found.path, found.source, found.controllers) == (
        path,
        f"SLURM_CONF={path}",
        ("ctl1", "backup", "old"),
    )


def test_an_unreadable_slurm_conf(tmp_path):
    (tmp_path / "slurm.conf").mkdir()
    with pytest.raises(OptionError, match="no such file"):  # a directory is no slurm.conf
        conf.find_conf({"SLURM_CONF": str(tmp_path / "slurm.conf")})


def test_under_xdist_the_controller_refuses_it_before_any_worker_starts(
    pytester, calls, monkeypatch, tmp_path
):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "nowhere.conf"))
    pytester.makepyfile(test_roll=ROLL_CALL)
    res = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--backend", "slurm", timeout=120
    )
    out, err = res.stdout.str(), res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, out + err
    assert f"ERROR: --backend slurm: no Slurm configuration: SLURM_CONF={tmp_path / 'nowhere.conf'}" in err
    assert "INTERNALERROR" not in out + err and not calls.exists()


def test_a_slurm_conf_without_slurms_client_commands_is_a_usage_error(pytester, calls, monkeypatch, tmp_path):
    path = slurm_conf(tmp_path / "slurm.conf", "SlurmctldHost=ctl(127.0.0.1)\n")
    monkeypatch.setenv("SLURM_CONF", str(path))
    bin_dir = tmp_path / "bin"
    (bin_dir / "scontrol").unlink()
    (bin_dir / "scancel").unlink()
    monkeypatch.setenv("PATH", str(bin_dir))  # Slurm's client commands, two of them missing
    err = usage_error(pytester, calls)
    assert (
        f"ERROR: --backend slurm: {path} names a cluster, but Slurm's client commands scontrol, scancel are not "
        "on PATH: install them (Debian's slurm-client, or your site's Slurm module) or put them on PATH"
    ) in err
