"""Whether a failed connection failed because the server's certificate is not trusted.

Both backends' clients (urllib3 for the kubernetes and docker clients, aiohttp for the
async Kubernetes one) wrap the ``ssl`` error in errors of their own; the reason is found
in the chain, so each backend can name the fix instead of calling the server unreachable.
"""

from __future__ import annotations

import re


def untrusted_certificate(e: BaseException) -> str | None:
    """The reason, when ``e`` (or what it wraps) is a failed check of the server's
    certificate; ``None`` for any other failure."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        text = str(cur)
        m = re.search(r"certificate verify failed(?:: ([^(')\]]+))?", text, re.IGNORECASE)
        if m is not None:
            return (m.group(1) or "").strip() or "certificate verify failed"
        if type(cur).__name__ in ("SSLCertVerificationError", "ClientConnectorCertificateError"):
            return getattr(cur, "verify_message", None) or text
        todo += [cur.__cause__, cur.__context__, getattr(cur, "reason", None)]
        todo += [getattr(cur, "os_error", None), getattr(cur, "certificate_error", None)]
        todo += [a for a in getattr(cur, "args", ()) if isinstance(a, BaseException)]
    return None
