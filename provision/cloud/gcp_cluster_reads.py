"""A named cluster's Compute Engine instances, read once per command instead of once per reader.

``status NAME`` wants three things of the instances labelled with the cluster: its host VM
(``list_vms``), its Compute Engine TPU's workers (``ComputeTpus.list``) and the zones to look for
its Cloud TPU API node in (``_cluster_v2``). Each used to be its own label-filtered
``instances.aggregatedList``; one list with the union of their fields answers all three. The
answer is kept only until the provider changes something (any call other than a GET forgets it),
so an ``up`` or ``down`` never reads a cluster as it was before its own create or delete.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Json = dict[str, Any]


class ClusterInstances:
    """Memo of ``read(cluster)``; concurrent readers of one cluster share one read."""

    def __init__(self, read: Callable[[str], list[Json]]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._kept: dict[str, Future[list[Json]]] = {}

    def of(self, cluster: str) -> list[Json]:
        with self._lock:
            kept = self._kept.get(cluster)
            mine = kept is None
            if kept is None:
                kept = self._kept[cluster] = Future()
        if mine:
            try:
                kept.set_result(self._read(cluster))
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting reader, then raised
                with self._lock:
                    self._kept.pop(cluster, None)      # a failed read is not kept: the next reader asks again
                kept.set_exception(exc)
        return kept.result()

    def forget(self) -> None:
        with self._lock:
            self._kept.clear()
