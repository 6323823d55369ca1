"""The tests' one reading of ``CI``: whether a missing prerequisite fails (in CI) or skips (elsewhere)."""

from __future__ import annotations

import os

#: The values of ``CI`` that mean a CI run (``CI=false``, ``CI=0`` or an empty one do not).
TRUE_VALUES = frozenset({"1", "true", "yes", "on"})


def ci() -> bool:
    """Whether this is a CI run: ``CI`` is set to a true value (GitHub Actions and GitLab set ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() in TRUE_VALUES
