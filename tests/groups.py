"""The integration tests that share something fixed on the machine run on one pytest-xdist worker.

``make test`` runs ``tests/local tests/browser tests/cluster tests/k8s tests/real tests/slurm`` on several
workers with ``--dist loadgroup``: a test goes to whichever worker is free, but the tests of one group go to
one worker, one after the other, in their order. :data:`GROUPS` names the directories whose tests share
something that exists once per machine, or that every test of theirs uses and that costs much to start:

- tests/real: the real nodes' bridge, network namespaces, addresses and cgroups (``hack/realnodes.sh``);
- tests/slurm: the test Slurm's ports (``tests/slurm/conftest.py``);
- tests/cluster and tests/k8s: one control plane for both (a worker of their own would start another: each
  worker's cluster is named by its pid), as most of their time is spent waiting on it, not computing.

The other tests share nothing of the sort: their runs take free ports and a temporary directory of their
own, and what a test checks was left behind is its own runs' (by their run id, which holds the pid of the
suite that started them).

pytest-xdist's own ``loadgroup`` reads ``xdist_group`` marks by renaming each test's node id, which pytest 9.2
no longer lets it do (the marks are then silently ignored): the groups here are the directories', read from
the node ids by the scheduler itself (:func:`pytest_xdist_make_scheduler`, which each grouped directory's
conftest imports so that the controller has it, whatever else is run beside them).
"""

from __future__ import annotations

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

#: The groups, by directory (relative to the repository's root, which pytest's node ids are relative to).
GROUPS = {
    "tests/real/": "real-nodes",
    "tests/slurm/": "slurm",
    "tests/cluster/": "control-plane",
    "tests/k8s/": "control-plane",
}


def group_of(nodeid: str) -> str | None:
    """The group of the test ``nodeid``, or None if it has none."""
    return next((group for prefix, group in GROUPS.items() if nodeid.startswith(prefix)), None)


class DirectoryGroups(LoadScopeScheduling):
    """xdist's scope scheduling with a grouped test's scope its group, any other test's its own node id.

    Scopes go to the workers largest first (``--loadscope-reorder``, the default): the groups start at once.
    """

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadScopeScheduling | None:
    """``--dist loadgroup``: :class:`DirectoryGroups`; any other mode: xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return DirectoryGroups(config, log)
