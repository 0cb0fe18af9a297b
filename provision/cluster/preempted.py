"""A cluster whose TPU VM its preemption deleted: still a cluster, its TPU PREEMPTED.

A Spot TPU VM on Compute Engine is deleted when it is preempted (termination action DELETE, which
tpuctl sets: docs/compute-engine.md), so no TPU resource is left to list, and without this the
cluster would read as having no TPU (or, made with ``--no-vm``, as no cluster at all). What tpuctl
reads instead, and from where:

- that the TPU existed and was preempted, where and when: the cloud, Compute Engine's own
  ``compute.instances.preempted`` record of the instance (``Provider.preempted_tpus``), never
  this machine; a record that a later creation or deletion of the instance overrides says nothing;
- what the TPU was (type, capacity, network, range): the cluster's spec as its ``up`` saved it in
  this machine's cluster cache (cache.py), the one place that says it, since the cloud keeps
  nothing of a deleted VM's shape; ``down`` forgets the spec, so a cluster taken down is not
  brought back to view by an old record.

A record with no spec here, or a spec with no record, makes nothing up: the cluster shows what the
cloud lists (its host VM, if any), as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..basics.errors import TpuctlError
from ..basics.validate import CLUSTER_LABEL
from ..cloud.base import Arch, ClusterSpec, Preemption, Provider, TpuNode, TpuState
from .cache import cached_spec, cached_specs


def gone_tpus(provider: Provider, name: str | None = None, *, live: Iterable[TpuNode] = (),
              zone: str | None = None) -> list[TpuNode]:
    """The PREEMPTED TPUs of clusters (``name``, or every one this machine knows) that have no TPU
    in ``live`` and whose Compute Engine TPU VM the cloud says it preempted and deleted. Costs no
    call unless such a cluster is cached here: then one list of the cloud's records."""
    if name is not None:
        one = cached_spec(provider, name)
        specs = {name: one} if isinstance(one, dict) else {}
    else:
        specs = cached_specs(provider)
    compute = {n: s for n, s in specs.items() if s.get("api") == "compute"}
    if not compute:
        return []
    have = {t.labels.get(CLUSTER_LABEL) for t in live}
    wanted = {n: s for n, s in compute.items() if n not in have}
    if not wanted:
        return []
    out = []
    for rec in provider.preempted_tpus(name):
        data = wanted.get(rec.cluster)
        if data is None or (zone and rec.zone != zone):
            continue
        node = node_of(rec, data)
        if node is not None:
            out.append(node)
    return out


def node_of(rec: Preemption, data: dict[str, Any]) -> TpuNode | None:
    """The preempted TPU as the cloud's record and the cluster's cached spec say it was."""
    try:
        spec = ClusterSpec.from_dict(data)
        capacity = spec.capacities[0]
    except (TpuctlError, ValueError, KeyError, TypeError):
        return None
    cidr = data.get("cidr")
    return TpuNode(
        name=rec.cluster, zone=rec.zone, arch=Arch.VM, accelerator_type=spec.accelerator_type,
        state=TpuState.PREEMPTED,
        health_description=f"Compute Engine preempted and deleted its VM {rec.instance} "
                           "(compute.instances.preempted)",
        cidr_block=cidr if isinstance(cidr, str) else None, spot=capacity.interruptible,
        network=spec.network, labels=spec.resource_labels("tpu"),
        api="compute", capacity=capacity.value, version=spec.runtime_version, created_at=None)
