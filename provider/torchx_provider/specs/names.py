"""Names and handles: unique app ids, Kubernetes-safe names, ``scheduler://session/app_id``.

Controllers derive names from the names we give them (Volcano makes pods
``{job}-{task}-{index}``, Services take the job's name), so every object name the provider
creates goes through :func:`normalize_rfc1123_name`: RFC 1123 labels of at most 63
characters that never end in ``-``. When a name must be shortened, a short hash of the full
name is kept at the end so that two long names that share a prefix do not collide.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
from typing import NamedTuple

from torchx_provider.specs.exceptions import MalformedAppHandleException

MAX_NAME_LEN = 63
_ALPHABET = string.ascii_lowercase + string.digits
_INVALID = re.compile(r"[^a-z0-9-]+")


def random_id(length: int = 8) -> str:
    """A random id of lowercase letters and digits that starts with a letter.

    >>> len(random_id(5))
    5
    """
    if length < 1:
        raise ValueError("length must be >= 1")
    first = secrets.choice(string.ascii_lowercase)
    return first + "".join(secrets.choice(_ALPHABET) for _ in range(length - 1))


def make_unique(name: str, string_length: int = 8) -> str:
    """``name`` plus a random suffix, e.g. ``trainer-k3x9q2ab``: a fresh id for each submit.

    ``string_length`` 0 means the default length (TorchX's ``make_unique(name, 0)``). The
    result is not normalized: pass it through :func:`normalize_rfc1123_name` where a
    Kubernetes name is needed.

    >>> import re
    >>> bool(re.fullmatch(r"trainer-[a-z][a-z0-9]{7}", make_unique("trainer")))
    True
    """
    return f"{name}-{random_id(string_length or 8)}"


def short_hash(value: str, length: int = 6) -> str:
    """A short stable hex digest of ``value`` (used to keep shortened names distinct).

    >>> short_hash("trainer")
    '06ea17'
    """
    # surrogatepass: any Python str hashes, even one decoded with errors="surrogateescape".
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def normalize_rfc1123_name(name: str, max_len: int = MAX_NAME_LEN) -> str:
    """Turn ``name`` into a valid RFC 1123 label of at most ``max_len`` characters.

    Lowercases, turns every run of invalid characters into one ``-``, strips dashes at both
    ends and puts an ``x`` in front of a leading digit (Service names must start with a
    letter; one rule for every object). Dashes already there are kept, so a valid name
    comes back unchanged.

    If the name is longer than ``max_len`` -- before or after those steps -- it is cut and
    ``-<hash>`` of the *original* name is appended. Judging the original length matters:
    ``"a" * 63 + "_"`` normalizes to ``"a" * 63``, which would collide with that valid name
    if only the normalized length were checked. So two different names that share a long
    prefix (the ones that get cut) never map to the same result.

    >>> normalize_rfc1123_name("My_Role.v2")
    'my-role-v2'
    >>> normalize_rfc1123_name("0-trainer")
    'x0-trainer'
    >>> len(normalize_rfc1123_name("x" * 100))
    63
    """
    if max_len < 8:
        raise ValueError("max_len must leave room for a hash suffix (>= 8)")
    norm = _INVALID.sub("-", name.lower()).strip("-")
    if not norm:
        norm = "x" + short_hash(name)
    elif not norm[0].isalpha():
        norm = "x" + norm
    if len(norm) <= max_len and len(name) <= max_len:
        return norm
    suffix = short_hash(name)
    head = norm[: max_len - len(suffix) - 1].rstrip("-")
    return f"{head}-{suffix}"


def is_rfc1123_name(name: str, max_len: int = MAX_NAME_LEN) -> bool:
    """Whether ``name`` is already a valid name of at most ``max_len`` characters."""
    return bool(re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])?", name)) and len(name) <= max_len


# ---------------------------------------------------------------------------------------------
# App handles


#: An app handle, ``{scheduler_backend}://{session_name}/{app_id}`` (TorchX's type name).
AppHandle = str


class ParsedAppHandle(NamedTuple):
    """The parts of ``{scheduler_backend}://{session_name}/{app_id}``.

    A named tuple, as in TorchX, so both ``parsed.app_id`` and
    ``scheduler, _, app_id = parse_app_handle(handle)`` work.
    """

    scheduler_backend: str
    session_name: str
    app_id: str


# TorchX's form: the scheduler runs to the last ``://``, the app id from the last ``/``.
# ``.`` matches no line break, so a handle holding one is refused instead of cut at it.
_HANDLE = re.compile(r"(?P<scheduler>.+)://(?P<session>.+)/(?P<app_id>.+)")
# The same with an empty session allowed: the operators' handles (see read_app_handle).
_STORED_HANDLE = re.compile(r"(?P<scheduler>.+)://(?P<session>.*)/(?P<app_id>.+)")
_SCHEDULER = re.compile(r"[A-Za-z0-9_\-]+")


def make_app_handle(scheduler_backend: str, session_name: str, app_id: str) -> str:
    """Format an app handle.

    >>> make_app_handle("kubernetes", "", "default:echo-x1")
    'kubernetes:///default:echo-x1'
    """
    return f"{scheduler_backend}://{session_name}/{app_id}"


def _split(app_handle: object, form: re.Pattern[str]) -> ParsedAppHandle:
    """The parts of ``app_handle`` by ``form``, or TorchX's exception; where TorchX would not
    refuse the handle, its message ends with why this package does."""
    text = app_handle.strip() if isinstance(app_handle, str) else ""
    m = form.fullmatch(text)
    reason = None
    if m is None and form.match(text):  # TorchX reads it up to the break
        reason = "it holds a line break"
    elif m is not None and not _SCHEDULER.fullmatch(m["scheduler"]):
        reason = f"scheduler {m['scheduler']!r} is not letters, digits, '_' and '-'"
    if m is None or reason is not None or not isinstance(app_handle, str):
        error = MalformedAppHandleException(app_handle)
        if reason is not None:
            error = MalformedAppHandleException(app_handle, f"{error}: {reason}")
        raise error
    return ParsedAppHandle(m["scheduler"], m["session"], m["app_id"])


def parse_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """Split an app handle into its parts as TorchX does, or raise
    :class:`MalformedAppHandleException` (an :class:`~torchx_provider.errors.InvalidAppError`
    of field ``app_handle``) where TorchX raises it.

    Scheduler, session and app id must all be there: ``local_docker:///echo-x1``, what the
    operators make with the default ``session_name=""``, is refused, as TorchX refuses it
    (:func:`read_app_handle` reads it). The session runs to the last ``/``. Stricter than
    TorchX: a handle holding a line break (TorchX reads it up to the break) or whose
    scheduler is not letters, digits, ``_`` and ``-`` is refused; surrounding spaces are
    dropped.

    >>> scheduler, session, app_id = parse_app_handle("volcano://airflow/default:ddp-k3x9")
    >>> scheduler, session, app_id
    ('volcano', 'airflow', 'default:ddp-k3x9')
    """
    return _split(app_handle, _HANDLE)


def read_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """:func:`parse_app_handle`, but the session may be empty: how the operators read the
    handles they pushed to XCom and kept in ``task_state_store``, made with their default
    ``session_name=""``.

    >>> read_app_handle("local_docker:///echo-k3x9q2ab")
    ParsedAppHandle(scheduler_backend='local_docker', session_name='', app_id='echo-k3x9q2ab')
    """
    return _split(app_handle, _STORED_HANDLE)
