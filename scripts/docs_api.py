"""A Griffe extension for the API reference (``docs/api.md``, built by mkdocstrings).

The package's docstrings are written in reStructuredText for Sphinx: fields (``:param x:``,
which mkdocstrings' Sphinx parser reads), roles (``:class:`~torchx_provider.errors.X```),
literal blocks after ``::`` and doctests. The reference renders docstrings as Markdown, so
this extension rewrites what Markdown would show as it is: a role becomes a code span of its
target (its last part with ``~``), a paragraph ending in ``::`` ends in ``:`` (the indented
block after it is a code block in Markdown too), and a doctest becomes a ``pycon`` code
block. The text of the docstrings is not changed otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:class:`~a.b.C``` or ``:py:func:`text <a.b.f>```
_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref|term):"
    r"`(?P<tilde>~?)(?P<body>[^`]+)`"
)
_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^>]+)>$", re.S)


def _role(match: re.Match[str]) -> str:
    body = match.group("body").strip()
    explicit = _EXPLICIT.match(body)
    if explicit:
        return f"`{explicit.group('text')}`"
    if match.group("tilde"):
        body = body.rstrip("()").rsplit(".", 1)[-1] + ("()" if body.endswith("()") else "")
    return f"`{body.lstrip('.')}`"


def _doctests(text: str) -> str:
    """Each paragraph that starts with ``>>>`` fenced as a ``pycon`` block."""
    out: list[str] = []
    for block in re.split(r"(\n[ \t]*\n)", text):
        stripped = block.lstrip("\n")
        if stripped.lstrip().startswith(">>>"):
            indent = stripped[: len(stripped) - len(stripped.lstrip())]
            block = f"{indent}```pycon\n{stripped}\n{indent}```"
        out.append(block)
    return "".join(out)


def markdown_of(text: str) -> str:
    """``text``, an reStructuredText docstring, with roles, ``::`` and doctests in Markdown.

    >>> markdown_of("Raises :class:`~torchx_provider.errors.UserCodeError`::")
    'Raises `UserCodeError`:'
    """
    text = _ROLE.sub(_role, text)
    text = re.sub(r"(\S)::$", r"\1:", text, flags=re.M)
    text = re.sub(r"^(\s*)::$", "", text, flags=re.M)
    return _doctests(text)


class SphinxToMarkdown(griffe.Extension):
    """Rewrites every docstring Griffe loads with :func:`markdown_of`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
