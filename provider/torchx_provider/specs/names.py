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


_HANDLE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_\-]+)://(?P<session>[^/]*)/(?P<app_id>.+)$")


def make_app_handle(scheduler_backend: str, session_name: str, app_id: str) -> str:
    """Format an app handle.

    >>> make_app_handle("kubernetes", "", "default:echo-x1")
    'kubernetes:///default:echo-x1'
    """
    return f"{scheduler_backend}://{session_name}/{app_id}"


def parse_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """Split an app handle into its parts; a :class:`MalformedAppHandleException` (an
    :class:`~torchx_provider.errors.InvalidAppError` of field ``app_handle``) shows the form.

    The scheduler and the app id must be there, as TorchX requires. The session may be
    empty, unlike TorchX's: it is what the operators write when ``session_name`` is left
    empty (``local_docker:///echo-k3x9q2ab``), and the handles they stored must stay
    readable. The app id is everything after the third ``/`` (Kubernetes ids look like
    ``namespace:name``); TorchX splits at the last ``/`` instead. Both read a handle alike
    when neither its session nor its app id holds a ``/``, as none the operators make does.

    >>> scheduler, session, app_id = parse_app_handle("volcano://airflow/default:ddp-k3x9")
    >>> scheduler, session, app_id
    ('volcano', 'airflow', 'default:ddp-k3x9')
    """
    m = _HANDLE.match(app_handle.strip()) if isinstance(app_handle, str) else None
    if not m:
        raise MalformedAppHandleException(app_handle)
    return ParsedAppHandle(m["scheduler"], m["session"], m["app_id"])
