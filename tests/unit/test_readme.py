"""The README's tables and lists say what the code declares: options, fitness rules and keys, modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollcall.checks.fitness import DRIFT_KEYS, EXPECT_KEYS, RULE_NAMES
from rollcall.options import OPTIONS, Spec
from rollcall_workload import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PACKAGE = ROOT / "src" / "rollcall"


def section(title: str) -> str:
    """The text of the README's section ``title`` (a ``##`` heading), up to the next ``##`` heading."""
    _, found, rest = README.partition(f"\n## {title}\n")
    assert found, f"README.md has no section '## {title}'"
    return rest.split("\n## ", 1)[0]


def option_rows() -> dict[str, list[list[str]]]:
    """The rows of the option table, by flag: each row's cells (``\\|`` inside a cell is no separator)."""
    rows: dict[str, list[list[str]]] = {}
    for line in section("Options").split("\n### ", 1)[0].splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.setdefault(cells[0].strip("`").split()[0], []).append(cells)
    return rows


def shown_default(spec: Spec) -> str | None:
    """How the table shows a default: ``30`` for 30.0; None for a default that is no value (unset, empty)."""
    default = spec.default
    if default is None or default is False or (not isinstance(default, int | float) and not default):
        return None
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


ROWS = option_rows()


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda s: s.flag)
def test_every_option_has_one_row_with_its_variable_and_default(spec: Spec) -> None:
    rows = ROWS.get(spec.flag, [])
    assert len(rows) == 1, f"README.md's option table has {len(rows)} rows for {spec.flag}; it needs one"
    _, env, default, _ = rows[0]
    assert env == f"`{spec.env}`"
    shown = shown_default(spec)
    if shown is not None:
        assert default == f"`{shown}`", f"{spec.flag}: the table says {default!r}, options.py {shown!r}"
    elif spec.switch:
        assert default == "off"
    else:
        assert not default.startswith("`"), f"{spec.flag} has no default value, the table says {default}"


def test_the_table_names_no_option_that_is_not_declared() -> None:
    assert sorted(ROWS.keys() - {s.flag for s in OPTIONS}) == []


def test_node_fitness_lists_the_rules_and_keys_the_checks_know() -> None:
    text = section("Node fitness")
    assert re.findall(r"^\| `(\w+)` \|", text, re.M) == list(RULE_NAMES)
    expect = text.split("Keys of `--expect", 1)[1].split("`config_drift` compares", 1)[0]
    named = [k for k in re.findall(r"`(\w+)`", expect) if not k.isupper()]  # not the variables read
    assert named == list(EXPECT_KEYS)
    drift = text.split("`config_drift` compares", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"`(\w+)`", drift) == list(DRIFT_KEYS)


def test_the_layout_names_every_module() -> None:
    text = section("Layout")
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        folder = "/".join(parts[:-1])
        named = f"`{parts[-1]}`" in text or f"`{'/'.join(parts)}.py`" in text
        if not named or (folder and f"`{folder}/`" not in text):
            missing.append("/".join(parts))
    assert missing == [], f"README.md's Layout names no entry for {missing}"


def workload_rows(text: str, first: str) -> dict[str, str]:
    """The rows of the table whose header starts with ``| first |``, by device, each row's text after it."""
    table = text.split(f"| {first} |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        device, _, rest = line.strip("| ").partition(" | ")
        rows[device.split()[0].strip("`")] = rest
    return rows


@pytest.mark.parametrize(
    ("doc", "first"),
    [("README.md", "device | model"), ("images/bert-training/README.md", "device | backend")],
)
def test_the_workload_tables_say_its_run_defaults(doc: str, first: str) -> None:
    rows = workload_rows((ROOT / doc).read_text(), first)
    assert sorted(rows) == sorted(cli.RUN_DEFAULTS)
    for device, defaults in cli.RUN_DEFAULTS.items():
        row = rows[device]
        assert defaults["model"] in re.findall(r"\w+", row), (
            f"{doc}, {device}: the model is {defaults['model']}"
        )
        numbers = [int(n) for n in re.findall(r"\b\d+\b", row)]
        batch = defaults.get("batch_size") or cli.cuda_batch_size(defaults["seq_len"], 141 << 30)
        want = [defaults["seq_len"], batch, defaults["warmup_steps"], defaults["epochs"]]
        want.append(defaults["steps_per_epoch"])
        assert all(n in numbers for n in want), f"{doc}, {device}: {row!r} should say {want}"
