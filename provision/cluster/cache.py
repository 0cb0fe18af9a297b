"""The local cache of cluster specs (never the source of truth), and where a cluster's bucket is."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from ..basics import statefile
from ..basics.config import home
from ..basics.errors import TpuctlError
from ..cloud.base import Arch, ClusterSpec, Provider, TpuNode, Vm

BUCKET_KEY = "tpuctl-bucket"     # the metadata key that names a cluster's bucket (templates/host-startup.sh)


def cache_dir(provider: Provider) -> Path:
    return home() / "clusters" / provider.name / (provider.project or "-")


def cache_spec(provider: Provider, spec: ClusterSpec, **extra: Any) -> None:
    data = spec.to_dict()
    data.update(extra)
    data["updated_at"] = time.time()
    statefile.write_json(cache_dir(provider) / f"{spec.name}.json", data)


def cached_spec(provider: Provider, name: str) -> dict[str, Any] | None:
    return statefile.read_json(cache_dir(provider) / f"{name}.json")


def saved_spec(provider: str, project: str | None, name: str) -> ClusterSpec | None:
    """The cluster as its last ``up`` on this machine made it (chosen type, zone first, capacity,
    API, image, host), or None where none is cached or it no longer reads as a spec: what ``up
    NAME`` alone makes again. ``provider`` and ``project`` name the cache before any provider is
    opened (the cache is laid out by them: :func:`cache_dir`)."""
    data = statefile.read_json(home() / "clusters" / provider / (project or "-") / f"{name}.json")
    if not isinstance(data, dict):
        return None
    try:
        spec = ClusterSpec.from_dict(data)
    except (TpuctlError, ValueError, KeyError, TypeError):
        return None
    zone = data.get("zone")
    return spec.with_zone(zone) if isinstance(zone, str) and zone in spec.zones else spec


def cached_specs(provider: Provider) -> dict[str, dict[str, Any]]:
    """Every cluster this machine has cached for the provider and project, by name, read in one
    pass over the cache: a fleet's reaper asks for thousands of clusters, most not cached here."""
    out: dict[str, dict[str, Any]] = {}
    root = cache_dir(provider)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(root):
            if entry.name.endswith(".json") and entry.is_file():
                spec = statefile.read_json(root / entry.name)
                if isinstance(spec, dict):
                    out[entry.name[:-len(".json")]] = spec
    return out


def uncache(provider: Provider, name: str) -> None:
    statefile.remove(cache_dir(provider) / f"{name}.json")


def cached_names() -> list[str]:
    root = home() / "clusters"
    if not root.is_dir():
        return []
    return sorted({p.stem for p in root.glob("*/*/*.json")})


def cached_zones(provider: Provider, cluster: str, spec: dict[str, Any] | None = None) -> tuple[str, ...]:
    """Where the cluster's Cloud TPU API node was when this machine last saw it (``up``): where
    to look first, and, found there, all ``status NAME`` reads of its TPU. None for a cluster
    whose TPU is on Compute Engine (``api: compute``): it has no node to look for, and its
    instances, MIG and remnants are read as before. ``spec``: its cached spec, read already."""
    spec = cached_spec(provider, cluster) if spec is None else spec
    zone = (spec or {}).get("zone")
    if (spec or {}).get("api") == "compute":
        return ()
    return (zone,) if isinstance(zone, str) and zone else ()


def bucket_for(provider: Provider, cluster: str, *, hint: str | None = None, node: TpuNode | None = None,
               vm: Vm | None = None, cache: dict[str, dict[str, Any]] | None = None) -> tuple[str | None, str]:
    """The cluster's bucket and where it was found: ``--bucket``, the local cache, metadata.

    ``cache``: the local cache as :func:`cached_specs` read it for many clusters (None: this
    cluster's file is read).

    The metadata is the one the list that found ``node`` or ``vm`` carried (``list_tpus`` /
    ``list_vms`` with ``metadata=True``: no request per cluster); only a resource read without
    it costs a ``metadata_of`` read. A TPU VM's metadata answers for the cluster
    (``point_hosts_at`` writes the bucket to the host VM and the TPU VM alike); a TPU Node has
    none, so its host VM's is read.
    """
    if hint:
        return hint, "--bucket"
    cached = cache.get(cluster) if cache is not None else cached_spec(provider, cluster)
    if cached and cached.get("bucket"):
        return cached["bucket"], "the local cluster cache"
    for kind, res in (("tpu", node), ("vm", vm)):
        if res is None:
            continue
        meta = res.metadata
        if meta is None:
            with contextlib.suppress(TpuctlError):
                meta = provider.metadata_of(kind, res.zone, res.name)
        bucket = (meta or {}).get(BUCKET_KEY)
        if bucket:
            return bucket, f"the {'host VM' if kind == 'vm' else 'TPU'}'s tpuctl-bucket metadata"
        if kind == "tpu" and res.metadata is not None and res.arch == Arch.VM:
            break   # a TPU VM's metadata, as listed, answers for its host VM too: both get the bucket
    if provider.default_bucket:
        return provider.default_bucket, f"the {provider.name} provider's default bucket"
    return None, "unknown"
