"""What ``up`` will do, decided from what the cloud says exists and offers: the ``UpPlan``.

Pure: the caller observes (the cluster's resources, each zone's offer, the ranges in use) and this
module decides which existing resources are adopted or refused, the zones in the order asked, the
first type and capacity to ask for, the TPU Node's range, and the lines ``--dry-run`` prints. The
apply step (``apply.py``) then asks the cloud for exactly what the plan needs, and only it fails
over from zone to zone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..basics.errors import UsageError
from ..basics.validate import region_of
from ..catalog.prices import Price, usd_text
from ..cloud.base import Arch, ClusterSpec, QueuedRequest, TpuNode, Used, Vm
from . import capacity as capacity_plan
from . import cidr as cidrs
from .candidates import Candidate
from .offers import ZoneFit

Fits = Mapping[tuple[str, str], ZoneFit]     # (type, zone) -> the image and host machine type there


@dataclass(frozen=True)
class Existing:
    """The cluster's resources as the cloud reports them, once deletions under way are over.

    ``request`` is a queued resource without a node: looked at only when there is no TPU.
    """

    vm: Vm | None = None
    tpu: TpuNode | None = None
    request: QueuedRequest | None = None

    @property
    def dead(self) -> bool:
        """The TPU is there but preempted or terminated: it is deleted and made again."""
        return self.tpu is not None and self.tpu.dead

    @property
    def need_tpu(self) -> bool:
        return self.tpu is None or self.dead

    def need_vm(self, spec: ClusterSpec) -> bool:
        return spec.machine_type is not None and self.vm is None


@dataclass(frozen=True)
class UpPlan:
    """Everything ``up`` decided before it creates anything; ``--dry-run`` reports it and stops.

    ``adopted``, ``planned`` and ``notes`` are the lines the summary prints; ``said`` are the notes
    that are also logged as ``up`` goes (not on a dry run).
    """

    spec: ClusterSpec                        # the first type to ask for, the API an existing TPU keeps
    existing: Existing
    zones: tuple[str, ...]                   # in the order asked; the first is where the TPU goes first
    candidates: tuple[Candidate, ...] = ()   # each (type, zone, capacity) in the order asked; () when no TPU is made
    fits: Fits = field(default_factory=dict)
    block: str | None = None                 # the TPU Node's range (or the existing TPU's)
    had: str | None = None                   # the cluster's range reservation before this call
    queued: bool = False                     # the TPU is asked for through a queued resource
    adopted: tuple[str, ...] = ()
    planned: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    said: tuple[str, ...] = ()

    @property
    def need_tpu(self) -> bool:
        return self.existing.need_tpu

    @property
    def need_vm(self) -> bool:
        return self.existing.need_vm(self.spec)

    @property
    def needs_range(self) -> bool:
        """A TPU Node is made: it needs a block of the network's addresses, reserved before it is asked for."""
        return self.spec.arch == Arch.NODE and self.need_tpu

    @property
    def planned_zone(self) -> str:
        """Where the TPU is (or is asked for first)."""
        tpu = self.existing.tpu
        return tpu.zone if tpu else self.zones[0]

    @property
    def zone(self) -> str:
        """The cluster's zone as a dry run reports it: its TPU's, a TPU Node host's, or the first asked."""
        tpu, vm = self.existing.tpu, self.existing.vm
        return tpu.zone if tpu else (vm.zone if vm and self.spec.arch == Arch.NODE else self.zones[0])

    @property
    def as_planned(self) -> ClusterSpec:
        """The spec with the image and host machine type planned where the TPU goes."""
        key = (self.spec.accelerator.name, self.planned_zone)
        return self.fits[key].apply(self.spec) if key in self.fits else self.spec


def adopt_tpu(spec: ClusterSpec, tpu: TpuNode | None, prefer: tuple[str, str] | None
              ) -> tuple[ClusterSpec, tuple[str, str] | None]:
    """An existing TPU is adopted (its type, API and zone first) only if it is what this ``up`` asks for."""
    wanted = {a.name for a in spec.candidates}
    if tpu is not None:
        if tpu.accelerator_type not in wanted or tpu.arch != spec.arch:
            raise UsageError(
                f"cluster {spec.name} already has a {tpu.accelerator_type} TPU ({tpu.arch.value}) in {tpu.zone}",
                hint=f"use --accelerator-type {tpu.accelerator_type} --arch {tpu.arch.value}, "
                     f"or tpuctl down {spec.name} first")
        spec = capacity_plan.keep_api(spec, tpu)
        if tpu.paid_as not in spec.capacities:
            have = "preemptible" if tpu.preemptible else tpu.paid_as.value
            raise UsageError(
                f"cluster {spec.name} already has {'an' if have[0] in 'aeiou' else 'a'} {have} TPU; a TPU's "
                f"capacity cannot be changed in place",
                hint=f"replace it: tpuctl down {spec.name} --keep-vm, then tpuctl up {spec.name} with the capacity you "
                     f"want (the host VM, bucket and range stay); or run tpuctl up {spec.name} as it is")
        spec = spec.with_type(tpu.accelerator_type)
        prefer = prefer or (tpu.accelerator_type, tpu.zone)
    return spec, prefer


def adopt_request(spec: ClusterSpec, req: QueuedRequest | None, prefer: tuple[str, str] | None
                  ) -> tuple[ClusterSpec, tuple[str, str] | None]:
    """A live queued resource without a node is the cluster's TPU to be: its type and zone first."""
    if req is not None and not req.dead:
        check_request(spec, req)
        if req.accelerator_type:
            spec = spec.with_type(req.accelerator_type)
            prefer = (req.accelerator_type, req.zone)
    return spec, prefer


def check_request(spec: ClusterSpec, req: QueuedRequest) -> None:
    """A live queued resource is adopted only if it asks for what this ``up`` asks for.

    Public: ``apply`` checks a request that appeared while it asked (409) the same way.
    """
    if spec.arch != Arch.VM or (req.accelerator_type and req.accelerator_type not in {a.name for a in spec.candidates}):
        raise UsageError(
            f"cluster {spec.name} already has a queued resource for a {req.accelerator_type} TPU VM in {req.zone} "
            f"({req.state.value})",
            hint=f"use --accelerator-type {req.accelerator_type} --arch vm, or tpuctl down {spec.name} first")
    if req.spot != spec.interruptible:
        tier = "spot" if req.spot else "on-demand"
        raise UsageError(f"cluster {spec.name} already has a queued resource for a {tier} TPU in {req.zone} "
                         f"({req.state.value})",
                         hint=f"{'add --spot' if req.spot else 'drop --spot/--preemptible'} to match it, or "
                              f"tpuctl down {spec.name} first")


def zone_order(spec: ClusterSpec, existing: Existing) -> list[str]:
    """The zones to ask in: a live TPU's own; a dead TPU's or a live request's first, then the user's
    failover order; a TPU Node only in its host's region, the host's zone first."""
    vm, tpu, req = existing.vm, existing.tpu, existing.request
    zones = list(spec.zones)
    if tpu is not None and not tpu.dead:
        zones = [tpu.zone]
    elif tpu is not None:
        # recreating after a preemption: its old zone first, then the user's failover order
        zones = [tpu.zone] + [z for z in zones if z != tpu.zone]
    elif req is not None and not req.dead:
        # the request asked there: wait for it first, then the user's failover order if it fails
        zones = [req.zone] + [z for z in zones if z != req.zone]
    if (tpu is None or tpu.dead) and vm is not None and spec.arch == Arch.NODE:
        # a TPU Node is reached from its host: keep it in the host's region
        same_region = [z for z in zones if region_of(z) == region_of(vm.zone)]
        if not same_region:
            raise UsageError(f"host VM {vm.name} is in {vm.zone}, outside the zones given",
                             hint=f"pass --zone {vm.zone}, or tpuctl down {spec.name} first")
        zones = sorted(same_region, key=lambda z: z != vm.zone)
    return zones


def image_to_keep(existing: Existing, keep_image: str | None) -> str | None:
    """A recreated TPU VM keeps its image where it is still offered."""
    tpu = existing.tpu
    if existing.dead and tpu is not None and tpu.arch == Arch.VM and tpu.version:
        return keep_image or tpu.version
    return keep_image


def host_in_zone(spec: ClusterSpec, fits: Fits, zone: str) -> ClusterSpec:
    """``spec``'s host VM as created in ``zone``: with the machine type planned there (any type's
    fit: the host does not depend on the TPU's type)."""
    f = fits.get((spec.accelerator_type, zone)) or next(
        (v for (_t, z), v in fits.items() if z == zone), None)
    return f.apply(spec) if f is not None else spec


def for_candidate(spec: ClusterSpec, fits: Fits, cand: Candidate) -> ClusterSpec:
    """``spec`` asking for ``cand``: its type and zone, with the image planned for them."""
    made = spec.with_type(cand.name).with_zone(cand.zone)
    if cand.capacity:
        made = made.with_capacity(cand.capacity)
    f = fits.get((cand.name, cand.zone))
    return f.apply(made) if f is not None else made


def range_for(spec: ClusterSpec, existing: Existing, *, reserved: Callable[[], str | None],
              used: Callable[[], list[Used]], pool: cidrs.IPv4Network) -> tuple[str | None, str | None]:
    """The TPU Node's block and the cluster's reservation before this call.

    A user's block is checked before anything is created; a recreated TPU gets its old block back
    (or the one reserved for it); else the first free block. ``reserved`` and ``used`` read the cloud
    only when this decision needs them.
    """
    tpu = existing.tpu
    if spec.arch == Arch.NODE and existing.need_tpu:
        prefix = spec.accelerator.node_cidr_prefix
        old = tpu.cidr_block if tpu is not None else None
        had = reserved()
        if spec.cidr:
            return str(cidrs.check_requested(ipaddress.ip_network(spec.cidr), prefix, used())), had
        if old or had:
            return old or had, had   # a recreated TPU gets its old block back
        return str(cidrs.allocate(prefix, used(), pool)), had
    return (tpu.cidr_block if tpu is not None else None), None


def make(spec: ClusterSpec, existing: Existing, zones: Sequence[str], candidates: Sequence[Candidate], fits: Fits, *,
         reserved: Callable[[], str | None], used: Callable[[], list[Used]], pool: cidrs.IPv4Network,
         provider: str, offers_queued: bool) -> UpPlan:
    """The plan from the zones to ask, the candidates each zone can host (``survey``) and the ranges.

    With candidates, the zones are theirs in order and the first candidate's type is asked for
    first; without (no TPU to make), the zones that can host the VM.
    """
    tpu, vm, req = existing.tpu, existing.vm, existing.request
    cands = list(candidates)
    if existing.need_tpu:
        zones = list(dict.fromkeys(c.zone for c in cands))
        spec = spec.with_type(cands[0].name)
    elif existing.need_vm(spec):
        zones = [z for z in zones if (spec.accelerator_type, z) in fits]
    acc = spec.accelerator
    need_vm = existing.need_vm(spec)
    dead, need_tpu = existing.dead, existing.need_tpu
    block, had = range_for(spec, existing, reserved=reserved, used=used, pool=pool)

    zone0 = zones[0]
    queued = spec.queued and offers_queued
    how = " through a queued resource" if queued else ""
    adopted: list[str] = []
    planned: list[str] = []
    notes: list[str] = []
    said: list[str] = []
    if tpu is not None and not dead:
        adopted.append(f"TPU {tpu.name} ({tpu.zone}, {tpu.state.value})")
    if req is not None and not req.dead:
        adopted.append(f"queued resource {req.name} ({req.zone}, {req.state.value})")
    if vm is not None:
        adopted.append(f"VM {vm.name} ({vm.zone}, {vm.state.value})")
    if dead:
        assert tpu is not None
        planned.append(f"TPU {spec.name} in {tpu.zone} (replacing the {tpu.state.value} one)")
    elif req is not None and req.dead:
        planned.append(f"TPU {spec.name} {acc.name} in {zone0}{how} (replacing the {req.state.value} "
                       f"queued resource in {req.zone})")
    elif need_tpu and req is None:
        planned.append(tpu_line(spec.name, cands[0] if cands else Candidate(acc, zone0), fits, block=block, how=how))
    if spec.queued and not offers_queued:
        notes.append(f"the {provider} provider has no queued resources: --queued created the TPU "
                     "directly (it matters on Google Cloud)")
    elif queued and spec.preemptible and need_tpu and (req is None or req.dead):
        note = ("--preemptible with --queued asks for the spot tier, as gcloud does: a queued resource has no "
                "preemptible tier, so the TPU is a Spot TPU VM")
        notes.append(note)
        said.append(note)
    if need_vm:
        vm_zone = zone0 if spec.arch == Arch.NODE or not tpu else tpu.zone
        machine = host_in_zone(spec, fits, vm_zone).machine_type
        planned.append(f"VM {spec.name} {machine} in {vm_zone}")
    if len(cands) > 1 and len({c.name for c in cands}) > 1:
        notes.append(order_note(spec, cands))
    return UpPlan(spec=spec, existing=existing, zones=tuple(zones), candidates=tuple(cands), fits=dict(fits),
                  block=block, had=had, queued=queued, adopted=tuple(adopted), planned=tuple(planned),
                  notes=tuple(notes), said=tuple(said))


def tpu_line(name: str, cand: Candidate, fits: Fits, *, block: str | None = None, how: str = "") -> str:
    """``TPU NAME v5p-8 in us-east5-c on Compute Engine (ct5p-hightpu-4t, spot), image ...``: the
    TPU as asked for of ``cand`` (a dry run's first try; after ``up``, the one taken)."""
    acc, zone = cand.accelerator, cand.zone
    fit = fits.get((acc.name, zone))
    image = fit.runtime_version if fit else None
    on = capacity_plan.on_compute(acc, cand.capacity) if fit and fit.api == "compute" else ""
    return (f"TPU {name} {acc.name} in {zone}{how}{on}" + (f" with range {block}" if block else "")
            + (f", image {image}" if image else ""))


def capacity_order_note(cands: Sequence[Candidate], price: Callable[[Candidate], Price]) -> str | None:
    """``would try, in the --capacity order: spot in us-east5-c ($6.72/hour), flex-start in ...``:
    each capacity (and zone) a dry run of one type would ask for, in order, each with its price or
    ``price unknown`` (None where only one capacity is asked for: the summary's price says it)."""
    if len({c.capacity for c in cands}) < 2 or len({c.name for c in cands}) > 1:
        return None

    def priced(c: Candidate) -> str:
        p = price(c)
        if p.usd_per_hour is None:
            return f"{c.capacity} in {c.zone} (price unknown)"
        return f"{c.capacity} in {c.zone} ({usd_text(p.usd_per_hour)}/hour" + (f"; {p.note}" if p.note else "") + ")"

    shown = ", ".join(priced(c) for c in cands[:6]) + (f", and {len(cands) - 6} more" if len(cands) > 6 else "")
    return f"would try, in the --capacity order: {shown}"


def order_note(spec: ClusterSpec, cands: list[Candidate]) -> str:
    """The candidates in the order they will be asked for, and why that order."""
    how = "in the order given (--in-order)" if spec.in_order else "cheapest first per peak bf16 FLOP/s"
    several_caps = len({c.capacity for c in cands}) > 1
    shown = ", ".join(c.describe(several_caps) for c in cands[:6]) + (f", and {len(cands) - 6} more" if len(cands) > 6 else "")
    return f"candidates {how}: {shown}"

