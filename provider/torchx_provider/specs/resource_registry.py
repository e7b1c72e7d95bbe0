"""The named resources beyond the generic sizes: TorchX's AWS hosts and registered ones.

TorchX 0.7.0 knows, besides the generic ``cpu.*``/``gpu.*`` sizes (in
:data:`~torchx_provider.specs.api.NAMED_RESOURCES`), the AWS instance types ``aws_<type>``
(:data:`AWS_NAMED_RESOURCES`, from :mod:`~torchx_provider.specs.named_resources_aws`: the
instance's CPUs and GPUs, 96 % of its memory, its EFA and Neuron devices, and
``node.kubernetes.io/instance-type`` so that Kubernetes places the pod on such a node), plus
whatever installed packages register under the ``torchx.named_resources`` entry-point group
(a name mapped to a function returning a Resource). :func:`complete` adds both to the table
on first use, so a DAG that names ``aws_p4d.24xlarge`` or a size its company package
registers for TorchX keeps working unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torchx_provider.specs.api import NAMED_RESOURCES, NULL_RESOURCE, Resource
from torchx_provider.specs.named_resources_aws import NAMED_RESOURCES as AWS_NAMED_RESOURCES

#: The entry-point group TorchX reads named resources from.
ENTRY_POINT_GROUP = "torchx.named_resources"


def _as_resource(value: Any, name: str) -> Resource:
    """A Resource from what a registered factory returned (TorchX's own Resource included)."""
    if isinstance(value, Resource):
        return value
    try:
        return Resource(
            cpu=value.cpu,
            gpu=value.gpu,
            memMB=value.memMB,
            capabilities=dict(getattr(value, "capabilities", {}) or {}),
            devices=dict(getattr(value, "devices", {}) or {}),
        )
    except AttributeError:
        raise TypeError(
            f"named resource {name!r} (entry point group {ENTRY_POINT_GROUP}) returned "
            f"{type(value).__name__}, not a Resource with cpu, gpu and memMB"
        ) from None


def _registered(entry_point: Any) -> Callable[[], Resource]:
    def factory() -> Resource:
        from torchx_provider.errors import InvalidAppError

        try:
            return _as_resource(entry_point.load()(), entry_point.name)
        except Exception as e:  # a broken plugin: name it, before anything is submitted
            raise InvalidAppError(
                f"named resource {entry_point.name!r}, registered by {entry_point.value!r} "
                f"in the {ENTRY_POINT_GROUP} entry point group, failed to load: {e}",
                field="resource",
            ) from e

    return factory


def registered() -> dict[str, Callable[[], Resource]]:
    """The factories installed packages register under :data:`ENTRY_POINT_GROUP`."""
    from importlib.metadata import entry_points

    return {ep.name: _registered(ep) for ep in entry_points(group=ENTRY_POINT_GROUP)}


def complete(table: dict[str, Callable[[], Resource]]) -> None:
    """Add the AWS sizes, TorchX's ``NULL``/``MISSING`` and the registered ones to ``table``
    (registered ones win, as in TorchX; sizes already in ``table`` are kept)."""
    more: dict[str, Callable[[], Resource]] = {
        **AWS_NAMED_RESOURCES,
        **registered(),
        "NULL": lambda: Resource.copy(NULL_RESOURCE),
        "MISSING": lambda: Resource.copy(NULL_RESOURCE),
    }
    for name, factory in more.items():
        table.setdefault(name, factory)


@functools.cache
def _named() -> dict[str, Callable[[], Resource]]:
    """:data:`NAMED_RESOURCES`, completed once with TorchX's AWS sizes and the registered ones
    (:mod:`~torchx_provider.specs.resource_registry`)."""
    complete(NAMED_RESOURCES)
    return NAMED_RESOURCES


class _NamedResources(Mapping[str, Resource]):
    """``named_resources["gpu.small"]``: a fresh :class:`Resource` per lookup (TorchX's API).

    A read-only view of :data:`NAMED_RESOURCES` that calls the factory, so that callers who
    change the returned Resource (``res.capabilities[...] = ...``) never change the next
    caller's. Names match exactly or in lower case.

    >>> named_resources["cpu.small"].memMB
    2048
    >>> "cpu.tiny" in named_resources
    False
    """

    def __getitem__(self, name: str) -> Resource:
        table = _named()
        factory = None
        if isinstance(name, str):
            factory = table.get(name) or table.get(name.lower())
        if factory is None:
            raise KeyError(f"no named resource {name!r}; registered: {sorted(table)}")
        return factory()

    def __iter__(self) -> Iterator[str]:
        return iter(_named())

    def __len__(self) -> int:
        return len(_named())


#: TorchX's ``specs.named_resources``: maps a name to a new Resource of that size.
named_resources: Mapping[str, Resource] = _NamedResources()


def get_named_resource(name: str) -> Resource:
    """The named resource ``name`` (case-insensitive); an error lists the valid names.

    Raises :class:`~torchx_provider.errors.InvalidAppError` (field ``resource``), because
    a wrong name is a mistake in the app, found before anything is submitted.

    >>> get_named_resource("GPU.small").gpu
    1
    """
    from torchx_provider.errors import InvalidAppError

    try:
        return named_resources[name]
    except KeyError:
        raise InvalidAppError(
            f"unknown named resource {name!r}; use one of {sorted(_named())} "
            "or give cpu/gpu/memMB explicitly",
            field="resource",
        ) from None


#: TorchX's name for :func:`get_named_resource`.
get_named_resources = get_named_resource
