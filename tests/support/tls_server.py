"""A TLS server on loopback whose certificate nothing trusts (a self-signed one made here):
what a client without the server's CA meets."""

from __future__ import annotations

import datetime
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, signed by nobody but itself."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "untrusted test server")])
    now = datetime.datetime.now(datetime.timezone.utc)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextmanager
def untrusted_tls_server() -> Iterator[str]:
    """``https://127.0.0.1:PORT`` of a server that completes no handshake a verifying client
    makes (it answers nothing else); stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed(Path(tmp))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(1)
                except OSError:
                    pass  # the client gave up on the handshake: what is expected
                finally:
                    conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield f"https://127.0.0.1:{port}"
        finally:
            stop.set()
            thread.join(5)
            listener.close()
