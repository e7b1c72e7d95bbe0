"""Kubeconfig files, read once: where ``kubectl`` finds one, and what its text must be.

Both the Airflow hook (which reads the kubeconfig on the worker and hands it on as content)
and the client configuration (which reads the context's namespace) use these functions, so
the search order and the parsing rules cannot drift apart. Pure apart from reading files;
no Airflow, no Kubernetes client.

>>> parse_kubeconfig("clusters: []\\ncurrent-context: c")["current-context"]
'c'
>>> context_namespace({"current-context": "c", "contexts": [
...     {"name": "c", "context": {"namespace": "team"}}]})
'team'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchx_provider.errors import InvalidOptionError

#: Where ``kubectl`` looks when ``KUBECONFIG`` is not set.
HOME_KUBECONFIG = "~/.kube/config"


def kubeconfig_candidates(env: Mapping[str, str]) -> list[Path]:
    """The files ``kubectl`` would consider, in order (``~`` expanded): the entries of
    ``KUBECONFIG`` when it names any, else ``~/.kube/config``. As for ``kubectl``, a
    ``KUBECONFIG`` whose files are missing never falls back to ``~/.kube/config``: that could
    be another cluster."""
    names = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(name).expanduser() for name in names or [HOME_KUBECONFIG]]


def find_kubeconfig(env: Mapping[str, str]) -> Path | None:
    """The first of :func:`kubeconfig_candidates` that is a file, or ``None``."""
    return next((path for path in kubeconfig_candidates(env) if path.is_file()), None)


def parse_kubeconfig(text: str, option: str = "kubeconfig") -> dict[str, Any]:
    """The kubeconfig in ``text`` (YAML or JSON); ``option`` names where it came from in the
    :class:`InvalidOptionError` raised when it is not YAML or has no ``clusters`` list."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Only the problem and where: the parser's own message quotes the text around it,
        # which may be a token or a key.
        mark = getattr(e, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(e, "problem", None) or "unreadable"
        raise InvalidOptionError(
            f"{option} is not valid YAML/JSON ({problem}{where})", option
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        raise InvalidOptionError(
            f"{option} is not a kubeconfig (no 'clusters' list); give the content of a "
            "kubeconfig file (`kubectl config view --raw`)",
            option,
        )
    return data


def read_kubeconfig(path: Path) -> dict[str, Any] | None:
    """The kubeconfig in file ``path``; ``None`` when it cannot be read or parsed."""
    try:
        return parse_kubeconfig(path.read_text())
    except (OSError, InvalidOptionError):
        return None


def context_namespace(kubeconfig: Mapping[str, Any], context: str | None = None) -> str | None:
    """The namespace of ``context`` (default: ``current-context``) in a kubeconfig, if set."""
    name = context or kubeconfig.get("current-context")
    for entry in kubeconfig.get("contexts") or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            ns = (entry.get("context") or {}).get("namespace")
            return str(ns) if ns else None
    return None


def _named(entries: Any, name: str) -> Mapping[str, Any] | None:
    for entry in entries or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def check_context(
    kubeconfig: Mapping[str, Any], context: str | None = None, option: str = "kubeconfig"
) -> None:
    """Refuse a kubeconfig whose context (``context``, default ``current-context``) is
    missing, or names a cluster or user it does not define, or a cluster without a server:
    no client could be made from it, and no retry would change that.

    >>> check_context({"current-context": "c", "contexts": [{"name": "c", "context":
    ...     {"cluster": "k", "user": "u"}}], "clusters": [], "users": []})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchx_provider.errors.InvalidOptionError: kubeconfig: context 'c' names cluster 'k', ...
    """
    name = context or kubeconfig.get("current-context")

    def names(key: str) -> str:
        found = [repr(e.get("name")) for e in kubeconfig.get(key) or [] if isinstance(e, Mapping)]
        return ", ".join(found) or "none"

    if not name:
        raise InvalidOptionError(
            f"{option} has no current-context and no context was given; set the connection's "
            f"context to one of: {names('contexts')}",
            option,
        )
    entry = _named(kubeconfig.get("contexts"), str(name))
    if entry is None:
        raise InvalidOptionError(
            f"{option}: context {name!r} is not in the kubeconfig (its contexts: "
            f"{names('contexts')}); name one of them",
            "context" if context else option,
        )
    ctx = entry.get("context") or {}
    cluster_name = ctx.get("cluster")
    cluster = None if not cluster_name else _named(kubeconfig.get("clusters"), str(cluster_name))
    if cluster is None:
        raise InvalidOptionError(
            f"{option}: context {name!r} names cluster {cluster_name!r}, which the kubeconfig "
            f"does not define (its clusters: {names('clusters')}); fix the context or add "
            "the cluster",
            option,
        )
    if not (cluster.get("cluster") or {}).get("server"):
        raise InvalidOptionError(
            f"{option}: cluster {cluster_name!r} has no server address; add its "
            "'server: https://...'",
            option,
        )
    user_name = ctx.get("user")
    if user_name and _named(kubeconfig.get("users"), str(user_name)) is None:
        raise InvalidOptionError(
            f"{option}: context {name!r} names user {user_name!r}, which the kubeconfig does "
            f"not define (its users: {names('users')}); fix the context or add the user",
            option,
        )
