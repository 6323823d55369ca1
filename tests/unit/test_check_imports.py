"""No module of src/rollcall outside the checks and the judge imports a single check's module.

The runner, the isolation probe, the release gate and the reports read the checks' declarations
(:data:`rollcall.judge.CHECKS`) and the few kinds :mod:`rollcall.checks` exports; a check's module is the
judge's (:data:`rollcall.judge.ORDER` names it) and its package's alone. ``checks.runview`` and
``checks.blame`` are shared parts, not checks. Every import counts, lazy ones too (:mod:`.test_imports`).
"""

from pathlib import Path

from rollcall.judge import ORDER
from tests.unit.test_imports import PACKAGE, graph, imports, module_name

#: The modules that may import a single check's module: its package and the judge.
MAY = ("rollcall.checks", "rollcall.judge")
SINGLE = {f"rollcall.checks.{name}" for name in ORDER}


def single_check_imports(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module outside :data:`MAY` that imports a single check's module, and which."""
    return {
        module: sorted(imported & SINGLE)
        for module, imported in sorted(edges.items())
        if imported & SINGLE and not any(module == m or module.startswith(m + ".") for m in MAY)
    }


def test_no_module_outside_the_checks_and_the_judge_imports_a_single_check():
    found = single_check_imports(graph())
    assert found == {}, f"import these from rollcall.checks or read rollcall.judge.CHECKS: {found}"


def test_the_finder_sees_a_single_checks_import_anywhere_in_a_module(tmp_path: Path):
    source = tmp_path / "runner.py"
    source.write_text(
        "from rollcall.checks import WAITING\n"
        "from rollcall.checks.runview import RunView\n"
        "def f():\n"
        "    from rollcall.checks.hangs import HUNG\n"
        "    from rollcall.checks import stragglers\n"
    )
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    edges = {"rollcall.runner": imports(source, modules), "rollcall.checks.silent": {"rollcall.checks.hangs"}}
    assert single_check_imports(edges) == {
        "rollcall.runner": ["rollcall.checks.hangs", "rollcall.checks.stragglers"]
    }
