"""What the fake cloud offers: regions, zones, default subnets, TPU types and software versions.

The region ranges are the ones an auto-mode ``default`` network gets. Which zones offer which TPU
generation is tpuctl's bundled table (:mod:`provision.catalog.zones`, a public source per row),
the one the local provider rehearses with: both stand-ins for Google agree, and a zone failover
test has somewhere to go (v2 is offered in us-central1-b, us-central1-c, us-central1-f,
europe-west4-a, asia-east1-c).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from provision.catalog.zones import zones_of

# region -> (default subnet range, zone suffixes)
REGIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "us-central1": ("10.128.0.0/20", ("a", "b", "c", "f")),
    "europe-west1": ("10.132.0.0/20", ("b", "c", "d")),
    "us-central2": ("10.130.0.0/20", ("b",)),
    "us-west1": ("10.138.0.0/20", ("a", "b", "c")),
    "asia-east1": ("10.140.0.0/20", ("a", "b", "c")),
    "us-east1": ("10.142.0.0/20", ("b", "c", "d")),
    "asia-northeast1": ("10.146.0.0/20", ("a", "b", "c")),
    "us-east4": ("10.150.0.0/20", ("a", "b", "c")),
    "europe-west4": ("10.164.0.0/20", ("a", "b", "c")),
    "us-west4": ("10.182.0.0/20", ("a", "b", "c")),
    "us-east5": ("10.202.0.0/20", ("a", "b", "c")),
    "us-south1": ("10.206.0.0/20", ("a", "b", "c")),
}

ZONES: dict[str, str] = {f"{r}-{s}": r for r, (_, sfx) in REGIONS.items() for s in sfx}

# v4 and v5p slice shapes, as Google publishes them: AI-Hypercomputer/xpk
# src/xpk/core/system_characteristics.py and AI-Hypercomputer/maxtext MaxText/accelerator_to_spec_map.py
# (v4-384 is 4x4x12, v5p-640 4x4x20; read 2026-11-24). Cores = 2 x chips.
_V4_SHAPES = "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 8x8x8 8x8x12 8x8x16 8x16x16"
_V5P_SHAPES = (
    "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20 4x4x44 "
    "8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92 8x12x16 "
    "4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 12x12x16 "
    "4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 12x16x16 "
    "4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 12x16x20 "
    "4x4x244 4x8x124 12x12x28 16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24 4x8x148 "
    "12x20x20 8x8x76 4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 4x8x172 4x12x116 "
    "8x16x44 12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 12x24x24 16x20x28"
)


def _shapes(text: str) -> dict[int, str]:
    """TensorCores -> topology (the first shape listed for that size)."""
    out: dict[int, str] = {}
    for topo in text.split():
        out.setdefault(2 * math.prod(int(x) for x in topo.split("x")), topo)
    return out


SHAPES: dict[str, dict[int, str]] = {"v4": _shapes(_V4_SHAPES), "v5p": _shapes(_V5P_SHAPES)}

# generation -> (suffix counts "cores"|"chips", cores per chip, single-host max chips, sizes, zones)
GENERATIONS: dict[str, tuple[str, int, int, tuple[int, ...], tuple[str, ...]]] = {
    "v2": ("cores", 2, 4, (8, 32, 128, 256, 512), zones_of("v2")),
    "v3": ("cores", 2, 4, (8, 32, 64, 128, 256, 512, 1024, 2048), zones_of("v3")),
    "v4": ("cores", 2, 4, tuple(sorted(SHAPES["v4"])), zones_of("v4")),
    "v5litepod": ("chips", 1, 8, (1, 4, 8, 16, 32, 64, 128, 256), zones_of("v5litepod")),
    "v5p": ("cores", 2, 4, tuple(sorted(SHAPES["v5p"])), zones_of("v5p")),
    "v6e": ("chips", 1, 8, (1, 4, 8, 16, 32, 64, 128, 256), zones_of("v6e")),
}
# AcceleratorConfig.Type enum of the v2 API, by name and number (REST clients send numbers).
ACCELERATOR_CONFIG_TYPES = {"V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11}
_CONFIG_TYPE_OF_GEN = {"v2": "V2", "v3": "V3", "v4": "V4", "v5litepod": "V5LITE_POD",
                       "v5p": "V5P", "v6e": "V6E"}
_GEN_OF_CONFIG_TYPE = {v: k for k, v in _CONFIG_TYPE_OF_GEN.items()}

# Runtime versions per generation: only names seen in public use, each with where (read 2026-11-24).
# runtimeVersions.list answers per zone, so a zone lists the union of its generations' images.
# - Base images for JAX/PyTorch: cloud.google.com/tpu/docs/runtimes ("v6e: v2-alpha-tpuv6e, v5p:
#   v2-alpha-tpuv5, v5e: v2-alpha-tpuv5-lite, v4 and older: tpu-ubuntu2204-base").
# - Generic TensorFlow images: cloud.google.com/tpu/docs/supported-tpu-versions lists
#   tpu-vm-tf-2.16.1-pjrt/-se, 2.15.1-pjrt/-se, 2.15.0-pjrt/-se; the -pod- flavour per
#   cloud.google.com/tpu/docs/supported-versions ("tpu-vm-tf-2.16.0-pod-pjrt" naming, v5e/v5p/v6e
#   from TF 2.15); Prz00124/tpu-vm-examples-2025 created v5litepod-8/-16 and v6e-4 with
#   tpu-vm-tf-2.16.1-pjrt / -pod-pjrt; GoogleCloudPlatform/python-docs-samples' TPU tests create
#   v2-8 and v5litepod-1 with tpu-vm-tf-2.17.0-pjrt; cloud.google.com/tpu/docs/preemptible uses
#   tpu-vm-tf-2.17.1-pjrt on v3-8; a user's gcloud script (public code index) uses
#   tpu-vm-tf-2.17.0-pod-pjrt on v3-8.
# - TF 2.18 per family: Prz00124/tpu-vm-examples-2025 tensorflow/v5e-4-tf-2-18-0.sh and
#   v5e-16-tf-2-18-0.sh (tpu-vm-tf-2.18.0-pjrt-v5e-and-v6, -pod-pjrt-v5e-and-v6, July 2025); user
#   scripts that pick tpu-vm-tf-2.18.0-pjrt-v5p-and-below from `gcloud compute tpus tpu-vm versions
#   list` for v2-8, v3-8 and v4 (public code index). No bare tpu-vm-tf-2.18.0-pjrt was seen anywhere.
_TF_GENERIC = ("tpu-vm-tf-2.15.0-pjrt", "tpu-vm-tf-2.15.0-se", "tpu-vm-tf-2.15.1-pjrt", "tpu-vm-tf-2.15.1-se",
               "tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.16.1-se", "tpu-vm-tf-2.16.1-pod-pjrt")
_TF_V2_V4 = ("tpu-vm-tf-2.17.0-pjrt", "tpu-vm-tf-2.17.0-pod-pjrt", "tpu-vm-tf-2.17.1-pjrt",
             "tpu-vm-tf-2.18.0-pjrt-v5p-and-below")
RUNTIME_VERSIONS_BY_GENERATION: dict[str, tuple[str, ...]] = {
    "v2": ("tpu-ubuntu2204-base", *_TF_GENERIC, *_TF_V2_V4),
    "v3": ("tpu-ubuntu2204-base", *_TF_GENERIC, *_TF_V2_V4),
    "v4": ("tpu-ubuntu2204-base", *_TF_GENERIC, *_TF_V2_V4),
    "v5p": ("v2-alpha-tpuv5", *_TF_GENERIC, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"),
    "v5litepod": ("v2-alpha-tpuv5-lite", *_TF_GENERIC, "tpu-vm-tf-2.17.0-pjrt",
                  "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6"),
    "v6e": ("v2-alpha-tpuv6e", *_TF_GENERIC, "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6",
            "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6"),
}
RUNTIME_VERSIONS = tuple(sorted({v for vs in RUNTIME_VERSIONS_BY_GENERATION.values() for v in vs}))

# Host machine types per zone: the standard-2/4/8 shapes of e2, n1 and n2 that
# skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv lists per AvailabilityZone (built from
# Google's APIs; file version 006059e0, read 2026-11-24): e2 and n2 are in every zone of these
# regions, n1 is absent from us-east5 and us-south1. Rows read: e2-standard-2/4/8/16, n2-standard-2
# and -16, n1-standard-1/2/4/8/16 (n2-standard-4/8 taken to follow n2-standard-2 and -16, which
# list the same zones). us-central2 (TPU v4, a restricted region) has
# no rows there; tensorflow/tpu tools/kubernetes/terraform (batching_with_compact_placement
# examples/v4, module/terraform.tfvars) puts n2-standard-8 and e2-standard-32 nodes in
# us-central2-a/b/c, so that is all the fake offers there.
_STANDARD = tuple(f"{fam}-standard-{n}" for fam in ("e2", "n2") for n in (2, 4, 8))
_N1 = tuple(f"n1-standard-{n}" for n in (2, 4, 8))
_NO_N1 = {"us-east5", "us-south1"}


# TPU machine types (Compute Engine): vCPUs, memory GB and chips as ``gcloud compute machine-types
# list`` shows them (Cyclenerd/google-cloud-pricing-cost-calculator tools/machinetypes.csv @8c32d22,
# July/August 2026), and the regions that list them (machinetyperegion.csv @8bf3293). Which zones
# of a region have them is not public; the fake puts them where public code asked for them, and
# away from the zones where it serves the same generation through the Cloud TPU API (so the
# Cloud TPU API tests keep their path): ct6e in us-east5-a and asia-northeast1-b, tpu7x in
# us-central1-c (skypilot-org/skypilot sky/clouds/gcp.py _COMPUTE_TPU_FLEX_START_ZONES @a790cb6),
# tpu7x also in us-east1-c, ct5p in us-east5-c and us-south1-b (ct5p regions; zones chosen).
TPU_MACHINE_TYPES: dict[str, tuple[int, int, int]] = {   # name -> (vCPUs, memory GB, chips)
    "ct5p-hightpu-4t": (208, 448, 4),
    "ct6e-standard-1t": (44, 176, 1), "ct6e-standard-4t": (180, 720, 4), "ct6e-standard-8t": (360, 1440, 8),
    "tpu7x-standard-1t": (56, 240, 1), "tpu7x-standard-4t": (224, 960, 4),
}
_TPU_MACHINE_ZONES: dict[str, tuple[str, ...]] = {
    "ct5p": ("us-east5-c", "us-south1-b"),
    "ct6e": ("us-east5-a", "asia-northeast1-b"),
    "tpu7x": ("us-central1-c", "us-east1-c"),
}


def tpu_machine_types_in(zone: str) -> tuple[str, ...]:
    return tuple(name for name in TPU_MACHINE_TYPES if zone in _TPU_MACHINE_ZONES[name.split("-")[0]])


def machine_types_in(zone: str) -> tuple[str, ...]:
    region = region_of(zone)
    if region not in REGIONS or zone not in ZONES:
        return ()
    if region == "us-central2":
        return ("n2-standard-8", "e2-standard-32")
    return _STANDARD + (() if region in _NO_N1 else _N1) + tpu_machine_types_in(zone)


def machine_type_cpus(name: str) -> int:
    if name in TPU_MACHINE_TYPES:
        return TPU_MACHINE_TYPES[name][0]
    return int(name.rsplit("-", 1)[-1])


# TPU OS image families in project ubuntu-os-accelerator-images, each with the newest image seen in
# public use: ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e-v20260803 (a user's notes of 2026-08-10: "every
# earlier build in the family is DEPRECATED"), ubuntu-accel-2404-amd64-tpu-tpu7x-v20260716 (a public
# terraform module for tpu7x-standard-4t). Other families of that project are not served (404).
ACCELERATOR_IMAGE_PROJECT = "ubuntu-os-accelerator-images"
ACCELERATOR_IMAGES: dict[str, str] = {
    "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e": "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e-v20260803",
    "ubuntu-accel-2404-amd64-tpu-tpu7x": "ubuntu-accel-2404-amd64-tpu-tpu7x-v20260716",
}


TENSORFLOW_VERSIONS = ("1.15.5", "2.10.1", "2.11.0", "2.11.1", "2.12.0", "2.12.1", "2.13.0",
                       "2.14.0", "2.15.0", "2.16.1", "pytorch-2.0", "nightly")
_TF_RE = re.compile(r"^(\d+\.\d+(\.\d+)?(-pjrt)?|nightly|pytorch-\d+\.\d+)$")


@dataclass(frozen=True)
class TpuType:
    name: str
    generation: str
    chips: int
    hosts: int

    @property
    def topology(self) -> str:
        """A plausible chip topology for acceleratorConfig (2x2, 2x2x1, ...)."""
        if self.generation in ("v5litepod", "v6e"):
            side = int(math.sqrt(self.chips))
            return f"{side}x{self.chips // side}" if side * (self.chips // side) == self.chips \
                else f"{self.chips}x1"
        if self.generation in ("v2", "v3"):
            side = int(math.sqrt(self.chips))
            return f"{side}x{self.chips // side}"
        known = SHAPES.get(self.generation, {}).get(self.chips * 2)
        if known:
            return known
        cube = max(1, round(self.chips ** (1 / 3)))
        return f"{cube}x{cube}x{max(1, self.chips // (cube * cube))}"

    @property
    def config_type(self) -> str:
        return _CONFIG_TYPE_OF_GEN[self.generation]


def tpu_type(name: str) -> TpuType | None:
    m = re.match(r"^(v2|v3|v4|v5litepod|v5p|v6e)-(\d+)$", name or "")
    if not m:
        return None
    gen = m.group(1)
    counts, cores_per_chip, single_max, sizes, _ = GENERATIONS[gen]
    size = int(m.group(2))
    if size not in sizes:
        return None
    chips = size // cores_per_chip if counts == "cores" else size
    hosts = 1 if chips <= single_max else chips // 4
    return TpuType(name, gen, chips, hosts)


def type_from_config(config: dict) -> str | None:
    """acceleratorConfig {type, topology} -> the equivalent acceleratorType name."""
    kind = config.get("type")
    if isinstance(kind, int):
        kind = {v: k for k, v in ACCELERATOR_CONFIG_TYPES.items()}.get(kind)
    gen = _GEN_OF_CONFIG_TYPE.get(str(kind or ""))
    topo = str(config.get("topology") or "")
    if not gen or not re.match(r"^\d+(x\d+)+$", topo):
        return None
    chips = math.prod(int(x) for x in topo.split("x"))
    counts = GENERATIONS[gen][0]
    return f"{gen}-{chips * 2 if counts == 'cores' else chips}"


def tpu_types_in(zone: str, extra: dict[str, set[str]] | None = None) -> list[str]:
    out = []
    for gen, (_, _, _, sizes, zones) in GENERATIONS.items():
        if zone in zones:
            out.extend(f"{gen}-{s}" for s in sizes)
    out.extend(sorted((extra or {}).get(zone, ())))
    return out


def tpu_zones(extra: dict[str, set[str]] | None = None) -> list[str]:
    zones = {z for *_, zs in GENERATIONS.values() for z in zs} | set(extra or {})
    return sorted(zones)


def runtime_versions_in(zone: str, extra: dict[str, set[str]] | None = None) -> list[str]:
    """What runtimeVersions.list answers in ``zone``: the images of every generation offered there."""
    gens = {t.split("-")[0] for t in tpu_types_in(zone, extra)}
    return sorted({v for g in gens for v in RUNTIME_VERSIONS_BY_GENERATION.get(g, ())})


def runtime_serves(version: str, generation: str) -> bool:
    return version in RUNTIME_VERSIONS_BY_GENERATION.get(generation, ())


def tensorflow_version_ok(version: str) -> bool:
    return bool(_TF_RE.match(version or ""))


def project_number(project: str) -> str:
    """A stable 12-digit project number, as Google assigns one to every project id."""
    digest = int(hashlib.sha256(project.encode()).hexdigest(), 16)
    return str(100_000_000_000 + digest % 900_000_000_000)


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]
