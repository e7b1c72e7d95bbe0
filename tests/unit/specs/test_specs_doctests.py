"""The examples in the app model's docstrings run as part of the unit suite.

They are the first code a reader copies, so a stale one is a bug. (``pytest --doctest-modules``
on the same modules runs them too; this keeps them in ``tests/unit`` without extra config.)
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "torchx_provider.specs",
    "torchx_provider.specs.api",
    "torchx_provider.specs.exceptions",
    "torchx_provider.specs.mounts",
    "torchx_provider.specs.named_resources_aws",
    "torchx_provider.specs.names",
    "torchx_provider.specs.resource_registry",
    "torchx_provider.specs.runopts",
    "torchx_provider.specs.serialization",
    "torchx_provider.specs.status",
    "torchx_provider.specs.validation",
    "torchx_provider.specs.yaml_text",
    "torchx_provider.components",
    "torchx_provider.components.dist",
    "torchx_provider.components.utils",
    "torchx_provider.errors",
    "torchx_provider.schedulers.logs",
    "torchx_provider.schedulers.labels",
    "torchx_provider.schedulers.backoff",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_the_app_model_has_examples() -> None:
    attempted = sum(
        doctest.testmod(importlib.import_module(n), report=False).attempted
        for n in MODULES
        if n.startswith("torchx_provider.specs.")
    )
    assert attempted >= 20
