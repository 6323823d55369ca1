"""The suite's options, in sections, each option declared once and also read from ``ROLLCALL_<NAME>``.

:class:`Options` is one frozen section per concern (:data:`GROUPS`): :attr:`~Options.job`,
:attr:`~Options.kubernetes`, :attr:`~Options.slurm`, :attr:`~Options.judging`, :attr:`~Options.baselines`,
:attr:`~Options.recovery`, :attr:`~Options.reports`, each a typed dataclass of its own module whose every
field is declared by :func:`~rollcall.options.declare.option` (its flag, how to parse it, its default and
help). Each backend is given its own section only (``--backend kubernetes`` reads :attr:`Options.kubernetes`).
How values are read (durations ``90``, ``90s``, ``30m``, ``1h`` alike, choices, ``KEY=VALUE``) is
:mod:`rollcall.options.values`. Every option also reads its environment variable (``--job-timeout`` reads
``ROLLCALL_JOB_TIMEOUT``) and, unless its declaration says why it cannot, an ini key
(``rollcall_job_timeout``, in ``[tool.pytest.ini_options]`` or ``pytest.ini``). :data:`OPTIONS`, the table the
pytest plugin registers, is derived from the sections, and :data:`DEFAULTS` holds every default. Adding an
option is adding one field.

Precedence: the command line, then the environment variable, then the ini file, then the default. A bad
value raises :class:`OptionError` naming the option, where the value came from, and what to write instead.
``python -m rollcall.options --markdown`` prints the reference, ``docs/options.md``
(:mod:`rollcall.options.reference`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollcall.options.baselines import BaselineOptions
from rollcall.options.declare import GROUPS, GroupName, Section, Spec
from rollcall.options.job import JobOptions
from rollcall.options.judging import JudgingOptions
from rollcall.options.kubernetes import KubernetesOptions
from rollcall.options.recovery import RecoveryOptions
from rollcall.options.reports import ReportOptions
from rollcall.options.slurm import SlurmOptions
from rollcall.options.values import OptionError, env_name, shell_words
from rollcall.secrets import redact

__all__ = [
    "DEFAULTS",
    "GROUPS",
    "OPTIONS",
    "BaselineOptions",
    "JobOptions",
    "JudgingOptions",
    "KubernetesOptions",
    "OptionError",
    "Options",
    "RecoveryOptions",
    "ReportOptions",
    "SlurmOptions",
    "Spec",
    "env_name",
    "former_flags",
    "resolve",
]


@dataclass(frozen=True)
class Options:
    """The validated options of one pytest session: one section per concern, named as its group."""

    job: JobOptions = field(default_factory=JobOptions)
    kubernetes: KubernetesOptions = field(default_factory=KubernetesOptions)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    judging: JudgingOptions = field(default_factory=JudgingOptions)
    baselines: BaselineOptions = field(default_factory=BaselineOptions)
    recovery: RecoveryOptions = field(default_factory=RecoveryOptions)
    reports: ReportOptions = field(default_factory=ReportOptions)

    def section(self, group: str) -> Section:
        """The section named ``group`` (``kubernetes``: :attr:`kubernetes`); AttributeError if none is."""
        found: Section = getattr(self, group)
        return found

    def source(self, name: str) -> str:
        """Where option ``name``'s value came from: its flag, its variable, its ini key, or ``default``."""
        return self.section(_GROUP_OF[name]).source(name)

    def given(self, name: str) -> bool:
        """Whether the user set option ``name`` (flag, variable or ini file), rather than its default."""
        return self.source(name) != "default"

    @property
    def sources(self) -> dict[str, str]:
        """Where each option's value came from, by name (``default`` for those left at it)."""
        return {spec.name: self.source(spec.name) for spec in OPTIONS}


#: Each section's class, by its group, in the groups' order.
SECTIONS: dict[GroupName, type[Section]] = {
    "job": JobOptions,
    "kubernetes": KubernetesOptions,
    "slurm": SlurmOptions,
    "judging": JudgingOptions,
    "baselines": BaselineOptions,
    "recovery": RecoveryOptions,
    "reports": ReportOptions,
}
assert tuple(SECTIONS) == tuple(g for g, _ in GROUPS)
#: Every option, group by group, each in declaration order (what the plugin registers).
OPTIONS: tuple[Spec, ...] = tuple(spec for section in SECTIONS.values() for spec in section.specs())
_GROUP_OF: dict[str, GroupName] = {spec.name: spec.group for spec in OPTIONS}
#: Every option at its default.
DEFAULTS = Options()


def former_flags(args: Sequence[str]) -> list[tuple[str, Spec]]:
    """Each former flag given in ``args``, with the option it now is (``--retries``: ``--job-retries``)."""
    given = {arg.split("=", 1)[0] for arg in args if arg.startswith("--")}
    return [(spec.formerly, spec) for spec in OPTIONS if spec.formerly and spec.formerly in given]


def resolve(
    cli: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    ini: Mapping[str, str | Sequence[str]] | None = None,
) -> Options:
    """Options from the command line, the environment, the ini file and the defaults, in that order.

    ``cli`` and ``ini`` are by option name; a value ``None``, ``""`` or empty is not given (what argparse and
    pytest's ``getini`` return then). Only options with an ini key read ``ini``. What a section's options
    say together is checked by the section (an :class:`OptionError`).
    """
    environ = os.environ if environ is None else environ
    ini = {} if ini is None else ini
    sections: dict[str, Section] = {}
    for group, section in SECTIONS.items():
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for spec in section.specs():
            given = cli.get(spec.name)
            if given not in (None, False, [], ()):
                raw, source = given, spec.flag
            elif spec.env in environ:
                raw, source = environ[spec.env], spec.env
            elif spec.former_env and spec.former_env in environ:
                raw, source = environ[spec.former_env], spec.former_env
            elif spec.ini_name and ini.get(spec.name) not in (None, "", [], ()):
                raw, source = ini[spec.name], f"ini {spec.ini_name}"
            else:
                continue
            sources[spec.name] = source
            values[spec.name] = _convert(spec, raw, source)
        sections[group] = section(**values, sources=sources)
    return Options(**sections)  # type: ignore[arg-type]


def _convert(spec: Spec, raw: Any, source: str) -> Any:
    if spec.switch and isinstance(raw, bool):
        return raw
    try:
        if spec.multiple:
            words = shell_words(raw) if isinstance(raw, str) else tuple(raw)
            return spec.parse(words)
        return spec.parse(raw)
    except ValueError as exc:
        shown = " ".join(map(shlex.quote, raw)) if isinstance(raw, list | tuple) else raw
        shown = redact(shown) if spec.environment else shown  # a pair of the workload's environment
        raise OptionError(
            f"invalid {spec.flag} value {shown!r} (from {source}): {exc}; use {spec.usage}"
        ) from None


def given_environment(options: Options, cli: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """The options given (by flag or variable), as the ``ROLLCALL_*`` variables a suite elsewhere reads.

    Each keeps the text it was given in, so that suite parses it as this one did (``rollcall render
    --cronjob``: the CronJob's pod). An option from the ini file stays with the ini file.
    """
    env: dict[str, str] = {}
    for spec in OPTIONS:
        source = options.source(spec.name)
        if source in (spec.env, spec.former_env):
            env[spec.env] = environ[source]
        elif source == spec.flag:
            given = cli[spec.name]
            if spec.switch:
                env[spec.env] = "true"
            elif spec.multiple:
                env[spec.env] = shlex.join(given)
            else:
                env[spec.env] = str(given)
    return env
