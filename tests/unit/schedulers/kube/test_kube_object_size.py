"""An app whose object is too large for the cluster is refused at the dry run, before any
call, naming its replicas and what to do (not sent, to come back as "retry later")."""

from __future__ import annotations

import pytest

from torchx_provider import specs
from torchx_provider.backends import scheduler_factories
from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.kube.request import MAX_OBJECT_BYTES


def app(replicas: int) -> specs.AppDef:
    return specs.AppDef(
        "big",
        [
            specs.Role(
                "trainer",
                image="registry.example/train:1",
                entrypoint="python",
                args=["-m", "train", "--lr", "0.1"],
                num_replicas=replicas,
                resource=specs.Resource(cpu=1, gpu=0, memMB=1024),
            )
        ],
    )


@pytest.mark.parametrize("backend", ["kubernetes", "kubernetes_mcad"])
def test_thousands_of_pod_templates_are_refused_before_any_call(backend: str) -> None:
    scheduler = scheduler_factories()[backend]("s", namespace="ns")
    cfg = {"queue": "default"} if backend == "kubernetes" else {}
    scheduler.submit_dryrun(app(1000), cfg)  # fits
    with pytest.raises(InvalidAppError, match=r"trainer x 2000") as e:
        scheduler.submit_dryrun(app(2000), cfg)
    message = str(e.value)
    assert f"{MAX_OBJECT_BYTES // 1024:,} KiB" in message
    assert "fewer replicas per role" in message and "kubernetes_appwrapper" in message


def test_one_template_per_role_fits_any_number_of_replicas() -> None:
    scheduler = scheduler_factories()["kubernetes_appwrapper"]("s", namespace="ns")
    scheduler.submit_dryrun(app(20_000), {})
