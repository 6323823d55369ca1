"""Each node's output file followed into its sink as it grows, and whether the node's task has begun.

Slurm writes each node's task output into the job's directory (``srun --output=node-%n.out``), on storage
every node shares; the follower copies it into the collector as it grows, and reads it once more through a
fresh open when stopped (NFS's close-to-open consistency). The first line of the task's own marks that its
task has begun (:func:`.arrivals.task_began`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from rollcall.backends.slurm.arrivals import task_began
from rollcall.collect import LogSink


class Follower(threading.Thread):
    """Copies one node's output file into its sink as it grows, until stopped and read to the end."""

    def __init__(self, path: Path, sink: LogSink) -> None:
        super().__init__(daemon=True, name=f"rollcall-slurm-{path.name}")
        self.path, self.sink = path, sink
        self.stopping = threading.Event()
        #: Set at the first line of the node's task's own (:func:`.arrivals.task_began`).
        self.began = threading.Event()
        self._head = b""

    def run(self) -> None:
        """Copy until stopped; the sink is closed at the end."""
        try:
            self._copy()
        except ValueError:  # the collector closed the sink first (a run interrupted under --keep)
            return
        finally:
            self.sink.close()

    def _copy(self) -> None:
        while not self.path.exists():
            if self.stopping.wait(0.2) and not self.path.exists():
                return  # the job ended before this node wrote anything
        with self.path.open("rb") as f:
            while True:
                chunk = f.read(1 << 16)
                if chunk:
                    self._note(chunk)
                    self.sink.write(chunk)
                    continue
                if self.stopping.is_set():  # stopped, at the end: read what came meanwhile
                    # through a fresh open, which sees what the node wrote (NFS's close-to-open consistency)
                    with self.path.open("rb") as again:
                        again.seek(f.tell())
                        if rest := again.read():
                            self._note(rest)
                            self.sink.write(rest)
                    return
                self.stopping.wait(0.2)

    def _note(self, chunk: bytes) -> None:
        """Whether the node's task has begun, from the first 64 KiB of its output."""
        if not self.began.is_set() and len(self._head) < 1 << 16:
            self._head += chunk[: (1 << 16) - len(self._head)]
            if task_began(self._head) or len(self._head) >= 1 << 16:  # no import says that much
                self.began.set()


__all__ = ["Follower"]
