"""Pure pool decisions: which TPU cluster the next trial runs on, and which ones may go.

A sweep owns at most ``max_concurrent`` clusters, named ``<sweep id>-p<k>``. A free cluster that
exists is reused before a new one is created (creating a TPU takes minutes; a finished or pruned
trial's TPU is ready at once). Clusters no remaining trial will need are deleted as soon as they
are free, so a sweep winding down does not bill idle TPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    cluster: str
    busy: bool


def cluster_name(sweep_id: str, k: int) -> str:
    return f"{sweep_id}-p{k}"


def index_of(sweep_id: str, cluster: str) -> int | None:
    head, sep, tail = cluster.rpartition("-p")
    return int(tail) if sep and head == sweep_id and tail.isdigit() else None


@dataclass(frozen=True)
class Choice:
    cluster: str | None      # None: every slot is busy and the pool is full: wait
    create: bool = False


def choose(sweep_id: str, slots: Sequence[Slot], max_concurrent: int) -> Choice:
    """A free existing cluster, else a new one while the pool is below ``max_concurrent``."""
    free = sorted((s.cluster for s in slots if not s.busy), key=lambda c: index_of(sweep_id, c) or 0)
    if free:
        return Choice(free[0])
    if len(slots) < max_concurrent:
        used = {index_of(sweep_id, s.cluster) for s in slots}
        k = next(i for i in range(len(slots) + 1) if i not in used)
        return Choice(cluster_name(sweep_id, k), create=True)
    return Choice(None)


def surplus(slots: Sequence[Slot], *, still_to_start: int) -> list[str]:
    """Free clusters beyond what the trials yet to start can use."""
    free = sorted(s.cluster for s in slots if not s.busy)
    return free[max(0, still_to_start):]
