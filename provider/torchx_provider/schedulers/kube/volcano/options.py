"""The ``kubernetes`` (Volcano) backend's run options: the shared ones and its own."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.options import KubeOpts, option, required_option
from torchx_provider.schedulers.kube.pod import PodSettings


@dataclass(frozen=True, kw_only=True)
class VolcanoOpts(KubeOpts):
    """The resolved run options; the shared ones come from :class:`KubeOpts`."""

    KIND: ClassVar[str] = "job"

    queue: str = required_option(str, "Volcano queue to schedule the job in", name="subdomain")
    priority_class: str | None = option(
        str, "PriorityClass of the job (and its pods)", name="subdomain"
    )
    ttl_seconds_after_finished: int | None = option(
        int, "delete the job this many seconds after it finished (default: keep it)", minimum=0
    )

    def check(self) -> None:
        super().check()
        if not self.queue.strip():
            raise InvalidOptionError("run option queue is empty; name a Volcano queue", "queue")

    def pod_settings(self) -> PodSettings:
        return replace(super().pod_settings(), priority_class_name=self.priority_class)
