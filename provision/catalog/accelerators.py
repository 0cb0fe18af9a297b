"""Every TPU accelerator type tpuctl knows: cores, chips, hosts, architectures, peak FLOP/s.

This is the one place for accelerator sizes. Validation, CIDR sizing (a TPU Node needs a block
with room for every host), pricing (per chip-hour) and the throughput benchmark (fraction of
peak) all read from here.

Naming differs by generation, which is the trap this module exists to absorb:
- v2, v3, v4, v5p: the suffix counts TensorCores (two per chip).
- v5litepod (v5e) and v6e: the suffix counts chips (one TensorCore each).
- tpu7x (Ironwood): the suffix counts TensorCores (two per chip), as Google's own launcher names
  it (AI-Hypercomputer/xpk ``system_characteristics.py``: ``tpu7x-8`` is the 2x2x1 slice of four
  chips, ``tpu7x-2`` the single chip).

Which API serves a generation (``Generation.apis``): the Cloud TPU API ("tpu") for v2 to v6e, and
Compute Engine ("compute") for v5p, v6e and TPU7x, the only generations Compute Engine documents
(cloud.google.com/compute/docs/tpus/tpu-machines); TPU7x exists only there ("Cloud TPU resources
in Compute Engine": new generations from TPU7x on are offered only through Compute Engine or GKE).
The machine type and topology of each Compute Engine slice are in :mod:`.compute_tpus`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..basics.errors import UsageError


@dataclass(frozen=True)
class Generation:
    name: str                 # "v2", "v3", "v4", "v5litepod", "v5p", "v6e", "tpu7x"
    suffix_counts: str        # "cores" or "chips"
    cores_per_chip: int
    chips_per_host: int       # on multi-host slices
    single_host_max_chips: int  # the largest slice that fits on one host
    sizes: tuple[int, ...]    # valid suffixes
    architectures: tuple[str, ...]  # "node" (TPU Node, v1 API) and/or "vm" (TPU VM, v2 API)
    peak_bf16_tflops_per_chip: float
    hbm_gib_per_chip: int
    apis: tuple[str, ...] = ("tpu",)  # "tpu" (Cloud TPU API) and/or "compute" (Compute Engine)


def chips_of(topology: str) -> int:
    """Chips in a topology such as ``2x2x4``."""
    chips = 1
    for side in topology.split("x"):
        chips *= int(side)
    return chips


def _cores(topologies: str) -> tuple[int, ...]:
    """TensorCore counts (two per chip) of slice topologies such as ``2x2x1 4x4x12``."""
    return tuple(sorted({2 * chips_of(topo) for topo in topologies.split()}))


# v4 and v5p slices are 3D shapes, not only powers of two (v4-384 is 4x4x12). The shapes are
# Google's published lists: AI-Hypercomputer/maxtext MaxText/accelerator_to_spec_map.py and
# AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py (kept in sync by Google; read
# 2026-11-24); cloud.google.com/tpu/docs/v4 and /v5p give the rule (multiples of 4 per side
# from 64 chips up) and the largest single slice.
V4_TOPOLOGIES = "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 8x8x8 8x8x12 8x8x16 8x16x16"
V5P_TOPOLOGIES = (
    "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x4x12 4x8x8 4x4x20 4x8x12 4x4x28 8x8x8 4x12x12 4x8x20 4x4x44 "
    "8x8x12 4x4x52 4x8x28 4x12x20 8x8x16 4x4x68 8x12x12 4x4x76 8x8x20 4x12x28 4x8x44 4x4x92 8x12x16 "
    "4x20x20 4x8x52 12x12x12 8x8x28 4x4x116 8x12x20 4x4x124 8x16x16 4x12x44 4x8x68 4x20x28 12x12x16 "
    "4x4x148 4x8x76 4x12x52 8x16x20 4x4x164 8x12x28 4x4x172 8x8x44 12x12x20 4x8x92 4x4x188 12x16x16 "
    "4x28x28 8x20x20 4x12x68 8x8x52 4x4x212 12x12x24 4x20x44 8x16x28 4x12x76 4x8x116 4x4x236 12x16x20 "
    "4x4x244 4x8x124 12x12x28 16x16x16 4x20x52 8x12x44 8x8x68 4x12x92 8x20x28 12x16x24 4x8x148 "
    "12x20x20 8x8x76 4x28x44 8x12x52 16x16x20 12x12x36 4x8x164 12x16x28 4x20x68 4x8x172 4x12x116 "
    "8x16x44 12x20x24 4x28x52 8x8x92 4x12x124 4x8x188 4x20x76 16x16x24 12x24x24 16x20x28"
)
# TPU7x: 1x1x1 on tpu7x-standard-1t, the rest on tpu7x-standard-4t, as AI-Hypercomputer/xpk
# src/xpk/core/system_characteristics.py lists them (commit 02b0c09, read 2026-11-27), in its order.
TPU7X_TOPOLOGIES = (
    "1x1x1 12x12x12 12x12x16 12x12x20 12x12x24 12x12x28 12x12x36 12x16x16 12x16x20 12x16x24 12x16x28 "
    "12x20x20 12x20x24 12x24x24 16x16x16 16x16x20 16x16x24 16x16x32 16x20x28 16x24x24 2x2x1 2x2x2 2x2x4 "
    "2x4x4 4x12x116 4x12x12 4x12x124 4x12x20 4x12x28 4x12x44 4x12x52 4x12x68 4x12x76 4x12x92 4x20x20 "
    "4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 4x28x28 4x28x44 4x28x52 4x4x116 4x4x12 4x4x124 4x4x148 "
    "4x4x164 4x4x172 4x4x188 4x4x20 4x4x212 4x4x236 4x4x244 4x4x28 4x4x4 4x4x44 4x4x52 4x4x68 4x4x76 "
    "4x4x8 4x4x92 4x8x116 4x8x12 4x8x124 4x8x148 4x8x164 4x8x172 4x8x188 4x8x20 4x8x28 4x8x44 4x8x52 "
    "4x8x68 4x8x76 4x8x8 4x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52 8x16x16 8x16x20 8x16x28 "
    "8x16x44 8x20x20 8x20x28 8x8x12 8x8x16 8x8x20 8x8x28 8x8x44 8x8x52 8x8x68 8x8x76 8x8x8 8x8x92"
)
# v6e slices are 2D (xpk: 1x1 on ct6e-standard-1t, 2x2 ... 16x16 on ct6e-standard-4t).
V6E_TOPOLOGIES = "1x1 2x2 2x4 4x4 4x8 8x8 8x16 16x16"


GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("v2", "cores", 2, 4, 4, (8, 32, 128, 256, 512), ("node", "vm"), 45.0, 16),
        Generation("v3", "cores", 2, 4, 4, (8, 32, 64, 128, 256, 512, 1024, 2048), ("node", "vm"), 123.0, 32),
        Generation("v4", "cores", 2, 4, 4, _cores(V4_TOPOLOGIES), ("vm",), 275.0, 32),
        Generation("v5litepod", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256), ("vm",), 197.0, 16),
        Generation("v5p", "cores", 2, 4, 4, _cores(V5P_TOPOLOGIES), ("vm",), 459.0, 95, ("tpu", "compute")),
        Generation("v6e", "chips", 1, 4, 8, (1, 4, 8, 16, 32, 64, 128, 256), ("vm",), 918.0, 32,
                   ("tpu", "compute")),
        # cloud.google.com/tpu/docs/tpu7x: 2 TensorCores per chip, 2307 bf16 TFLOP/s, 192 GiB HBM
        Generation("tpu7x", "cores", 2, 4, 4, _cores(TPU7X_TOPOLOGIES), ("vm",), 2307.0, 192, ("compute",)),
    )
}

# TPU Node (v1 API) TensorFlow version used when the user names none: the oldest the job side
# supports, and the host VM's TensorFlow must match it.
DEFAULT_TENSORFLOW_VERSION = "2.16.1"

_TYPE_RE = re.compile(r"^(v2|v3|v4|v5litepod|v5p|v6e|tpu7x)-(\d{1,5})$")


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

    def served_by(self, api: str) -> bool:
        """Whether ``api`` ("tpu": the Cloud TPU API, "compute": Compute Engine) can make this type."""
        return api in self.generation.apis


def parse(name: str) -> AcceleratorType:
    """Parse and validate an accelerator type such as ``v2-8`` or ``v5litepod-16``."""
    raw = (name or "").strip()
    m = _TYPE_RE.match(raw.lower())
    if not m:
        guess = suggest(raw)
        if guess:
            why = " (Cloud TPU names v5e v5litepod)" if guess.startswith("v5litepod") and "litepod" not in raw else ""
            raise UsageError(f"unknown accelerator type {raw!r}", hint=f"did you mean {guess}?{why}")
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


# what people type for a generation, as the marketing or other tools name it
_GENERATION_ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod", "v5litepod": "v5litepod", "v6elite": "v6e"}
_LOOSE_RE = re.compile(r"(?:tpu[-_ ]?)?(v[0-9][a-z]*)[-_ ]?([0-9]{1,5})")


def suggest(raw: str) -> str | None:
    """The type a mistyped name most likely means (``v5e-8`` -> ``v5litepod-8``, ``v6e8`` -> ``v6e-8``,
    ``tpu-v3-8`` -> ``v3-8``), or None when no valid type is that close."""
    m = _LOOSE_RE.fullmatch((raw or "").strip().lower())
    if not m:
        return None
    gen = GENERATIONS.get(_GENERATION_ALIASES.get(m.group(1), m.group(1)))
    if gen is None or int(m.group(2)) not in gen.sizes:
        return None
    return f"{gen.name}-{int(m.group(2))}"


def known_summary() -> str:
    parts = []
    for g in GENERATIONS.values():
        parts.append(f"{g.name}-{g.sizes[0]}..{g.name}-{g.sizes[-1]}")
    return ", ".join(parts)


def all_types() -> list[AcceleratorType]:
    return [parse(f"{g.name}-{s}") for g in GENERATIONS.values() for s in g.sizes]
