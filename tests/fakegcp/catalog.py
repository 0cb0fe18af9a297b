"""What the fake cloud offers: regions, zones, default subnets, TPU types and software versions.

The region ranges are the ones an auto-mode ``default`` network gets; the TPU offerings follow the
public regions-and-zones page closely enough that a zone failover test has somewhere to go
(v2-8 is offered in us-central1-b, us-central1-c, us-central1-f, europe-west4-a, asia-east1-c).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

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

# generation -> (suffix counts "cores"|"chips", cores per chip, single-host max chips, sizes, zones)
_V2_ZONES = ("us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a", "asia-east1-c")
_V3_ZONES = ("us-central1-a", "us-central1-b", "europe-west4-a")
GENERATIONS: dict[str, tuple[str, int, int, tuple[int, ...], tuple[str, ...]]] = {
    "v2": ("cores", 2, 4, (8, 32, 128, 256, 512), _V2_ZONES),
    "v3": ("cores", 2, 4, (8, 32, 64, 128, 256, 512, 1024, 2048), _V3_ZONES),
    "v4": ("cores", 2, 4, (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), ("us-central2-b",)),
    "v5litepod": ("chips", 1, 8, (1, 4, 8, 16, 32, 64, 128, 256),
                  ("us-central1-a", "us-west4-a", "us-east1-c", "europe-west4-b", "us-south1-a")),
    "v5p": ("cores", 2, 4, (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288),
            ("us-east5-a", "europe-west4-b")),
    "v6e": ("chips", 1, 8, (1, 4, 8, 16, 32, 64, 128, 256),
            ("us-east1-d", "us-east5-b", "europe-west4-a", "asia-northeast1-b", "us-central1-b")),
}
# AcceleratorConfig.Type enum of the v2 API, by name and number (REST clients send numbers).
ACCELERATOR_CONFIG_TYPES = {"V2": 2, "V3": 4, "V4": 7, "V5LITE_POD": 9, "V5P": 10, "V6E": 11}
_CONFIG_TYPE_OF_GEN = {"v2": "V2", "v3": "V3", "v4": "V4", "v5litepod": "V5LITE_POD",
                       "v5p": "V5P", "v6e": "V6E"}
_GEN_OF_CONFIG_TYPE = {v: k for k, v in _CONFIG_TYPE_OF_GEN.items()}

RUNTIME_VERSIONS = (
    "tpu-vm-base", "tpu-ubuntu2204-base", "v2-alpha", "v2-alpha-pod", "v2-alpha-tpuv5",
    "v2-alpha-tpuv5-lite", "v2-alpha-tpuv6e",
    "tpu-vm-tf-2.15.0-pjrt", "tpu-vm-tf-2.15.0-pod-pjrt",
    "tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.16.1-pod-pjrt",
    "tpu-vm-tf-2.17.0-pjrt", "tpu-vm-tf-2.17.0-pod-pjrt",
    "tpu-vm-tf-2.18.0-pjrt", "tpu-vm-tf-2.18.0-pod-pjrt",
    "tpu-vm-tf-2.19.0-pjrt", "tpu-vm-tf-2.19.0-pod-pjrt",
    "tpu-vm-tf-2.20.0-pjrt", "tpu-vm-tf-2.20.0-pod-pjrt",
    "tpu-vm-pt-2.0", "tpu-vm-v4-pt-2.0",
)
# Versions follow the published naming; anything of this shape is accepted too.
_RUNTIME_RE = re.compile(r"^tpu-vm-(tf|pt|v4-pt|v4-base)(-\d+\.\d+(\.\d+)?)?(-pod)?(-pjrt|-se)?$")
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


def runtime_version_ok(version: str) -> bool:
    return version in RUNTIME_VERSIONS or bool(_RUNTIME_RE.match(version or ""))


def tensorflow_version_ok(version: str) -> bool:
    return bool(_TF_RE.match(version or ""))


def project_number(project: str) -> str:
    """A stable 12-digit project number, as Google assigns one to every project id."""
    digest = int(hashlib.sha256(project.encode()).hexdigest(), 16)
    return str(100_000_000_000 + digest % 900_000_000_000)


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]
