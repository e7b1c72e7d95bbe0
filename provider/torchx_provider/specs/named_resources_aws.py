"""AWS instance types as named resources: TorchX's ``torchx.specs.named_resources_aws``.

Each ``aws_<type>()`` (dots and dashes of the type written ``_``) returns a new
:class:`~torchx_provider.specs.Resource` of one such host: its CPUs and GPUs, 96 % of its
memory (:data:`MEM_TAX`: what AWS Batch and ECS leave to a job), its EFA and Neuron devices,
and the capability ``node.kubernetes.io/instance-type`` (:data:`K8S_ITYPE`), with which the
Kubernetes backends place the pod on a node of that type. :data:`NAMED_RESOURCES` maps the
names a role asks for (``aws_p4d.24xlarge``) to them; the registry of named resources
(:mod:`~torchx_provider.specs.resource_registry`) serves them through
``specs.named_resources``, ``specs.resource(h=...)`` and ``specs.get_named_resources``.

>>> res = aws_p4d_24xlarge()
>>> res.cpu, res.gpu, res.memMB, res.devices
(96, 8, 1132416, {'vpc.amazonaws.com/efa': 4})
>>> instance_type_from_resource(NAMED_RESOURCES["aws_g5.xlarge"]())
'g5.xlarge'
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torchx_provider.specs.api import Resource

#: The extended resource of an Elastic Fabric Adapter.
EFA_DEVICE = "vpc.amazonaws.com/efa"
#: The extended resource of a Neuron device (Trainium, Inferentia).
NEURON_DEVICE = "aws.amazon.com/neurondevice"
#: The share of an instance's memory a job can have: AWS Batch and ECS hold back the rest,
#: and a job asking for more than is left never leaves the queue.
MEM_TAX = 0.96
#: The node label naming an instance type, set as each resource's capability.
K8S_ITYPE = "node.kubernetes.io/instance-type"
#: MiB counted per GiB of an instance: its GiB after :data:`MEM_TAX`.
GiB: int = int(1024 * MEM_TAX)


def instance_type_from_resource(resource: Resource) -> str | None:
    """The instance type ``resource`` asks for (its :data:`K8S_ITYPE` capability).

    Warns, and returns None, when it names none: an app whose replicas may land on
    different instance types.
    """
    instance_type = resource.capabilities.get(K8S_ITYPE)
    if instance_type is None:
        warnings.warn(
            f"the resource names no instance type (capability {K8S_ITYPE!r}): its replicas "
            "may be placed on instance types that differ; use one of the aws_* named "
            "resources, or set that capability",
            stacklevel=2,
        )
    return instance_type


@dataclass(frozen=True, eq=False)
class _Host:
    """The factory of one instance type's Resource, called like TorchX's ``aws_*``."""

    instance_type: str
    cpu: int
    gpu: int
    gib: int
    efa: int = 0
    neuron: int = 0

    @property
    def name(self) -> str:
        """The named resource, e.g. ``aws_p3.2xlarge``."""
        return f"aws_{self.instance_type}"

    @property
    def __name__(self) -> str:
        """The factory's name in this module, e.g. ``aws_p3_2xlarge``."""
        return "aws_" + re.sub(r"[.-]", "_", self.instance_type)

    def __call__(self) -> Resource:
        return Resource(
            cpu=self.cpu,
            gpu=self.gpu,
            memMB=self.gib * GiB,
            capabilities={K8S_ITYPE: self.instance_type},
            devices=self.devices(),
        )

    def devices(self) -> dict[str, int]:
        """Its EFA and Neuron devices, those it has."""
        counts = {EFA_DEVICE: self.efa, NEURON_DEVICE: self.neuron}
        return {device: n for device, n in counts.items() if n}


# instance type, CPUs, GPUs, memory in GiB (before the tax), EFA devices, Neuron devices
aws_t3_medium = _Host("t3.medium", 2, 0, 4, 0, 0)
aws_m5_2xlarge = _Host("m5.2xlarge", 8, 0, 32, 0, 0)
aws_p3_2xlarge = _Host("p3.2xlarge", 8, 1, 61, 0, 0)
aws_p3_8xlarge = _Host("p3.8xlarge", 32, 4, 244, 0, 0)
aws_p3_16xlarge = _Host("p3.16xlarge", 64, 8, 488, 0, 0)
aws_p3dn_24xlarge = _Host("p3dn.24xlarge", 96, 8, 768, 1, 0)
aws_p4d_24xlarge = _Host("p4d.24xlarge", 96, 8, 1152, 4, 0)
# the p4d's host with GPUs of twice the memory
aws_p4de_24xlarge = _Host("p4de.24xlarge", 96, 8, 1152, 4, 0)
aws_p5_48xlarge = _Host("p5.48xlarge", 192, 8, 2048, 32, 0)
aws_g4dn_xlarge = _Host("g4dn.xlarge", 4, 1, 16, 0, 0)
aws_g4dn_2xlarge = _Host("g4dn.2xlarge", 8, 1, 32, 0, 0)
aws_g4dn_4xlarge = _Host("g4dn.4xlarge", 16, 1, 64, 0, 0)
aws_g4dn_8xlarge = _Host("g4dn.8xlarge", 32, 1, 128, 1, 0)
aws_g4dn_16xlarge = _Host("g4dn.16xlarge", 64, 1, 256, 1, 0)
aws_g4dn_12xlarge = _Host("g4dn.12xlarge", 48, 4, 192, 1, 0)
aws_g4dn_metal = _Host("g4dn.metal", 96, 8, 384, 1, 0)
aws_g5_xlarge = _Host("g5.xlarge", 4, 1, 16, 0, 0)
aws_g5_2xlarge = _Host("g5.2xlarge", 8, 1, 32, 0, 0)
aws_g5_4xlarge = _Host("g5.4xlarge", 16, 1, 64, 0, 0)
aws_g5_8xlarge = _Host("g5.8xlarge", 32, 1, 128, 1, 0)
aws_g5_16xlarge = _Host("g5.16xlarge", 64, 1, 256, 1, 0)
aws_g5_12xlarge = _Host("g5.12xlarge", 48, 4, 192, 1, 0)
aws_g5_24xlarge = _Host("g5.24xlarge", 96, 4, 384, 1, 0)
aws_g5_48xlarge = _Host("g5.48xlarge", 192, 8, 768, 1, 0)
aws_trn1_2xlarge = _Host("trn1.2xlarge", 8, 0, 32, 0, 1)
aws_trn1_32xlarge = _Host("trn1.32xlarge", 128, 0, 512, 8, 16)

#: ``aws_<instance type>`` -> the factory of its Resource, in TorchX's order.
NAMED_RESOURCES: Mapping[str, Callable[[], Resource]] = {
    host.name: host
    for host in (
        aws_t3_medium,
        aws_m5_2xlarge,
        aws_p3_2xlarge,
        aws_p3_8xlarge,
        aws_p3_16xlarge,
        aws_p3dn_24xlarge,
        aws_p4d_24xlarge,
        aws_p4de_24xlarge,
        aws_p5_48xlarge,
        aws_g4dn_xlarge,
        aws_g4dn_2xlarge,
        aws_g4dn_4xlarge,
        aws_g4dn_8xlarge,
        aws_g4dn_16xlarge,
        aws_g4dn_12xlarge,
        aws_g4dn_metal,
        aws_g5_xlarge,
        aws_g5_2xlarge,
        aws_g5_4xlarge,
        aws_g5_8xlarge,
        aws_g5_16xlarge,
        aws_g5_12xlarge,
        aws_g5_24xlarge,
        aws_g5_48xlarge,
        aws_trn1_2xlarge,
        aws_trn1_32xlarge,
    )
}
