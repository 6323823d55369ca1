"""The baselines' options: the release gate against a baseline file or the history of past runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rollcall.options.declare import GroupName, Section, option
from rollcall.options.values import OptionError, percent, positive_float, whole


@dataclass(frozen=True, kw_only=True)
class BaselineOptions(Section):
    """The reference a run's figures are gated against, and the record of new ones."""

    GROUP: ClassVar[GroupName] = "baselines"

    baseline: str | None = option(
        "--baseline",
        str,
        None,
        "JSON baseline to gate throughput, epoch time, compute time and world bus bandwidth against",
        "FILE",
    )
    max_regression: float = option(
        "--max-regression",
        percent,
        10.0,
        (
            "fail when total or median-rank throughput or the world's bus bandwidth falls, or epoch time "
            "or the median compute time rises, more than PCT% against the baseline"
        ),
        "PCT",
    )
    baseline_history: str | None = option(
        "--baseline-history",
        str,
        None,
        (
            "instead of `--baseline`: each configuration's reference is the median of its last "
            "`--baseline-runs` sound runs in SOURCE (a directory of past artifacts, or a glob of "
            "`results.json` files); a figure regresses only past both `--max-regression` and "
            "`--baseline-mads` spreads ([gating.md](gating.md))"
        ),
        "SOURCE",
    )
    baseline_runs: int = option(
        "--baseline-runs",
        whole(1),
        10,
        "how many of the latest sound runs of a configuration make its reference",
        "N",
    )
    baseline_mads: float = option(
        "--baseline-mads",
        positive_float,
        3.0,
        (
            "with `--baseline-history`, a figure must also be worse than the median by more than K "
            "spreads (1.4826 x MAD, a robust standard deviation) to regress"
        ),
        "K",
    )
    write_baseline: str | None = option(
        "--write-baseline",
        str,
        None,
        "record each sound run's figures as the new baseline in FILE (merged by key)",
        "FILE",
        file="an act of one session; pinned in a file, every sound run would rewrite the baseline",
    )

    def __post_init__(self) -> None:
        if self.baseline and self.baseline_history:
            raise OptionError(
                f"--baseline {self.baseline} and --baseline-history {self.baseline_history}: "
                "the gate takes one reference; pass one of them"
            )
