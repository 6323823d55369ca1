"""What each accelerated EC2 instance type has: its EFA interfaces, GPUs or Neuron devices and NeuronCores.

Discovery requests an instance type's full EFA count and names a node that advertises fewer as unusable (an
EFA device plugin that came up before every interface was attached, or an interface that failed); the
manifests set ``FI_EFA_USE_DEVICE_RDMA=1`` where the type's EFA does RDMA. A type missing from the table is
judged by what its nodes advertise.

Sources, each fact declared once here:

- EFA interfaces: ``NetworkInfo.EfaInfo.MaximumEfaInterfaces`` of ``aws ec2 describe-instance-types``
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_EfaInfo.html); the EC2 user guide's
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html requests "32 EFA devices and
  one ENA device" for p5.48xlarge. Trn1/Trn1n: the Neuron architecture page
  (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trn1-arch.html)
  gives 800 and 1,600 Gbps of EFA, 8 and 16 interfaces of 100 Gbps; Trn2: 3.2 Tbps, 16 interfaces of
  200 Gbps (trn2-arch.html).
- GPUs, Neuron devices and NeuronCores: the EC2 accelerated-computing instance specifications
  (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) and the Neuron architecture pages (two
  NeuronCore-v2 per Trainium chip, eight NeuronCore-v3 per Trainium2 chip).
- RDMA: EFA on p4d and later P types and on Trn types supports RDMA read (GPUDirect RDMA / Neuron
  device RDMA); the G types' EFA does not.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    """One instance type's accelerators and EFA interfaces.

    Attributes:
        name: the ``node.kubernetes.io/instance-type`` value.
        efa: EFA interfaces the type can attach (its maximum); 0 when it has none.
        gpus: NVIDIA GPUs.
        neuron_devices: Trainium / Inferentia chips.
        neuron_cores: physical NeuronCores.
        logical_core_size: physical NeuronCores per logical one, the unit the Neuron device plugin advertises
            (``aws.amazon.com/neuroncore``): 2 on Trn2 by default (LNC=2), 1 elsewhere.
        efa_rdma: whether the type's EFA does RDMA (``FI_EFA_USE_DEVICE_RDMA=1``).
    """

    name: str
    efa: int
    gpus: int = 0
    neuron_devices: int = 0
    neuron_cores: int = 0
    efa_rdma: bool = False
    logical_core_size: int = 1

    @property
    def advertised_neuron_cores(self) -> int:
        """The NeuronCores its nodes advertise, with the device plugin's defaults."""
        return self.neuron_cores // self.logical_core_size


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("p4d.24xlarge", efa=4, gpus=8, efa_rdma=True),
        InstanceType("p4de.24xlarge", efa=4, gpus=8, efa_rdma=True),
        InstanceType("p5.4xlarge", efa=1, gpus=1, efa_rdma=True),
        InstanceType("p5.48xlarge", efa=32, gpus=8, efa_rdma=True),
        InstanceType("p5e.48xlarge", efa=32, gpus=8, efa_rdma=True),
        InstanceType("p5en.48xlarge", efa=16, gpus=8, efa_rdma=True),
        InstanceType("p6-b200.48xlarge", efa=8, gpus=8, efa_rdma=True),
        InstanceType("p6-b300.48xlarge", efa=16, gpus=8, efa_rdma=True),
        InstanceType("g5.xlarge", efa=0, gpus=1),
        InstanceType("g5.48xlarge", efa=1, gpus=8),
        InstanceType("g6.xlarge", efa=0, gpus=1),
        InstanceType("trn1.2xlarge", efa=0, neuron_devices=1, neuron_cores=2),
        InstanceType("trn1.32xlarge", efa=8, neuron_devices=16, neuron_cores=32, efa_rdma=True),
        InstanceType("trn1n.32xlarge", efa=16, neuron_devices=16, neuron_cores=32, efa_rdma=True),
        InstanceType(
            "trn2.48xlarge", efa=16, neuron_devices=16, neuron_cores=128, efa_rdma=True, logical_core_size=2
        ),
        InstanceType(
            "trn2u.48xlarge", efa=16, neuron_devices=16, neuron_cores=128, efa_rdma=True, logical_core_size=2
        ),
    )
}


def lookup(name: str | None) -> InstanceType | None:
    """The table's entry for ``name`` (None for an unknown or missing type)."""
    return INSTANCE_TYPES.get(name) if name else None
