"""The tests' one way to wait for a condition: re-test it until it holds, under a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    what: str | Callable[[], str], probe: Callable[[], T | None], timeout: float = 60, every: float = 0.2
) -> T:
    """Return ``probe()``'s first truthy value; fail naming ``what`` after ``timeout`` seconds.

    ``what`` may be a function, called only on failure (to describe the state things were left in).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described}")
        time.sleep(every)
