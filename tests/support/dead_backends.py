"""Backend clients that would fail on any call (nothing listens on port 9): for tests that
check what the dry run refuses before anything is sent."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def unreachable_backends() -> Iterator[None]:
    """KUBECONFIG and DOCKER_HOST pointing at 127.0.0.1:9 while the block runs."""
    saved = {k: os.environ.get(k) for k in ("KUBECONFIG", "DOCKER_HOST")}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u, namespace: default}}]\n"
        )
    os.environ["KUBECONFIG"], os.environ["DOCKER_HOST"] = f.name, "tcp://127.0.0.1:9"
    try:
        yield
    finally:
        os.unlink(f.name)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Schedulers:
    """One scheduler per backend, made on first use (session ``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._made: dict[str, Any] = {}

    def __call__(self, backend: str) -> Any:
        from torchx_provider.backends import create_scheduler

        if backend not in self._made:
            kwargs = {} if backend == "local_docker" else {"namespace": "default"}
            self._made[backend] = create_scheduler(backend, self.name, **kwargs)
        return self._made[backend]
