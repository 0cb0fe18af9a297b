"""TPUs as Compute Engine sells them: each slice's machine type, VMs and topology, and the OS image.

On Compute Engine a TPU VM is an instance whose machine type carries the chips, and a multi-host
slice is a managed instance group of such instances whose workload policy names the slice's
topology (cloud.google.com/tpu/docs/tpus-in-compute-engine, "Cloud TPU resources in Compute
Engine"). This module maps the accelerator names users know (``v6e-8``, ``v5p-32``, ``tpu7x-8``;
:mod:`.accelerators`) onto those, in one place. Pure.

Machine types (``gcloud compute machine-types list``, July/August 2026, as collected in
Cyclenerd/google-cloud-pricing-cost-calculator ``tools/machinetypes.csv`` @8c32d22, and Google's
"TPU machines in accelerator-optimized machine family", compute/docs/tpus/tpu-machines):

- v5p: ``ct5p-hightpu-4t`` (4 chips, 208 vCPUs, 448 GB);
- v6e: ``ct6e-standard-1t`` / ``-4t`` / ``-8t`` (1, 4, 8 chips);
- TPU7x: ``tpu7x-standard-1t`` / ``-4t`` (1, 4 chips).

A slice that fits one machine type is one VM of that type (``v6e-8`` is one ``ct6e-standard-8t``,
as it is one host on the Cloud TPU API); a larger one is ``chips / 4`` VMs of the 4-chip type, as
Google's launcher builds them (AI-Hypercomputer/xpk ``system_characteristics.py``: chips_per_vm 4,
vms_per_slice = chips / 4; ``v5p-32`` is 2x2x4 on 4 VMs). Which of these a zone has is never read
from here: ``up`` asks the zone's ``machineTypes``.

OS images: Google tests its TPU-optimized Ubuntu images only (tpu/docs/custom-os-image). The
families, each resolved in the cloud with ``images.getFromFamily`` (never a fixed image name):
``ubuntu-accel-2404-amd64-tpu-tpu7x`` (GoogleCloudPlatform/cluster-toolkit
examples/machine-learning/tpu7x-standard-4t/tpu7x-slurm-blueprint.yaml) and
``ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e`` (skypilot-org/skypilot sky/clouds/gcp.py
``_DEFAULT_TPU_V6E_IMAGE_ID`` @a790cb6, used for ct6e), both in project
``ubuntu-os-accelerator-images``. Google's own page listing TPU OS image families was not found.
"""

from __future__ import annotations

from dataclasses import dataclass

from .accelerators import (
    GENERATIONS,
    TPU7X_TOPOLOGIES,
    V5P_TOPOLOGIES,
    V6E_TOPOLOGIES,
    AcceleratorType,
    chips_of,
)

IMAGE_PROJECT = "ubuntu-os-accelerator-images"

# generation -> {chips per VM: machine type}
MACHINE_TYPES: dict[str, dict[int, str]] = {
    "v5p": {4: "ct5p-hightpu-4t"},
    "v6e": {1: "ct6e-standard-1t", 4: "ct6e-standard-4t", 8: "ct6e-standard-8t"},
    "tpu7x": {1: "tpu7x-standard-1t", 4: "tpu7x-standard-4t"},
}
MULTI_HOST_CHIPS_PER_VM = 4

IMAGE_FAMILIES: dict[str, str] = {
    "v5p": "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e",
    "v6e": "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e",
    "tpu7x": "ubuntu-accel-2404-amd64-tpu-tpu7x",
}

_TOPOLOGIES = {"v5p": V5P_TOPOLOGIES, "v6e": V6E_TOPOLOGIES, "tpu7x": TPU7X_TOPOLOGIES}


@dataclass(frozen=True)
class ComputeShape:
    """One slice on Compute Engine: ``vms`` instances of ``machine_type``, wired as ``topology``."""

    accelerator: AcceleratorType
    machine_type: str
    chips_per_vm: int
    vms: int
    topology: str

    @property
    def multi_host(self) -> bool:
        return self.vms > 1

    @property
    def image_family(self) -> str:
        return IMAGE_FAMILIES[self.accelerator.generation.name]


def served(acc: AcceleratorType) -> bool:
    """Whether Compute Engine sells this generation as machine types (v5p, v6e, TPU7x)."""
    return acc.generation.name in MACHINE_TYPES


def topology(acc: AcceleratorType) -> str:
    """The slice's chip topology: the first shape Google lists with that many chips."""
    for topo in _TOPOLOGIES[acc.generation.name].split():
        if chips_of(topo) == acc.chips:
            return topo
    raise ValueError(f"no topology of {acc.chips} chips for {acc.generation.name}")


def shape(acc: AcceleratorType) -> ComputeShape | None:
    """How Compute Engine makes ``acc``, or None for a generation it does not sell."""
    types = MACHINE_TYPES.get(acc.generation.name)
    if types is None:
        return None
    if acc.chips in types:
        return ComputeShape(acc, types[acc.chips], acc.chips, 1, topology(acc))
    per_vm = MULTI_HOST_CHIPS_PER_VM
    return ComputeShape(acc, types[per_vm], per_vm, acc.chips // per_vm, topology(acc))


def shape_family(accelerator_type: str) -> str:
    """The TPU image family of an accelerator type's generation ("" for one Compute Engine does not sell)."""
    from .accelerators import parse

    return IMAGE_FAMILIES.get(parse(accelerator_type).generation.name, "")


def machine_types() -> tuple[str, ...]:
    """Every TPU machine type tpuctl knows, for reading them back from an instance."""
    return tuple(t for types in MACHINE_TYPES.values() for t in types.values())


def accelerator_of(machine_type: str, vms: int = 1) -> str | None:
    """The accelerator name of ``vms`` instances of ``machine_type`` (a slice read back), or None."""
    for gen, types in MACHINE_TYPES.items():
        for chips, name in types.items():
            if name != machine_type:
                continue
            generation = GENERATIONS[gen]
            total = chips * max(1, vms)
            size = total * generation.cores_per_chip if generation.suffix_counts == "cores" else total
            return f"{gen}-{size}" if size in generation.sizes else None
    return None
