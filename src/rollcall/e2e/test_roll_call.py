"""The roll call: a distributed BERT job on the chosen backend, and every rank must answer.

Runs on any backend (``--backend local|kubernetes|slurm``): provision, wait, collect each node's log into
``artifacts/<test>/``, parse, and assert the verdict. Installed with the package, so a wheel runs it from
anywhere: ``rollcall run --nodes 2`` (``pytest --pyargs rollcall.e2e --nodes 2``); a checkout's
``tests/e2e`` is this same test.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rollcall.reports import TestRecord


# Its deadline is the session's own (rollcall.suite.deadline_of), which the plugin arms over any ini timeout.
@pytest.mark.rollcall
def test_every_rank_answers_the_roll_call(rollcall: Callable[..., "TestRecord"]) -> None:
    """Every expected rank reported its throughput, its epoch times and its completion."""
    record = rollcall()
    result = record.result
    if not result.passed:  # the verdict's own words, without this test's source or a dump of the result
        pytest.fail(result.message(), pytrace=False)
