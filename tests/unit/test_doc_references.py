"""The docs name only what exists: every file, option, make target, stack frame and module they name.

Each Markdown page of the project (README.md, docs/, the images' and the nightly manifests' READMEs) is read
as a reader would:

- files: a path of the checkout in a code span, a code block, a link or the prose (``src/...``, ``hack/x.sh``,
  ``manifests/rbac/``, or from inside a package: ``checks/blame.py``) must exist;
- options: every ``--flag`` of a ``pytest``, ``rollcall run`` or ``rollcall <command>`` line (in a code block or
  a code span) must be the suite's, pytest's or an installed plugin's (that sub-command's), and those inside
  ``--workload-args`` the workload's; an inline ``--flag`` must be the suite's, the workload's, pytest's or a
  ``rollcall`` sub-command's, or another tool's (:func:`inline_flag_problem`);
- make targets: every ``make X`` must be a target or pattern rule of the Makefile;
- frames: every ``file.py:N in f: code`` must be line N of a file of ``src/``, inside ``f``, holding ``code``;
- modules: every ``rollcall.x.y`` must be a module of the package or a name one of its modules defines.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from rollcall.cli import build_parser
from rollcall.options import OPTIONS
from rollcall_workload.rank import cli as workload_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "images" / "bert-training" / "README.md",
        ROOT / "src" / "rollcall" / "manifests" / "nightly" / "README.md",
    ]
)

#: Kinds of file the checkout holds: a word ending so is taken for a path of it.
REPO_SUFFIXES = (".py", ".sh", ".md", ".j2", ".yaml", ".yml", ".toml", ".lock", ".in")
#: Other tools whose options a line may name beside the tool (``kubectl apply -f``, ``sbatch --parsable``).
TOOLS = frozenset(
    {
        "kubectl", "docker", "buildah", "sbatch", "srun", "scontrol", "squeue", "scancel", "salloc",
        "torchrun", "uv", "pip", "make", "git", "enroot", "pyxis", "python", "curl", "ssh", "helm",
        "eksctl", "aws", "aws-k8s-tester",
    }
)  # fmt: skip
#: Words of a shell line that are not the command: a prompt, what runs it, the environment given to it.
_PREFIX = re.compile(r"^(?:\$\s+)?(?:(?:[A-Z_][A-Z0-9_]*=\S*|time|exec|sudo|env)\s+)*")
_PYTEST = re.compile(r"^(?:\S*/)?(?:pytest|python3?\s+-m\s+pytest)(?:\s|$)|^rollcall\s+run(?:\s|$)")
_ROLLCALL_SUB = re.compile(r"^rollcall\s+([a-z][\w-]*)")
_MAKE = re.compile(r"^make(?:\s|$)")
_FLAG = re.compile(r"(?<![\w/.=-])(--[A-Za-z][\w-]*)")
_FRAME = re.compile(
    r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.py):(\d+)\b(?: in (\w+|<\w+>)(?:: (.+?)(?= <- |`|;|$))?)?", re.M
)
_MODULE = re.compile(r"^(rollcall|rollcall_workload)((?:\.\w+)+)$")


# --- reading a page --------------------------------------------------------------------------------------


def fences(text: str) -> list[tuple[int, str]]:
    """Each fenced code block: the line number of its first line, and its body."""
    blocks, body, start, inside = [], [], 0, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if inside:
                blocks.append((start, "\n".join(body)))
            inside, body, start = not inside, [], number + 1
        elif inside:
            body.append(line)
    return blocks


def prose(text: str) -> str:
    """The page without its fenced code blocks (each of their lines left empty, so line numbers hold)."""
    lines, inside = [], False
    for line in text.splitlines():
        fence = line.lstrip().startswith("```")
        lines.append("" if inside or fence else line)
        inside = inside != fence
    return "\n".join(lines)


def paragraphs(text: str) -> list[tuple[int, str, str]]:
    """The prose's paragraphs: first line number, text, and what precedes it as its context. Blank lines,
    list items and headings part them; each table row is one, read after its table's header row (what a row
    names is read with its columns' titles)."""
    found: list[tuple[int, list[str], str]] = []
    header, joinable = "", False
    for number, line in enumerate(prose(text).splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("|"):
            header = header or stripped
            found.append((number, [stripped], header if header != stripped else ""))
            joinable = False
        elif not stripped:
            header, joinable = "", False
        elif joinable and not re.match(r"^(?:[-*] |\d+\. |#)", stripped):
            found[-1][1].append(stripped)
        else:
            header, joinable = "", not stripped.startswith("#")
            found.append((number, [stripped], ""))
    return [(first, "\n".join(lines), context) for first, lines, context in found]


def code_spans(text: str) -> list[tuple[int, str, str]]:
    """Each inline code span of the prose: its line number, its text, and what it is read with: its
    sentence after its paragraph's first (a list item's lead names its subject), or a table row whole after
    its table's header."""
    spans = []
    for first, paragraph, header in paragraphs(text):
        ends = [0, *(m.end() for m in re.finditer(r"[.!?]\s+(?=[A-Z(`*\[])", paragraph)), len(paragraph)]
        if header or paragraph.startswith("|"):
            ends = [0, len(paragraph)]
        for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", paragraph):
            start = max(e for e in ends if e <= match.start())
            end = min(e for e in ends if e > match.start())
            lead = paragraph[: ends[1]] if start else ""
            context = " ".join(f"{header} {lead} {paragraph[start:end]}".split())
            line = first + paragraph.count("\n", 0, match.start())
            spans.append((line, " ".join(match.group(1).split()), context))
    return spans


def links(text: str) -> list[tuple[int, str]]:
    """Each Markdown link target of the prose that is no URL or anchor, without its ``#fragment``."""
    body = prose(text)
    found = []
    for match in re.finditer(r"\]\(([^)\s]+)\)", body):
        target = match.group(1).split("#", 1)[0]
        if target and not re.match(r"^[a-z]+:", target):
            found.append((body.count("\n", 0, match.start()) + 1, target))
    return found


def shell_commands(block: str) -> list[tuple[int, str]]:
    """The commands of a shell block, by line offset: comments out, ``\\`` lines joined, split at ``|``,
    ``&&`` and ``;``, the environment assignments before each command dropped."""
    commands, pending, first = [], "", 0
    for offset, raw in enumerate(block.splitlines()):
        if not pending:
            first = offset
        line = re.sub(r"(^|\s)#(\s.*|)$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        for part in re.split(r"\s(?:\|\|?|&&|;)\s", pending + line):
            command = _PREFIX.sub("", part.strip())
            if command:
                commands.append((first, command))
        pending = ""
    return commands


def words(command: str) -> list[str]:
    """A command's words as the shell splits them (or at spaces, when its quotes do not close)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# --- what exists -----------------------------------------------------------------------------------------


@cache
def ignored() -> frozenset[str]:
    """Names .gitignore keeps out of the checkout (what runs and builds write), plus Python's caches."""
    names = {"__pycache__"}
    for line in (ROOT / ".gitignore").read_text().splitlines():
        name = line.strip().strip("/")
        if name and not name.startswith("#") and not any(c in name for c in "*?[/"):
            names.add(name)
    return frozenset(names)


@cache
def tree() -> tuple[frozenset[str], frozenset[str]]:
    """Every file and every folder of the checkout, by path from the root (hidden and ignored ones out)."""
    files, folders = set(), set()
    for here, dirs, names in os.walk(ROOT):
        dirs[:] = [
            d for d in dirs if not d.startswith(".") and d not in ignored() and not d.endswith(".egg-info")
        ]
        base = Path(here).relative_to(ROOT)
        folders.update(str(base / d) for d in dirs)
        files.update(str(base / n) for n in names if not n.startswith(".") and n not in ignored())
    return frozenset(files), frozenset(folders)


@cache
def top_level() -> frozenset[str]:
    """The checkout's own top-level entries: a path starting with one is a path from the root."""
    return frozenset(
        p.name for p in ROOT.iterdir() if not p.name.startswith(".") and p.name not in ignored()
    ) - {"artifacts"}


#: Files the docs name that are not the checkout's, where nothing else on the page can say so.
OUTSIDE_FILES = {
    "efa_installer.sh": "AWS's EFA installer, which images/bert-training/Dockerfile.nvidia downloads and runs",
}
#: A path segment that is a placeholder: ``node-I/``, ``k8s-bin-1.Y/``, ``X.Y.Z``.
_PLACEHOLDER = re.compile(r"(?:^|[./_-])[A-Z](?:$|[./_-])")


def looks_like_path(word: str) -> bool:
    """Whether a word names a file or folder of the checkout (not a URL, a placeholder, a label, a glob, an
    absolute or home path, nor what a run writes)."""
    if not word or word[0] in "/~.$-" or re.search(r"[<>*{}$=@#%|?'\"\\:]", word) or "://" in word:
        return False
    if word in OUTSIDE_FILES or _PLACEHOLDER.search(word):
        return False
    first = word.split("/", 1)[0]
    if first in top_level():
        return True
    name = word.rstrip("/").rsplit("/", 1)[-1]
    kind = name.endswith(REPO_SUFFIXES) or name.startswith("Dockerfile.")
    return kind or ("/" in word.rstrip("/") and word.endswith("/"))


def path_exists(word: str, doc: Path) -> bool:
    """A path from the root, or from the page's folder, or, written from inside a package (``checks/x.py``,
    ``rank/run.py``, ``plugin.py``), the end of one path of the checkout."""
    target = word.rstrip("/")
    folder_only = word.endswith("/")
    for base in (ROOT, doc.parent):
        path = base / target
        if path.is_dir() or (not folder_only and path.is_file()):
            return True
    if target.split("/", 1)[0] in top_level():
        return False
    files, folders = tree()
    pool = folders if folder_only else files | folders
    return any(p == target or p.endswith("/" + target) for p in pool)


def file_problems(text: str, doc: Path) -> list[str]:
    """Each path of the checkout the page names, in a code span, a code block, a link or its prose (a top-level
    folder's path), that does not exist."""
    named: list[tuple[int, str]] = []
    for line, span, _ in code_spans(text):
        named += [(line, w.strip("()[],;")) for w in span.split()]
    for start, block in fences(text):
        named += [
            (start + i, w.strip("()[],;`'\""))
            for i, line in enumerate(block.splitlines())
            for w in line.split()
        ]
    body = prose(text)
    folders = "|".join(sorted(re.escape(d) for d in top_level() if (ROOT / d).is_dir()))
    for match in re.finditer(rf"(?<![\w/.`-])((?:{folders})/[\w./-]*[\w/])", body):
        named.append((body.count("\n", 0, match.start()) + 1, match.group(1)))
    missing = sorted({(n, w) for n, w in named if looks_like_path(w) and not path_exists(w, doc)})
    problems = [f"line {n}: `{w}` does not exist" for n, w in missing]
    for line, target in links(text):
        if not ((doc.parent / target).exists() or (ROOT / target).exists()):
            problems.append(f"line {line}: the link ({target}) leads nowhere")
    return problems


#: Prints every long option of pytest's parser once pytest has loaded its plugins and the root conftest (its
#: help hides the shorter spelling of an option, ``--junitxml`` beside ``--junit-xml``).
_PYTEST_OPTIONS = """
from _pytest.config import _prepareconfig
config = _prepareconfig([])
groups = [config._parser._anonymous, *config._parser._groups]
print("\\n".join(sorted({n for g in groups for o in g.options for n in o.names() if n.startswith("--")})))
config._ensure_unconfigure()
"""


@cache
def pytest_flags() -> frozenset[str]:
    """Every long option pytest takes here: its own, the installed plugins', and the suite's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROLLCALL_", "PYTEST_"))}
    out = subprocess.run(
        [sys.executable, "-c", _PYTEST_OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    return frozenset(out.split())


def help_flags(text: str) -> frozenset[str]:
    """The long options of an argparse-style help text (the heads of its option lines)."""
    flags = set()
    for line in text.splitlines():
        head = re.match(r"^ {2}(-\S.*?)(?: {2,}|$)", line)
        if head:
            flags.update(re.findall(r"--[A-Za-z][\w-]*", head.group(1)))
    return frozenset(flags)


@cache
def workload_flags() -> frozenset[str]:
    """The workload's options (train.py's command line, ``rollcall_workload.rank.cli``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        workload_cli.parse_args(["--help"])
    return help_flags(out.getvalue())


SUITE_FLAGS = frozenset(spec.flag for spec in OPTIONS)
SUITE_VALUED = frozenset(spec.flag for spec in OPTIONS if not spec.switch)


@cache
def subcommand_flags() -> dict[str, frozenset[str]]:
    """Each ``rollcall`` sub-command's long options (``run`` takes pytest's)."""
    parser = build_parser()
    choices = next(a.choices for a in parser._actions if a.choices and isinstance(a.choices, dict))
    return {
        name: frozenset(f for f in sub._option_string_actions if f.startswith("--"))
        for name, sub in choices.items()
    }


def command_flag_problems(command: str) -> list[str]:
    """Each option of a ``pytest``/``rollcall`` command line that its program does not take."""
    sub = _ROLLCALL_SUB.match(command)
    if _PYTEST.match(command):
        allowed, program = pytest_flags(), "pytest's, a plugin's or the suite's"
    elif sub and sub.group(1) in subcommand_flags():
        allowed, program = subcommand_flags()[sub.group(1)], f"rollcall {sub.group(1)}'s"
    elif _MAKE.match(command):
        found = re.search(r"PYTEST_ARGS=(?:\"([^\"]*)\"|'([^']*)'|(\S+))", command)
        if not found:
            return []
        return command_flag_problems("pytest " + next(g for g in found.groups() if g is not None))
    else:
        return []
    problems, given = [], [w.strip("[]()") for w in words(command)]
    skip = False
    for i, word in enumerate(given):
        if skip or not word.startswith("--"):
            skip = False
            continue
        flag, has_value = word.split("=", 1)[0], "=" in word
        if flag == "--workload-args":
            value = word.split("=", 1)[1] if has_value else (given[i + 1] if i + 1 < len(given) else "")
            problems += [
                f"{f} is no option of the workload (in --workload-args)"
                for f in _FLAG.findall(value)
                if f not in workload_flags()
            ]
        elif flag not in allowed:
            problems.append(f"{flag} is not {program} option")
        skip = flag in SUITE_VALUED and not has_value
    return problems


FORMERLY = {spec.formerly: spec.flag for spec in OPTIONS if spec.formerly}


def scripts_named(sentence: str) -> tuple[list[Path], bool]:
    """The checkout's scripts a sentence names (``hack/cluster.sh``, ``image.sh``), and whether it names a
    script the checkout does not hold (another tool's, such as ``efa_installer.sh``)."""
    files, _ = tree()
    ours, outside = [], False
    for name in set(re.findall(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.sh)\b", sentence)):
        found = [f for f in files if f == name or f.endswith("/" + name)]
        ours += [ROOT / f for f in found]
        outside = outside or not found
    return ours, outside


@cache
def given_to_tools() -> str:
    """The checkout's own code, scripts and templates (not its docs or tests): the options it gives other
    tools (sbatch's in the batch script, kubelet's in hack/realnodes.sh, buildah's in hack/image.sh) are
    written there."""
    files, _ = tree()
    own = [
        f
        for f in sorted(files)
        if f.split("/", 1)[0] in ("src", "hack", "images", "Makefile")
        and not f.endswith((".md", ".txt", ".lock"))
    ]
    return "\n".join((ROOT / f).read_text(errors="replace") for f in own)


def inline_flag_problem(flag: str, sentence: str) -> str | None:
    """Why an option a code span names alone is none that exists, or None: it is the suite's, the
    workload's, pytest's or a ``rollcall`` sub-command's; a former spelling named beside the option that
    replaced it; an option of a checkout script the sentence names (found in that script); an option the
    checkout's own code gives another tool; or the sentence names the other tool it belongs to."""
    known = SUITE_FLAGS | workload_flags() | pytest_flags() | frozenset().union(*subcommand_flags().values())
    if flag in known:
        return None
    if flag in FORMERLY:
        if FORMERLY[flag] in sentence:
            return None
        return f"`{flag}` is the former spelling of `{FORMERLY[flag]}`, and the sentence does not name that"
    written = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
    scripts, outside = scripts_named(sentence)
    if any(written.search(p.read_text()) for p in scripts):
        return None
    if outside or TOOLS & set(re.findall(r"[\w.-]+", sentence.lower())):
        return None
    if scripts:
        named = ", ".join(str(p.relative_to(ROOT)) for p in scripts)
        return f"`{flag}` is no option of {named}, nor of the suite, the workload, pytest or rollcall"
    if written.search(given_to_tools()):
        return None
    return (
        f"`{flag}` is no option of the suite, the workload, pytest or rollcall, nor one the checkout gives "
        "another tool, and the sentence names no other tool it belongs to"
    )


def option_problems(text: str, doc: Path) -> list[str]:
    """Each option the page names that nothing takes: on a ``pytest``/``rollcall`` command line (a code block's
    or a code span's), or alone in a code span (:func:`inline_flag_problem`)."""
    problems = []
    for start, block in fences(text):
        for offset, command in shell_commands(block):
            problems += [f"line {start + offset}: {p}: {command}" for p in command_flag_problems(command)]
    for line, span, sentence in code_spans(text):
        command = _PREFIX.sub("", span)
        if _PYTEST.match(command) or _ROLLCALL_SUB.match(command) or _MAKE.match(command):
            problems += [f"line {line}: {p}: `{span}`" for p in command_flag_problems(command)]
            continue
        for flag in _FLAG.findall(span):
            problem = inline_flag_problem(flag, f"{span} {sentence}")
            if problem:
                problems.append(f"line {line}: {problem} (`{span}`)")
    return problems


@cache
def make_targets() -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """The Makefile's targets, and its pattern rules (``deps-%``) as patterns."""
    names: set[str] = set()
    patterns = []
    for match in re.finditer(
        r"^([\w%.$()/-]+(?: +[\w%.$()/-]+)*) *:(?!=)", (ROOT / "Makefile").read_text(), re.M
    ):
        for target in match.group(1).split():
            if "%" in target:
                patterns.append(re.compile(re.escape(target).replace("%", ".+") + "$"))
            elif not target.startswith("."):
                names.add(target)
    return frozenset(names), tuple(patterns)


def is_target(name: str) -> bool:
    names, patterns = make_targets()
    return name in names or any(p.match(name) for p in patterns)


def target_problems(text: str, doc: Path) -> list[str]:
    """Each ``make X`` of a code span or block whose X is no target of the Makefile."""
    named = [(line, span) for line, span, _ in code_spans(text)]
    named += [(start + o, c) for start, block in fences(text) for o, c in shell_commands(block)]
    problems = []
    for line, command in named:
        for found in re.finditer(r"(?:^|[\s(])make((?: +[^\s-][^\s=]*(?= |$))+)", command):
            for target in found.group(1).split():
                if re.fullmatch(r"[\w.-]+", target) and not is_target(target):
                    problems.append(f"line {line}: `make {target}`: the Makefile has no target {target}")
    return problems


@cache
def sources() -> tuple[str, ...]:
    """Every Python file under src/, by path from the root."""
    return tuple(str(p.relative_to(ROOT)) for p in sorted((ROOT / "src").rglob("*.py")))


def enclosing_function(lines: list[str], number: int) -> str | None:
    """The function whose body holds line ``number`` (1-based): walking up, the first ``def`` indented less
    than every line passed on the way; None when a line of the module's top level comes first."""
    indent = len(lines[number - 1]) - len(lines[number - 1].lstrip())
    for line in reversed(lines[: number - 1]):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        level = len(line) - len(line.lstrip())
        if level >= indent:
            continue
        found = re.match(r"^\s*(?:async\s+)?def\s+(\w+)", line)
        if found:
            return found.group(1)
        if level == 0:
            return None
        indent = level
    return None


def frame_problems(text: str, doc: Path) -> list[str]:
    """Each ``file.py:N`` frame whose file is in no folder of src/, or has no line N, or whose line N is not in
    the function named beside it or does not hold the code shown (``file.py:N in f: code``)."""
    problems = []
    for match in _FRAME.finditer(text):
        name, number, function, shown = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        line = text.count("\n", 0, match.start()) + 1
        files = [p for p in sources() if p == name or p.endswith("/" + name)]
        if not files:
            problems.append(f"line {line}: {name}:{number}: no file of src/ is {name}")
            continue
        sources_lines = [(ROOT / p).read_text().splitlines() for p in files]
        sources_lines = [
            lines for lines in sources_lines if len(lines) >= number and lines[number - 1].strip()
        ]
        if not sources_lines:
            problems.append(f"line {line}: {name}:{number}: {name} has no code on line {number}")
            continue
        if function and not function.startswith("<"):
            inside = [lines for lines in sources_lines if enclosing_function(lines, number) == function]
            if not inside:
                held = enclosing_function(sources_lines[0], number)
                problems.append(f"line {line}: {name}:{number} is in {held}(), not in {function}()")
                continue
            sources_lines = inside
        code = (shown or "").rstrip(". ").strip()
        held = [lines[number - 1].strip() for lines in sources_lines]
        if code and not any(h.startswith(code) for h in held):
            problems.append(f"line {line}: {name}:{number} holds {held[0]!r}, not {shown!r}")
    return problems


def module_problems(text: str, doc: Path) -> list[str]:
    """Each ``rollcall.x.y`` or ``rollcall_workload.x.y`` of a code span that is no module of the package nor
    a name one of its modules defines."""
    problems = []
    for line, span, _ in code_spans(text):
        for word in span.split():
            found = _MODULE.match(word.strip("(),;").removesuffix("()"))
            if found and not module_exists(found.group(1), found.group(2)[1:].split(".")):
                problems.append(f"line {line}: `{word}` is no module or name of {found.group(1)}")
    return problems


def module_exists(package: str, parts: list[str]) -> bool:
    base = ROOT / "src" / package
    for i, part in enumerate(parts):
        if (base / part).is_dir():
            base = base / part
            continue
        if (base / f"{part}.py").is_file():
            module, rest = base / f"{part}.py", parts[i + 1 :]
        else:
            module, rest = base / "__init__.py", parts[i:]
        return not rest or defines(module.read_text(), rest[0])
    return True


def defines(source: str, name: str) -> bool:
    """Whether a module's source defines or imports ``name`` at its top level."""
    return bool(
        re.search(
            rf"^(?:async def|def|class) {name}\b|^{name}\b\s*(?::|=)|^from \S+ import .*\b{name}\b",
            source,
            re.M,
        )
        or re.search(rf"^from \S+ import \([^)]*\b{name}\b", source, re.M)
    )


CHECKERS = {
    "files": file_problems,
    "options": option_problems,
    "make targets": target_problems,
    "frames": frame_problems,
    "modules": module_problems,
}


def cases() -> Iterator[tuple[Path, str]]:
    for doc in DOCS:
        for kind in CHECKERS:
            yield doc, kind


@pytest.mark.parametrize(
    ("doc", "kind"), list(cases()), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v
)
def test_every_doc_names_only_what_exists(doc: Path, kind: str) -> None:
    problems = CHECKERS[kind](doc.read_text(), doc)
    assert problems == [], f"{doc.relative_to(ROOT)} names {kind} that do not exist:\n" + "\n".join(problems)


# --- the checker itself ----------------------------------------------------------------------------------

FAKE = """# A page

Run `src/rollcall/no_such_module.py` or [this](no-such-page.md); `checks/reference.py` moved.
`rollcall.no_such_thing` and `rollcall.judge.NO_SUCH_NAME` are nowhere; `--no-such-option` is nothing.
`make no-such-target`; a frame: `rank/run.py:99999 in run: x`, `faults.py:1 in f: no such code`,
`rank/run.py:1 in run: ...`.

`--retries 1` re-runs it. Start it with `hack/cluster.sh up --no-such-script-flag`. See hack/no-such-script.sh.

```bash
pytest tests/e2e --nodes 2 --no-such-pytest-flag --workload-args "--no-such-workload-flag 3"
rollcall render --no-such-render-flag
make e2e-local no-such-other-target
$ pytest tests/e2e --no-such-prompted-flag
kubectl apply -f manifests/no-such-folder/
```
"""

GOOD = """# A page

Run `src/rollcall/plugin.py`, `checks/blame.py`, `rank/run.py` and [the docs](hangs.md) or
[options](../docs/options.md); `manifests/rbac/`, `images/bert-training/Dockerfile.nvidia`, `hack/slurm.sh`.
`rollcall.backends.kubernetes.instances`, `rollcall.judge.ORDER`; `--job-retries`, `--hang-after`,
`--impl compact`, `--cronjob`; `sbatch --parsable`, and sbatch's `--ntasks-per-node=1`; `make deps-slurm`.
Outputs are not the checkout's: `artifacts/report.html`, `results.json`, `/etc/slurm/slurm.conf`,
`nvidia.com/gpu`, `karpenter.sh/nodepool=gpu`, `node-I/kubelet.yaml`.

`--job-retries` was `--retries` until 0.2. Start it with `hack/cluster.sh up --real-nodes 2`; see hack/slurm.sh.

```bash
.venv/bin/python -m pytest tests/e2e --nodes 2 --job-retries 1 -x --junitxml=out.xml \\
  --slurm-arg --gres=gpu:8 --workload-args "--impl compact --hang-after 20"  # a comment --not-checked
rollcall run --nodes 2 --backend local
rollcall render --cronjob '0 2 * * *' --suite-image x --image y --nodes 4 | kubectl apply -f -
make e2e NODES=2 PYTEST_ARGS="--image x --nodes 2"
docker build -f images/suite/Dockerfile --pull -t x .
```
"""


@pytest.mark.parametrize("kind", CHECKERS)
def test_the_checker_accepts_what_exists(kind: str) -> None:
    assert CHECKERS[kind](GOOD, ROOT / "docs" / "fake.md") == []


@pytest.mark.parametrize(
    ("kind", "wrong"),
    [
        ("files", "src/rollcall/no_such_module.py"),
        ("files", "(no-such-page.md)"),
        ("files", "checks/reference.py"),
        ("files", "manifests/no-such-folder/"),
        ("files", "hack/no-such-script.sh"),
        ("modules", "rollcall.no_such_thing"),
        ("modules", "rollcall.judge.NO_SUCH_NAME"),
        ("options", "`--no-such-option`"),
        ("options", "--no-such-pytest-flag is not"),
        ("options", "--no-such-workload-flag is no option of the workload"),
        ("options", "--no-such-render-flag is not rollcall render's"),
        ("options", "--no-such-prompted-flag is not"),
        ("options", "`--retries` is the former spelling of `--job-retries`"),
        ("options", "`--no-such-script-flag` is no option of hack/cluster.sh"),
        ("make targets", "no target no-such-target"),
        ("make targets", "no target no-such-other-target"),
        ("frames", "rank/run.py:99999"),
        ("frames", "faults.py:1 "),
        ("frames", "rank/run.py:1 is in"),
    ],
)
def test_the_checker_finds_each_wrong_reference(kind: str, wrong: str) -> None:
    problems = CHECKERS[kind](FAKE, ROOT / "docs" / "fake.md")
    assert any(wrong in p for p in problems), f"{kind}: {wrong} not found in {problems}"


def test_the_checker_reads_pytest_and_the_workload_options() -> None:
    assert {"--junitxml", "--strict-markers", "--job-retries", "--slurm-partition"} <= pytest_flags()
    assert {"--impl", "--hang-after", "--seq-len"} <= workload_flags()
    assert "--retries" not in SUITE_FLAGS
    assert is_target("e2e-local") and is_target("deps-slurm") and not is_target("no-such-target")
