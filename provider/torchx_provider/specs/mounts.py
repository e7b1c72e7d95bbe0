"""Parse the ``type=bind,src=…,dst=…[,readonly]`` mount syntax into typed mounts.

The syntax is Docker's ``--mount`` syntax, the same TorchX components accept:

* ``type=bind,src=<host path>,dst=<container path>[,readonly]`` (a source starting with ``~``
  is expanded to the home directory of the user who submits, on the submitting machine)
* ``type=volume,src=<volume or claim name>,dst=<container path>[,readonly]``
* ``type=device,src=/dev/<name>[,dst=<container path>][,perm=rwm]``

Several mounts may follow each other in one list; each starts with its ``type=``.

>>> parse_mounts(["type=bind,src=/data,dst=/data,readonly"])
[BindMount(src_path='/data', dst_path='/data', read_only=True)]
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import BindMount, DeviceMount, VolumeMount

_KEY_ALIASES = {
    "src": "src",
    "source": "src",
    "dst": "dst",
    "destination": "dst",
    "target": "dst",
    "perm": "perm",
    "permissions": "perm",
    "readonly": "readonly",
    "read_only": "readonly",
    "ro": "readonly",
    "type": "type",
}
_ALLOWED_KEYS = {
    "bind": {"src", "dst", "readonly"},
    "volume": {"src", "dst", "readonly"},
    "device": {"src", "dst", "perm"},
}
_SYNTAX_HELP = (
    "write mounts as type=bind,src=<host path>,dst=<path>[,readonly] | "
    "type=volume,src=<name>,dst=<path>[,readonly] | "
    "type=device,src=/dev/<x>[,dst=<path>][,perm=rwm]"
)


def _tokens(opts: str | Iterable[str]) -> list[str]:
    # TorchX's CLI hands over the comma-split pieces (["type=bind", "src=/a", ...]) while
    # YAML authors write whole mounts ("type=bind,src=/a,dst=/b"): split both the same way.
    if isinstance(opts, str):
        opts = [opts]
    out: list[str] = []
    for i, opt in enumerate(opts):
        if not isinstance(opt, str):
            raise InvalidAppError(
                f"mount options must be strings, got {type(opt).__name__} {opt!r}; {_SYNTAX_HELP}",
                f"mounts[{i}]",
            )
        out.extend(t.strip() for t in opt.split(",") if t.strip())
    return out


def parse_mounts(opts: str | Iterable[str]) -> list[BindMount | VolumeMount | DeviceMount]:
    """Parse mount options; an :class:`InvalidAppError` names the bad token and the syntax.

    ``opts`` is one string or a list of strings; the pieces are read in order and every
    ``type=`` starts a new mount, so ``["type=bind", "src=/a", "dst=/b"]`` (TorchX's CLI
    form) and ``["type=bind,src=/a,dst=/b"]`` give the same mount. ``readonly`` (also
    ``ro``, ``read_only``) takes no value or a boolean; a device mount's ``dst`` defaults to
    its ``src`` and its ``perm`` to ``rwm``.

    >>> for m in parse_mounts("type=volume,src=ckpt,dst=/ckpt,type=device,src=/dev/fuse"):
    ...     print(m)
    VolumeMount(src='ckpt', dst_path='/ckpt', read_only=False)
    DeviceMount(src_path='/dev/fuse', dst_path='/dev/fuse', permissions='rwm')
    """
    groups: list[dict[str, str]] = []
    for token in _tokens(opts):
        key, sep, value = token.partition("=")
        norm = _KEY_ALIASES.get(key.strip().lower())
        if norm is None:
            raise InvalidAppError(f"unknown mount option {token!r}; {_SYNTAX_HELP}", "mounts")
        if norm == "type":
            groups.append({"type": value.strip().lower()})
            continue
        if not groups:
            raise InvalidAppError(
                f"mount option {token!r} comes before any type=...; {_SYNTAX_HELP}", "mounts"
            )
        if norm == "readonly":
            if sep and value.strip().lower() not in ("", "true", "1", "yes"):
                if value.strip().lower() in ("false", "0", "no"):
                    continue
                raise InvalidAppError(f"readonly takes no value, got {token!r}", "mounts")
            groups[-1]["readonly"] = "true"
            continue
        if not sep or not value.strip():
            raise InvalidAppError(f"mount option {token!r} needs a value; {_SYNTAX_HELP}", "mounts")
        if norm in groups[-1]:
            # Most likely a forgotten type=... between two mounts; never let one win silently.
            raise InvalidAppError(
                f"{norm}= is given twice in mounts[{len(groups) - 1}] ({token!r}); start each "
                f"mount with type=...; {_SYNTAX_HELP}",
                "mounts",
            )
        groups[-1][norm] = value.strip()

    mounts: list[BindMount | VolumeMount | DeviceMount] = []
    for i, g in enumerate(groups):
        kind = g["type"]
        where = f"mounts[{i}]"
        if kind not in _ALLOWED_KEYS:
            raise InvalidAppError(f"unknown mount type {kind!r}; use bind, volume or device", where)
        extra = set(g) - {"type"} - _ALLOWED_KEYS[kind]
        if extra:
            raise InvalidAppError(
                f"option(s) {sorted(extra)} do not apply to type={kind}; {_SYNTAX_HELP}", where
            )
        if "src" not in g:
            raise InvalidAppError(f"type={kind} needs src=...; {_SYNTAX_HELP}", where)
        if kind == "device":
            perm = g.get("perm", "rwm")
            if set(perm) - set("rwm"):
                raise InvalidAppError(
                    f"perm={perm!r}: device permissions use only the letters r, w and m", where
                )
            mounts.append(
                DeviceMount(
                    src_path=g["src"],
                    dst_path=g.get("dst", g["src"]),
                    permissions=perm,
                )
            )
            continue
        if "dst" not in g:
            raise InvalidAppError(f"type={kind} needs dst=...; {_SYNTAX_HELP}", where)
        read_only = g.get("readonly") == "true"
        if kind == "bind":
            # A home-relative source (~/data, ~user/data) is the submitting user's, as in TorchX.
            src = os.path.expanduser(g["src"]) if g["src"].startswith("~") else g["src"]
            mounts.append(BindMount(src_path=src, dst_path=g["dst"], read_only=read_only))
        else:
            mounts.append(VolumeMount(src=g["src"], dst_path=g["dst"], read_only=read_only))
    return mounts
