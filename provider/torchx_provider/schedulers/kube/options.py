"""The run options both Kubernetes backends accept, declared once.

Volcano and MCAD place pods the same way (:mod:`.pod`), so the options that shape those pods
and the object around them -- namespace, service account, workspace image repository, pull
secret, reserved resources, server-side validation, extra labels and annotations -- mean the
same on both. Declaring them here keeps their names, types, defaults and help from drifting
apart; each backend adds only what its object has of its own (Volcano's ``queue``, MCAD's
``priority`` and coscheduling).

>>> opts = kube_run_opts("job", runopts())
>>> [name for name, _ in opts][:3]
['namespace', 'service_account', 'image_repo']
>>> opts.get("validate_spec").help
'ask the API server to validate the job (server-side dry run) before creating it'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.pod import (
    RESERVED_MEMMB,
    RESERVED_MILLICPU,
    PodSettings,
)
from torchx_provider.schedulers.labels import check_labels
from torchx_provider.specs.runopts import CfgVal, runopts

_Opts = TypeVar("_Opts", bound="KubeOpts")


def kube_run_opts(kind: str, specific: runopts) -> runopts:
    """``namespace``, then the backend's ``specific`` options, then the shared rest.

    ``kind`` names the object the backend creates (``"job"``, ``"AppWrapper"``) in the help
    texts. The backend's own options come second, where TorchX users look for them (the
    required ``queue`` right after ``namespace``).
    """
    opts = runopts()
    opts.add(
        "namespace",
        str,
        f"Kubernetes namespace of the {kind} (default: the connection's, else the kube "
        "context's, else 'default')",
    )
    opts.update(specific)
    opts.add("service_account", str, "service account of the pods")
    opts.add(
        "image_repo",
        str,
        "registry repository to push workspace images to (e.g. registry.example.com/me/app); "
        "needed by roles with a workspace",
    )
    opts.add("image_secret", str, "image pull secret of the pods (private registries)")
    opts.add(
        "reserved_millicpu",
        int,
        "CPU (millicores) kept back from each replica's request for the node's own use",
        default=RESERVED_MILLICPU,
    )
    opts.add(
        "reserved_memmb",
        int,
        "memory (MiB) kept back from each replica's request for the node's own use",
        default=RESERVED_MEMMB,
    )
    opts.add(
        "validate_spec",
        bool,
        f"ask the API server to validate the {kind} (server-side dry run) before creating it",
        default=False,
    )
    opts.add("labels", dict[str, str], f"extra labels for the {kind} and its pods")
    opts.add("annotations", dict[str, str], f"extra annotations for the {kind} and its pods")
    return opts


@dataclass(frozen=True, kw_only=True)
class KubeOpts:
    """The resolved shared options (see :func:`kube_run_opts` for their help).

    Keyword-only, so that a backend's subclass may add a required field (Volcano's ``queue``)
    after these defaulted ones.
    """

    namespace: str | None = None
    service_account: str | None = None
    image_repo: str | None = None
    image_secret: str | None = None
    reserved_millicpu: int = RESERVED_MILLICPU
    reserved_memmb: int = RESERVED_MEMMB
    validate_spec: bool = False
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None

    @classmethod
    def from_cfg(cls: type[_Opts], cfg: Mapping[str, CfgVal]) -> _Opts:
        """From resolved run options (unset ones take the dataclass defaults; keys of other
        backends or of the connection are ignored)."""
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in cfg.items() if k in names and v is not None}
        return cls(**known)  # type: ignore[arg-type]

    def check(self) -> None:
        """Reject shared values the API server would reject later, or silently misapply."""
        for key in ("reserved_millicpu", "reserved_memmb"):
            value = getattr(self, key)
            if value < 0:
                msg = f"run option {key} must be >= 0, got {value}"
                raise InvalidOptionError(msg, option=key)
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
