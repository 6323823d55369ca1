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

:func:`expected_devices` turns the table into the node facts the ``device_count`` fitness rule holds a node
to (:mod:`rollcall.evidence.fitness`): a pod given every accelerator of its node should see all of them.

A node may also advertise fewer GPUs, Neuron devices, NeuronCores or EFA interfaces than its type has (a GPU
lost, a device plugin that failed to enumerate one): discovery then lowers the pods' requests to what the
nodes offer, and the ranks see all they were given. :func:`advertised_counts` reads what a node advertises
(:data:`COUNTED`), :func:`count_facts` turns it and the type's counts into the node facts the
``advertised_devices`` fitness rule compares, and :func:`shortfalls` names them at discovery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rollcall.jobspec import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    NEURON_RESOURCE,
    NEURONCORE_RESOURCE,
    NEURONDEVICE_RESOURCE,
)


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


def expected_devices(name: str | None, requested: Mapping[str, int]) -> dict[str, str]:
    """The devices a pod that ``requested`` these resources on a node of type ``name`` must see, as facts.

    ``expected_gpus`` and ``expected_neuron_devices`` (the node facts of
    :data:`rollcall.evidence.nodefacts.OBSERVED_KEYS`) where the type is in the table and the pod was given
    every GPU, or every NeuronCore or Neuron device, the type has: a pod given fewer (``--procs-per-node``)
    sees only its own share, and nothing is expected of it.
    """
    known = lookup(name)
    if known is None:
        return {}
    found = {}
    if known.gpus and requested.get(GPU_RESOURCE, 0) >= known.gpus:
        found["expected_gpus"] = str(known.gpus)
    whole_neuron = known.neuron_devices and (
        requested.get(NEURONCORE_RESOURCE, 0) >= known.advertised_neuron_cores
        or max(requested.get(NEURONDEVICE_RESOURCE, 0), requested.get(NEURON_RESOURCE, 0))
        >= known.neuron_devices
    )
    if whole_neuron:
        found["expected_neuron_devices"] = str(known.neuron_devices)
    return found


@dataclass(frozen=True)
class Counted:
    """One thing a node advertises and its instance type has a number of.

    Attributes:
        fact: the suffix of its node facts, ``advertised_<fact>`` and ``type_<fact>``.
        resources: the resources the device plugins advertise it as (the least of those a node lists counts).
        what: what it counts, in words.
        of_type: how many the instance type has (0: the type has none, nothing is compared).
    """

    fact: str
    resources: tuple[str, ...]
    what: str
    of_type: Callable[[InstanceType], int]


#: What a node advertises of its accelerators and EFA, against its instance type.
COUNTED: tuple[Counted, ...] = (
    Counted("gpus", (GPU_RESOURCE,), "GPUs", lambda t: t.gpus),
    Counted(
        "neuron_devices",
        (NEURONDEVICE_RESOURCE, NEURON_RESOURCE),
        "Neuron devices",
        lambda t: t.neuron_devices,
    ),
    Counted("neuroncores", (NEURONCORE_RESOURCE,), "NeuronCores", lambda t: t.advertised_neuron_cores),
    Counted("efa", (EFA_RESOURCE,), "EFA interfaces", lambda t: t.efa),
)


def advertised_counts(advertised: Callable[[str], int | None]) -> dict[str, int]:
    """What a node advertises of each of :data:`COUNTED`, by its ``fact``; one it lists none of is left out.

    ``advertised`` is the node's count of a resource, None when it lists none
    (:meth:`.nodeviews.Node.advertised`).
    """
    found = {}
    for counted in COUNTED:
        listed = [n for r in counted.resources if (n := advertised(r)) is not None]
        if listed:
            found[counted.fact] = min(listed)
    return found


@dataclass(frozen=True)
class Shortfall:
    """A node advertising fewer of something than its instance type has."""

    counted: Counted
    advertised: int
    has: int
    instance_type: str

    def __str__(self) -> str:
        resources = " or ".join(self.counted.resources)
        return (
            f"advertises {self.advertised} {resources}, its instance type {self.instance_type} has "
            f"{self.has} {self.counted.what}"
        )


def shortfalls(name: str | None, counts: Mapping[str, int]) -> list[Shortfall]:
    """What a node of type ``name`` advertising ``counts`` (:func:`advertised_counts`) has fewer of."""
    known = lookup(name)
    if known is None:
        return []
    found = []
    for counted in COUNTED:
        has, seen = counted.of_type(known), counts.get(counted.fact)
        if has and seen is not None and seen < has:
            found.append(Shortfall(counted, seen, has, known.name))
    return found


def count_facts(name: str | None, counts: Mapping[str, int]) -> dict[str, str]:
    """The node facts ``advertised_<fact>`` (of ``counts``) and ``type_<fact>`` (of type ``name``'s entry).

    The ``advertised_devices`` fitness rule compares them
    (:data:`rollcall.evidence.fitness.ADVERTISED_COUNTS`); a type missing from the table, or one with none of
    a thing, has no ``type_`` fact for it.
    """
    found = {f"advertised_{fact}": str(n) for fact, n in counts.items()}
    known = lookup(name)
    if known is not None:
        found |= {f"type_{c.fact}": str(has) for c in COUNTED if (has := c.of_type(known))}
    return found
