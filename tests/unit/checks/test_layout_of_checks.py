"""A check is its module and its tests: declared once, every table of checks and kinds derived from that.

For each name of :data:`rollcall.judge.ORDER`: ``rollcall.checks.<name>`` declares the check once (its
``CHECK``, a :class:`~rollcall.checks.runview.Check`) over the one public predicate of that module, named
after it (and the predicate it judges a trial by, where it declares one); ``tests/unit/checks/test_<name>.py`` imports the predicate from there and calls it. No module of
``rollcall.checks`` but :mod:`~rollcall.checks.runview`, :mod:`~rollcall.checks.blame` and the docs'
generator (``__main__``) lacks a check. Every kind of problem is declared once, by one check or as one of the
kinds no check raises; ``docs/checks.md`` is what the declarations say.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import pytest

import rollcall.checks
from rollcall.checks.__main__ import OTHER_KINDS, REGENERATE, main, markdown
from rollcall.checks.runview import Check, RunView
from rollcall.judge import CHECKS, KINDS, LOG_CHECKS, ORDER, declared
from rollcall.verdict import Kind

TESTS = Path(__file__).parent
ROOT = TESTS.parents[2]
SRC = ROOT / "src" / "rollcall"
#: what every check reads, whose each problem is (and the table of errors it reads), the docs
NOT_CHECKS = {"runview", "blame", "error_texts", "__main__"}
NAMES = [c.name for c in CHECKS]


def _is_predicate(obj: object) -> bool:
    """A function of one parameter, the run as the checks see it."""
    if not inspect.isfunction(obj):
        return False
    params = list(inspect.signature(obj).parameters.values())
    hints = typing.get_type_hints(obj)
    return len(params) == 1 and hints.get(params[0].name) is RunView


def test_the_judge_orders_each_check_once_and_runs_them_in_that_order():
    twice = sorted({n for n in ORDER if ORDER.count(n) > 1})
    assert ORDER and twice == [], f"judge.ORDER lists more than once: {twice}"
    assert list(ORDER) == NAMES
    assert [c.name for c in LOG_CHECKS] == ["errors", "missing_events", "unexpected_ranks", "invalid_values"]


def test_a_module_that_declares_no_check_of_its_name_is_refused():
    with pytest.raises(TypeError, match=r"rollcall\.checks\.blame declares no CHECK named 'blame'"):
        declared("blame")


def test_each_check_is_declared_by_the_module_named_after_it_over_its_one_public_predicate():
    offenders = []
    for check in CHECKS:
        module = importlib.import_module(f"rollcall.checks.{check.name}")
        if module.CHECK is not check or check.predicate.__module__ != module.__name__:
            offenders.append(f"{module.__name__}: CHECK is not its own check over its own predicate")
        exported = getattr(module, "__all__", None)
        if exported is None or not {check.name, "CHECK"} <= set(exported):
            offenders.append(f"{module.__name__}: __all__ does not name {check.name} and CHECK ({exported})")
        predicates = sorted(
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and getattr(obj, "__module__", None) == module.__name__
            and _is_predicate(obj)
        )
        trial = check.in_trials_as
        expected = sorted([check.name, *([trial.__name__] if trial is not None else [])])
        if predicates != expected:
            offenders.append(f"{module.__name__}: public predicates {predicates}, expected {expected}")
        if not check.detects or not check.reads:
            offenders.append(f"{module.__name__}: CHECK says neither what it detects nor what it reads")
    assert offenders == [], "\n".join(offenders)


def test_every_module_of_checks_but_runview_blame_and_the_docs_holds_a_check_of_the_judge():
    modules = {m.name for m in pkgutil.iter_modules(rollcall.checks.__path__)}
    assert modules >= NOT_CHECKS, modules
    orphans = sorted(modules - NOT_CHECKS - set(NAMES))
    assert orphans == [], f"modules of rollcall.checks not in judge.ORDER: {orphans}"
    for name in NOT_CHECKS - {"__main__"}:
        assert not isinstance(
            getattr(importlib.import_module(f"rollcall.checks.{name}"), "CHECK", None), Check
        )


def _declared_kinds() -> dict[str, Kind]:
    """Every kind of problem src/rollcall declares (``NAME = Kind(...)`` at a module's top), by where."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = [
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "Kind"
            for target in node.targets
            if isinstance(target, ast.Name)
        ]
        if names:
            parts = path.relative_to(SRC.parent).with_suffix("").parts
            module = importlib.import_module(".".join(parts))
            found |= {f"{module.__name__}.{n}": getattr(module, n) for n in names}
    return found


def test_every_kind_is_declared_by_exactly_one_check_or_as_one_no_check_raises():
    declared_here = _declared_kinds()
    assert len(declared_here) >= len(KINDS) > 25, declared_here
    owners: dict[Kind, list[str]] = {}
    for check in CHECKS:
        for kind in check.kinds:
            owners.setdefault(kind, []).append(check.name)
    for kind, _by in OTHER_KINDS:
        owners.setdefault(kind, []).append("OTHER_KINDS")
    offenders = [f"{k.value} is declared by {', '.join(by)}" for k, by in owners.items() if len(by) != 1]
    offenders += [
        f"{where} ({k.value}) is declared by no check"
        for where, k in declared_here.items()
        if k not in owners
    ]
    for check in CHECKS:  # a check's kinds are its module's own
        module = f"rollcall.checks.{check.name}"
        offenders += [
            f"{check.name} declares {k.value}, which {module} does not define"
            for k in check.kinds
            if not any(where.startswith(f"{module}.") and d is k for where, d in declared_here.items())
        ]
    values = [k.value for k in owners]
    offenders += [f"two kinds are named {v}" for v in sorted({v for v in values if values.count(v) > 1})]
    assert offenders == [], "\n".join(offenders)


def test_a_kind_says_its_state_and_owner_and_a_too_slow_one_answered():
    for kind in (*KINDS, *(k for k, _ in OTHER_KINDS)):
        assert kind.value and kind.value == kind.value.lower() and str(kind) == kind.value
        assert not (kind.too_slow and not kind.rank_state.answered), kind


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
    assert strays == [], f"tests/unit/checks/ files for no check of judge.ORDER: {strays}"


def test_docs_checks_md_is_what_the_declarations_say(capsys):
    assert (ROOT / "docs" / "checks.md").read_text() == markdown(), f"docs/checks.md is stale: {REGENERATE}"
    assert main(["--markdown"]) == 0 and capsys.readouterr().out == markdown()
    assert main([]) == 2 and REGENERATE in capsys.readouterr().err
    text = markdown()
    for check in CHECKS:
        assert f"| `{check.name}` | {check.detects} |" in text
    for kind in KINDS:
        assert f"| `{kind.value}` |" in text


def test_the_architecture_and_the_layout_point_at_the_generated_table_and_list_no_checks_by_hand():
    for doc in ("architecture.md", "layout.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert "docs/checks.md" in text or "(checks.md)" in text, (
            f"docs/{doc} does not point at docs/checks.md"
        )
        lists = [line for line in text.splitlines() if sum(f"`{n}`" in line for n in NAMES) > 3]
        assert lists == [], f"docs/{doc} lists checks by hand: point at docs/checks.md instead: {lists}"
