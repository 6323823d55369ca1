"""Following a container's log: timestamps stripped, resumed after a broken stream without loss or repeats.

A connection reset in the middle of a log stream is not something the local control plane can be made to
produce on cue, so these tests script the server's answers.
"""

import threading

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from rollcall.backends.kubernetes.podlogs import NET_CLUES, EfaEvidence, LogFollower, explain, timestamp_key
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


@pytest.mark.parametrize(
    ("line", "efa", "fallback"),
    [
        (b"NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)", True, None),
        (b"NCCL INFO Using network Socket", False, "Using network Socket"),
        (b"NCCL INFO NET/OFI Selected provider is tcp", False, "NET/OFI Selected provider is tcp"),
        (b"NCCL INFO Using network Libfabric", False, None),
        (b"nothing to see", False, None),
    ],
)
def test_efa_evidence(line, efa, fallback):
    e = EfaEvidence()
    e.scan(line + b"\n")
    assert (e.efa, e.fallback) == (efa, fallback)


def test_timestamp_key():
    assert timestamp_key(b"2026-01-02T03:04:05Z") == (1767323045, 0)
    assert timestamp_key(b"2026-01-02T03:04:05.5Z") == (1767323045, 500000000)
    assert timestamp_key(b"2026-01-02T05:04:05.000000001+02:00") == (1767323045, 1)
    assert timestamp_key(b"not-a-time") is None


# Lines as NCCL 2.18-2.27, aws-ofi-nccl 1.16 and libfabric print them, behind torchrun's rank prefix.
H = b"[0]:bert-0:152:386 [0] NCCL INFO "
NO_PLUGIN_226 = H + b"NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."
NO_PLUGIN_219 = (
    H + b"NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory "
    b"No plugin found (libnccl-net.so), using internal implementation"
)
NO_PLUGIN_218 = (
    H + b"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object "
    b"file: No such file or directory"
)
NO_LIBFABRIC = (
    H + b"NET/Plugin : dlerror=libfabric.so.1: cannot open shared object file: No such file or directory "
    b"No plugin found (libnccl-net.so), using internal implementation"
)
NO_DEVICE = [
    H + b"NET/OFI Initializing aws-ofi-nccl 1.16.2",
    H + b"NET/OFI Setting provider_filter to efa",
    H + b"NET/OFI No eligible providers were found",
    b"[0]:bert-0:152:386 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):259 NCCL WARN NET/OFI "
    b"Unable to find a protocol that worked.  Failing initialization.",
]
EMPTY_LIST = b"[0]:libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list"
SOCKET = [H + b"NET/Socket : Using [0]eth0:10.0.4.51<0>", H + b"Using network Socket"]


def causes_of(*lines):
    e = EfaEvidence()
    e.scan(b"\n".join(lines) + b"\n")
    return e


@pytest.mark.parametrize(
    ("lines", "missing", "said"),
    [
        ([NO_PLUGIN_226], "the aws-ofi-nccl network plugin", "NET/Plugin: Could not find: libnccl-net.so"),
        (
            [NO_PLUGIN_219],
            "the aws-ofi-nccl network plugin",
            "NET/Plugin : dlerror=libnccl-net.so: cannot open",
        ),
        (
            [NO_PLUGIN_218],
            "the aws-ofi-nccl network plugin",
            "NET/Plugin : Plugin load (libnccl-net.so) returned",
        ),
        ([NO_LIBFABRIC], "libfabric (libfabric.so.1)", "libfabric.so.1: cannot open shared object file"),
        (NO_DEVICE, "an EFA device in the container", "NET/OFI No eligible providers were found"),
        ([EMPTY_LIST], "an EFA device in the container", "fi_getinfo: provider efa output empty list"),
        (
            [H + b"NET/OFI Selected provider is tcp"],
            "libfabric's efa provider",
            "NET/OFI Selected provider is tcp",
        ),
        (
            [H + b"Failed to initialize any NET plugin"],
            "any network NCCL may use",
            "Failed to initialize any",
        ),
    ],
)
def test_the_line_that_says_why_names_what_was_missing(lines, missing, said):
    e = causes_of(*lines, *SOCKET)
    assert e.fallback == "Using network Socket" or e.fallback.startswith("NET/OFI Selected provider is")
    assert not e.efa
    (cause,) = e.causes  # one cause per kind, the first clue that matches each line
    assert cause.clue.missing.startswith(missing) and cause.line.startswith(said)
    assert str(cause).startswith(f"{cause.clue.missing} ({cause.line!r}): {cause.clue.fix}")


def test_each_fix_points_at_the_remedy():
    fixes = {c.missing.split(" (")[0]: c.fix for c in NET_CLUES}
    assert "efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in fixes["libfabric"]
    assert "/opt/amazon/efa/lib" in fixes["libfabric"]
    assert "/opt/amazon/ofi-nccl/lib" in fixes["the aws-ofi-nccl network plugin"]
    assert "NCCL_NET_PLUGIN=ofi" in fixes["the aws-ofi-nccl network plugin"]
    assert "/dev/infiniband/uverbs" in fixes["an EFA device in the container"]
    assert "FI_PROVIDER=efa" in fixes["libfabric's efa provider"]


def test_a_pod_that_used_efa_has_no_causes_and_harmless_lines_are_no_clue():
    e = causes_of(
        H + b"NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.",
        H + b"NET/Plugin: Loaded net plugin Libfabric (v10)",
        H + b"NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)",
        H + b"Using network Libfabric",
        H + b"TUNER/Plugin: Could not find: libnccl-tuner.so. Using internal tuner plugin.",
    )
    assert e.efa and e.fallback is None and e.causes == []


def test_a_cause_is_kept_once_in_the_order_seen():
    e = causes_of(NO_PLUGIN_226, NO_PLUGIN_226, *NO_DEVICE)
    assert [c.clue.missing.split(" (")[0] for c in e.causes] == [
        "the aws-ofi-nccl network plugin",
        "an EFA device in the container",
    ]


def test_explain_names_each_cause_once_with_its_pods():
    plugin = str(causes_of(NO_PLUGIN_226).causes[0])
    device = str(causes_of(*NO_DEVICE).causes[0])
    text = explain({"bert-0": (plugin,), "bert-1": (plugin, device)})
    assert text == f"; missing {plugin} [bert-0, bert-1]; missing {device} [bert-1]"
    assert explain({}).startswith("; no NCCL line said why")
