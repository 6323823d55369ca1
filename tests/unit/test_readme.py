"""The README and docs/ say what the code declares: options, fitness rules and keys, modules, the workload's
defaults; the README stays short and names the commands that must always work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollcall.evidence.drift import DRIFT_KEYS, EXPECT_KEYS, PLATFORM_KEYS, whose
from rollcall.evidence.fitness import RULE_NAMES
from rollcall.options import GROUPS, OPTIONS, Spec
from rollcall.options.reference import REGENERATE, markdown
from rollcall_workload.rank import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
OPTIONS_DOC = (DOCS / "options.md").read_text()
PACKAGE = ROOT / "src" / "rollcall"
#: The README reads in five minutes: the reference lives in docs/.
README_MAX_LINES = 300
#: About 900 words (as ``wc -w`` counts them, code and output included), in sentences a reader takes in at once.
README_MAX_WORDS = 950
README_MAX_SENTENCE_WORDS = 35


def section(title: str, text: str = README, doc: str = "README.md") -> str:
    """The text of ``doc``'s section ``title`` (a ``##`` heading), up to the next ``##`` heading."""
    _, found, rest = text.partition(f"\n## {title}\n")
    assert found, f"{doc} has no section '## {title}'"
    return rest.split("\n## ", 1)[0]


def option_rows() -> dict[str, list[list[str]]]:
    """The rows of docs/options.md's tables, by flag: each row's cells (``\\|`` inside a cell is no separator)."""
    rows: dict[str, list[list[str]]] = {}
    for line in OPTIONS_DOC.splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.setdefault(cells[0].strip("`").split()[0], []).append(cells)
    return rows


ROWS = option_rows()


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda s: s.flag)
def test_every_option_has_one_row_with_its_variable_and_default(spec: Spec) -> None:
    rows = ROWS.get(spec.flag, [])
    assert len(rows) == 1, f"docs/options.md's tables have {len(rows)} rows for {spec.flag}; it needs one"
    _, env, ini, default, meaning = rows[0]
    assert env == f"`{spec.env}`"
    assert ini == (f"`{spec.ini_name}`" if spec.ini_name else "")
    assert spec.ini_name or f"(no ini key: {spec.file})" in meaning, f"{spec.flag}: say why it has no ini key"
    assert default == f"`{spec.shown_default}`", f"{spec.flag}: the table says {default!r}"
    assert not re.search(r"None|\(\)|\{\}|frozenset|PosixPath", default), (
        f"{spec.flag}: {default} is Python's"
    )


def test_the_table_names_no_option_that_is_not_declared() -> None:
    assert sorted(ROWS.keys() - {s.flag for s in OPTIONS}) == []


def test_docs_options_is_what_the_declarations_generate() -> None:
    assert markdown() == OPTIONS_DOC, (
        f"docs/options.md is out of date with src/rollcall/options/: run {REGENERATE}"
    )


def test_docs_options_shows_each_option_under_its_group() -> None:
    for group, title in GROUPS:
        text = section(title[0].upper() + title[1:], OPTIONS_DOC, "docs/options.md")
        flags = re.findall(r"^\| `(--[a-z-]+)", text, re.M)
        assert flags == [s.flag for s in OPTIONS if s.group == group], title


def test_the_readme_stays_short() -> None:
    lines = len(README.splitlines())
    assert lines < README_MAX_LINES, (
        f"README.md has {lines} lines; keep it under {README_MAX_LINES} and move the reference to docs/"
    )


def test_the_readme_stays_under_its_words() -> None:
    words = len(README.split())
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words; keep it under {README_MAX_WORDS} and move the reference to docs/"
    )


def code_blocks(text: str) -> tuple[str, list[str]]:
    """The text without its fenced code blocks, and the blocks."""
    prose: list[str] = []
    blocks: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
        else:
            prose.append(line)
    return "\n".join(prose), ["\n".join(b) for b in blocks]


def sentences(text: str) -> list[str]:
    """The prose's sentences: code blocks out; headings, list items, table rows and blank lines end one."""
    prose, _ = code_blocks(text)
    parts = re.split(r"\n\s*\n|\n(?=#|[-*] |\|)", prose)
    found = []
    for part in parts:
        found += re.split(r"(?<=[.!?])\s+(?=[A-Z`\[(*])", " ".join(part.split()))
    return [s for s in found if s]


def test_no_sentence_of_the_readme_runs_long() -> None:
    long = [s for s in sentences(README) if len(s.split()) > README_MAX_SENTENCE_WORDS]
    assert long == [], f"README.md has sentences over {README_MAX_SENTENCE_WORDS} words: {long}"


def test_the_readme_shows_a_crash_and_a_hang_as_the_terminal_does() -> None:
    output = "\n".join(code_blocks(README)[1])
    assert re.search(r"^ +- first failure: rank \d+ .*\n +whose: ", output, re.M), "README.md shows no crash"
    assert re.search(r"^ +- rank \d+ .* hung .*\n +whose: ", output, re.M), "README.md shows no hang"


@pytest.mark.parametrize("command", ["make e2e-local", "make test", "make test-fast"])
def test_the_readme_names_the_commands_that_must_work_and_the_makefile_has_them(command: str) -> None:
    assert f"\n{command} " in README, f"README.md's first commands do not include {command}"
    target = command.split()[1]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"the Makefile has no target {target}"
    assert re.search(rf'^\t@echo "make {re.escape(target)} ', makefile, re.M), (
        f"make help does not list {target}"
    )


def test_every_doc_the_readme_links_exists() -> None:
    linked = re.findall(r"\]\((docs/[\w./-]+\.md)\)", README)
    assert "docs/options.md" in linked
    missing = [d for d in sorted(set(linked)) if not (ROOT / d).is_file()]
    assert missing == [], f"README.md links to {missing}, which do not exist"


def test_every_doc_is_linked_from_the_readme() -> None:
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if f"](docs/{p.name})" not in README]
    assert unlinked == [], f"README.md links no {unlinked}"


def test_node_fitness_lists_the_rules_and_keys_the_checks_know() -> None:
    text = (DOCS / "fitness.md").read_text()
    assert re.findall(r"^\| `(\w+)` \|", text, re.M) == list(RULE_NAMES)
    expect = text.split("Keys of `--expect", 1)[1].split("`config_drift` compares", 1)[0]
    named = [k for k in re.findall(r"`(\w+)`", expect) if not k.isupper()]  # not the variables read
    assert named == list(EXPECT_KEYS)
    drift = text.split("`config_drift` compares", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"`(\w+)`", drift) == list(DRIFT_KEYS)


def test_node_fitness_says_whose_each_expect_key_is_naming_exactly_the_platforms_keys() -> None:
    text = (DOCS / "fitness.md").read_text()
    assert text.count("Whose each `--expect` key is") == 1
    whose_paragraph = text.split("Whose each `--expect` key is", 1)[1].split("\n\n", 1)[0]
    platform = whose_paragraph.split("Every other key is", 1)[0]
    words = re.findall(r"`(\w+)`", platform)
    assert {w for w in words if w not in EXPECT_KEYS} <= {"undetermined"}  # the verdict, not a key
    named = [k for k in words if k in EXPECT_KEYS]
    assert len(named) == len(set(named)) and set(named) == PLATFORM_KEYS
    assert set(EXPECT_KEYS) >= PLATFORM_KEYS
    assert {k for k in EXPECT_KEYS if whose(k) == "platform"} == PLATFORM_KEYS
    for says in ("owner platform", "marks no node", "owner cluster", "makes the node unfit", "marks nothing"):
        assert says in " ".join(whose_paragraph.split()), says


def test_the_layout_names_every_module() -> None:
    """Each module is named in docs/layout.md; a check, in the table of checks docs/layout.md points at."""
    text = (DOCS / "layout.md").read_text()
    checks = (DOCS / "checks.md").read_text()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        folder = "/".join(parts[:-1])
        named = f"`{parts[-1]}`" in text or f"`{'/'.join(parts)}.py`" in text
        named = named or (folder == "checks" and f"| `{parts[-1]}` |" in checks and "(checks.md)" in text)
        if not named or (folder and f"`{folder}/`" not in text):
            missing.append("/".join(parts))
    assert missing == [], f"docs/layout.md names no entry for {missing}"


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
    [("docs/workload.md", "device | model"), ("images/bert-training/README.md", "device | backend")],
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
