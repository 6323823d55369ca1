"""The roll call, as the package installs it (:mod:`rollcall.e2e.test_roll_call`): ``pytest tests/e2e``."""

import pytest

from rollcall.e2e.test_roll_call import test_every_rank_answers_the_roll_call

__all__ = ["test_every_rank_answers_the_roll_call"]

pytestmark = pytest.mark.slow
