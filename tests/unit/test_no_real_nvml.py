"""No unit test's node monitor loads the real NVML: on a GPU runner, an NVML event would reach the test.

Every unit test that starts the monitor (a command naming ``rollcall_workload.node.monitor``, run by
``subprocess``) gives it :func:`tests.unit.monitors.monitor_env`, whose ``pynvml`` comes first on its path;
the monitor started so loads that one and says its GPU events are off, with that module's words.
"""

from __future__ import annotations

import ast
import runpy
import subprocess
import sys
from pathlib import Path

from rollcall.jobspec import MONITOR_MODULE
from tests.unit.monitors import NO_NVML, monitor_env

UNIT = Path(__file__).resolve().parent
RUNS = frozenset({"run", "Popen", "call", "check_call", "check_output"})


def _names_monitor(node: ast.AST) -> bool:
    """Whether ``node`` is a command literal that holds the monitor's module."""
    return isinstance(node, ast.List | ast.Tuple) and any(
        (isinstance(e, ast.Constant) and e.value == MONITOR_MODULE)
        or (isinstance(e, ast.Name) and e.id == "MONITOR_MODULE")
        for e in node.elts
    )


def _is_monitor_env(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "monitor_env"


def monitor_runs(source: str) -> list[tuple[int, bool]]:
    """Each ``subprocess`` call of ``source`` that starts the monitor: its line, and whether its environment
    is :func:`~tests.unit.monitors.monitor_env`'s (given there, or a name a test function assigned it to)."""
    found = []
    for function in ast.parse(source).body:
        if not isinstance(function, ast.FunctionDef):
            continue
        commands, envs = set(), set()
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                if _names_monitor(node.value):
                    commands.add(node.targets[0].id)
                if _is_monitor_env(node.value):
                    envs.add(node.targets[0].id)
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in RUNS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
                and node.args
            ):
                continue
            command = node.args[0]
            if not (_names_monitor(command) or (isinstance(command, ast.Name) and command.id in commands)):
                continue
            env = next((k.value for k in node.keywords if k.arg == "env"), None)
            found.append(
                (node.lineno, _is_monitor_env(env) or (isinstance(env, ast.Name) and env.id in envs))
            )
    return found


def test_every_unit_test_that_starts_a_monitor_gives_it_the_tests_pynvml():
    runs = {
        f"{path.relative_to(UNIT)}:{line}": ok
        for path in sorted(UNIT.rglob("*.py"))
        for line, ok in monitor_runs(path.read_text())
    }
    assert len(runs) >= 5, f"the scan finds the monitors test_monitor.py and test_gpu_events.py start: {runs}"
    real = sorted(where for where, ok in runs.items() if not ok)
    assert real == [], f"these monitors would load the real pynvml: give them env=monitor_env(...): {real}"


def test_the_scan_names_a_monitor_started_with_the_path_alone():
    source = """
def test_one(tmp_path):
    cmd = [sys.executable, "-m", "rollcall_workload.node.monitor", "--dir", str(tmp_path)]
    subprocess.run(cmd, env={**os.environ, "PYTHONPATH": SRC})
    subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, "PYTHONPATH": SRC})  # no monitor
    env = monitor_env(NODE_NAME="n")
    with subprocess.Popen(cmd, env=env):
        pass

def test_two():
    subprocess.run([sys.executable, "-m", MONITOR_MODULE], env=monitor_env())
    subprocess.run([sys.executable, "-m", MONITOR_MODULE])
"""
    assert monitor_runs(source) == [(4, False), (7, True), (11, True), (12, False)]


def pynvml_said() -> str:
    """What the tests' ``pynvml`` says of NVML (its ``SAID``), read from its file: we import no pynvml."""
    return str(runpy.run_path(str(NO_NVML / "pynvml.py"))["SAID"])


def test_a_monitor_given_monitor_env_loads_the_tests_pynvml_and_says_its_gpu_events_are_off(tmp_path):
    loaded = subprocess.run(
        [sys.executable, "-c", "import pynvml; print(pynvml.__file__)"],
        env=monitor_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(loaded.stdout.strip()) == NO_NVML / "pynvml.py"
    cmd = [
        sys.executable,
        "-m",
        "rollcall_workload.node.monitor",
        "--dir",
        str(tmp_path),
        "--",
        sys.executable,
        "-c",
        "pass",
    ]
    done = subprocess.run(cmd, env=monitor_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    said = f"rollcall monitor: GPU events off: no NVML: NVMLError_DriverNotLoaded: {pynvml_said()}"
    assert said in done.stderr, done.stderr
