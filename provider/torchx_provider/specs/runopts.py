"""Run options: the typed, documented ``cfg`` a scheduler accepts.

Each scheduler declares its options once (name, type, default, help, required) and every
entry point -- a Python dict, the TorchX CLI string ``k=v,k2=v2``, an Airflow connection's
extras -- goes through :meth:`runopts.resolve`, so a typo or a wrong type is caught the same
way everywhere, before anything talks to a cluster.

>>> opts = runopts()
>>> opts.add("queue", str, "Volcano queue", required=True)
>>> opts.add("copy_env", list[str], "env vars to copy", default=None)
>>> opts.resolve(opts.cfg_from_str("queue=default,copy_env=A;B"))
{'queue': 'default', 'copy_env': ['A', 'B']}
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torchx_provider.specs.exceptions import InvalidRunConfigException

CfgVal = str | int | float | bool | list[str] | dict[str, str] | None

_OPTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off"})
_DELIMS = re.compile(r"[,;]")


def bool_value(value: object) -> bool | None:
    """``value`` as a bool: a bool, 0/1, or one of the words true/false, 1/0, yes/no, y/n,
    on/off (any case, spaces ignored); ``None`` when it is none of these.

    The one reading of booleans: run options, connection extras and client parameters all use
    it, each with its own error message.

    >>> bool_value("Yes"), bool_value(0), bool_value("off"), bool_value("maybe")
    (True, False, False, None)
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    low = str(value).strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def _pieces(cfg_str: str) -> list[tuple[str, str]]:
    """``"a=1,b;c"`` -> ``[("", "a=1"), (",", "b"), (";", "c")]``: pieces with the delimiter
    that came before each."""
    parts = re.split(r"([,;])", cfg_str)
    return [("", parts[0])] + [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def get_type_name(tp: Any) -> str:
    """TorchX's name of a run option type: a class's own name, and ``str(tp)`` for a
    ``typing`` form or anything without a name.

    The names TorchX prints in its help and errors; this package's own messages write
    ``list[str]`` and ``dict[str, str]`` instead (:attr:`runopt.type_name`). ``str(tp)`` is
    the interpreter's: ``typing.Optional[str]`` is ``'typing.Optional[str]'`` up to Python
    3.13 and ``'str | None'`` from 3.14 on, with TorchX's function as with this one.

    >>> get_type_name(int), get_type_name(list[str]), get_type_name(typing.List[str])
    ('int', 'list', 'typing.List[str]')
    """
    if getattr(tp, "__module__", None) == "typing" or not hasattr(tp, "__name__"):
        return str(tp)
    return str(tp.__name__)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        return "list[str]"
    if origin is dict:
        return "dict[str, str]"
    return getattr(tp, "__name__", str(tp))


@dataclass(frozen=True)
class runopt:
    """One option: its default, its type, whether it is required and its help text."""

    default: CfgVal
    opt_type: Any
    is_required: bool
    help: str

    @property
    def type_name(self) -> str:
        return _type_name(self.opt_type)


class runopts:
    """The set of options of one scheduler, in declaration order."""

    def __init__(self) -> None:
        self._opts: dict[str, runopt] = {}

    # -- declaration ---------------------------------------------------------------------------
    def add(
        self,
        cfg_key: str,
        type_: Any,
        help: str,
        default: CfgVal = None,
        required: bool = False,
    ) -> None:
        """Declare an option. A required option cannot have a default."""
        if required and default is not None:
            raise ValueError(f"required option {cfg_key!r} cannot have a default")
        if default is not None and not self.is_type(default, type_):
            raise TypeError(f"default of {cfg_key!r} is not a {_type_name(type_)}: {default!r}")
        self._opts[cfg_key] = runopt(default, type_, required, help)

    def update(self, other: runopts) -> None:
        """Add every option of ``other`` (overriding same-named ones)."""
        self._opts.update(other._opts)

    def get(self, name: str) -> runopt | None:
        return self._opts.get(name)

    def __iter__(self) -> Iterator[tuple[str, runopt]]:
        return iter(self._opts.items())

    def __contains__(self, name: object) -> bool:
        return name in self._opts

    def __len__(self) -> int:
        return len(self._opts)

    # -- checking --------------------------------------------------------------------------------
    @staticmethod
    def is_type(obj: Any, tp: Any) -> bool:
        """Whether ``obj`` is of option type ``tp`` (``list[str]`` and ``dict[str, str]`` too)."""
        origin = typing.get_origin(tp)
        if origin is list:
            return isinstance(obj, list) and all(isinstance(v, str) for v in obj)
        if origin is dict:
            return isinstance(obj, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
            )
        if tp is float:
            return isinstance(obj, (int, float)) and not isinstance(obj, bool)
        if tp is int:
            return isinstance(obj, int) and not isinstance(obj, bool)
        return isinstance(obj, tp)

    def _valid_list(self) -> str:
        return (
            ", ".join(
                f"{k} ({o.type_name}{', required' if o.is_required else ''})"
                for k, o in self._opts.items()
            )
            or "(none: this scheduler takes no run options)"
        )

    def _unknown(self, keys: list[str]) -> InvalidRunConfigException:
        hints = [
            f"{m[0]!r} for {k!r}"
            for k in keys
            if (m := difflib.get_close_matches(k, list(self._opts), n=1))
        ]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        return InvalidRunConfigException(
            f"unknown run option(s) {keys}{hint}; valid options are: {self._valid_list()}",
            cfg_key=keys[0],
        )

    def resolve(self, cfg: Mapping[str, CfgVal] | None) -> dict[str, CfgVal]:
        """Check ``cfg`` and fill in defaults; one :class:`InvalidRunConfigException` (an
        :class:`~torchx_provider.errors.InvalidOptionError`) lists the fix.

        Values given as strings (from the CLI form, templates or connection extras) are
        converted to the option's type; anything else must already be of that type.
        """
        cfg = dict(cfg or {})
        unknown = sorted(str(k) for k in cfg if k not in self._opts)
        if unknown:
            raise self._unknown(unknown)
        resolved: dict[str, CfgVal] = {}
        missing: list[str] = []
        for key, opt in self._opts.items():
            value = cfg.get(key)
            if value is None:
                if opt.is_required:
                    missing.append(key)
                resolved[key] = opt.default
                continue
            if isinstance(value, str) and opt.opt_type is not str:
                value = self._parse_value(key, opt, value)
            elif not self.is_type(value, opt.opt_type):
                value = self._coerce(key, opt, value)
            elif opt.opt_type is float:
                value = float(typing.cast(float, value))  # an int passed is_type
            resolved[key] = value
        if missing:
            raise InvalidRunConfigException(
                f"required run option(s) {missing} not set; set them in cfg "
                f"(e.g. cfg={{'{missing[0]}': ...}}) or in the connection's extras. "
                f"Valid options are: {self._valid_list()}",
                cfg_key=missing[0],
            )
        return resolved

    def _coerce(self, key: str, opt: runopt, value: Any) -> CfgVal:
        # Tuples of strings and ints for floats are harmless; everything else is a mistake.
        if typing.get_origin(opt.opt_type) is list and isinstance(value, tuple):
            value = list(value)
            if self.is_type(value, opt.opt_type):
                return value
        if typing.get_origin(opt.opt_type) is dict and isinstance(value, Mapping):
            converted = {str(k): str(v) for k, v in value.items()}
            return converted
        raise InvalidRunConfigException(
            f"run option {key!r} must be a {opt.type_name}, got {type(value).__name__} "
            f"{value!r}. {key}: {opt.help}",
            cfg_key=key,
        )

    def _parse_value(self, key: str, opt: runopt, raw: str) -> CfgVal:
        tp = opt.opt_type
        origin = typing.get_origin(tp)
        raw = raw.strip()
        if raw in ('""', "''"):
            raw = ""  # the CLI's way to write an empty value
        try:
            if tp is str:
                return raw
            if origin is list:
                return [v.strip() for v in _DELIMS.split(raw) if v.strip()]
            if origin is dict:
                out: dict[str, str] = {}
                for item in _DELIMS.split(raw):
                    if not item.strip():
                        continue
                    k, sep_, v = item.partition(":")
                    if not sep_ or not k.strip():
                        raise ValueError(f"{item.strip()!r} is not KEY:VALUE")
                    out[k.strip()] = v.strip()
                return out
            if tp is bool:
                flag = bool_value(raw)
                if flag is None:
                    raise ValueError("not one of true/false/1/0/yes/no")
                return flag
            if tp is int:
                return int(raw)
            if tp is float:
                return float(raw)
        except ValueError as e:
            raise InvalidRunConfigException(
                f"run option {key!r} must be a {opt.type_name}, cannot parse {raw!r} ({e}). "
                f"{key}: {opt.help}",
                cfg_key=key,
            ) from None
        raise InvalidRunConfigException(f"run option {key!r} has unsupported type {tp!r}", key)

    # -- the CLI string form ------------------------------------------------------------------
    def cfg_from_str(self, cfg_str: str) -> dict[str, CfgVal]:
        """Parse TorchX's ``k=v,k2=v2`` form into typed values (no defaults, no required check).

        Pairs are separated by ``,`` or ``;``. A piece without ``key=`` continues the value of
        the option before it, which is how lists (``a;b`` or ``a,b``) and dicts
        (``K:V,K2:V2``) are written; bools are ``true/false/1/0/yes/no``; ``k=`` or ``k=""``
        is an empty value. Surrounding spaces are dropped. Call :meth:`resolve` on the result
        to add defaults and check required options.

        >>> opts = runopts()
        >>> opts.add("tags", list[str], "tags")
        >>> opts.add("env", dict[str, str], "env")
        >>> opts.add("debug", bool, "debug", default=False)
        >>> opts.cfg_from_str("tags=a,b;debug=yes,env=A:1,B:2")
        {'tags': ['a', 'b'], 'debug': True, 'env': {'A': '1', 'B': '2'}}
        """
        pieces: list[tuple[str, str]] = []
        # Keep each delimiter with the piece after it, so a continued str value keeps it.
        for delim, piece in _pieces(cfg_str):
            if not piece.strip():
                continue
            key, sep, value = piece.partition("=")
            if sep and _OPTION_NAME.match(key.strip()):
                pieces.append((key.strip(), value))
            elif pieces:
                k, v = pieces[-1]
                pieces[-1] = (k, f"{v}{delim}{piece}")
            else:
                raise InvalidRunConfigException(
                    f"cannot parse run options {cfg_str!r}: {piece!r} is not key=value. "
                    f"Valid options are: {self._valid_list()}"
                )
        unknown = [k for k, _ in pieces if k not in self._opts]
        if unknown:
            raise self._unknown(unknown)
        return {key: self._parse_value(key, self._opts[key], value) for key, value in pieces}

    # -- help --------------------------------------------------------------------------------
    def __repr__(self) -> str:
        lines = []
        for key, opt in self._opts.items():
            req = "required" if opt.is_required else f"default: {opt.default!r}"
            lines.append(f"    {key} ({opt.type_name}, {req})\n        {opt.help}")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """A Markdown table of the options (the docs' run-option tables use it)."""
        rows = ["| option | type | default | description |", "|---|---|---|---|"]
        for key, opt in self._opts.items():
            default = "**required**" if opt.is_required else f"`{opt.default!r}`"
            help_text = opt.help.replace("|", "\\|").replace("\n", " ")
            rows.append(f"| `{key}` | `{opt.type_name}` | {default} | {help_text} |")
        return "\n".join(rows)
