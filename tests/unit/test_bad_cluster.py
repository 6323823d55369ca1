"""A cluster that answers badly: each a clear usage error naming the server and the fix, nothing created.

Each server here is a real one on this machine's loopback: one that accepts and never answers, and an HTTPS
one (its certificate made by ``openssl`` for the test) that refuses every request with 401 and records what
it was asked, so that a test proves the session stopped before creating anything.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.unit.test_bad_input import IMAGE, usage_error

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def no_ambient_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class Refusing(http.server.BaseHTTPRequestHandler):
    """Answers every request with the API server's 401, and records it."""

    seen: list[str]

    def _refuse(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        body = json.dumps({"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing(certificate) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server refusing every request with 401: its address, and what it was asked."""
    seen: list[str] = []
    handler = type("Handler", (Refusing,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, certificate))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts every connection and never answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
        for c in held:
            c.close()


def kubeconfig(path: Path, cluster: dict, user: dict) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def trusting(server: str, certificate) -> dict:
    return {
        "server": server,
        "certificate-authority-data": base64.b64encode(certificate[0].read_bytes()).decode(),
    }


def only_read(seen: list[str]) -> bool:
    return bool(seen) and all(s.startswith("GET ") for s in seen)


def test_a_server_that_never_answers_is_named_and_the_wait_is_bounded(pytester, tmp_path, silent):
    path = kubeconfig(tmp_path / "kc", {"server": silent, "insecure-skip-tls-verify": True}, {"token": "t"})
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", IMAGE)
    assert f"ERROR: cannot reach the API server {silent} (from --kubeconfig {path}, context x)" in err
    assert "timed out" in err


def test_refused_credentials_are_named_with_the_fix(pytester, tmp_path, refusing, certificate):
    server, seen = refusing
    path = kubeconfig(tmp_path / "kc", trusting(server, certificate), {"token": "expired"})
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", IMAGE)
    assert (
        f"ERROR: the API server {server} (from --kubeconfig {path}, context x) refused the credentials" in err
    )
    assert "renew them" in err
    assert only_read(seen), seen  # nothing was created


def test_an_exec_credential_plugin_that_fails_is_named_not_blamed_on_the_server(
    pytester, tmp_path, refusing, certificate
):
    server, seen = refusing
    plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "false",
        "interactiveMode": "Never",
    }
    path = kubeconfig(tmp_path / "kc", trusting(server, certificate), {"exec": plugin})
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", IMAGE)
    assert "the kubeconfig's user gave no credentials (an exec credential plugin that fails" in err
    assert only_read(seen), seen


def test_a_certificate_the_kubeconfig_does_not_trust_is_named(pytester, tmp_path, refusing):
    server, seen = refusing
    path = kubeconfig(tmp_path / "kc", {"server": server}, {"token": "t"})  # no certificate-authority
    err = usage_error(pytester, "--kubeconfig", str(path), "--image", IMAGE)
    assert (
        f"ERROR: the API server {server} (from --kubeconfig {path}, context x) answered with a certificate"
        in err
    )
    assert "certificate verify failed" in err and "certificate-authority-data" in err
    assert seen == []  # the handshake failed: no request reached it
