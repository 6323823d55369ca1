"""Following a container's log: timestamps stripped, resumed after a broken stream without loss or repeats.

A connection reset in the middle of a log stream is not something the local control plane can be made to
produce on cue, so these tests script the server's answers.
"""

import threading

import urllib3
from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.efa import EfaEvidence
from rollcall.backends.kubernetes.podlogs import LogFollower, timestamp_key
from rollcall.collect import Collector


class Response:
    """A streaming response that yields ``chunks``, then breaks with ``error`` if given."""

    def __init__(self, chunks, error=None, block=None):
        self.chunks, self.error, self.block = chunks, error, block
        self.shut = threading.Event()

    def stream(self, amt, decode_content=False):
        yield from self.chunks
        if self.block is not None:
            self.shut.wait(5)
            raise urllib3.exceptions.ProtocolError("connection shut down")
        if self.error:
            raise self.error

    def shutdown(self):
        self.shut.set()


class Core:
    """Answers read_namespaced_pod_log with the next scripted response (or raises it)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def read_namespaced_pod_log(self, name, namespace, **kw):
        self.calls.append(kw)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def ts(second, nanos=0):
    return f"2026-01-02T03:04:{second:02}.{nanos:09}Z".replace(".000000000Z", "Z").encode()


def lines(*pairs):
    return b"".join(ts(*t) + b" " + text + b"\n" for t, text in pairs)


def follow(core, tmp_path, **kw):
    collector = Collector(tmp_path)
    sink = collector.sink("pod-0")
    f = LogFollower(core, "ns", "pod-0", "train", sink, retry_s=5, **kw)
    f.start().join(10)
    assert f.done
    return f, (tmp_path / "pod-0.log").read_bytes()


def test_timestamps_are_stripped_and_partial_chunks_joined(tmp_path):
    data = lines(((1,), b"a"), ((2, 5), b"b")) + ts(3) + b" tail"
    core = Core(Response([data[:7], data[7:30], data[30:]]))
    f, out = follow(core, tmp_path)
    assert out == b"a\nb\ntail"
    assert f.error is None and f.received == len(out)
    assert core.calls[0]["follow"] is True and core.calls[0]["timestamps"] is True


def test_a_broken_stream_resumes_without_loss_or_repeats(tmp_path):
    full = lines(((1,), b"one"), ((1,), b"two"), ((2, 10), b"three"), ((2, 10), b"four"), ((3,), b"five"))
    cut = full.index(b"four") + 2  # in the middle of "four"
    first = Response([full[:cut]], error=urllib3.exceptions.ProtocolError("Connection reset by peer"))
    f, out = follow(Core(first, Response([full])), tmp_path)
    assert out == b"one\ntwo\nthree\nfour\nfive\n"
    assert f.reconnects == 1 and f.error is None


def test_lines_with_the_same_timestamp_are_counted_on_resume(tmp_path):
    same = [((5, 1), f"line {i}".encode()) for i in range(4)]
    full = lines(*same)
    first = Response([lines(*same[:2])], error=ConnectionResetError())
    _, out = follow(Core(first, Response([full])), tmp_path)
    assert out.decode().splitlines() == [f"line {i}" for i in range(4)]


def test_a_container_still_starting_is_retried(tmp_path):
    waiting = ApiException(status=400, reason="container train is waiting to start: ContainerCreating")
    f, out = follow(Core(waiting, Response([lines(((1,), b"up"))])), tmp_path)
    assert out == b"up\n" and f.error is None


def test_a_pod_gone_is_reported(tmp_path):
    f, out = follow(Core(ApiException(status=404, reason="Not Found")), tmp_path)
    assert out == b"" and "pod gone" in f.error


def test_a_forbidden_log_is_not_retried(tmp_path):
    core = Core(ApiException(status=403, reason="Forbidden"))
    f, _ = follow(core, tmp_path)
    assert "HTTP 403" in f.error and len(core.calls) == 1


def test_close_ends_a_stream_that_never_ends(tmp_path):
    collector = Collector(tmp_path)
    resp = Response([lines(((1,), b"hello"))], block=True)
    f = LogFollower(Core(resp), "ns", "pod-0", "train", collector.sink("pod-0")).start()
    for _ in range(100):
        if f.received:
            break
        threading.Event().wait(0.02)
    f.close()
    f.join(5)
    assert f.done and f.error is None
    assert (tmp_path / "pod-0.log").read_bytes() == b"hello\n"


def test_efa_evidence_is_read_on_the_way(tmp_path):
    evidence = EfaEvidence()
    data = lines(
        ((1,), b"[3]:h:1:1 NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)")
    )
    follow(Core(Response([data])), tmp_path, scan=evidence.scan)
    assert evidence.efa and evidence.fallback is None


def test_timestamp_key():
    assert timestamp_key(b"2026-01-02T03:04:05Z") == (1767323045, 0)
    assert timestamp_key(b"2026-01-02T03:04:05.5Z") == (1767323045, 500000000)
    assert timestamp_key(b"2026-01-02T05:04:05.000000001+02:00") == (1767323045, 1)
    assert timestamp_key(b"not-a-time") is None
