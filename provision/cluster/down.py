"""``down``: delete every labelled resource of a cluster, wait until it is gone, and say what it saves.

A queued resource is one of them: a request without a node bills nothing but holds quota and can
still become a billed TPU, so it is deleted too (with ``force`` while it holds a node; a node that
came from a request is deleted through it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import NotFound, PartialFailure, TpuctlError, UnknownName
from ..catalog import prices
from ..cloud.base import ClusterSpec, Provider, TpuNode, TpuState
from ..cloud.operations import Backoff, OperationTimeout, wait_all, wait_until
from . import least_privilege, ledger, pod_network
from .cache import cached_spec, uncache
from .resources import LOCAL_DEFAULT_ZONE, delete_request, find, noop, tpu_price

Log = Callable[[str], None]



@dataclass
class DownResult:
    name: str
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    priced: list[dict[str, Any]] = field(default_factory=list)   # what each deletion saves, with its price
    price_source: str = field(default_factory=prices.describe_source)

    @property
    def saved(self) -> prices.Total:
        """What the deletions save per hour (from ``priced``); an unknown price makes it a lower bound."""
        return prices.Total.of((p["resource"], p["usd_per_hour"]) for p in self.priced)

    @property
    def saved_per_hour(self) -> float | None:
        return self.saved.usd

    def to_dict(self) -> dict[str, Any]:
        return {"ok": True, "cluster": self.name, "dry_run": self.dry_run, "deleted": self.deleted,
                "kept": self.kept, "saves_usd_per_hour": self.saved_per_hour,
                "price_source": self.price_source, "prices": self.priced, "seconds": round(self.seconds, 2),
                "notes": self.notes}

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        lines = [f"{verb}: {', '.join(self.deleted) or 'nothing'}"
                 + (" (dry run: nothing was deleted)" if self.dry_run else "")]
        if self.kept:
            lines.append(f"kept: {', '.join(self.kept)}")
        lines.extend(self.notes)
        lines.append(f"saves {self.saved.text()} at list price")
        lines.extend(f"  {p['resource']}: {prices.usd_text(p['usd_per_hour'])}/hour ({p['label']})" for p in self.priced
                     if p["usd_per_hour"] != 0)
        return "\n".join(lines)


def down(provider: Provider, name: str, *, zone: str | None = None, keep_vm: bool = False, dry_run: bool = False,
         timeout: float = 900.0, log: Log = noop, backoff: Backoff | None = None) -> DownResult:
    start = time.monotonic()
    backoff = backoff or Backoff()
    found = find(provider, name, zone)
    result = DownResult(name=name, dry_run=dry_run)
    if found.empty:
        cached = cached_spec(provider, name)
        if cached is None and provider.reserved_range(_stub_spec(name)) is None:
            raise UnknownName(f"no cluster named {name}", hint="run tpuctl status to list clusters")
        spec = _spec_of(provider, name, [])
        result.deleted += (least_privilege.owned(provider, spec) if dry_run
                           else least_privilege.remove(provider, spec, log=log))
        if not dry_run:
            provider.release_range(name)
            uncache(provider, name)
        result.notes.append(f"cluster {name} has no resources left; cleared its local record")
        return result

    book = provider.price_book()
    result.price_source = book.describe()
    targets: list[tuple[str, str, str, prices.Price]] = []
    for node in found.tpus:
        targets.append(("tpu", node.zone, node.name, tpu_price(node, book)))
    for node in found.gone:         # deleted by its preemption: nothing of it left to delete or to pay for
        result.notes.append(f"TPU {node.name} ({node.zone}) was PREEMPTED: Compute Engine deleted its VM then, "
                            "so nothing of it is left to delete")
    requests = found.requests       # those without a node here; a node's request goes with the node
    for req in requests:
        targets.append(("queued", req.zone, req.name, prices.NO_PRICE))
        result.notes.append(f"{req.describe()} billed nothing yet; deleting it frees the quota it held "
                            f"({req.quota()})" + (" and keeps it from becoming a billed TPU" if not req.dead else ""))
    for vm in found.vms:
        if keep_vm:
            result.kept.append(f"VM {vm.name} ({vm.zone})")
        else:
            targets.append(("vm", vm.zone, vm.name, book.vm_price(vm.machine_type, vm.zone)))
    for kind, z, n, price in targets:
        result.deleted.append(f"{_WHAT[kind]} {n} ({z})")
        result.priced.append({"resource": f"{_WHAT[kind]} {n} ({z})", "usd_per_hour": price.usd_per_hour,
                              "label": price.label(), "price": price.to_dict()})
    if dry_run:
        spec = _spec_of(provider, name, found.tpus) if not keep_vm or not found.vms else None
        result.deleted += [f"firewall rule {r}" for r in (pod_network.owned(provider, spec) if spec else [])]
        result.deleted += least_privilege.owned(provider, spec)     # up --least-privilege's account
        result.seconds = time.monotonic() - start
        return result

    ops = []
    for kind, z, n, price in targets:
        log(f"deleting {_WHAT[kind]} {n} in {z} (saves {prices.usd_text(price.usd_per_hour)}/hour)")
        try:
            if kind == "queued":
                req = next(r for r in requests if (r.zone, r.name) == (z, n))
                op = delete_request(provider, req, nodes=found.tpus, log=log)
                if op is not None:
                    ops.append(op)
                continue
            ops.append(provider.delete_tpu(z, n) if kind == "tpu" else provider.delete_vm(z, n))
        except NotFound:
            continue
    for node in found.tpus:
        if node.state != TpuState.DELETING:
            ledger.tpu_deleted(provider, name, node, by="down", hourly_usd=tpu_price(node, book).usd_per_hour,
                              price=tpu_price(node, book).to_dict())
    ledger.cluster_down(provider, name)
    try:
        wait_all(provider, ops, timeout=timeout, backoff=backoff)
    except OperationTimeout as exc:
        raise PartialFailure(f"down timed out waiting for: {exc}",
                             remaining=[op.describe() for op in exc.pending],
                             hint=f"rerun tpuctl down {name}") from None
    failed = [op for op in ops if op.error and op.error.code != 5]
    if failed:
        raise PartialFailure(f"down failed for {', '.join(op.describe() for op in failed)}: "
                             f"{failed[0].error.message}",
                             remaining=[f"{op.kind} {op.target} in {op.zone}" for op in failed],
                             hint=f"rerun tpuctl down {name}")
    # wait until they are really gone: a DELETING TPU still holds its range
    for kind, z, n, _h in targets:
        getter = {"tpu": provider.get_tpu, "vm": provider.get_vm, "queued": provider.get_queued}[kind]
        wait_until(lambda g=getter, zz=z, nn=n: g(zz, nn) is None, timeout=timeout, backoff=backoff)
    if not keep_vm or not found.vms:
        spec = _spec_of(provider, name, found.tpus)
        if spec is not None:
            # the rule up --create-firewall-rule added for a pod slice: no TPU of the cluster is left
            result.deleted += pod_network.remove(provider, spec)
            # the hosts' account up --least-privilege made: no host is left to run as it
            result.deleted += least_privilege.remove(provider, spec, log=log)
        uncache(provider, name)
    provider.release_range(name)
    result.seconds = time.monotonic() - start
    return result


_WHAT = {"tpu": "TPU", "vm": "VM", "queued": "queued resource"}


def delete_tpu(provider: Provider, name: str, *, by: str, bucket: Any = None, run_id: str | None = None,
               timeout: float = 900.0, log: Log = noop, backoff: Backoff | None = None) -> list[str]:
    """Delete the cluster's TPU (through its queued resource where it came from one) and keep its host
    VM and range: what a run's cap does when it stops the run. Each deletion goes into the cost ledger
    (here and in ``bucket``, where the laptop sees a host's). Returns what was deleted."""
    backoff = backoff or Backoff()
    found = find(provider, name)
    book = provider.price_book()
    ops, done = [], []
    for node in found.tpus:
        price = tpu_price(node, book)
        log(f"deleting TPU {node.name} in {node.zone} (saves {prices.usd_text(price.usd_per_hour)}/hour)")
        req = next((r for r in found.queued if r.owns(node)), None)
        try:
            op = delete_request(provider, req, nodes=found.tpus, log=log) if req else \
                provider.delete_tpu(node.zone, node.name)
        except NotFound:
            op = None
        if op is not None:
            ops.append(op)
        done.append(f"TPU {node.name} ({node.zone})")
        ledger.record(provider, "tpu_deleted", name, bucket=bucket, by=by, hourly_usd=price.usd_per_hour,
                      price=price.to_dict(), run_id=run_id, **ledger.node_fields(node))
    wait_all(provider, ops, timeout=timeout, backoff=backoff)
    for node in found.tpus:
        wait_until(lambda n=node: provider.get_tpu(n.zone, n.name) is None, timeout=timeout, backoff=backoff)
    return done


def _spec_of(provider: Provider, name: str, tpus: list[TpuNode]) -> ClusterSpec | None:
    """What the cluster was: its cached spec, else what its TPU says (network, type)."""
    data = cached_spec(provider, name)
    try:
        if data:
            return ClusterSpec.from_dict(data)
        for node in tpus:
            return ClusterSpec(name=name, accelerator_type=node.accelerator_type, zones=(node.zone,),
                               provider=provider.name, arch=node.arch, network=node.network or "default",
                               machine_type=None)
    except TpuctlError:
        return None
    return None


def _stub_spec(name: str) -> ClusterSpec:
    return ClusterSpec(name=name, accelerator_type="v2-8", zones=(LOCAL_DEFAULT_ZONE,))
