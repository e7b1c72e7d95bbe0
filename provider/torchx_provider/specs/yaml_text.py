"""The YAML a dry run prints: plain data in, the text of ``yaml.safe_dump`` out, fast.

A dry run's request (a Volcano Job, an AppWrapper, the Docker containers) is printed with
``str(info)``; for an app of a thousand replicas that is over a hundred thousand values, and
PyYAML takes seconds over it (about one even with libyaml's C emitter, whose text also
differs from PyYAML's own in corner cases). :func:`yaml_text` writes the block structure
itself and leaves to PyYAML only what needs judgement -- how one scalar is written (plain,
quoted, escaped, folded at the 80th column) -- asked once per distinct value and place: a
thousand pods repeat the same values at the same places.

The text is exactly ``yaml.safe_dump(obj, sort_keys=False)`` (keys in insertion order, block
style, indent 2, width 80), except that a dict or list that appears twice is written twice
instead of as an ``&id``/``*id`` alias (as the API server will store it). A document the
short path cannot vouch for -- a type other than ``dict``, ``list``, ``str``, ``int``,
``float``, ``bool`` and ``None``, or a key PyYAML writes as a complex ``? key`` -- is dumped
by PyYAML whole: slower, the same text.
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: PyYAML's defaults: the column a scalar may reach before it is folded, the longest
#: simple key (PyYAML counts the key's tag, ``!!str``, in it).
WIDTH = 80
SIMPLE_KEY_MAX = 128

_SCALARS = (str, int, float, bool, type(None))
_BREAKS = frozenset("\n\r\x85\u2028\u2029")


class _Unsure(Exception):
    """The short path cannot promise PyYAML's text for this document."""


@functools.cache
def _dumper() -> type:
    import yaml

    class NoAliasDumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return NoAliasDumper


def _pyyaml(obj: Any, **kwargs: Any) -> str:
    import yaml

    return str(
        yaml.dump(obj, Dumper=_dumper(), sort_keys=False, default_flow_style=False, **kwargs)
    )


#: Strings PyYAML writes as they are: a letter, then letters, digits, ``_./-`` (no indicator,
#: no space), unless YAML 1.1 reads them as a boolean or null (:data:`_KEYWORDS`).
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*\Z")
_KEYWORDS = frozenset(
    f(w)
    for w in ("yes", "no", "true", "false", "on", "off", "null")
    for f in (str, str.title, str.upper)
)
#: Strings PyYAML quotes because they read as an integer (decimal or octal): ``'0'``, ``'17'``.
_INTEGER = re.compile(r"(?:0|[1-9][0-9]*|0[0-7]+)\Z")


def _line(value: Any) -> str | None:
    """How PyYAML writes ``value`` as a mapping value when nothing folds it; ``None`` when
    that takes more than one line (a string with line breaks). The commonest values -- names,
    paths, counts -- are answered without PyYAML."""
    kind = type(value)
    if kind is str:
        if _PLAIN.match(value) and value not in _KEYWORDS:
            return str(value)
        if _INTEGER.match(value):
            return f"'{value}'"
    elif kind is int:
        return str(value)
    text = _pyyaml({"k": value}, width=1 << 30)
    return text[3:-1] if text.count("\n") == 1 else None


def _placed(value: Any, indent: int, key_width: int | None) -> str:
    """How PyYAML writes ``value`` at its place, folded lines included: after a key of
    ``key_width`` characters in a mapping at column ``indent``, or after ``- `` at column
    ``indent`` (``key_width`` None). The place is rebuilt around the value and cut out."""
    outer = "".join(f"{' ' * (2 * i)}a:\n" for i in range(indent // 2))
    if key_width is None:
        doc: Any = {"x": [value]}
        prefix = f"{outer}{' ' * indent}x:\n{' ' * indent}- "
    else:
        doc = {"x" * key_width: value}
        prefix = f"{outer}{' ' * indent}{'x' * key_width}: "
    for _ in range(indent // 2):
        doc = {"a": doc}
    text = _pyyaml(doc)
    if indent % 2 or not text.startswith(prefix):
        raise _Unsure
    return text[len(prefix) : -1]


# Kept per value (and per key): the type's name is part of the cache key (``True == 1``), and floats
# are never kept (``0.0 == -0.0``, which PyYAML writes apart).
@functools.lru_cache(maxsize=65536)
def _known_line(kind: str, value: Any) -> str | None:
    return _line(value)


@functools.lru_cache(maxsize=4096)
def _known_placed(kind: str, value: Any, indent: int, key_width: int | None) -> str:
    return _placed(value, indent, key_width)


def _value(value: Any, indent: int, key_width: int | None) -> str:
    """``value`` written at its place (see :func:`_placed`)."""
    kind = type(value)
    text = _line(value) if kind is float else _known_line(kind.__name__, value)
    column = indent + 2 if key_width is None else indent + key_width + 2
    if text is not None and column + len(text) <= WIDTH:
        return text
    if text is not None and " " not in text and text[0] != '"':
        return text  # plain and single-quoted scalars fold only at spaces
    if kind is float:
        return _placed(value, indent, key_width)
    return _known_placed(kind.__name__, value, indent, key_width)


def _simple_key(key: Any) -> str | None:
    """How PyYAML writes ``key`` as a simple key; ``None`` when it writes ``? key``."""
    text = _line(key)
    text_of_key = str(key)
    if text is None or key == "" or len(text_of_key) + 6 >= SIMPLE_KEY_MAX:
        return None
    return text if _BREAKS.isdisjoint(text_of_key) else None


@functools.lru_cache(maxsize=4096)
def _known_key(kind: str, key: Any) -> str | None:
    return _simple_key(key)


def _key(key: Any) -> str:
    kind = type(key)
    if kind not in _SCALARS:
        raise _Unsure
    text = _simple_key(key) if kind is float else _known_key(kind.__name__, key)
    if text is None:
        raise _Unsure
    return str(text)


def _inline(value: Any, indent: int, key_width: int | None) -> str | None:
    """``value`` on its line (a scalar, ``{}``, ``[]``); ``None`` for a block below it."""
    kind = type(value)
    if kind is dict or kind is list:
        return None if value else ("{}" if kind is dict else "[]")
    if kind in _SCALARS:
        return _value(value, indent, key_width)
    raise _Unsure


def _mapping(data: dict[Any, Any], indent: int, first: str, out: list[str]) -> None:
    pad = " " * indent
    prefix = first
    for key, value in data.items():
        k = _key(key)
        text = _inline(value, indent, len(k))
        if text is not None:
            out.append(f"{prefix}{k}: {text}\n")
        elif type(value) is dict:
            out.append(f"{prefix}{k}:\n")
            _mapping(value, indent + 2, " " * (indent + 2), out)
        else:
            out.append(f"{prefix}{k}:\n")
            _sequence(value, indent, out)  # indentless, as PyYAML writes lists in mappings
        prefix = pad


def _sequence(data: list[Any], indent: int, out: list[str], first: str | None = None) -> None:
    dash = " " * indent + "- "
    prefix = dash if first is None else first
    for item in data:
        text = _inline(item, indent, None)
        if text is not None:
            out.append(f"{prefix}{text}\n")
        elif type(item) is dict:
            _mapping(item, indent + 2, prefix, out)
        else:
            _sequence(item, indent + 2, out, prefix + "- ")
        prefix = dash


def yaml_text(obj: Any) -> str:
    """YAML of plain data: the text of ``yaml.safe_dump(obj, sort_keys=False)``, no aliases.

    >>> print(yaml_text({"b": [1, "x", [True]], "a": {"on": None, "e": {}}}), end="")
    b:
    - 1
    - x
    - - true
    a:
      'on': null
      e: {}
    """
    out: list[str] = []
    try:
        if type(obj) is dict and obj:
            _mapping(obj, 0, "", out)
            return "".join(out)
        if type(obj) is list and obj:
            _sequence(obj, 0, out)
            return "".join(out)
    except _Unsure:
        pass
    return _whole(obj)


def _whole(obj: Any) -> str:
    """The document dumped by PyYAML itself."""
    return _pyyaml(obj)
