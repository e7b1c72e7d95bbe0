"""The run options every Kubernetes backend accepts, each declared once as a dataclass field.

Volcano, MCAD and AppWrapper v1beta2 place pods the same way (:mod:`.pod`), so the options
that shape those pods and the object around them -- namespace, service account, workspace
image repository, pull secret, reserved resources, server-side validation, extra labels and
annotations -- mean the same on all. Each is a field of :class:`KubeOpts` whose metadata
holds its type and help; :meth:`KubeOpts.run_opts` derives the :class:`runopts` from the
fields, so names, types, defaults and help cannot drift apart. A backend subclasses
:class:`KubeOpts` with only what its object has of its own (Volcano's ``queue``, MCAD's
``priority`` and coscheduling, the AppWrapper's Kueue queue) and sets :attr:`KubeOpts.KIND`,
the object ``{kind}`` names in the help texts.

>>> @dataclass(frozen=True, kw_only=True)
... class JobOpts(KubeOpts):
...     KIND: ClassVar[str] = "job"
>>> opts = JobOpts.run_opts()
>>> [name for name, _ in opts][:3]
['namespace', 'service_account', 'image_repo']
>>> opts.get("validate_spec").help
'ask the API server to validate the job (server-side dry run) before creating it'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.pod import (
    RESERVED_MEMMB,
    RESERVED_MILLICPU,
    PodSettings,
)
from torchx_provider.schedulers.labels import check_labels
from torchx_provider.specs.runopts import CfgVal, runopts

_Opts = TypeVar("_Opts", bound="KubeOpts")


def option(
    type_: Any,
    help: str,
    default: Any = None,
    *,
    name: str | None = None,
    minimum: int | None = None,
) -> Any:
    """A run-option field: its default, and in the field's metadata its type, its help
    (``{kind}`` is filled in by :meth:`KubeOpts.run_opts`) and what :meth:`KubeOpts.check`
    holds it to: ``name``, the rule of the Kubernetes name it holds (see :data:`NAME_RULES`);
    ``minimum``, the least value of an ``int``."""
    return field(default=default, metadata=_metadata(type_, help, name, minimum))


def required_option(type_: Any, help: str, *, name: str | None = None) -> Any:
    """A run-option field without default: the option is required."""
    return field(metadata=_metadata(type_, help, name, None))


def _metadata(type_: Any, help: str, name: str | None, minimum: int | None) -> dict[str, Any]:
    return {"type": type_, "help": help, "name_rule": name, "minimum": minimum}


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: rule -> (pattern, longest, what the error says)
NAME_RULES: dict[str, tuple[re.Pattern[str], int, str]] = {
    "label": (
        re.compile(_DNS_LABEL),
        63,
        "at most 63 characters of a-z, 0-9 and '-', starting and ending alphanumeric",
    ),
    "subdomain": (
        re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"),
        253,
        "at most 253 characters of a-z, 0-9, '-' and '.', starting and ending alphanumeric",
    ),
    # a name that is also a label value (Kueue's queue-name and priority-class labels)
    "labelled": (
        re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"),
        63,
        "at most 63 characters of a-z, 0-9, '-' and '.', starting and ending alphanumeric "
        "(it is also a label value)",
    ),
}


def check_object_name(value: Any, option: str, rule: str) -> None:
    """Raise :class:`InvalidOptionError` when run option ``option`` names a Kubernetes object
    with a name the API server would refuse (``None``: unset, fine)."""
    if value is None:
        return
    pattern, longest, what = NAME_RULES[rule]
    if not str(value).strip():
        raise InvalidOptionError(f"run option {option} is empty; set it to a name", option)
    if not pattern.fullmatch(str(value)) or len(str(value)) > longest:
        raise InvalidOptionError(
            f"run option {option}={value!r} is not a valid Kubernetes name: {what}", option
        )


@dataclass(frozen=True, kw_only=True)
class KubeOpts:
    """The resolved shared options; each field's metadata holds its type and help.

    Keyword-only, so that a backend's subclass may add a required field (Volcano's ``queue``)
    after these defaulted ones.
    """

    #: The object the backend creates (``"job"``, ``"AppWrapper"``), as help texts name it.
    KIND: ClassVar[str] = "object"

    namespace: str | None = option(
        str,
        "Kubernetes namespace of the {kind} (default: the connection's, else the kube "
        "context's, else 'default')",
        name="label",
    )
    service_account: str | None = option(str, "service account of the pods", name="subdomain")
    image_repo: str | None = option(
        str,
        "registry repository to push workspace images to (e.g. registry.example.com/me/app); "
        "needed by roles with a workspace",
    )
    image_secret: str | None = option(
        str, "image pull secret of the pods (private registries)", name="subdomain"
    )
    quiet: bool = option(
        bool, "log the progress of workspace image builds at debug level only", default=False
    )
    reserved_millicpu: int = option(
        int,
        "CPU (millicores) kept back from each replica's request for the node's own use",
        default=RESERVED_MILLICPU,
        minimum=0,
    )
    reserved_memmb: int = option(
        int,
        "memory (MiB) kept back from each replica's request for the node's own use",
        default=RESERVED_MEMMB,
        minimum=0,
    )
    validate_spec: bool = option(
        bool,
        "ask the API server to validate the {kind} (server-side dry run) before creating it",
        default=False,
    )
    labels: Mapping[str, str] | None = option(
        dict[str, str], "extra labels for the {kind} and its pods"
    )
    annotations: Mapping[str, str] | None = option(
        dict[str, str], "extra annotations for the {kind} and its pods"
    )

    @classmethod
    def run_opts(cls) -> runopts:
        """The options of the fields: ``namespace``, then the backend's own (where TorchX
        users look for them: the required ``queue`` right after ``namespace``), then the
        shared rest."""
        shared = [f.name for f in dataclasses.fields(KubeOpts)]
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        own = [name for name in by_name if name not in shared]
        opts = runopts()
        for name in [shared[0], *own, *shared[1:]]:
            f = by_name[name]
            required = f.default is dataclasses.MISSING
            default: CfgVal = None if required else f.default  # type: ignore[assignment]
            help = f.metadata["help"].replace("{kind}", cls.KIND)
            opts.add(name, f.metadata["type"], help, default=default, required=required)
        return opts

    @classmethod
    def from_cfg(cls: type[_Opts], cfg: Mapping[str, CfgVal]) -> _Opts:
        """From resolved run options (unset ones take the dataclass defaults; keys of other
        backends or of the connection are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in cfg.items() if k in names and v is not None}
        return cls(**known)  # type: ignore[arg-type]

    def check(self) -> None:
        """Reject values the API server would reject later, or silently misapply: the names
        and least values the fields declare (see :func:`option`), and the labels; a backend
        extends it with its own options' other rules."""
        fields = dataclasses.fields(self)
        for f in fields:
            if f.metadata["name_rule"] is not None:
                check_object_name(getattr(self, f.name), f.name, f.metadata["name_rule"])
        for f in fields:
            value, minimum = getattr(self, f.name), f.metadata["minimum"]
            if minimum is not None and value is not None and value < minimum:
                msg = f"run option {f.name} must be >= {minimum}, got {value}"
                raise InvalidOptionError(msg, option=f.name)
        check_labels(self.labels or {}, "labels")

    def pod_settings(self) -> PodSettings:
        """The pod settings of the shared options; a backend ``replace``s in its own."""
        return PodSettings(
            service_account=self.service_account,
            image_secret=self.image_secret,
            reserved_millicpu=self.reserved_millicpu,
            reserved_memmb=self.reserved_memmb,
            labels=dict(self.labels or {}),
            annotations=dict(self.annotations or {}),
        )
