"""The exceptions ``torchx.specs`` names, in the provider's error tree.

Each keeps TorchX's name, constructor and attributes, and subclasses the provider's error
for the same mistake (:mod:`torchx_provider.errors`), so both kinds of ``except`` work::

    TorchXProviderError
    ├── InvalidAppError (ValueError)
    │   └── MalformedAppHandleException   parse_app_handle: not {scheduler}://{session}/{app_id}
    ├── InvalidOptionError (ValueError)
    │   └── InvalidRunConfigException     runopts: a run option unknown, missing or ill-typed
    └── AppStatusError                    AppStatus.raise_for_status: the app did not succeed

TorchX's three classes are plain ``Exception`` subclasses: an ``except`` written for one of
them catches ours, and so do ``except InvalidAppError`` / ``except InvalidOptionError``.
TorchX raises ``InvalidRunConfigException`` only where :class:`~torchx_provider.specs.runopts`
checks a ``cfg``; so does this package. The checks a backend adds on top (a namespace that
is no Kubernetes name, ...) raise the plain :class:`InvalidOptionError`.
"""

from __future__ import annotations

from typing import Any

from torchx_provider.errors import InvalidAppError, InvalidOptionError, TorchXProviderError

#: ``cfg`` not given to :class:`InvalidRunConfigException` (``None`` and ``{}`` are given:
#: TorchX shows both as ``<EMPTY>``).
_NO_CFG: Any = object()


class MalformedAppHandleException(InvalidAppError):
    """An app handle that is not ``{scheduler}://{session}/{app_id}``.

    An :class:`InvalidAppError` of field ``app_handle`` (and so a ``ValueError``);
    ``app_handle`` is the value refused. Its text is TorchX's, without the field in front.

    >>> e = MalformedAppHandleException("echo-x1")
    >>> str(e)
    'echo-x1 is not of the form: <scheduler_backend>://<session_name>/<app_id>'
    >>> e.field, e.app_handle, isinstance(e, ValueError)
    ('app_handle', 'echo-x1', True)
    """

    def __init__(self, app_handle: object, message: str | None = None) -> None:
        self.app_handle = app_handle
        super().__init__(
            message
            or f"{app_handle} is not of the form: <scheduler_backend>://<session_name>/<app_id>",
            field="app_handle",
        )
        self.args = (self.message,)  # TorchX's text, without the field in front

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again from the handle and the message, not from the text holding both.
        return type(self), (self.app_handle, self.message)


class InvalidRunConfigException(InvalidOptionError):
    """A run option is unknown, missing or of the wrong type (what :meth:`runopts.resolve`
    and :meth:`runopts.cfg_from_str` raise).

    ``cfg_key`` is the option at fault, as ``option`` is. Made as TorchX makes it, with the
    ``cfg`` as third argument, the message ends with that cfg as TorchX's does.

    >>> e = InvalidRunConfigException("Required run option: queue", "queue", {})
    >>> str(e), e.cfg_key, isinstance(e, InvalidOptionError)
    ('Required run option: queue. Given: <EMPTY>', 'queue', True)
    """

    def __init__(self, invalid_reason: str, cfg_key: str | None = None, cfg: Any = _NO_CFG) -> None:
        if cfg is not _NO_CFG:
            invalid_reason = f"{invalid_reason}. Given: {cfg if cfg else '<EMPTY>'}"
        super().__init__(invalid_reason, cfg_key)

    @property
    def cfg_key(self) -> str | None:
        """The option at fault (TorchX's name for ``option``)."""
        return self.option

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.option)


class AppStatusError(TorchXProviderError):
    """The app did not succeed (:meth:`~torchx_provider.specs.AppStatus.raise_for_status`);
    ``status`` is its :class:`~torchx_provider.specs.AppStatus`."""

    def __init__(self, status: Any, *args: object) -> None:
        super().__init__(*args)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.status, *self.args)
