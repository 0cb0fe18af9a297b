"""What one ``up`` call made, and undoing exactly that when it fails.

``up`` records each resource as it creates it (``Attempt``); on any failure, an interrupt included,
``fail`` deletes those (never what was there before the call, such as an adopted queued resource),
or keeps them on request, and raises one error that says what, if anything, is still there and
billed, with the command that deletes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..basics.errors import CloudError, NotFound, PartialFailure, TpuctlError
from ..cloud.base import Arch, ClusterSpec, Provider
from ..cloud.operations import Backoff, OperationTimeout, wait_all
from .candidates import Candidate, CandidatePlan
from .offers import ZoneFit
from .plan import for_candidate, host_in_zone
from .resources import Log, delete_request


@dataclass
class Attempt:
    """Mutable state of one ``up`` call: what it created, so a failure can undo exactly that."""

    created_vm: tuple[str, str] | None = None     # (zone, name)
    created_tpu: tuple[str, str] | None = None
    created_queued: bool = False                  # created_tpu is a queued resource (its node may not exist)
    adopted_request: tuple[str, str] | None = None  # a queued resource that was there before this call
    reserved: str | None = None
    had: str | None = None        # the cluster's range reservation before this call
    # each (type, zone)'s image and host machine type
    fits: dict[tuple[str, str], ZoneFit] = field(default_factory=dict)
    plan: CandidatePlan | None = None             # which TPU candidates were asked for, and how it went
    chosen: Candidate | None = None               # the candidate whose create this call made
    # when each step began and ended (wall clock): UpResult.marks, up's time by phase
    marks: dict[str, Any] = field(default_factory=dict)

    def mark(self, key: str, *, first: bool = False) -> None:
        """Note now as ``key`` (``first``: only if not noted yet)."""
        if not (first and key in self.marks):
            self.marks[key] = round(time.time(), 3)

    def in_zone(self, spec: ClusterSpec, zone: str) -> ClusterSpec:
        """``spec``'s host VM as created in ``zone`` (``plan.host_in_zone``)."""
        return host_in_zone(spec, self.fits, zone)

    def for_candidate(self, spec: ClusterSpec, cand: Candidate) -> ClusterSpec:
        """``spec`` asking for ``cand`` (``plan.for_candidate``)."""
        return for_candidate(spec, self.fits, cand)


def fail(provider: Provider, spec: ClusterSpec, attempt: Attempt, exc: BaseException, *,
         keep_on_failure: bool, log: Log, backoff: Backoff) -> None:
    """Undo what this call created (or keep it, on request) and raise one error that says what remains."""
    if isinstance(exc, OperationTimeout):
        cause = f"timed out waiting for: {exc}"
    elif isinstance(exc, KeyboardInterrupt):
        cause = "interrupted"
    elif isinstance(exc, TpuctlError):
        cause = exc.one_line()
    else:
        cause = f"{type(exc).__name__}: {exc}"
    made = []
    if attempt.created_tpu:
        made.append(("queued" if attempt.created_queued else "tpu",) + attempt.created_tpu)
    if attempt.created_vm:
        made.append(("vm",) + attempt.created_vm)
    # a queued resource this call adopted (an earlier up asked for it) is not this call's to delete:
    # it stays, and the error line names it
    kept = ([_describe_remaining(spec, "queued", *attempt.adopted_request) + ", kept: it was there before this call"]
            if attempt.adopted_request else [])
    if keep_on_failure:
        remaining = kept + [_describe_remaining(spec, kind, zone, name) for kind, zone, name in made]
        if attempt.reserved:
            remaining.append(f"range reservation {attempt.reserved} (freed by tpuctl down {spec.name})")
        raise PartialFailure(f"up failed: {cause}", remaining=remaining,
                             hint=f"kept as asked (--keep-on-failure); rerun tpuctl up {spec.name} to finish, "
                                  f"or tpuctl down {spec.name}") from (None if isinstance(exc, TpuctlError) else exc)
    if made:
        log(f"up failed ({cause}); rolling back what this call created")
    remaining = _rollback(provider, spec, made, log=log, backoff=backoff)
    if attempt.reserved and not any(k == "tpu" for k, _z, _n in remaining):
        try:
            provider.release_range(spec.name)
        except Exception as rexc:  # noqa: BLE001 - reported below, never hidden
            remaining.append(("range", "-", f"{attempt.reserved} ({rexc})"))
    if remaining:
        raise PartialFailure(f"up failed: {cause}; rollback incomplete",
                             remaining=kept + [_describe_remaining(spec, k, z, n) for k, z, n in remaining],
                             hint=f"run tpuctl down {spec.name} to delete them") from None
    if kept:
        what = f"rolled back {_list(made)}" if made else "nothing of this call's to roll back"
        raise PartialFailure(f"up {'interrupted' if isinstance(exc, KeyboardInterrupt) else f'failed: {cause}'}; "
                             f"{what}", remaining=kept,
                             hint=f"rerun tpuctl up {spec.name} to wait for it again, or tpuctl down {spec.name}"
                             ) from None
    if isinstance(exc, KeyboardInterrupt):
        raise TpuctlError(f"up interrupted; rolled back: {_list(made) or 'nothing had been created'}") from None
    if isinstance(exc, TpuctlError):
        if made:
            exc.message = f"{exc.message}; rolled back {_list(made)}, nothing remains"
        raise exc
    if isinstance(exc, OperationTimeout):
        raise CloudError(f"up timed out waiting for {exc}; rolled back {_list(made) or 'nothing'}",
                         kind="timeout", hint="retry with a longer --timeout or in another zone") from None
    raise exc


def _list(made: list[tuple[str, str, str]]) -> str:
    what = {"vm": "VM", "tpu": "TPU", "queued": "queued resource"}
    return ", ".join(f"{what.get(k, k)} {n} ({z})" for k, z, n in made)


def _describe_remaining(spec: ClusterSpec, kind: str, zone: str, name: str) -> str:
    if kind == "tpu" and spec.api == "compute":
        return (f"TPU {name} in {zone} (billed; Compute Engine instance, or MIG with its instance template and "
                f"workload policy, all named {name}-tpu; delete with tpuctl down {spec.name})")
    if kind == "tpu":
        cmd = (f"gcloud compute tpus tpu-vm delete {name} --zone {zone}" if spec.arch == Arch.VM
               else f"gcloud compute tpus delete {name} --zone {zone}")
        return f"TPU {name} in {zone} (billed; delete with tpuctl down {spec.name} or {cmd})"
    if kind == "vm":
        return f"VM {name} in {zone} (billed; delete with tpuctl down {spec.name} or " \
               f"gcloud compute instances delete {name} --zone {zone})"
    if kind == "queued":
        return (f"queued resource {name} in {zone} (holds quota and becomes a billed TPU once capacity frees up; "
                f"delete with tpuctl down {spec.name} or gcloud compute tpus queued-resources delete {name} "
                f"--zone {zone} --force)")
    return f"{kind} {name}"


def _rollback(provider: Provider, spec: ClusterSpec, made: list[tuple[str, str, str]], *, log: Log,
              backoff: Backoff) -> list[tuple[str, str, str]]:
    ops, remaining = [], []
    for kind, zone, name in made:
        try:
            if kind == "queued":
                # the request, and with force the node it may be making (a waiting one has none)
                req = provider.get_queued(zone, name)
                op = delete_request(provider, req, log=log) if req is not None else None
                if op is None:
                    continue
            else:
                op = provider.delete_tpu(zone, name) if kind == "tpu" else provider.delete_vm(zone, name)
            ops.append((kind, zone, name, op))
        except NotFound:
            continue
        except Exception as exc:  # noqa: BLE001 - a failed rollback is reported, not raised over the cause
            log(f"could not delete {kind} {name} in {zone}: {exc}")
            remaining.append((kind, zone, name))
    try:
        wait_all(provider, [op for *_r, op in ops], timeout=600, backoff=backoff)
    except Exception as exc:  # noqa: BLE001
        log(f"waiting for rollback deletions failed: {exc}")
        return remaining + [(k, z, n) for k, z, n, _op in ops]
    for kind, zone, name, op in ops:
        if op.error and op.error.code != 5:
            remaining.append((kind, zone, name))
        else:
            log(f"rolled back {_list([(kind, zone, name)])}")
    return remaining
