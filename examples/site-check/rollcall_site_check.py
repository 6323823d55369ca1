"""A site's own rollcall check: the dataset mount holds at least the bytes the site requires.

Installed beside rollcall (``pip install ./examples/site-check``), pytest loads it through its ``pytest11``
entry point. Its options, each also an ini key::

    --site-dataset PATH         (ini site_dataset) the dataset's mount: a file, or a directory of files
    --site-dataset-min-bytes N  (ini site_dataset_min_bytes) the least it may hold, in bytes

With ``--site-dataset`` given, every run is judged by ``dataset_size`` after rollcall's own checks: a mount
that is missing or holds fewer than N bytes fails the run, the cluster's, naming no rank (the mount is the
site's, not a rank's). It reads the path as the machine that runs pytest sees it, when each run is judged:
that machine must share the nodes' mount (the local backend's nodes, a login node on a shared file system).
Its report (``pytest_rollcall_report``) adds one line per test to ``site-check.txt`` beside rollcall's own
reports. The contract both hooks meet is rollcall's ``docs/extending.md``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollcall.checks.runview import Check, RunView
from rollcall.verdict import Blame, Kind, Owner, Problem, RankState, Verdict

#: The one kind of problem this check raises: the cluster's, as a mount the cluster provides.
DATASET_TOO_SMALL = Kind(
    "dataset_too_small",
    RankState.FAILED,
    Blame(Owner.CLUSTER, "the site's dataset mount is missing or short"),
)
#: The file this plugin's report writes into rollcall's artifacts directory.
REPORT = "site-check.txt"


def pytest_addoption(parser: pytest.Parser) -> None:
    """The dataset's path and the least it may hold, as options and ini keys."""
    group = parser.getgroup("site-check", "the site's own rollcall check")
    group.addoption("--site-dataset", default=None, metavar="PATH", help="the dataset's mount (file or dir)")
    group.addoption("--site-dataset-min-bytes", default=None, metavar="N", help="the least it may hold")
    parser.addini("site_dataset", "the dataset's mount (as --site-dataset)", default="")
    parser.addini("site_dataset_min_bytes", "the least it may hold (as --site-dataset-min-bytes)", default="")


def _setting(config: pytest.Config, name: str) -> str:
    """Option ``--site-<name>``, else its ini key."""
    given = config.getoption(f"site_{name}")
    return str(given if given is not None else config.getini(f"site_{name}")).strip()


@pytest.hookimpl(optionalhook=True)
def pytest_rollcall_checks(config: pytest.Config) -> list[Check] | None:
    """``dataset_size`` when ``--site-dataset`` is given; a bad byte count is a usage error."""
    path = _setting(config, "dataset")
    if not path:
        return None
    raw = _setting(config, "dataset_min_bytes") or "1"
    try:
        floor = int(raw)
    except ValueError:
        floor = 0
    if floor < 1:
        raise pytest.UsageError(
            f"--site-dataset-min-bytes {raw!r}: give a whole number of bytes above 0 (e.g. 1000000000)"
        )
    dataset = Path(path)

    def dataset_size(run: RunView) -> list[Problem]:
        """The dataset mount must hold at least ``floor`` bytes."""
        held = _bytes(dataset)
        if held is None:
            why = f"dataset mount {dataset} is not there (--site-dataset)"
        elif held < floor:
            why = f"dataset mount {dataset} holds {held} bytes, under the {floor} the site requires"
        else:
            return []
        return [Problem(DATASET_TOO_SMALL, why)]

    return [
        Check(
            dataset_size,
            detects="a dataset mount that is missing or smaller than the site requires",
            reads="the path --site-dataset, as the machine running pytest sees it",
            kinds=(DATASET_TOO_SMALL,),
        )
    ]


def _bytes(path: Path) -> int | None:
    """What ``path`` holds: a file's size, or its files' under a directory; None when it is not there."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return None
    return sum((Path(top) / name).stat().st_size for top, _, names in os.walk(path) for name in names)


@pytest.hookimpl(optionalhook=True)
def pytest_rollcall_report(
    config: pytest.Config, test_id: str, verdict: Verdict, artifacts_dir: Path
) -> None:
    """With ``--site-dataset``, one line per test in ``site-check.txt``: its outcome, what the check found."""
    if not _setting(config, "dataset"):
        return
    found = [p.message for p in verdict.findings if p.kind is DATASET_TOO_SMALL]
    line = f"{test_id}: {verdict.outcome.value}: {'; '.join(found) or 'dataset mount as required'}\n"
    with (artifacts_dir / REPORT).open("a") as out:
        out.write(line)
