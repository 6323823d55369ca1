"""The local backend's tests: real torchrun runs of the workload on this machine's CPU.

Under pytest-xdist (``make test``) each test goes to whichever worker is free (:mod:`tests.groups`), in the
order they are collected. The tests that hold healthy ranks to a few seconds' margin of their bounds, or that
compare one run's speed with other runs' (:data:`LAST`), are collected last: they run when most of the other
tests' runs are done and fewer share the machine's cores, not while the whole session starts at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
#: The modules collected after every other test.
LAST = ("test_baseline_history_live.py", "test_uneven.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(
        key=lambda item: item.path.parent == HERE and item.path.name in LAST
    )  # stable: the rest keep order
