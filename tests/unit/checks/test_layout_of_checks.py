"""Every check of the judge is a named predicate in a module of its own, with its own tests that call it.

For each check of :data:`rollcall.judge.CHECKS`: ``rollcall.checks.<name>`` defines it, as the one public
predicate over :class:`~rollcall.checks.runview.RunView` of that module (its ``__all__`` names it), and
``tests/unit/checks/test_<name>.py`` imports it from there and calls it. No module of ``rollcall.checks`` but
:mod:`~rollcall.checks.runview` and :mod:`~rollcall.checks.blame` lacks a check (``docs/architecture.md``,
"Where each failure is detected").
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import rollcall.checks
from rollcall.checks.runview import RunView
from rollcall.judge import CHECKS

TESTS = Path(__file__).parent
ROOT = TESTS.parents[2]
NOT_CHECKS = {"runview", "blame"}  # what every check reads, and whose each problem is
NAMES = [c.__name__ for c in CHECKS]


def _is_predicate(obj: object) -> bool:
    """A function of one parameter, the run as the checks see it."""
    if not inspect.isfunction(obj):
        return False
    params = list(inspect.signature(obj).parameters.values())
    hints = typing.get_type_hints(obj)
    return len(params) == 1 and hints.get(params[0].name) is RunView


def test_the_judge_lists_each_check_once():
    twice = sorted({n for n in NAMES if NAMES.count(n) > 1})
    assert NAMES and twice == [], f"judge.CHECKS lists more than once: {twice}"


def test_each_check_is_defined_in_the_module_named_after_it():
    misplaced = {c.__name__: c.__module__ for c in CHECKS if c.__module__ != f"rollcall.checks.{c.__name__}"}
    assert misplaced == {}, f"checks not defined in rollcall.checks.<their name>: {misplaced}"


def test_each_checks_module_has_it_as_its_one_public_predicate():
    offenders = []
    for check in CHECKS:
        module = importlib.import_module(f"rollcall.checks.{check.__name__}")
        exported = getattr(module, "__all__", None)
        if exported is None or check.__name__ not in exported:
            offenders.append(f"{module.__name__}: __all__ does not name {check.__name__} ({exported})")
        predicates = sorted(
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and getattr(obj, "__module__", None) == module.__name__
            and _is_predicate(obj)
        )
        if predicates != [check.__name__]:
            offenders.append(
                f"{module.__name__}: public predicates {predicates}, expected [{check.__name__!r}]"
            )
    assert offenders == [], "\n".join(offenders)


def test_every_module_of_checks_but_facts_and_blame_holds_a_check_of_the_judge():
    modules = {m.name for m in pkgutil.iter_modules(rollcall.checks.__path__)}
    assert modules >= NOT_CHECKS, modules
    orphans = sorted(modules - NOT_CHECKS - set(NAMES))
    assert orphans == [], f"modules of rollcall.checks with no check in judge.CHECKS: {orphans}"
    unlisted = sorted(set(NAMES) - modules)
    assert unlisted == [], f"checks without a module of their own: {unlisted}"


def _calls_it_directly(path: Path, name: str) -> str | None:
    """Why ``path`` does not import the predicate ``name`` from its module and call it; None when it does."""
    tree = ast.parse(path.read_text(), str(path))
    local = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == f"rollcall.checks.{name}"
        for alias in node.names
        if alias.name == name
    }
    if not local:
        return f"{path.name} does not import {name} from rollcall.checks.{name}"
    called = any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in local
        for node in ast.walk(tree)
    )
    return None if called else f"{path.name} imports {name} and never calls it"


def test_each_check_has_its_own_tests_that_call_its_predicate():
    offenders = []
    for name in NAMES:
        path = TESTS / f"test_{name}.py"
        if not path.is_file():
            offenders.append(f"{path.relative_to(ROOT)} is missing")
            continue
        why = _calls_it_directly(path, name)
        if why is not None:
            offenders.append(why)
    assert offenders == [], "\n".join(offenders)


def test_every_test_file_here_is_a_checks_own_or_this_one():
    files = {p.stem.removeprefix("test_") for p in TESTS.glob("test_*.py")}
    strays = sorted(files - set(NAMES) - {"layout_of_checks"})
    assert strays == [], f"tests/unit/checks/ files for no check of judge.CHECKS: {strays}"


def test_the_architecture_names_each_check_its_tests_and_this_test():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where each failure is detected", 1)[1].split("\n## ", 1)[0]
    assert (
        "tests/unit/checks/test_<check>.py" in section
        and "tests/unit/checks/test_layout_of_checks.py" in section
    )
    rows = {line.split("|")[2].strip().strip("`") for line in section.splitlines() if line.count("|") >= 4}
    unnamed = sorted(set(NAMES) - rows)
    assert unnamed == [], f"checks docs/architecture.md does not list: {unnamed}"
