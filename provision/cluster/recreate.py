"""``recreate_tpu``: the supervisor's answer to a preempted or broken TPU.

It deletes the cluster's TPU whatever its state (recording the deletion in the cost ledger) and
runs ``up`` again, asking for the old type and zone first and keeping the old image where it is
still offered.
"""

from __future__ import annotations

from ..basics.errors import NotFound
from ..cloud.base import Arch, ClusterSpec, Provider, TpuState
from ..cloud.operations import Backoff, wait_all, wait_until
from . import ledger
from .resources import Log, find, noop, tpu_price
from .result import UpResult
from .up import up


def recreate_tpu(provider: Provider, spec: ClusterSpec, *, timeout: float = 1800.0, log: Log = noop,
                 backoff: Backoff | None = None) -> UpResult:
    """Delete the cluster's TPU whatever its state, then bring it back: same name, type and range.

    The range reservation survives the deletion, so the new node gets its old block back; a
    stockout moves it to the next allowed zone as ``up`` does.
    """
    backoff = backoff or Backoff()
    keep_image = None
    prefer = None
    for node in find(provider, spec.name).tpus:
        prefer = prefer or (node.accelerator_type, node.zone)    # its type and zone first, then the rest
        if node.arch == Arch.VM and node.version:
            keep_image = keep_image or node.version     # the new node keeps the image where offered
        if node.state != TpuState.DELETING:
            log(f"deleting TPU {node.name} in {node.zone} ({node.state.value})")
            try:
                op = provider.delete_tpu(node.zone, node.name)
                price = tpu_price(node, provider.price_book())
                ledger.tpu_deleted(provider, spec.name, node, by="recreate", hourly_usd=price.usd_per_hour,
                                   price=price.to_dict())
                wait_all(provider, [op], timeout=timeout, backoff=backoff)
            except NotFound:
                pass
        wait_until(lambda n=node: provider.get_tpu(n.zone, n.name) is None, timeout=timeout, backoff=backoff)
        spec = spec.with_zone(node.zone) if node.zone in spec.zones else spec
    return up(provider, spec, timeout=timeout, log=log, backoff=backoff, keep_image=keep_image, prefer=prefer,
              by="a recreate after a preemption")
