"""The workload's secrets: passed by reference, their values written nowhere.

A value of ``--workload-env`` whose name looks secret (:func:`is_secret`: ``TOKEN``, ``KEY``, ``PASSWORD``,
``SECRET`` or ``CREDENTIAL`` as a part of the name, :data:`SECRET_NAME`) and every value of
``--workload-secret`` reach the workload's environment and nothing else. Each backend passes them its own way:

- Kubernetes: a Secret of the run's own namespace, made by the suite and deleted with the run, that the
  training container's environment names (``secretKeyRef``); a ``--workload-secret NAME=NAMESPACE/SECRET/KEY``
  is read from that Secret (a right to ``get`` it alone, given in its own namespace) and copied there.
- Slurm: a file of the artifacts directory readable by the job's user alone (0600, made anew), which the
  batch script reads and removes before anything else runs.
- local: the process's environment only.

Every artifact, log excerpt and report that would hold such a value writes :data:`REDACTED` instead: each
writer passes its text through :func:`redact` (``KEY=VALUE`` words, a command line) or its environment
through :func:`redact_env`, both over the one predicate :func:`is_secret`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: What an artifact says in place of a secret's value.
REDACTED = "<redacted>"
#: A variable's name that looks secret: one of these words as a part of it, between ``_``, ``-``, ``.`` or
#: its ends (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB-PASSWORD``; not ``MONKEY`` or ``TOKENIZERS``).
SECRET_NAME = re.compile(r"(?:^|[_.-])(?:TOKEN|KEY|PASSWORD|SECRET|CREDENTIAL)S?(?:$|[_.-])", re.IGNORECASE)
#: A ``NAME=`` in text (a command line, a variable's text), and its value: up to a space outside quotes.
_NAME = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=")
_VALUE = re.compile(r"(?:'[^']*'|\"[^\"]*\"|[^\s'\"])*")


def is_secret(name: str, declared: Collection[str] = ()) -> bool:
    """Whether the variable ``name`` holds a secret: it looks so (:data:`SECRET_NAME`), or is ``declared``."""
    return name in declared or SECRET_NAME.search(name) is not None


def redact(text: str, declared: Collection[str] = ()) -> str:
    """``text`` with the value of each ``NAME=VALUE`` word whose name :func:`is_secret` :data:`REDACTED`."""
    said, kept, at = [], 0, 0
    while (m := _NAME.search(text, at)) is not None:
        at = m.end()  # a pair inside a value (``-o rollcall_workload_env=HF_TOKEN=...``) is read too
        if is_secret(m[1], declared):
            end = _VALUE.match(text, at)
            said.append(text[kept:at] + REDACTED)
            kept = at = end.end() if end else at
    return "".join(said) + text[kept:]


def redact_argv(argv: Sequence[str], declared: Collection[str] = ()) -> list[str]:
    """A command line's words, each from a ``NAME=`` whose name :func:`is_secret` to its end :data:`REDACTED`.

    A word is one value whatever it holds (spaces, quotes): ``--workload-env 'HF_TOKEN=a b'`` is one word.
    """
    said = []
    for word in argv:
        found = next((m for m in _NAME.finditer(word) if is_secret(m[1], declared)), None)
        said.append(word if found is None else word[: found.end()] + REDACTED)
    return said


def redact_env(env: Mapping[str, str], declared: Collection[str] = ()) -> dict[str, str]:
    """``env`` with the value of each variable that :func:`is_secret` as :data:`REDACTED`."""
    return {name: REDACTED if is_secret(name, declared) else value for name, value in env.items()}


def secret_env(
    env: Mapping[str, str], declared: Collection[str] = ()
) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` parted: the variables that may be written, and those that :func:`is_secret`."""
    public = {k: v for k, v in env.items() if not is_secret(k, declared)}
    return public, {k: v for k, v in env.items() if k not in public}


@dataclass(frozen=True)
class FromEnvironment:
    """A secret's value from the suite's own environment: the variable of the same name."""

    def __str__(self) -> str:
        return "the suite's environment"


@dataclass(frozen=True)
class FromSecret:
    """A secret's value from the key ``key`` of the Kubernetes Secret ``namespace/secret``."""

    namespace: str
    secret: str
    key: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.secret}/{self.key}"


SecretSource = FromEnvironment | FromSecret
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_FORM = "NAME (its value from the suite's own environment) or NAME=NAMESPACE/SECRET/KEY (a Kubernetes Secret)"


def parse_secret(word: str) -> tuple[str, SecretSource]:
    """``--workload-secret``'s word, ``NAME`` or ``NAME=NAMESPACE/SECRET/KEY``; else ValueError saying why.

    The value itself is never part of the word: a command line and the ini file hold only where it comes from.
    """
    name, eq, source = word.partition("=")
    if not _ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable's name; give {_FORM}")
    if not eq:
        return name, FromEnvironment()
    parts = source.split("/")
    if len(parts) != 3:
        raise ValueError(
            f"{name}=...: what follows the = is not NAMESPACE/SECRET/KEY (a value is never given here: "
            f"put it in the suite's environment as {name}); give {_FORM}"
        )
    namespace, secret, key = parts
    for what, text, form in (("namespace", namespace, _DNS), ("Secret", secret, _DNS), ("key", key, _KEY)):
        if not form.match(text) or (what == "namespace" and "." in text):
            raise ValueError(f"{name}=...: the {what} is not a Kubernetes {what} name; give {_FORM}")
    return name, FromSecret(namespace, secret, key)


def no_kubernetes_secret(secrets: Mapping[str, SecretSource], backend: str) -> None:
    """ValueError naming a Kubernetes Secret among ``secrets``, which the ``backend`` backend cannot read."""
    for name, source in secrets.items():
        if isinstance(source, FromSecret):
            raise ValueError(
                f"--workload-secret {name}={source}: a Kubernetes Secret, which the {backend} backend cannot "
                f"read; put its value in the suite's environment as {name} and give --workload-secret {name}"
            )


__all__ = [
    "REDACTED",
    "SECRET_NAME",
    "FromEnvironment",
    "FromSecret",
    "SecretSource",
    "is_secret",
    "no_kubernetes_secret",
    "parse_secret",
    "redact",
    "redact_argv",
    "redact_env",
    "secret_env",
]
