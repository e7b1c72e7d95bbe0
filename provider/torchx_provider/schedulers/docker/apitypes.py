"""The parts of the Docker SDK (``docker`` on PyPI, which ships no types) the provider uses,
as protocols: ``docker.DockerClient`` is a :class:`DockerClient`, its ``api`` (the low-level
``docker.APIClient``) a :class:`DockerApi`. Tests hand stand-ins with the same methods.

The log and pull streams (:mod:`.logbody`, :mod:`.pull`) use the client's own request
helpers (``_url``, ``_get``, ``_post``, ``_raise_for_status``, ``_stream_helper``): the
public calls buffer or cannot bound the read, which those modules explain.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

#: One JSON object as the engine answers it (a container, a network, an image, an event).
Json = dict[str, Any]


class DockerApi(Protocol):
    """``docker.APIClient``: the engine's HTTP API, call by call."""

    base_url: str
    api_version: str

    # containers
    def containers(
        self, *, all: bool = ..., filters: Mapping[str, Any] | None = ...
    ) -> list[Json]: ...
    def inspect_container(self, container: str) -> Json: ...
    def rename(self, container: str, name: str) -> None: ...
    def stop(self, container: str, timeout: int | None = ...) -> None: ...
    def remove_container(self, container: str, *, force: bool = ...) -> None: ...
    def logs(
        self, container: str, *, stdout: bool = ..., stderr: bool = ..., tail: int | str = ...
    ) -> bytes: ...

    # networks
    def networks(self, names: Sequence[str] | None = ...) -> list[Json]: ...
    def inspect_network(self, net_id: str) -> Json: ...
    def create_network(
        self,
        name: str,
        *,
        driver: str | None = ...,
        check_duplicate: bool | None = ...,
        labels: Mapping[str, str] | None = ...,
    ) -> Json: ...
    def remove_network(self, net_id: str) -> None: ...

    # images
    def images(self, *, filters: Mapping[str, Any] | None = ...) -> list[Json]: ...
    def remove_image(self, image: str, *, force: bool = ...) -> None: ...
    def tag(self, image: str, repository: str, *, tag: str | None = ...) -> bool: ...
    def push(
        self,
        repository: str,
        *,
        tag: str | None = ...,
        stream: bool = ...,
        decode: bool = ...,
        auth_config: Mapping[str, str] | None = ...,
    ) -> Iterator[Json]: ...
    def build(
        self,
        *,
        path: str,
        dockerfile: str,
        buildargs: Mapping[str, str],
        pull: bool,
        rm: bool,
        forcerm: bool,
        labels: Mapping[str, str],
        decode: bool,
    ) -> Iterator[Json]: ...

    # the client's request helpers (see the module docstring)
    def _url(self, pathfmt: str, *args: str) -> str: ...
    def _get(self, url: str, **kwargs: Any) -> Any: ...
    def _post(self, url: str, **kwargs: Any) -> Any: ...
    def _raise_for_status(self, response: Any) -> None: ...
    def _stream_helper(self, response: Any, decode: bool = ...) -> Iterator[Any]: ...

    def close(self) -> None: ...


class Container(Protocol):
    """``docker.models.containers.Container``, as a creation returns it."""

    id: str

    def start(self) -> None: ...


class Containers(Protocol):
    """``docker.DockerClient.containers``."""

    def create(self, **kwargs: Any) -> Container: ...


class Images(Protocol):
    """``docker.DockerClient.images``."""

    def get(self, name: str) -> Any: ...


class DockerClient(Protocol):
    """``docker.DockerClient``."""

    api: DockerApi
    containers: Containers
    images: Images

    def info(self) -> Json: ...
    def ping(self) -> bool: ...
    def close(self) -> None: ...
