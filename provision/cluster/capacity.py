"""What ``up`` decides about capacity and the API of a cluster's TPU. Pure.

Kept out of ``up.py``: which capacities a (type, zone) can be asked for, given the API that
serves it there (a zone on the Cloud TPU API has no flex-start or named reservation), that a
cluster keeps the API its TPU was made with, and how a Compute Engine plan reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..basics.errors import UsageError
from ..catalog import compute_tpus
from ..catalog.accelerators import AcceleratorType
from ..cloud import capacity as capacities
from ..cloud.base import Arch, ClusterSpec, Provider, TpuNode
from ..cloud.capacity import Capacity


def allowed(spec: ClusterSpec, api: str, cap: str) -> bool:
    """Whether ``cap`` of the spec's order can be asked for where ``api`` serves the type."""
    return Capacity(cap) in capacities.for_api(spec.capacities, api or "tpu")


def left_out(spec: ClusterSpec, apis: Mapping[tuple[str, str], str]) -> list[str]:
    """``flex-start in us-west4-a``: each capacity of the order a zone's API cannot make."""
    out = [f"{cap.value} in {zone}" for (_type, zone), api in apis.items() for cap in spec.capacities
           if not allowed(spec, api, cap.value)]
    return list(dict.fromkeys(out))


def nothing_to_ask(spec: ClusterSpec, zones: Sequence[str], types: Iterable[AcceleratorType],
                   compute_zones: Mapping[str, Sequence[str]] | None = None) -> UsageError:
    """Every capacity asked for is Compute Engine's, and no zone given sells the type there: the
    line names the zone (or zones) as given, and where the capacity can be had for each type
    (``compute_zones``: the zones that list its machine type, as the cloud answered)."""
    types = list(types)
    order = ", ".join(c.value for c in spec.capacities)
    where = zones[0] if len(zones) == 1 else f"none of {', '.join(zones)}"
    verb = "does not list" if len(zones) == 1 else "lists"
    offered = []
    for acc in types:
        shape = compute_tpus.shape(acc)
        if shape is None:
            offered.append(f"{acc.name} is sold only through the Cloud TPU API ({order} is for "
                           f"{', '.join(compute_tpus.MACHINE_TYPES)} types, on Compute Engine)")
            continue
        near = nearest_zones((compute_zones or {}).get(acc.name, ()), zones[0] if zones else "")
        offered.append(f"Compute Engine lists {acc.name} ({shape.machine_type}) in {', '.join(near[:4])}" if near
                       else f"no zone lists {shape.machine_type} now")
    sold = any(compute_tpus.shape(a) is not None for a in types)
    return UsageError(f"{order} can be had only on Compute Engine, and {where} {verb} "
                      f"{'/'.join(a.name for a in types)} as a machine type; " + "; ".join(offered),
                      hint="pick a zone that sells it on Compute Engine, or add on-demand or spot to --capacity"
                      if sold else "use spot or on-demand (--capacity spot,on-demand), or a "
                                   f"{'/'.join(compute_tpus.MACHINE_TYPES)} type for {order}")


def check_provider(provider: Provider, spec: ClusterSpec, acc: AcceleratorType) -> None:
    """A provider without Compute Engine TPUs (the local one) cannot make what only Compute Engine
    sells, or anything asked for with ``--api compute``: say that, not "pick another zone"."""
    if provider.offers_compute_tpus or (spec.api != "compute" and acc.served_by("tpu")):
        return
    why = "--api compute asks for Compute Engine" if spec.api == "compute" else \
        f"{acc.name} is sold only through Compute Engine"
    raise UsageError(f"{why}, which the {provider.name} provider does not emulate",
                     hint="use --provider gcp" + ("" if acc.served_by("tpu") else ", or a type the Cloud TPU API "
                                                  "offers (e.g. v6e-8) to rehearse locally"))


def keep_api(spec: ClusterSpec, node: TpuNode) -> ClusterSpec:
    """A cluster keeps the API its TPU was made with: ``--api auto`` follows it, another is refused."""
    if spec.api not in ("auto", node.api):
        made = "Compute Engine" if node.api == "compute" else "the Cloud TPU API"
        raise UsageError(f"cluster {spec.name}'s TPU was made with {made} (--api {node.api})",
                         hint=f"use --api {node.api} or auto, or tpuctl down {spec.name} first")
    return spec.with_api(node.api) if node.api != spec.api else spec


def on_compute(acc: AcceleratorType, cap: str) -> str:
    """`` on Compute Engine (2 x ct5p-hightpu-4t, 2x2x2, spot)``: what the plan makes there."""
    shape = compute_tpus.shape(acc)
    if shape is None:
        return ""
    vms = f"{shape.vms} x {shape.machine_type}, {shape.topology}" if shape.multi_host else shape.machine_type
    return f" on Compute Engine ({vms}" + (f", {cap}" if cap else "") + ")"


def listing_command(acc: AcceleratorType) -> str:
    """The gcloud command that shows where a type is offered, on the API that would make it."""
    shape = compute_tpus.shape(acc)
    if shape is None:
        return "gcloud compute tpus accelerator-types list --zone ZONE"
    return f"gcloud compute machine-types list --filter=name={shape.machine_type} for Compute Engine"


TPU_API_FROZEN = "Google gives it bug and security fixes only"


def nearest_zones(zones: Iterable[str], near: str, *, leave_out: Iterable[str] = ()) -> list[str]:
    """``zones`` without ``leave_out`` (the zones that just failed), those of ``near``'s region first,
    otherwise in the order given (the zone table's first row is the one it suggests)."""
    skip = set(leave_out)
    region = near.rsplit("-", 1)[0]
    return sorted((z for z in zones if z not in skip), key=lambda z: z.rsplit("-", 1)[0] != region)


def api_line(spec: ClusterSpec, acc: AcceleratorType, zone: str, api: str, compute_zones: Sequence[str] = ()) -> str:
    """The one line ``up`` prints about the API that makes the TPU, and why that one.

    ``compute_zones``: where Compute Engine sells ``acc`` (asked of the cloud only when the Cloud
    TPU API was taken for a type Compute Engine sells too), named so the user can move: the
    Cloud TPU API is frozen (docs/compute-engine.md)."""
    shape = compute_tpus.shape(acc)
    if api == "compute":
        why = "--api compute" if spec.api == "compute" else \
            f"{zone} lists its machine type {shape.machine_type if shape else '?'} (--api auto)"
        return f"API: Compute Engine, because {why}"
    if spec.arch == Arch.NODE:
        why = "TPU Nodes (--arch node) exist only there"
    elif spec.queued:
        why = "queued resources (--queued) exist only there"
    elif spec.api == "tpu":
        why = "--api tpu"
    elif shape is None:
        why = f"Compute Engine does not sell {acc.name}"
    else:
        why = f"{zone} lists no {shape.machine_type} machine type (--api auto)"
    line = f"API: the Cloud TPU API ({TPU_API_FROZEN}), because {why}"
    elsewhere = nearest_zones(compute_zones, zone)
    if elsewhere:
        move = f"--zone {elsewhere[0]}" + ("" if spec.api == "auto" else " --api auto")
        line += f"; Compute Engine sells {acc.name} in {', '.join(elsewhere)} ({move})"
    return line
