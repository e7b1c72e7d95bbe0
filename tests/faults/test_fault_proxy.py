"""The fault proxy itself, against a small TLS upstream of its own (no cluster needed)."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fault_proxy import FaultProxy, make_serving_cert, resumes_from


class Upstream:
    """An HTTPS server on loopback answering every request ``200 ok <path>``."""

    def __init__(self, cert: Any) -> None:
        self.cert = cert
        self.port = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert.cert_file, self.cert.key_file)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)
        )
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ")[1]
                body = b"ok " + path
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[FaultProxy]:
    upstream_dir, proxy_dir = tmp_path / "up", tmp_path / "proxy"
    upstream_dir.mkdir()
    proxy_dir.mkdir()
    upstream_cert = make_serving_cert(upstream_dir)
    upstream = Upstream(upstream_cert)
    with FaultProxy(
        upstream=("127.0.0.1", upstream.port),
        upstream_ca=upstream_cert.ca_file,
        cert=make_serving_cert(proxy_dir),
    ) as p:
        yield p


def get(proxy: FaultProxy, path: str, timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    context = ssl.create_default_context(cafile=proxy.cert.ca_file)
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_passes_requests_through_with_keep_alive(proxy: FaultProxy) -> None:
    context = ssl.create_default_context(cafile=proxy.cert.ca_file)
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=5)
    for path in ("/api/v1/pods", "/api/v1/namespaces/x/pods/p/log"):
        conn.request("GET", path)
        assert conn.getresponse().read() == b"ok " + path.encode()
    conn.close()
    assert proxy.forwarded == ["/api/v1/pods", "/api/v1/namespaces/x/pods/p/log"]


def test_answers_503_and_429_with_retry_after_in_scope_only(proxy: FaultProxy) -> None:
    proxy.set_fault("503", path=r"/log$")
    status, _, body = get(proxy, "/api/v1/namespaces/x/pods/p/log")
    assert status == 503 and json.loads(body)["code"] == 503
    assert get(proxy, "/api/v1/pods")[0] == 200
    proxy.set_fault("429", retry_after=7)
    status, headers, _ = get(proxy, "/api/v1/pods")
    assert (status, headers["Retry-After"]) == (429, "7")
    proxy.clear()
    assert get(proxy, "/api/v1/pods")[0] == 200


def test_resets_connections(proxy: FaultProxy) -> None:
    proxy.set_fault("reset", seconds=30)
    with pytest.raises((ConnectionError, http.client.HTTPException, ssl.SSLError, OSError)):
        get(proxy, "/api/v1/pods")
    assert [kind for _, kind, _ in proxy.injected] == ["reset"]


def test_stalls_until_cleared(proxy: FaultProxy) -> None:
    proxy.set_fault("stall")
    threading.Timer(1.0, proxy.clear).start()
    started = time.monotonic()
    assert get(proxy, "/api/v1/pods")[0] == 200
    assert time.monotonic() - started >= 0.9


def test_gone_answers_resumed_watches_only_and_counts(proxy: FaultProxy) -> None:
    proxy.set_fault("gone", watch=True, times=1)
    assert get(proxy, "/api/v1/pods?watch=true")[2] == b"ok /api/v1/pods?watch=true"
    status, _, body = get(proxy, "/api/v1/pods?watch=True&resourceVersion=42")
    event = json.loads(body)
    assert status == 200 and event["type"] == "ERROR" and event["object"]["code"] == 410
    # used up: the next resumed watch passes
    assert get(proxy, "/api/v1/pods?watch=1&resourceVersion=43")[0] == 200


def test_resumes_from() -> None:
    assert resumes_from("/x?watch=1&resourceVersion=12") == "12"
    assert resumes_from("/x?watch=1&resourceVersion=0") is None
    assert resumes_from("/x?watch=1") is None
