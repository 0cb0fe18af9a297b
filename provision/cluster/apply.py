"""The apply step of ``up``: create what the plan needs, poll, fail over, wait until READY.

The host VM and the TPU are created concurrently. A TPU stockout moves to the next candidate
(type, zone, capacity) the failure leaves, a transient error asks the same zone again a few times,
a CIDR conflict takes the next free block, and a TPU Node's host follows its TPU to its region.
What is made is recorded in the ``Attempt`` as it is made, so a failure undoes exactly that.
"""

from __future__ import annotations

import time

from ..basics.errors import CloudError, NotFound, UsageError
from ..basics.validate import region_of
from ..cloud.base import (
    Arch,
    ClusterSpec,
    Operation,
    Provider,
    QueuedRequest,
    QueuedState,
    TpuNode,
    Vm,
)
from ..cloud.failures import Failure, Kind, Scope, classify, failure
from ..cloud.operations import Backoff, OperationTimeout, wait_all, wait_until
from . import cidr as cidrs
from .candidates import Candidate, CandidatePlan
from .failover import ZonePlan
from .plan import check_request
from .resources import Log, delete_request, noop
from .result import UpResult
from .rollback import Attempt

CIDR_ATTEMPTS = 8
# An operation that fails with a transient error ("Please try again") is asked for again in the
# same zone this many times before the zone counts as failed.
OPERATION_RETRIES = 2


def range_pool(provider: Provider) -> cidrs.IPv4Network:
    """Where a TPU Node's range is taken from: the provider's own pool, else the default one (the plan
    allocates from it too)."""
    return getattr(provider, "cidr_pool", None) or cidrs.DEFAULT_POOL


def apply(provider: Provider, spec: ClusterSpec, result: UpResult, attempt: Attempt, *, vm: Vm | None,
          tpu: TpuNode | None, dead: bool, need_vm: bool, zones: list[str], cands: list[Candidate],
          block: str | None, timeout: float, log: Log, backoff: Backoff,
          request: QueuedRequest | None = None) -> None:
    """Create what the plan needs, the VM and the TPU concurrently, polling both; a failed create moves
    to the next candidate (or block), a transient one is asked again. Each resource made is recorded
    in ``attempt`` as it is made (``rollback.fail`` undoes exactly that); ``result`` gets the cluster
    once its TPU is READY."""
    deadline = time.monotonic() + timeout
    attempt.marks = result.marks          # the instants of each step: up's time by phase
    plan = attempt.plan = CandidatePlan(tuple(cands))
    vm_plan = ZonePlan(tuple(zones))     # the host VM fails over on its own (Compute's stockouts, quotas)
    retries: dict[tuple[str, str], int] = {}
    cand: Candidate | None = None

    if dead and tpu is not None:
        log(f"deleting {tpu.state.value} TPU {tpu.name} in {tpu.zone} to recreate it")
        attempt.mark("dead_deleting")
        op = provider.delete_tpu(tpu.zone, tpu.name)
        wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
        wait_until(lambda: provider.get_tpu(tpu.zone, tpu.name) is None, timeout=_left(deadline), backoff=backoff)
        attempt.mark("dead_deleted")
        tpu = None
    if request is not None and request.dead:
        _delete_dead_request(provider, request, deadline, log, backoff)
        request = None

    zone = zones[0] if tpu is None else tpu.zone
    ops: list[Operation] = []
    vm_op: Operation | None = None
    tpu_op: Operation | None = None
    # A TPU VM's host does not depend on the TPU: start it first, it runs while the TPU is asked
    # for. A TPU Node is asked for first (its range reserved, its create call answered), because
    # Google refuses new TPU Nodes to most projects at that call: no host VM is made for nothing,
    # and the host goes to the zone the TPU got. Both operations still run concurrently.
    node_first = spec.arch == Arch.NODE and tpu is None
    if need_vm and not node_first:
        vm_op = _start_vm(provider, spec, zone, attempt, log, vm_plan)
        ops.append(vm_op)
    if block and spec.arch == Arch.NODE and tpu is None:
        block = _reserve(provider, spec, block, attempt, log, had=attempt.had)
    if tpu is None and request is not None:
        log(f"waiting for {request.describe()}, asked for before this call (adopted)")
        attempt.mark("tpu_asked")
        attempt.marks.update(queued=True, tpu_tries=1)
        tpu_op, zone = provider.watch_queued(request.zone, request.name), request.zone
        attempt.adopted_request = (request.zone, request.name)
        cand = next((c for c in cands if (c.name, c.zone) == (request.accelerator_type, request.zone)), None) \
            or Candidate(spec.accelerator, request.zone)
        ops.append(tpu_op)
    elif tpu is None:
        tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, deadline=deadline,
                                         backoff=backoff)
        zone = cand.zone
        ops.append(tpu_op)
    if need_vm and node_first:
        vm_op = _start_vm(provider, spec, zone, attempt, log, vm_plan)
        ops.append(vm_op)

    # Poll every pending operation together; a failed TPU create moves to the next zone or block.
    delays = backoff.delays()
    cidr_tries = 0
    while True:
        if vm_op is not None and not vm_op.done:
            vm_op = provider.poll(vm_op)
            if vm_op.done:
                if vm_op.error:
                    f = classify(code=vm_op.error.code, message=vm_op.error.message, where="operation")
                    log(f"creating host VM {spec.name} in {vm_op.zone} failed: {f.kind.value}: {vm_op.error.message}")
                    # a TPU Node's host stays in its TPU's region
                    region = region_of(tpu_op.zone) if spec.arch == Arch.NODE and tpu_op is not None else None
                    nxt = _failed_over(vm_plan, vm_op.zone, f, retries, "vm", region)
                    _forget_failed_vm(provider, spec, vm_op.zone, attempt, deadline, backoff)
                    if nxt is not None:
                        if nxt != vm_op.zone:
                            log(f"moving host VM {spec.name} on to zone {nxt} ({vm_plan.explain()})")
                        vm_op = _start_vm(provider, spec, nxt, attempt, log, vm_plan, region=region)
                        continue
                    if f.scope not in (Scope.ZONE, Scope.REGION):     # it stops the search: said as itself
                        raise CloudError(f"creating host VM {spec.name} in {vm_op.zone} failed: "
                                         f"{vm_op.error.message}",
                                         kind=f.kind.value, hint=f.hint, zone=vm_op.zone)
                    raise CloudError(f"no zone could create host VM {spec.name} ({vm_plan.explain()})",
                                     kind=f.kind.value, hint=f.hint or "add zones to --zone, or retry later",
                                     zone=vm_op.zone)
                attempt.mark("vm_created")
                log(f"host VM {spec.name} created in {vm_op.zone}")
        if tpu_op is not None and not tpu_op.done:
            tpu_op = provider.poll(tpu_op)
            if tpu_op.done and tpu_op.error:
                assert cand is not None
                f = classify(code=tpu_op.error.code, message=tpu_op.error.message, where="operation")
                log(f"creating TPU {spec.name} in {tpu_op.zone} failed: {f.kind.value}: {tpu_op.error.message}")
                _forget_failed_tpu(provider, spec, tpu_op.zone, attempt, deadline, backoff,
                                   queued=tpu_op.kind == "queued-resource", log=log)
                if f.kind == Kind.CIDR_CONFLICT and spec.arch == Arch.NODE and not spec.cidr \
                        and cidr_tries < CIDR_ATTEMPTS:
                    cidr_tries += 1
                    bad = block
                    used = provider.used_ranges(spec) + ([cidrs.Used.of(bad, "conflict reported by the API")]
                                                         if bad else [])
                    block = str(cidrs.allocate(spec.accelerator.node_cidr_prefix, used, range_pool(provider)))
                    log(f"range {bad} conflicts with something on the network; trying {block}")
                    block = _reserve(provider, spec, block, attempt, log, had=attempt.had)
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log,
                                                     cand=cand, deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                if f.kind == Kind.CIDR_CONFLICT and spec.cidr:
                    raise UsageError(f"--cidr {spec.cidr} conflicts with a range on network {spec.network}",
                                     hint="pick another block, or omit --cidr to let tpuctl choose one")
                nxt = _next_candidate(plan, cand, f, retries)
                if nxt is not None and nxt == cand:
                    log(f"asking again for TPU {spec.name} in {nxt.zone} ({f.kind.value})")
                    time.sleep(min(next(delays), _left(deadline)))
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, cand=nxt,
                                                     deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                if nxt is not None:
                    log(f"moving on to {_where(plan, nxt)} ({plan.explain()})")
                    if (spec.arch == Arch.NODE and attempt.created_vm
                            and region_of(attempt.created_vm[0]) != region_of(nxt.zone)):
                        # the host must be near its TPU Node: move the VM we made with it
                        vm_op = _move_vm(provider, spec, attempt, nxt.zone, vm_op, deadline, log, backoff)
                    tpu_op, cand, block = _start_tpu(provider, spec, plan, block, attempt, log, cand=nxt,
                                                     deadline=deadline, backoff=backoff)
                    zone = cand.zone
                    continue
                raise _exhausted(spec, plan.stopped or f, plan)
            if tpu_op.done:
                attempt.mark("tpu_created")
                log(f"TPU {spec.name} created in {tpu_op.zone}")
        if (vm_op is None or vm_op.done) and (tpu_op is None or tpu_op.done):
            break
        if time.monotonic() >= deadline:
            pending = [o for o in (vm_op, tpu_op) if o is not None and not o.done]
            raise OperationTimeout(pending)
        time.sleep(min(next(delays), _left(deadline)))

    # Operations done: the TPU must also be READY and healthy before anyone trains on it.
    tpu_zone = tpu.zone if tpu is not None else zone
    node = _wait_ready(provider, spec.name, tpu_zone, deadline, log, backoff)
    attempt.mark("tpu_ready")
    result.tpu = node
    result.zone = node.zone
    result.cidr = node.cidr_block or block
    if spec.machine_type:
        host_zone = attempt.created_vm[0] if attempt.created_vm else (vm.zone if vm else tpu_zone)
        result.vm = provider.get_vm(host_zone, spec.name)
        if result.vm is None:
            raise CloudError(f"host VM {spec.name} disappeared in {host_zone}", kind="not_found", zone=host_zone)
    if attempt.created_vm:
        result.created.append(f"VM {spec.name} ({attempt.created_vm[0]})")
    if attempt.created_tpu:
        result.created.append(f"TPU {spec.name} ({attempt.created_tpu[0]})")
    elif attempt.adopted_request:
        result.created.append(f"TPU {spec.name} ({attempt.adopted_request[0]}, granted to the adopted queued resource)")


def _start_vm(provider: Provider, spec: ClusterSpec, zone: str, attempt: Attempt, log: Log,
              plan: ZonePlan | None = None, region: str | None = None) -> Operation:
    """Create the host VM in ``zone``; a create call refused for that zone or region (Compute's quota,
    a zone not served) moves on to the next zone of ``plan`` (within ``region``, for a TPU Node's
    host), as a failed create operation does."""
    while True:
        made = attempt.in_zone(spec, zone)
        log(f"creating host VM {spec.name} ({made.machine_type}) in {zone}")
        try:
            op = provider.create_vm(made, zone)
        except CloudError as exc:
            f = failure(exc.kind, exc.message, exc.hint)
            if plan is None or f.scope not in (Scope.ZONE, Scope.REGION):
                raise
            log(f"creating host VM {spec.name} in {zone} failed: {f.kind.value}: {exc.message}")
            plan.record(zone, f)
            nxt = plan.next_zone(region)
            if nxt is None:
                raise CloudError(f"no zone could create host VM {spec.name} ({plan.explain()})", kind=f.kind.value,
                                 hint=f.hint or "add zones to --zone, or retry later") from None
            zone = nxt
            continue
        attempt.created_vm = (zone, spec.name)
        attempt.mark("vm_asked", first=True)
        return op


def _failed_over(plan: ZonePlan, zone: str, f: Failure, retries: dict[tuple[str, str], int], what: str,
                 region: str | None = None) -> str | None:
    """Where to ask next after a failed create operation in ``zone``: the same zone again for a
    transient error (a few times), the next zone the failure leaves, or None (stop)."""
    if f.retriable:
        key = (what, zone)
        retries[key] = retries.get(key, 0) + 1
        if retries[key] <= OPERATION_RETRIES:
            return zone
        f = Failure(f.kind, Scope.ZONE, f.message, f.hint)     # it keeps failing there
    plan.record(zone, f)
    if f.scope not in (Scope.ZONE, Scope.REGION):
        return None
    return plan.next_zone(region)


def _forget_failed_vm(provider: Provider, spec: ClusterSpec, zone: str, attempt: Attempt, deadline: float,
                      backoff: Backoff) -> None:
    """A failed insert normally leaves no instance; if one is there, delete it before moving on."""
    try:
        vm = provider.get_vm(zone, spec.name)
        if vm is not None:
            op = provider.delete_vm(zone, spec.name)
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    except NotFound:
        pass
    attempt.created_vm = None


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _reserve(provider: Provider, spec: ClusterSpec, block: str, attempt: Attempt, log: Log,
             had: str | None = None) -> str:
    """Claim the block where every tpuctl sees it; on a race take the next free one.

    ``had`` is the cluster's reservation before this call (kept if this call fails)."""
    for skip in range(CIDR_ATTEMPTS):
        if provider.reserve_range(spec, block):
            if block != had and attempt.reserved is None:
                attempt.reserved = block   # ours to release if this call fails
            return block
        log(f"range {block} was just claimed by another tpuctl; taking the next free block")
        used = provider.used_ranges(spec)
        block = str(cidrs.allocate(spec.accelerator.node_cidr_prefix, used, range_pool(provider),
                                   skip=cidrs.spread(spec.name, skip)))
    raise CloudError("could not reserve a TPU range: other tpuctl runs keep claiming the same blocks",
                     kind="conflict", hint="retry in a minute")


def _start_tpu(provider: Provider, spec: ClusterSpec, plan: CandidatePlan, block: str | None, attempt: Attempt,
               log: Log, cand: Candidate | None = None, *, deadline: float, backoff: Backoff
               ) -> tuple[Operation, Candidate, str | None]:
    """Ask for the TPU as ``cand`` (else the plan's next candidate); a create call refused for its
    zone or region moves on to the next candidate, as a failed create operation does."""
    cand = cand or plan.next()
    queued = spec.queued and provider.offers_queued
    exists_tries = 0
    while True:
        if cand is None:
            raise _exhausted(spec, plan.stopped, plan)
        made = attempt.for_candidate(spec, cand)
        zone = cand.zone
        attempt.mark("tpu_asked", first=True)
        attempt.mark("tpu_asked_last")
        attempt.marks["tpu_tries"] = int(attempt.marks.get("tpu_tries") or 0) + 1
        attempt.marks["queued"] = bool(spec.queued and provider.offers_queued) or None
        kind = "preemptible" if made.preemptible else made.capacities[0].value
        kind += ", Compute Engine" if made.api == "compute" else ""
        log(f"creating TPU {spec.name} ({made.accelerator_type}, {spec.arch.value}, {kind}) in {zone}"
            + (f" with range {block}" if block else "") + (" through a queued resource" if queued else ""))
        try:
            op = provider.create_tpu(made, zone, block)
        except CloudError as exc:
            f = failure(exc.kind, exc.message, exc.hint)
            if f.kind == Kind.EXISTS and queued and exists_tries < 3:
                # 409 ALREADY_EXISTS: a request of this name appeared since we looked (another up of
                # this cluster); adopt it rather than abort, or clear a dead one and ask again
                exists_tries += 1
                adopted = _existing_request(provider, made, zone, attempt, deadline, log, backoff)
                if adopted is not None:
                    return adopted, cand, block
                continue
            if f.scope in (Scope.ZONE, Scope.REGION):
                log(f"creating TPU in {zone} failed: {f.kind.value}: {exc.message}")
                plan.record(cand, f)
                cand = plan.next()
                if cand is not None:
                    log(f"moving on to {_where(plan, cand)} ({plan.explain()})")
                continue
            raise
        if cand not in plan.tried:
            plan.tried.append(cand)
        attempt.created_tpu = (zone, spec.name)
        attempt.created_queued = queued
        attempt.chosen = cand
        if queued:
            log(f"queued resource {spec.name} asked for in {zone}; waiting for capacity (Ctrl-C or --timeout "
                f"deletes the request)")
        return op, cand, block


def _where(plan: CandidatePlan, cand: Candidate) -> str:
    where = f"{cand.name} in {cand.zone}" if plan.several else f"zone {cand.zone}"
    return f"{where} ({cand.capacity})" if plan.capacities else where


def _next_candidate(plan: CandidatePlan, cand: Candidate, f: Failure, retries: dict[tuple[str, str], int]
                    ) -> Candidate | None:
    """Where to ask next after ``cand``'s create operation failed: the same candidate again for a
    transient error (a few times), the next candidate the failure leaves, or None (stop)."""
    if f.retriable:
        key = (f"tpu:{cand.name}", cand.zone)
        retries[key] = retries.get(key, 0) + 1
        if retries[key] <= OPERATION_RETRIES:
            return cand
        f = Failure(f.kind, Scope.ZONE, f.message, f.hint)     # it keeps failing there
    plan.record(cand, f)
    if f.scope not in (Scope.ZONE, Scope.REGION):
        return None
    return plan.next()


def _existing_request(provider: Provider, spec: ClusterSpec, zone: str, attempt: Attempt, deadline: float,
                      log: Log, backoff: Backoff) -> Operation | None:
    """The queued resource a create was refused for (409): its watch operation when it is this
    cluster's and alive (adopted), None when it was dead or gone (ask again); a request that is
    not this cluster's stops ``up`` with the command that deletes it."""
    req = provider.get_queued(zone, spec.name)
    if req is None:
        return None
    if req.cluster != spec.name:
        raise CloudError(f"a queued resource named {spec.name} already exists in {zone} ({req.state.value}) and is "
                         f"not tpuctl cluster {spec.name}'s (its node has no tpuctl-cluster={spec.name} label)",
                         kind="exists", zone=zone,
                         hint=f"pick another cluster name, or delete it: gcloud compute tpus queued-resources "
                              f"delete {spec.name} --zone {zone} --force")
    if req.dead or req.state == QueuedState.DELETING:
        _delete_dead_request(provider, req, deadline, log, backoff)
        return None
    check_request(spec, req)
    log(f"{req.describe()} already exists: another tpuctl up of this cluster asked for it; waiting for it (adopted)")
    attempt.adopted_request = (zone, spec.name)
    return provider.watch_queued(zone, spec.name)


def _delete_dead_request(provider: Provider, req: QueuedRequest, deadline: float, log: Log,
                         backoff: Backoff) -> None:
    """Delete a FAILED or SUSPENDED request (it holds quota and never provisions) and wait until it is gone."""
    if req.state != QueuedState.DELETING:
        log(f"deleting {req.describe()}: a {req.state.value} request never provisions and holds quota "
            f"({req.quota()}) until deleted")
        op = delete_request(provider, req, log=log)
        if op is not None:
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    wait_until(lambda: provider.get_queued(req.zone, req.name) is None, timeout=_left(deadline), backoff=backoff)


def _exhausted(spec: ClusterSpec, failure: Failure | None, plan: CandidatePlan) -> CloudError:
    """Why ``up`` stops asking for the TPU: a failure that stops the search (a missing role, a request
    no zone can grant) as itself, in the zone that said it; else every candidate failed, each as it did."""
    last = plan.tried[-1] if plan.tried else None
    if failure is not None and failure.scope not in (Scope.ZONE, Scope.REGION):
        where = f" in {last.zone}" if last else ""
        what = f" ({last.name})" if last and plan.several else ""
        return CloudError(f"creating TPU {spec.name}{what}{where} failed: {failure.message}", kind=failure.kind.value,
                          hint=failure.hint, zone=last.zone if last else None)
    tried = ",".join(plan.label(c) for c in plan.tried) or "none"
    skipped = [plan.label(c) for c in plan.untried()]
    what = f"TPU of any of {','.join(plan.types)}" if plan.several else f"{spec.accelerator_type} TPU"
    more = "--zone or --accelerator-type" if plan.several else "--zone"
    hint = f"add zones to {more} (tried {tried}"
    hint += f"; not asked: {','.join(skipped)}" if skipped else ""
    return CloudError(f"no zone could create a {what} ({plan.explain()})", kind="stockout",
                      hint=hint + "), or retry later")


def _forget_failed_tpu(provider: Provider, spec: ClusterSpec, zone: str, attempt: Attempt, deadline: float,
                       backoff: Backoff, *, queued: bool = False, log: Log = noop) -> None:
    """A failed create may leave a node record behind (in the cloud, a failed node): delete it. A failed
    queued resource stays FAILED, holding quota, until deleted: delete it (and any node it made)."""
    if queued:
        req = provider.get_queued(zone, spec.name)
        if req is not None:
            _delete_dead_request(provider, req, deadline, log, backoff)
        attempt.created_tpu, attempt.created_queued, attempt.adopted_request = None, False, None
    node = provider.get_tpu(zone, spec.name)
    if node is not None:
        try:
            op = provider.delete_tpu(zone, spec.name)
            wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
        except NotFound:
            pass
        wait_until(lambda: provider.get_tpu(zone, spec.name) is None, timeout=_left(deadline), backoff=backoff)
    attempt.created_tpu = None


def _move_vm(provider: Provider, spec: ClusterSpec, attempt: Attempt, zone: str, vm_op: Operation | None,
             deadline: float, log: Log, backoff: Backoff) -> Operation:
    old_zone = attempt.created_vm[0]
    log(f"moving host VM {spec.name} from {old_zone} to {zone}, next to its TPU")
    if vm_op is not None and not vm_op.done:
        wait_all(provider, [vm_op], timeout=_left(deadline), backoff=backoff)
    op = provider.delete_vm(old_zone, spec.name)
    attempt.created_vm = None
    wait_all(provider, [op], timeout=_left(deadline), backoff=backoff)
    new = provider.create_vm(attempt.in_zone(spec.with_zone(zone), zone), zone)
    attempt.created_vm = (zone, spec.name)
    return new


def _wait_ready(provider: Provider, name: str, zone: str, deadline: float, log: Log, backoff: Backoff) -> TpuNode:
    seen: dict[str, TpuNode | None] = {"node": None}

    def ready() -> bool:
        node = provider.get_tpu(zone, name)
        seen["node"] = node
        if node is None:
            raise CloudError(f"TPU {name} disappeared from {zone} while starting", kind="not_found", zone=zone)
        if node.dead:
            raise CloudError(f"TPU {name} was {node.state.value} while starting", kind="stockout", zone=zone)
        return node.usable

    if not wait_until(ready, timeout=_left(deadline), backoff=backoff):
        node = seen["node"]
        state = f"{node.state.value}/{node.health.value}" if node else "missing"
        raise OperationTimeout([Operation(name="-", zone=zone, verb="wait for READY", kind="tpu",
                                          target=f"{name} (still {state})")])
    node = seen["node"]
    assert node is not None
    return node
