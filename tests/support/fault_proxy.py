"""A fault-injecting HTTPS proxy for the Kubernetes API server, on loopback.

The proxy ends TLS itself (with a serving certificate for 127.0.0.1 signed by the cluster's
CA when its key is at hand, else by a CA of its own, see :func:`make_serving_cert`) and
forwards each HTTP/1.1 request to the real API server over a TLS connection of its own. It
reads every request head, so that a fault can be scoped to some requests; responses are
copied through as they come. Bearer tokens pass; client certificates cannot.

In front of a Docker engine it listens on a unix socket of its own and forwards in plain
HTTP to the engine's socket (``FaultProxy(upstream_unix=..., listen_unix=...)``); its
:attr:`~FaultProxy.url` is then the ``unix://`` URL to give the client.

Tests drive it from their own thread or event loop::

    proxy = FaultProxy(upstream=("127.0.0.1", 17402), upstream_ca="ca.crt", cert=cert)
    proxy.start()                                   # a thread with its own event loop
    proxy.set_fault("503", path=r"/pods/[^/]+/log") # only log requests answer 503
    proxy.cut_watches()                             # open watches end abruptly
    proxy.set_fault("gone", seconds=2)              # watches that resume get ERROR 410
    proxy.clear()                                   # pass everything through again
    proxy.stop()

Faults (one at a time; ``path`` is a regular expression searched in the request target,
``watch`` restricts to watch requests (True) or to the others (False)):

``reset``   the connection is aborted (a TCP reset) instead of forwarded; open connections
            in scope are aborted when the fault is set.
``503``     ``503 Service Unavailable`` with a ``Status`` body; open connections in scope end.
``429``     ``429 Too Many Requests`` with ``Retry-After: <retry_after>``; likewise.
``403``     ``403 Forbidden`` with a ``Status`` body, as an API server whose authorizer has
            not loaded the Roles yet answers; open connections in scope end.
``stall``   requests in scope are held, and responses on open connections in scope stop
            flowing, until the fault is cleared (the bytes then flow on).
``gone``    a watch request with a ``resourceVersion`` gets an ``ERROR`` event with code 410
            (as an API server whose watch cache no longer has that version), then the end
            of the stream; other requests pass.
``pass``    nothing (same as :meth:`FaultProxy.clear`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

KINDS = frozenset({"pass", "reset", "503", "429", "403", "stall", "gone"})


@dataclass(frozen=True)
class ServingCert:
    """A certificate and key (PEM files) the proxy serves, and the CA that signed it."""

    cert_file: str
    key_file: str
    ca_file: str


def make_serving_cert(
    out_dir: Path, ca_cert: Path | None = None, ca_key: Path | None = None
) -> ServingCert:
    """A serving certificate for ``127.0.0.1`` and ``localhost``, signed by the given CA, or by
    a new CA (written beside it) when no CA key is given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def pem_key(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    if ca_cert is not None and ca_key is not None:
        issuer_cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
        issuer_key: Any = serialization.load_pem_private_key(ca_key.read_bytes(), None)
        ca_file = ca_cert
    else:
        issuer_key = ec.generate_private_key(ec.SECP256R1())
        issuer_cert = (
            x509.CertificateBuilder()
            .subject_name(name("torchx-fault-proxy-ca"))
            .issuer_name(name("torchx-fault-proxy-ca"))
            .public_key(issuer_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(issuer_key, hashes.SHA256())
        )
        ca_file = out_dir / "proxy-ca.crt"
        ca_file.write_bytes(issuer_cert.public_bytes(serialization.Encoding.PEM))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("torchx-fault-proxy"))
        .issuer_name(issuer_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(issuer_key, hashes.SHA256())
    )
    cert_file = out_dir / "proxy.crt"
    key_file = out_dir / "proxy.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(pem_key(key))
    key_file.chmod(0o600)
    return ServingCert(str(cert_file), str(key_file), str(ca_file))


@dataclass
class Fault:
    kind: str = "pass"
    path: re.Pattern[str] | None = None
    watch: bool | None = None
    retry_after: int = 1
    #: monotonic time after which the fault no longer applies (None: until cleared)
    until: float | None = None
    #: requests it may still answer (None: any number)
    times: int | None = None

    def applies(self, target: str, is_watch: bool) -> bool:
        if self.kind == "pass":
            return False
        if self.until is not None and time.monotonic() >= self.until:
            return False
        if self.times is not None and self.times <= 0:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        return self.path is None or self.path.search(target) is not None


@dataclass(eq=False)
class _Conn:
    """One client connection: the last request it forwarded, and its transports."""

    writer: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    target: str = ""
    is_watch: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def abort(self) -> None:
        for w in (self.writer, self.upstream):
            if w is not None:
                with contextlib.suppress(Exception):
                    w.transport.abort()


def is_watch_request(target: str) -> bool:
    query = parse_qs(urlsplit(target).query)
    return query.get("watch", ["false"])[-1].lower() in ("true", "1")


def resumes_from(target: str) -> str | None:
    """The ``resourceVersion`` a watch resumes from (None for '' or '0': any version)."""
    rv = parse_qs(urlsplit(target).query).get("resourceVersion", [""])[-1]
    return rv if rv not in ("", "0") else None


def _status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


class FaultProxy:
    """See the module docstring."""

    def __init__(
        self,
        *,
        upstream: tuple[str, int] = ("127.0.0.1", 0),
        upstream_ca: str = "",
        cert: ServingCert | None = None,
        upstream_unix: str | None = None,
        listen_unix: str | None = None,
    ) -> None:
        if (upstream_unix is None) != (listen_unix is None):
            raise ValueError("upstream_unix and listen_unix go together (a Docker engine)")
        if upstream_unix is None and cert is None:
            raise ValueError("a TLS proxy needs its serving certificate")
        self.upstream = upstream
        self.upstream_ca = upstream_ca
        self.cert = cert
        self.upstream_unix = upstream_unix
        self.listen_unix = listen_unix
        self.port = 0
        self.fault = Fault()
        #: (monotonic time, kind, target) of every request a fault answered or held
        self.injected: list[tuple[float, str, str]] = []
        #: request targets forwarded, in order
        self.forwarded: list[str] = []
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._changed: asyncio.Event | None = None

    # -- life cycle -------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self.listen_unix is not None:
            return f"unix://{self.listen_unix}"
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._listen())
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start listening within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.abort()

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands (from any thread) -----------------------------------------------------
    def set_fault(
        self,
        kind: str,
        *,
        path: str | None = None,
        watch: bool | None = None,
        retry_after: int = 1,
        seconds: float | None = None,
        times: int | None = None,
    ) -> None:
        """Apply fault ``kind`` to requests in scope from now on (for ``seconds``, to at most
        ``times`` requests, or until :meth:`clear`); see the module docstring."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}: one of {sorted(KINDS)}")
        fault = Fault(
            kind,
            re.compile(path) if path else None,
            watch,
            retry_after,
            None if seconds is None else time.monotonic() + seconds,
            times,
        )

        async def apply() -> None:
            self.fault = fault
            if kind in ("reset", "503", "429", "403"):
                for conn in list(self._conns):
                    if conn.target and fault.applies(conn.target, conn.is_watch):
                        conn.abort()
            self._wake()

        self._call(apply())

    def clear(self) -> None:
        """Pass everything through again (held requests and responses go on)."""
        self.set_fault("pass")

    def cut_watches(self, path: str | None = None) -> int:
        """Abort every open watch (whose target matches ``path``); returns how many."""
        pattern = re.compile(path) if path else None

        async def cut() -> int:
            n = 0
            for conn in list(self._conns):
                if conn.is_watch and (pattern is None or pattern.search(conn.target)):
                    self.injected.append((time.monotonic(), "cut", conn.target))
                    conn.abort()
                    n += 1
            return n

        return self._call(cut())

    def open_watches(self) -> list[str]:
        async def watches() -> list[str]:
            return [c.target for c in self._conns if c.is_watch]

        return self._call(watches())

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None, "the proxy is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _wake(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    # -- serving -----------------------------------------------------------------------
    async def _listen(self) -> None:
        self._changed = asyncio.Event()
        if self.listen_unix is not None:
            self._server = await asyncio.start_unix_server(self._serve, path=self.listen_unix)
            return
        assert self.cert is not None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert.cert_file, self.cert.key_file)
        context.set_alpn_protocols(["http/1.1"])
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stalled(self, target: str, is_watch: bool) -> bool:
        """Wait while a stall applies to this request; True if one did."""
        held = False
        while self.fault.kind == "stall" and self.fault.applies(target, is_watch):
            if not held:
                self.injected.append((time.monotonic(), "stall", target))
                held = True
            assert self._changed is not None
            changed = self._changed
            timeout = (
                None if self.fault.until is None else max(0.0, self.fault.until - time.monotonic())
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
        return held

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        self._conns.add(conn)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                request_line, _, rest = head.decode("latin-1").partition("\r\n")
                _method, target, _version = request_line.split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (ln.partition(":") for ln in rest.split("\r\n") if ln)
                }
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    await self._answer(writer, 501, "NotImplemented", "chunked request bodies")
                    return
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                watch = is_watch_request(target)
                fault = self.fault
                if fault.applies(target, watch) and not (
                    fault.kind == "gone" and not (watch and resumes_from(target))
                ):
                    if fault.times is not None:
                        fault.times -= 1
                    if fault.kind == "reset":
                        self.injected.append((time.monotonic(), "reset", target))
                        conn.abort()
                        return
                    if fault.kind in ("503", "429", "403"):
                        self.injected.append((time.monotonic(), fault.kind, target))
                        code = int(fault.kind)
                        extra = {"Retry-After": str(fault.retry_after)} if code == 429 else {}
                        reason = {503: "ServiceUnavailable", 429: "TooManyRequests"}.get(
                            code, "Forbidden"
                        )
                        await self._answer(
                            writer, code, reason, "injected by the fault proxy", extra
                        )
                        return
                    if fault.kind == "gone" and watch and resumes_from(target):
                        self.injected.append((time.monotonic(), "gone", target))
                        await self._gone(writer, resumes_from(target) or "")
                        return
                    if fault.kind == "stall":
                        await self._stalled(target, watch)
                conn.target, conn.is_watch = target, watch
                if conn.upstream is None or conn.upstream.is_closing():
                    if self.upstream_unix is not None:
                        up_reader, conn.upstream = await asyncio.open_unix_connection(
                            self.upstream_unix
                        )
                    else:
                        up_reader, conn.upstream = await asyncio.open_connection(
                            *self.upstream,
                            ssl=self._upstream_context(),
                            server_hostname=self.upstream[0],
                        )
                    conn.tasks.append(asyncio.create_task(self._pump(conn, up_reader)))
                self.forwarded.append(target)
                conn.upstream.write(head + body)
                await conn.upstream.drain()
        except (ConnectionError, OSError, ssl.SSLError):
            return
        finally:
            self._conns.discard(conn)
            conn.abort()
            for task in conn.tasks:
                task.cancel()

    async def _pump(self, conn: _Conn, up_reader: asyncio.StreamReader) -> None:
        """Copy the API server's bytes to the client, holding them while a stall applies."""
        try:
            while True:
                data = await up_reader.read(65536)
                if not data:
                    break
                await self._stalled(conn.target, conn.is_watch)
                conn.writer.write(data)
                await conn.writer.drain()
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        finally:
            conn.abort()

    _context: ssl.SSLContext | None = None

    def _upstream_context(self) -> ssl.SSLContext:
        if self._context is None:
            context = ssl.create_default_context(cafile=self.upstream_ca)
            context.set_alpn_protocols(["http/1.1"])
            self._context = context
        return self._context

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        code: int,
        reason: str,
        message: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        body = _status_body(code, reason, message)
        head = [
            f"HTTP/1.1 {code} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Connection: close",
            *(f"{k}: {v}" for k, v in (extra or {}).items()),
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()

    async def _gone(self, writer: asyncio.StreamWriter, rv: str) -> None:
        event = (
            json.dumps(
                {
                    "type": "ERROR",
                    "object": json.loads(
                        _status_body(410, "Expired", f"too old resource version: {rv}")
                    ),
                }
            ).encode()
            + b"\n"
        )
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n")
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()


def proxy_kubeconfig(kubeconfig: str, proxy: FaultProxy, out_dir: Path) -> str:
    """A copy of a bearer-token ``kubeconfig`` that points at ``proxy``, trusting its CA."""
    import base64

    import yaml

    config = yaml.safe_load(Path(kubeconfig).read_text())
    for entry in config["clusters"]:
        cluster = entry["cluster"]
        cluster["server"] = proxy.url
        cluster.pop("certificate-authority", None)
        cluster["certificate-authority-data"] = base64.b64encode(
            Path(proxy.cert.ca_file).read_bytes()
        ).decode()
    path = out_dir / f"proxy-{proxy.port}.yaml"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return str(path)


def temporary_dir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="torchx-faults-")
