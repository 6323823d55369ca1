"""The option reference, ``docs/options.md``, from the declarations (``python -m rollcall.options``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rollcall.options import GROUPS, OPTIONS

#: The command that writes the reference, ``docs/options.md`` (a unit test holds the file to it).
REGENERATE = "python -m rollcall.options --markdown > docs/options.md"


def markdown() -> str:
    """The option reference, ``docs/options.md``: one table per group, from the declarations."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = [
        "# Options",
        "",
        f"<!-- Generated from src/rollcall/options/; do not edit. Regenerate: {REGENERATE} -->",
        "",
        "Every option also reads an environment variable, so CI systems can set it, and an ini key of the "
        "ini file (`[tool.pytest.ini_options]` of `pyproject.toml`, or `pytest.ini`), as the *ini* column "
        "names it; the few that cannot live in a file say why. The command line wins over the environment, "
        "the environment over the ini file, the ini file over the default. A duration takes seconds (`90`) "
        "or a number with `s`, `m`, `h` or `d` (`90s`, `30m`, `1h`, `2d`); defaults are shown as you would "
        "write them. Bad values stop the session before anything is created, with a message naming the "
        "option, where the value came from, and the fix. `pytest --help` lists the options in the same "
        "groups.",
        "",
        "```toml",
        "[tool.pytest.ini_options]",
        'rollcall_backend = "kubernetes"',
        'rollcall_context = "nightly-eks"',
        'rollcall_instance_type = "p5.48xlarge"',
        'rollcall_node_selector = ["karpenter.sh/nodepool=gpu"]',
        'rollcall_job_timeout = "45m"',
        "```",
    ]
    for group, title in GROUPS:
        out += [
            "",
            f"## {title[0].upper()}{title[1:]}",
            "",
            "| option | environment | ini | default | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for spec in OPTIONS:
            if spec.group != group:
                continue
            ini = f"`{spec.ini_name}`" if spec.ini_name else ""
            meaning = spec.text
            if spec.file:
                meaning += f" (no ini key: {spec.file})"
            row = [f"`{cell(spec.usage)}`", f"`{spec.env}`", ini, f"`{spec.shown_default}`"]
            out.append("| " + " | ".join([*row, cell(meaning)]) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rollcall.options --markdown``: print the option reference."""
    parser = argparse.ArgumentParser(prog="python -m rollcall.options", description=main.__doc__)
    parser.add_argument("--markdown", action="store_true", required=True, help="the reference in Markdown")
    parser.parse_args(argv)
    sys.stdout.write(markdown())
    return 0
