"""The ``kubernetes_mcad`` backend's run options (TorchX's, plus a few): the shared ones and
its own."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torchx_provider.schedulers.kube.options import KubeOpts, option
from torchx_provider.schedulers.kube.pod import PodSettings
from torchx_provider.schedulers.kube.resources import (
    APPWRAPPER_GROUP,
    APPWRAPPER_GROUPS,
    PODGROUP_GROUP,
    PODGROUP_GROUPS,
    appwrapper,
    podgroup,
)


@dataclass(frozen=True, kw_only=True)
class McadOpts(KubeOpts):
    """The resolved run options; the shared ones come from :class:`KubeOpts`."""

    KIND: ClassVar[str] = "AppWrapper"

    priority: int | None = option(int, "AppWrapper priority in MCAD's queue (higher runs first)")
    priority_class_name: str | None = option(str, "PriorityClass of the pods", name="subdomain")
    coscheduler_name: str | None = option(
        str,
        "secondary scheduler (scheduler-plugins coscheduling) to gang-schedule each role; "
        "a PodGroup per role is created",
        name="subdomain",
    )
    network: str | None = option(str, "extra pod network (Multus NetworkAttachmentDefinition name)")
    api_group: str = option(
        str,
        f"AppWrapper API group: {APPWRAPPER_GROUP} (MCAD >= v1.34.1) or "
        f"{APPWRAPPER_GROUPS[1]} (MCAD <= v1.34.0)",
        default=APPWRAPPER_GROUP,
    )
    coscheduler_api_group: str = option(
        str,
        f"PodGroup API group: {PODGROUP_GROUP} (scheduler-plugins >= v0.25) or "
        f"{PODGROUP_GROUPS[1]} (older)",
        default=PODGROUP_GROUP,
    )

    def check(self) -> None:
        appwrapper(self.api_group)
        podgroup(self.coscheduler_api_group)
        super().check()

    def pod_settings(self) -> PodSettings:
        return replace(
            super().pod_settings(),
            scheduler_name=self.coscheduler_name,
            priority_class_name=self.priority_class_name,
            network=self.network,
        )
