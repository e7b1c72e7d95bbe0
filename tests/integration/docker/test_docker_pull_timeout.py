"""On Docker the image pull is the wait to run: ``queue_timeout`` cuts it, on the worker and
deferred alike (the pull happens at submission, before a deferral), and the engine gives the
pull up. The registries are local TCP servers of the test: one that accepts connections and
never answers, one that answers slowly but keeps a layer moving."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import secrets
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from docker_operator_harness import TI, Log, Operator
from torchx_provider.errors import QueueTimeoutError

pytestmark = pytest.mark.docker


@dataclass
class SilentRegistry:
    """Accepts every connection and never sends a byte; notes when each was opened."""

    sock: socket.socket
    opened: list[float] = field(default_factory=list)
    held: list[socket.socket] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.opened.append(time.monotonic())
            self.held.append(conn)


@pytest.fixture
def silent_registry() -> Iterator[SilentRegistry]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    registry = SilentRegistry(sock)
    threading.Thread(target=registry.serve, daemon=True).start()
    yield registry
    sock.close()
    for conn in registry.held:
        conn.close()


def run_task(image: str, network: str, deferrable: bool, queue_timeout: float) -> tuple[Any, Log]:
    """Run one replica of ``image`` as a task; what it raised (or returned), and its log."""
    op = Operator(
        task_id="t",
        app={"name": "pulled", "roles": [{"name": "w", "image": image, "entrypoint": "true"}]},
        cfg={"network": network},
        poll_interval=0.5,
        deferrable=deferrable,
        queue_timeout=queue_timeout,
    )
    op.recorded = Log()
    try:
        outcome: Any = op.execute({"ti": TI("pulls", "t"), "task_state_store": None})  # type: ignore[arg-type]
    except Exception as e:
        outcome = e
    return outcome, op.recorded


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_registry_that_never_answers_is_a_queue_timeout(
    docker_engine: Any, network: str, silent_registry: SilentRegistry, deferrable: bool
) -> None:
    image = f"{silent_registry.address}/never/answers:{secrets.token_hex(4)}"
    started = time.monotonic()
    error, _ = run_task(image, network, deferrable, queue_timeout=3)
    took = time.monotonic() - started
    # before: SubmissionError after 25 s, the engine's own "context deadline exceeded"
    assert type(error) is QueueTimeoutError, error
    assert took < 3 + 4, took
    text = str(error)
    assert f"image {image!r} of role 'w' was still being pulled" in text, text
    # the pull's own time, begun a little after the submission's clock (more so under load)
    waited = re.search(r"nothing received yet after (\d+\.\d) s", text)
    assert waited is not None and 2.0 <= float(waited[1]) <= 3.5, text
    assert "(queue_timeout 3.0s)" in text and "the app was not created" in text, text
    assert silent_registry.opened, "the engine never reached the registry"
    if deferrable:
        return
    # The engine gave the pull up: left alone it tries the registry again 10 s after its
    # first attempt (and fails the pull at 25 s); cancelled, it makes no further attempt.
    first = silent_registry.opened[0]
    time.sleep(max(0.0, first + 13 - time.monotonic()))
    assert len(silent_registry.opened) == 1, [t - first for t in silent_registry.opened]


# -- a registry that answers, slowly -------------------------------------------------------------


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class SlowImage:
    """One image of one layer: its manifest, config and layer blobs."""

    manifest: bytes
    blobs: dict[str, bytes]
    layer: str

    @classmethod
    def make(cls, size: int) -> SlowImage:
        """An image of ``size`` bytes in one layer of its own: the engine has no layer of it
        from an earlier run (it would not pull it again)."""
        tar_bytes = io.BytesIO()
        with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
            info = tarfile.TarInfo("data.bin")
            payload = secrets.token_bytes(16) + bytes(range(256)) * (size // 256)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        raw = tar_bytes.getvalue()
        layer = gzip.compress(raw, compresslevel=0)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": [_digest(raw)]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": _digest(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": len(layer),
                        "digest": _digest(layer),
                    }
                ],
            }
        ).encode()
        return cls(manifest, {_digest(config): config, _digest(layer): layer}, _digest(layer))


def slow_registry(image: SlowImage, bytes_per_step: int, step: float) -> ThreadingHTTPServer:
    """A registry of ``image`` (any name) that sends its layer ``bytes_per_step`` at a time
    every ``step`` seconds."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if kind.startswith("application/vnd.docker.distribution"):
                self.send_header("Docker-Content-Digest", _digest(body))
            self.end_headers()

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            path = self.path.split("?")[0]
            if path == "/v2/":
                self._send(200, b"{}")
                if not head:
                    self.wfile.write(b"{}")
                return
            if "/manifests/" in path:
                kind = "application/vnd.docker.distribution.manifest.v2+json"
                self._send(200, image.manifest, kind)
                if not head:
                    self.wfile.write(image.manifest)
                return
            digest = path.rsplit("/", 1)[-1]
            blob = image.blobs.get(digest)
            if blob is None:
                self._send(404, b"{}")
                if not head:
                    self.wfile.write(b"{}")
                return
            self._send(200, blob, "application/octet-stream")
            if head:
                return
            slow = digest == image.layer
            try:
                for at in range(0, len(blob), bytes_per_step if slow else len(blob)):
                    self.wfile.write(blob[at : at + (bytes_per_step if slow else len(blob))])
                    self.wfile.flush()
                    if slow:
                        time.sleep(step)
            except OSError:
                pass  # the engine gave the pull up

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_pull_that_keeps_moving_is_cut_at_the_queue_timeout(
    docker_engine: Any, network: str, caplog: pytest.LogCaptureFixture
) -> None:
    # 4 MB at 100 kB a second: 40 s to pull, moving all along
    server = slow_registry(SlowImage.make(4_000_000), bytes_per_step=20_000, step=0.2)
    image = f"127.0.0.1:{server.server_address[1]}/slow/moving:{secrets.token_hex(4)}"
    try:
        started = time.monotonic()
        error, _ = run_task(image, network, deferrable=False, queue_timeout=6)
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    # before: the task waited for the whole pull
    assert type(error) is QueueTimeoutError, error
    assert took < 6 + 4, took
    text = str(error)
    assert f"image {image!r} of role 'w' was still being pulled (0/1 layers, " in text, text
    # how far the pull got at the cut: its own seconds (it began after the image lookup,
    # so a moment after the 6 s the wait counts from; said to a tenth), past the 5 s
    # progress line's
    pulled = re.search(r" of 4\.0 MB after (\d+\.\d) s\)", text)
    assert pulled and 5.0 < float(pulled[1]) <= took + 0.05, (text, took)
    said = [r.getMessage() for r in caplog.records]
    assert any(f"pulling {image}: 0/1 layers" in line for line in said), said
    with pytest.raises(Exception, match=r"No such image|not found"):
        docker_engine.images.get(image)


def test_a_submission_stopped_during_a_pull_cancels_the_pull(
    docker_engine: Any, network: str
) -> None:
    # What a task killed while it pulls does (on_kill stops the submission).
    from torchx_provider import specs
    from torchx_provider.errors import SubmissionError
    from torchx_provider.schedulers.docker.scheduler import DockerScheduler

    server = slow_registry(SlowImage.make(4_000_000), bytes_per_step=20_000, step=0.2)
    image = f"127.0.0.1:{server.server_address[1]}/slow/stopped:{secrets.token_hex(4)}"
    role = specs.Role(name="w", image=image, entrypoint="true")
    scheduler = DockerScheduler("stop")
    outcome: list[BaseException | str] = []
    try:
        info = scheduler.submit_dryrun(specs.AppDef("stopped", [role]), {"network": network})

        def submit() -> None:
            try:
                outcome.append(scheduler.schedule(info))
            except BaseException as e:
                outcome.append(e)

        submitting = threading.Thread(target=submit, daemon=True)
        submitting.start()
        time.sleep(2.0)  # the layer is moving
        stopped = time.monotonic()
        scheduler.cancel(info.request.app_id)
        submitting.join(10)
        took = time.monotonic() - stopped
    finally:
        scheduler.close()
        server.shutdown()
        server.server_close()
    [error] = outcome
    assert isinstance(error, SubmissionError), error
    assert took < 2, took
    assert f"the pull of image {image!r} of role 'w' was stopped with its submission" in str(
        error
    ), error
    with pytest.raises(Exception, match=r"No such image|not found"):
        docker_engine.images.get(image)
