"""How an option is declared: :class:`Spec`, :func:`option`, the groups, and :class:`Section`, their holder.

Each section of the options (:data:`GROUPS`: the job, Kubernetes, Slurm, judging, baselines, recovery,
reports) is a frozen dataclass of :class:`Section` whose every field is declared by :func:`option`: its flag,
how to parse it, its default, its one text. The rest is derived: the field's name and environment variable
from the flag (``--job-timeout``: ``job_timeout``, ``ROLLCALL_JOB_TIMEOUT``), its ini key
(``rollcall_job_timeout``: every option can live in the ini file unless its declaration says why not,
``file=``), its group from its section, and how ``pytest --help`` and ``docs/options.md`` show it
(:attr:`Spec.usage`, :attr:`Spec.shown_default`): the reference shows its text whole, ``--help`` its first
sentence as plain text (:attr:`Spec.help`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from rollcall.options.values import Choice, attr_name, env_name, format_duration

GroupName = Literal["job", "kubernetes", "slurm", "judging", "baselines", "recovery", "reports"]
#: The option groups, in the order ``pytest --help`` and ``docs/options.md`` show them: name, title. Each
#: is a section of :class:`rollcall.options.Options` of that name.
GROUPS: tuple[tuple[GroupName, str], ...] = (
    ("job", "the job: where it runs, its size, image, workload, hang bounds and deadlines"),
    ("kubernetes", "Kubernetes: the cluster, the nodes, the pods' scheduling and capacity"),
    ("slurm", "Slurm: where sbatch places the job (partition, account, QOS, reservation, nodes), its image"),
    ("judging", "judging: throughput, stragglers, bus bandwidth, node fitness"),
    ("baselines", "baselines: the release gate against past runs"),
    ("recovery", "recovery: retries, isolating a bad node, each node's verdict, tainting unfit ones"),
    ("reports", "reports: artifacts, the live roll call, metrics"),
)
#: The metavar of every duration: it takes 90, 90s, 30m, 1h30m alike.
DURATION = "DURATION"


@dataclass(frozen=True)
class Spec:
    """One option: its flag, how to parse it, its default and its text.

    Attributes:
        text: what it does, in Markdown: ``docs/options.md`` shows it whole, ``--help`` its first sentence
            (:attr:`help`). Sentences after the first say more for the reference.
        parse: turns the text given into the value (with ``multiple``, the tuple of words given).
        metavar: what the flag takes, as ``--help`` shows it (a choice's are its choices).
        multiple: repeatable on the command line; its variable (and ini key) holds shell-quoted words.
        switch: a flag without a value (its variable and ini key read true/false).
        group: the name of its group in :data:`GROUPS` (its section's).
        file: why it cannot live in the ini file; empty: it can, as :attr:`ini_name`.
        shown: the default as a user writes it, where the value is none (``auto``); else derived.
        formerly: the flag's former spelling, given up for a clash with another plugin's; the field and the
            ini key keep its name, its variable is still read after the new flag's (:attr:`former_env`), and
            the old flag is answered with the new one.
        backends: the backends that alone read it, where it lives in a section every backend is given
            (``--image``: kubernetes); empty: its section's reader, the wing given it (``--instance-type``:
            kubernetes), or every backend (:func:`rollcall.suite.read_by`).
        environment: its values are ``NAME=VALUE`` pairs of the workload's environment, a secret's among them
            maybe: an error shows what it was given with each secret-looking value ``<redacted>``.
    """

    flag: str
    parse: Callable[[Any], Any]
    default: Any
    text: str
    metavar: str | None = None
    multiple: bool = False
    switch: bool = False
    group: GroupName = "job"
    file: str = ""
    shown: str = ""
    formerly: str = ""
    backends: tuple[str, ...] = ()
    environment: bool = False

    @property
    def help(self) -> str:
        """What ``--help`` says of it: its text's first sentence, as plain text (:func:`first_sentence`)."""
        return plain(first_sentence(self.text))

    @property
    def argparse_help(self) -> str:
        """:attr:`help` as argparse takes it, which formats it with ``%``: each of its own ``%`` doubled."""
        return self.help.replace("%", "%%")

    @property
    def name(self) -> str:
        """The field of its section holding it: ``--job-timeout`` is ``job_timeout``."""
        return attr_name(self.formerly or self.flag)

    @property
    def env(self) -> str:
        """The environment variable it also reads."""
        return env_name(self.flag)

    @property
    def former_env(self) -> str:
        """The variable of its former flag, still read where :attr:`env` is not set; empty: none."""
        return env_name(self.formerly) if self.formerly else ""

    @property
    def ini_name(self) -> str | None:
        """The ini file's key it also reads (``rollcall_kubeconfig``), or None when it cannot live there."""
        return None if self.file else "rollcall_" + self.name

    @property
    def choices(self) -> tuple[str, ...]:
        """The values it takes, when they are a few words (``--backend``), else none."""
        return self.parse.choices if isinstance(self.parse, Choice) else ()

    @property
    def placeholder(self) -> str | None:
        """What ``--help`` shows it takes: ``{auto,on,off}``, ``N``, ``DURATION``; None for a switch."""
        if self.switch:
            return None
        return "{" + ",".join(self.choices) + "}" if self.choices else self.metavar

    @property
    def usage(self) -> str:
        """``--efa auto|on|off``, ``--nodes N``, ``--keep``: the flag and what it takes."""
        if self.choices:
            return f"{self.flag} {'|'.join(self.choices)}"
        return f"{self.flag} {self.metavar}" if self.metavar else self.flag

    @property
    def shown_default(self) -> str:
        """The default as a user writes it: ``2``, ``30m``, ``auto``, ``artifacts``, ``off``, ``none``."""
        default = self.default
        if self.switch:
            return "off"
        if self.shown:
            return self.shown
        if default is None or (not isinstance(default, int | float | Path) and not default):
            return "none"
        if isinstance(default, bool):
            return "on" if default else "off"
        if isinstance(default, int | float) and self.metavar == DURATION:
            return format_duration(float(default))
        if isinstance(default, float) and default.is_integer():
            return str(int(default))
        return str(default)

    @property
    def where(self) -> str:
        """Where else it is read: ``env ROLLCALL_NODES; ini rollcall_nodes``, or why no ini key."""
        ini = f"ini {self.ini_name}" if self.ini_name else f"no ini key: {self.file}"
        return f"env {self.env}; {ini}"


def option(
    flag: str,
    parse: Callable[[Any], Any],
    default: Any,
    text: str,
    metavar: str | None = None,
    *,
    multiple: bool = False,
    switch: bool = False,
    file: str = "",
    shown: str = "",
    formerly: str = "",
    backends: tuple[str, ...] = (),
    environment: bool = False,
) -> Any:
    """Declare a field of a :class:`Section` as an option (see the module docstring)."""
    spec = Spec(
        flag,
        parse,
        default,
        text,
        metavar,
        multiple,
        switch,
        "job",
        file,
        shown,
        formerly,
        backends,
        environment,
    )
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata={"option": spec})
    return field(default=default, metadata={"option": spec})


def plain(text: str) -> str:
    """Markdown made plain: a link is its text (a page of the docs: ``docs/<page>``), code loses its marks."""

    def link(m: re.Match[str]) -> str:
        return f"docs/{m[2]}" if m[1] == m[2] else m[1]

    return re.sub(r"\[([^]]+)\]\(([^)]+)\)", link, text).replace("`", "")


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence.

    A sentence ends at a full stop outside brackets followed by a space and a capital or code (``. `auto```).
    """
    depth = 0
    for i, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        after = text[i + 2 : i + 3]
        if char == "." and depth == 0 and text[i + 1 : i + 2] == " " and (after.isupper() or after == "`"):
            return text[:i]
    return text


@dataclass(frozen=True, kw_only=True)
class Section:
    """One section of the options: a frozen dataclass of :func:`option` fields, and where each came from.

    A section checks what its options say together in ``__post_init__`` (an :class:`OptionError`).
    """

    #: Its name in :data:`GROUPS`, the field of :class:`rollcall.options.Options` holding it.
    GROUP: ClassVar[GroupName]
    #: Where each option's value came from: its flag, its environment variable, ``ini rollcall_<name>``; an
    #: option left at its default is not in it.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def source(self, name: str) -> str:
        """Where option ``name``'s value came from: its flag, its variable, its ini key, or ``default``."""
        return self.sources.get(name, "default")

    def given(self, name: str) -> bool:
        """Whether the user set option ``name`` (flag, variable or ini file), rather than its default."""
        return self.source(name) != "default"

    @classmethod
    def specs(cls) -> tuple[Spec, ...]:
        """Its options, in declaration order, each with its group."""
        return tuple(
            replace(f.metadata["option"], group=cls.GROUP) for f in fields(cls) if "option" in f.metadata
        )
