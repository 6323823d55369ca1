"""What NCCL's log says of EFA: the clues, each pod's evidence, and the check over them.

With EFA requested, NCCL must say it selected the OFI plugin's ``efa`` provider, because it silently falls
back to TCP sockets when the plugin does not load. :class:`EfaEvidence` reads each pod's ``NCCL_DEBUG=INFO``
lines as its log is followed (:mod:`.podlogs`); :data:`NET_CLUES` turns the lines that say why (the plugin
not found, libfabric missing, no EFA device in the container, another provider chosen) into what was
missing and the fix.

:func:`check` turns the pods' evidence into the observation :class:`~rollcall.backends.EfaUse` that the
job's status carries; the backend reports it and never fails the job for it: :func:`rollcall.judge.efa`
alone makes it a problem.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rollcall.backends import EfaUse


@dataclass(frozen=True)
class NetClue:
    """A kind of NCCL, aws-ofi-nccl or libfabric log line that says why NCCL did not get EFA.

    Attributes:
        pattern: matches the line (the wordings of NCCL 2.4 to 2.27 and aws-ofi-nccl 1.x).
        missing: what was missing.
        fix: what to do about it.
    """

    pattern: re.Pattern[bytes]
    missing: str
    fix: str


_EFA_SOFTWARE = (
    "install the EFA software in the image (efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify, "
    "as images/bert-training/Dockerfile.nvidia does)"
)
#: The clues, most specific first: a line is taken by the first clue that matches it.
NET_CLUES: tuple[NetClue, ...] = (
    NetClue(
        # the plugin is there but its dependency is not: "NET/Plugin : dlerror=libfabric.so.1: cannot open..."
        re.compile(rb"libfabric\.so[.\d]*: cannot open shared object file"),
        "libfabric (libfabric.so.1), which the aws-ofi-nccl plugin links",
        _EFA_SOFTWARE + " and keep /opt/amazon/efa/lib on LD_LIBRARY_PATH",
    ),
    NetClue(
        # 2.26: "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."
        # 2.19: "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: ... No plugin found"
        # 2.18: "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open ..."
        # 2.4:  "NET/Plugin : No plugin found (libnccl-net.so)."
        re.compile(
            rb"NET/Plugin ?: ?(?:Could not find: libnccl-net\S*?\.so|No plugin found|"
            rb"Plugin load \(libnccl-net\S*?\.so\) returned|dlerror=libnccl-net\S*?\.so: cannot open)"
        ),
        "the aws-ofi-nccl network plugin (libnccl-net.so)",
        _EFA_SOFTWARE + ", which puts aws-ofi-nccl in /opt/amazon/ofi-nccl/lib; keep that directory on "
        "LD_LIBRARY_PATH, or set NCCL_NET_PLUGIN=ofi where the plugin is named libnccl-net-ofi.so",
    ),
    NetClue(
        # aws-ofi-nccl: "NET/OFI No eligible providers were found", then "NET/OFI Unable to find a protocol
        # that worked.  Failing initialization."; libfabric: "fi_getinfo: provider efa output empty list"
        re.compile(
            rb"NET/OFI No eligible providers were found|NET/OFI Unable to find a protocol that worked|"
            rb"fi_getinfo: provider efa output empty list"
        ),
        "an EFA device in the container (libfabric's efa provider found none)",
        "request the node's EFA interfaces (vpc.amazonaws.com/efa, --efa on) and check that the EFA device "
        "plugin is running and puts /dev/infiniband/uverbs* into the pod; the image's libfabric must be the "
        "EFA installer's (/opt/amazon/efa)",
    ),
    NetClue(
        re.compile(rb"NET/OFI Selected [Pp]rovider is (?!efa\b)[\w;]+"),
        "libfabric's efa provider (the plugin chose another)",
        "leave FI_PROVIDER=efa as rollcall sets it (check --workload-env)",
    ),
    NetClue(
        re.compile(rb"Failed to initialize any NET plugin"),
        "any network NCCL may use: NCCL_NET names one that did not load",
        "see the clues before it, or unset NCCL_NET to let NCCL choose",
    ),
)


@dataclass(frozen=True)
class NetCause:
    """One clue found in a pod's log, with the words of the line that matched it."""

    clue: NetClue
    line: str

    def __str__(self) -> str:
        return f"{self.clue.missing} ({self.line!r}): {self.clue.fix}"


@dataclass
class EfaEvidence:
    """What one pod's NCCL lines said about the network it chose, and why it did not get EFA."""

    efa: bool = False
    fallback: str | None = None
    causes: list[NetCause] = field(default_factory=list)

    USED = re.compile(rb"NET/OFI Selected [Pp]rovider is efa\b")
    FELL_BACK = re.compile(rb"Using network Socket|NET/OFI Selected [Pp]rovider is (?!efa\b)\S+")

    def scan(self, data: bytes) -> None:
        """Read complete lines of the pod's log."""
        if b"NCCL" not in data and b"NET/" not in data and b"fi_getinfo" not in data:
            return
        if not self.efa and self.USED.search(data):
            self.efa = True
        if self.fallback is None:
            m = self.FELL_BACK.search(data)
            if m:
                self.fallback = m.group(0).decode(errors="replace")
        for line in data.splitlines():
            if b"NET" not in line and b"fi_getinfo" not in line and b"libfabric" not in line:
                continue
            for clue in NET_CLUES:
                m = clue.pattern.search(line)
                if m:
                    if all(c.clue is not clue for c in self.causes):
                        self.causes.append(NetCause(clue, m.group(0).decode(errors="replace")))
                    break


def explain(causes: Mapping[str, Sequence[str]]) -> str:
    """The tail of an EFA failure: each cause once, with the pods that logged it (``causes``: per pod)."""
    if not any(causes.values()):
        return "; no NCCL line said why (NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,NET shows the plugin's)"
    pods: dict[str, list[str]] = {}
    for pod, texts in causes.items():
        for text in texts:
            pods.setdefault(text, []).append(pod)
    return "".join(f"; missing {text} [{', '.join(names)}]" for text, names in pods.items())


def check(evidence: Mapping[str, EfaEvidence], *, required: bool) -> EfaUse:
    """What the pods' NCCL lines showed of EFA, with the failure's text when NCCL did not use it.

    Args:
        evidence: each pod's evidence, by pod name.
        required: whether a pod that never logged NCCL selecting EFA fails the run (NCCL on CUDA logs the
            selection; the Neuron runtime's NCCL need not).

    Returns:
        The observation; its ``reason`` says what was missing and the fix when :attr:`~EfaUse.failed`.
    """
    fell_back = {p: e.fallback for p, e in sorted(evidence.items()) if e.fallback}
    unproven = tuple(sorted(p for p, e in evidence.items() if not e.efa and not e.fallback))
    causes = {p: tuple(map(str, e.causes)) for p, e in sorted(evidence.items()) if e.causes and not e.efa}
    reason = ""
    if fell_back:
        reason = (
            f"EFA was requested but NCCL did not use it on {len(fell_back)} pod(s): it fell back to "
            "TCP sockets" + explain(causes)
        )
    elif required and unproven:
        reason = (
            f"EFA was requested but {len(unproven)} pod(s) never logged NCCL selecting it "
            "('NET/OFI Selected provider is efa' with NCCL_DEBUG=INFO): "
            + ", ".join(unproven)
            + explain(causes)
        )
    return EfaUse(fell_back, unproven, required=required, causes=causes, reason=reason)


def details(use: EfaUse) -> list[str]:
    """The lines a report shows under the run: each fallback's NCCL line, or EFA use not proven."""
    lines = [f"{p}: {line!r}" for p, line in use.fell_back.items()]
    if not use.failed and use.unproven:
        lines.append(
            f"EFA use not proven on {len(use.unproven)} pod(s): no 'NET/OFI Selected provider is efa' line"
        )
    return lines
