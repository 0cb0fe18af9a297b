"""The local cache of cluster specs (never the source of truth), and where a cluster's bucket is."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from ..basics import statefile
from ..basics.config import home
from ..basics.errors import TpuctlError
from ..cloud.base import ClusterSpec, Provider, TpuNode, Vm


def cache_dir(provider: Provider) -> Path:
    return home() / "clusters" / provider.name / (provider.project or "-")


def cache_spec(provider: Provider, spec: ClusterSpec, **extra: Any) -> None:
    data = spec.to_dict()
    data.update(extra)
    data["updated_at"] = time.time()
    statefile.write_json(cache_dir(provider) / f"{spec.name}.json", data)


def cached_spec(provider: Provider, name: str) -> dict[str, Any] | None:
    return statefile.read_json(cache_dir(provider) / f"{name}.json")


def uncache(provider: Provider, name: str) -> None:
    statefile.remove(cache_dir(provider) / f"{name}.json")


def cached_names() -> list[str]:
    root = home() / "clusters"
    if not root.is_dir():
        return []
    return sorted({p.stem for p in root.glob("*/*/*.json")})


def bucket_for(provider: Provider, cluster: str, *, hint: str | None = None, node: TpuNode | None = None,
               vm: Vm | None = None) -> tuple[str | None, str]:
    """The cluster's bucket and where it was found: ``--bucket``, the local cache, metadata."""
    if hint:
        return hint, "--bucket"
    cached = cached_spec(provider, cluster)
    if cached and cached.get("bucket"):
        return cached["bucket"], "the local cluster cache"
    for kind, res in (("vm", vm), ("tpu", node)):
        if res is None:
            continue
        with contextlib.suppress(TpuctlError):
            bucket = provider.metadata_of(kind, res.zone, res.name).get("tpuctl-bucket")
            if bucket:
                return bucket, f"the {'host VM' if kind == 'vm' else 'TPU'}'s tpuctl-bucket metadata"
    if provider.default_bucket:
        return provider.default_bucket, f"the {provider.name} provider's default bucket"
    return None, "unknown"
