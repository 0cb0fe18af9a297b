"""Every TPU accelerator type tpuctl knows: cores, chips, hosts, architectures, peak FLOP/s.

This is the one place for accelerator sizes. Validation, CIDR sizing (a TPU Node needs a block
with room for every host), pricing (per chip-hour) and the throughput benchmark (fraction of
peak) all read from here.

Naming differs by generation, which is the trap this module exists to absorb:
- v2, v3, v4, v5p: the suffix counts TensorCores (two per chip).
- v5litepod (v5e) and v6e: the suffix counts chips (one TensorCore each).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..basics.errors import UsageError


@dataclass(frozen=True)
class Generation:
    name: str                 # "v2", "v3", "v4", "v5litepod", "v5p", "v6e"
    suffix_counts: str        # "cores" or "chips"
    cores_per_chip: int
    chips_per_host: int       # on multi-host slices
    single_host_max_chips: int  # the largest slice that fits on one host
    sizes: tuple[int, ...]    # valid suffixes
    architectures: tuple[str, ...]  # "node" (TPU Node, v1 API) and/or "vm" (TPU VM, v2 API)
    peak_bf16_tflops_per_chip: float
    hbm_gib_per_chip: int
    default_runtime: str      # TPU VM runtime image for TensorFlow


def _powers(lo: int, hi: int) -> tuple[int, ...]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return tuple(out)


GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("v2", "cores", 2, 4, 4, (8, 32, 128, 256, 512), ("node", "vm"),
                   45.0, 16, "tpu-vm-tf-2.16.1-pjrt"),
        Generation("v3", "cores", 2, 4, 4, (8, 32, 64, 128, 256, 512, 1024, 2048), ("node", "vm"),
                   123.0, 32, "tpu-vm-tf-2.16.1-pjrt"),
        Generation("v4", "cores", 2, 4, 4, _powers(8, 4096), ("vm",),
                   275.0, 32, "tpu-vm-tf-2.16.1-pjrt"),
        Generation("v5litepod", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256), ("vm",),
                   197.0, 16, "tpu-vm-tf-2.18.0-pjrt"),
        Generation("v5p", "cores", 2, 4, 4, _powers(8, 8192) + (12288,), ("vm",),
                   459.0, 95, "tpu-vm-tf-2.18.0-pjrt"),
        Generation("v6e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256), ("vm",),
                   918.0, 32, "tpu-vm-tf-2.18.0-pjrt"),
    )
}

# TPU Node (v1 API) TensorFlow version used when the user names none: the oldest the job side
# supports, and the host VM's TensorFlow must match it.
DEFAULT_TENSORFLOW_VERSION = "2.16.1"

_TYPE_RE = re.compile(r"^(v2|v3|v4|v5litepod|v5p|v6e)-(\d{1,5})$")


@dataclass(frozen=True)
class AcceleratorType:
    name: str
    generation: Generation
    cores: int
    chips: int
    hosts: int

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def node_cidr_prefix(self) -> int:
        """Size of the block a TPU Node needs: two addresses per host, at least a /29.

        This reproduces ctpu's table (v2-8/v3-8/v2-32/v3-32 /29, v3-64 /28, ..., v3-1024 /24).
        """
        addresses = max(8, 2 * self.hosts)
        return 32 - math.ceil(math.log2(addresses))

    @property
    def peak_bf16_flops(self) -> float:
        return self.generation.peak_bf16_tflops_per_chip * 1e12 * self.chips

    def supports(self, arch: str) -> bool:
        return arch in self.generation.architectures

    @property
    def default_runtime(self) -> str:
        """Multi-host slices need the pod flavour of a TPU VM runtime image."""
        image = self.generation.default_runtime
        return image.replace("-pjrt", "-pod-pjrt") if self.multi_host else image


def parse(name: str) -> AcceleratorType:
    """Parse and validate an accelerator type such as ``v2-8`` or ``v5litepod-16``."""
    raw = (name or "").strip()
    m = _TYPE_RE.match(raw.lower())
    if not m:
        raise UsageError(
            f"unknown accelerator type {raw!r}",
            hint=f"use one of {known_summary()} (e.g. --accelerator-type v2-8)",
        )
    gen = GENERATIONS[m.group(1)]
    size = int(m.group(2))
    if size not in gen.sizes:
        sizes = ", ".join(f"{gen.name}-{s}" for s in gen.sizes[:8])
        more = " ..." if len(gen.sizes) > 8 else ""
        raise UsageError(f"{raw!r} is not a {gen.name} slice size", hint=f"use one of {sizes}{more}")
    if gen.suffix_counts == "cores":
        cores = size
        chips = size // gen.cores_per_chip
    else:
        chips = size
        cores = size * gen.cores_per_chip
    hosts = 1 if chips <= gen.single_host_max_chips else chips // gen.chips_per_host
    return AcceleratorType(f"{gen.name}-{size}", gen, cores, chips, hosts)


def known_summary() -> str:
    parts = []
    for g in GENERATIONS.values():
        parts.append(f"{g.name}-{g.sizes[0]}..{g.name}-{g.sizes[-1]}")
    return ", ".join(parts)


def all_types() -> list[AcceleratorType]:
    return [parse(f"{g.name}-{s}") for g in GENERATIONS.values() for s in g.sizes]
