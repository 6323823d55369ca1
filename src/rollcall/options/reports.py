"""The reports' options: where artifacts go, the live roll call, the session's metrics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rollcall.options.declare import DURATION, GroupName, Section, option
from rollcall.options.values import duration_or_off


def prom_file(text: str) -> Path:
    """A file name ending in ``.prom``, the only files node_exporter's textfile collector reads."""
    path = Path(text)
    if path.suffix != ".prom" or not path.stem:
        raise ValueError("must name a file ending in .prom (node_exporter's textfile collector reads *.prom)")
    if path.is_dir():
        raise ValueError("is a directory; name a file in it, e.g. DIR/rollcall.prom")
    return path


def http_url(text: str) -> str:
    """An http(s) URL with a host (``http://127.0.0.1:9091``)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http(s) URL with a host, e.g. http://pushgateway:9091")
    return text


def label_value(text: str) -> str:
    """A Prometheus grouping key's value: a word without spaces or ``/``."""
    if not text or any(c.isspace() or c == "/" for c in text):
        raise ValueError("must be a non-empty word without spaces or '/'")
    return text


@dataclass(frozen=True, kw_only=True)
class ReportOptions(Section):
    """Where the session's reports and metrics go, and how often the live roll call is printed."""

    GROUP: ClassVar[GroupName] = "reports"

    artifacts_dir: Path = option(
        "--artifacts-dir",
        Path,
        Path("artifacts"),
        "where the per-pod logs and reports go",
        "DIR",
    )
    progress_every: float = option(
        "--progress-every",
        duration_or_off,
        30.0,
        (
            "the live roll call while a job runs (ranks started, epochs done min-max, throughput and "
            "complete out of the world, the slowest rank so far): on a terminal one line updated every "
            "second; otherwise a plain line every DURATION (CI logs). The state at the job's end is "
            "always shown; `0` or `off` turns it off; not shown by xdist workers, whose output pytest "
            "does not show"
        ),
        DURATION,
    )
    metrics_file: Path | None = option(
        "--metrics-file",
        prom_file,
        None,
        "write the session's metrics in Prometheus' text format, atomically, for node_exporter's "
        "textfile collector (the name must end in `.prom`; under xdist each worker writes "
        "`NAME.gwN.prom`)",
        "PATH",
    )
    pushgateway: str | None = option(
        "--pushgateway",
        http_url,
        None,
        (
            "push the session's metrics to the Prometheus Pushgateway at URL, one group per configuration "
            "(grouping key `job`, `cluster`, `config`); a push that fails is a warning in the terminal "
            "summary, never a changed verdict"
        ),
        "URL",
    )
    pushgateway_job: str = option(
        "--pushgateway-job",
        label_value,
        "rollcall",
        "the `job` of `--pushgateway`'s grouping key (`cluster` is `--context`, else the backend's name)",
        "NAME",
    )
