"""Every example in the package's docstrings runs as part of the unit suite.

They are the first code a reader copies, so a stale one is a bug. Every module of
``torchx_provider`` whose source holds an example (``>>>``) is found here, so a module that
gains one is tested without being listed.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import torchx_provider

PACKAGE = Path(torchx_provider.__file__).parent


def modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts).removesuffix(".__init__"))
    return names


MODULES = modules_with_examples()


def test_the_search_finds_the_modules_with_examples() -> None:
    assert len(MODULES) >= 45
    assert {"torchx_provider.specs.api", "torchx_provider.triggers.policy"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has '>>> ' but no example doctest finds"
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
