"""What ``up`` reports: the cluster as made (or, on a dry run, as planned) and what it costs.

Pure: a record and its words. ``summary`` is what ``tpuctl up`` prints, ``to_dict`` its ``--json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..basics.validate import format_duration
from ..catalog import prices
from ..cloud.base import Arch, ClusterSpec, Health, TpuNode, Vm
from . import timing
from .candidates import Candidate, CandidatePlan


@dataclass
class UpResult:
    """One ``up``: where the cluster is, what this call created, adopted or (dry run) would create."""

    spec: ClusterSpec
    zone: str | None = None
    cidr: str | None = None
    vm: Vm | None = None
    tpu: TpuNode | None = None
    created: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0
    # when each step of this call began and ended (wall clock; provision.cluster.timing.up_startup)
    marks: dict[str, Any] = field(default_factory=dict)

    book: prices.PriceBook | None = field(default=None, repr=False)   # None: the bundled table

    @property
    def tpu_price(self) -> prices.Price:
        zone = self.zone or self.spec.zone
        cap = self.tpu.paid_as if self.tpu else self.spec.capacities[0]
        return (self.book or prices.BUNDLED).tpu_price(self.spec.accelerator, zone,
                                                        prices.tier_of(cap.interruptible, cap.value))

    @property
    def vm_price(self) -> prices.Price:
        return (self.book or prices.BUNDLED).vm_price(self.spec.machine_type, self.zone or self.spec.zone)

    @property
    def hourly_total(self) -> prices.Total:
        return prices.Total.of((("the TPU", self.tpu_price), ("the host VM", self.vm_price)))

    @property
    def hourly(self) -> float | None:
        """TPU and host VM per hour; None when either's price is unknown."""
        return self.hourly_total.usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True, "cluster": self.spec.name, "provider": self.spec.provider, "project": self.spec.project,
            "zone": self.zone, "dry_run": self.dry_run, "accelerator_type": self.spec.accelerator_type,
            "arch": self.spec.arch.value, "preemptible": self.spec.preemptible, "spot": self.spec.spot,
            "api": self.tpu.api if self.tpu else self.spec.api,
            "capacity": self.tpu.paid_as.value if self.tpu else [c.value for c in self.spec.capacities],
            "runtime_version": self.spec.runtime_version, "machine_type": self.spec.machine_type,
            "cidr": self.cidr, "vm": self.vm.to_dict() if self.vm else None,
            "tpu": self.tpu.to_dict() if self.tpu else None, "created": self.created, "adopted": self.adopted,
            "planned": self.planned, "notes": self.notes, "hourly_usd": self.hourly,
            "price_source": (self.book or prices.BUNDLED).describe(),
            "price": {"tpu": self.tpu_price.to_dict(), "vm": self.vm_price.to_dict()}, "seconds": round(self.seconds, 2),
            "startup": self.startup,
        }

    @property
    def startup(self) -> dict[str, Any] | None:
        """This call's time by phase (None on a dry run: nothing was asked for)."""
        return None if self.dry_run else timing.up_startup(self.marks)

    def summary(self) -> str:
        s = self.spec
        kind = "preemptible" if s.preemptible else self.tpu.paid_as.value if self.tpu else \
            ",".join(c.value for c in s.capacities)
        if self.tpu is not None and self.tpu.api == "compute":
            kind += ", Compute Engine"
        lines = []
        if self.dry_run:
            lines.append(f"dry run: would create {', '.join(self.planned) or 'nothing'} "
                         f"(nothing was created)")
            if self.adopted:
                lines.append(f"already there (would adopt): {', '.join(self.adopted)}")
        else:
            tpu = self.tpu
            state = "-" if tpu is None else tpu.state.value if tpu.health == Health.HEALTH_UNSPECIFIED \
                else f"{tpu.state.value}/{tpu.health.value}"
            lines.append(f"cluster {s.name} is up in {self.zone}: TPU {s.accelerator_type} ({s.arch.value}, {kind}) "
                         f"{state}" + (f", range {self.cidr}" if self.cidr else "")
                         + (f", host VM {s.machine_type}" if s.machine_type else ", no host VM"))
            if self.created:
                lines.append(f"created: {', '.join(self.created)}")
            if self.adopted:
                lines.append(f"already there (adopted): {', '.join(self.adopted)}")
        lines.extend(self.notes)
        said = timing.line(self.startup, duration=format_duration, label="took")
        if said:
            lines.append(said)
        lines.append(f"list price: {self.hourly_total.text()} while it exists; tpuctl down {s.name} deletes it")
        lines.append(f"  TPU {s.accelerator_type}: {prices.usd_text(self.tpu_price.usd_per_hour)}/hour "
                     f"({self.tpu_price.label()})")
        if s.machine_type:
            lines.append(f"  VM {s.machine_type}: {prices.usd_text(self.vm_price.usd_per_hour, 3)}/hour "
                         f"({self.vm_price.label()})")
        return "\n".join(lines)


def as_made(spec: ClusterSpec, result: UpResult) -> ClusterSpec:
    """The spec as the cloud made it: the TPU VM's image, the host VM's machine type and the
    capacity taken (what the cluster's cache keeps, so the next command asks for the same)."""
    changes: dict[str, Any] = {}
    if result.tpu is not None and result.tpu.accelerator_type in {a.name for a in spec.candidates}:
        changes["accelerator_type"] = result.tpu.accelerator_type
    if result.tpu is not None and result.tpu.arch == Arch.VM and result.tpu.version:
        changes["runtime_version"] = result.tpu.version
    if result.vm is not None and result.vm.machine_type:
        changes["machine_type"] = result.vm.machine_type
    if result.tpu is not None:
        changes["api"] = result.tpu.api          # a cluster keeps the API it was made with
        # the capacity taken goes first (the rest stay, in order, as its fallbacks): a cached
        # spec says what the TPU is paid as, and a recreate asks for that first, as for its zone
        taken = result.tpu.paid_as.value
        if spec.capacity and taken in spec.capacity and spec.capacity[0] != taken:
            changes["capacity"] = (taken, *(c for c in spec.capacity if c != taken))
    return dataclasses.replace(spec, **changes) if changes else spec


def chosen_note(spec: ClusterSpec, chosen: Candidate, plan: CandidatePlan) -> str:
    """Which candidate ``up`` got, and why it was that one: first in the order, or the first left
    after the others failed."""
    if plan.candidates and chosen == plan.candidates[0]:
        why = "first in the order given (--in-order)" if spec.in_order else \
            f"the cheapest per peak bf16 FLOP/s of {len(plan.candidates)} candidates" if plan.several else \
            "first in the capacity order (--capacity)"
    else:
        why = f"the first that could be had after {plan.explain()}"
    return f"chose {chosen.describe(plan.capacities)}: {why}"
