"""Pinning what a cluster's hosts may run: the digests of what is staged, written into their metadata.

The decisions (what a pin holds, what it allows) are :mod:`provision.runs.pins`; this module
computes the digests from the bytes being staged, writes the pin through the provider before
anything is uploaded (a host that sees the objects already finds them pinned), and finds a run's
pin again for a supervisor that must pin a recreated TPU VM: from this machine's run index (the
machine that staged the run), else from the metadata of the cluster's hosts. Never from the bucket.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from ..basics.errors import TpuctlError
from ..cloud.base import Provider
from . import pins

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"


def pin(provider: Provider, cluster: str, kind: str, ident: str, fields: dict[str, str | None]) -> list[str]:
    """Write the entry into the metadata of the cluster's hosts (only what differs); returns what changed."""
    return provider.update_host_metadata(cluster, pins.KEY, lambda current: pins.updated(current, kind, ident, fields))


def trusted_run_entry(provider: Provider, cluster: str, run_id: str) -> dict[str, str | None] | None:
    """The run's pin entry where bucket writers cannot change it: this machine's run index (written
    when this machine staged it), else the metadata of the cluster's host VM or TPU VM."""
    from .store import lookup

    try:
        entry = lookup(run_id).get("pin")
    except TpuctlError:         # not staged on this machine
        entry = None
    if isinstance(entry, dict):
        with contextlib.suppress(ValueError):
            return pins.Pin().with_entry("run", run_id, entry).entry("run", run_id)
    from .. import cluster as clusters

    found_cluster = clusters.find(provider, cluster)
    for kind, res in (("vm", found_cluster.vm), ("tpu", found_cluster.tpu)):
        if res is None:
            continue
        got = pins.Pin.parse(provider.metadata_of(kind, res.zone, res.name).get(pins.KEY)).entry("run", run_id)
        if got is not None:
            return got
    return None


def ensure_run_pinned(provider: Provider, cluster: str, run_id: str, entry: dict[str, str | None] | None,
                      log: Callable[[str], None]) -> None:
    """Before an attempt starts: a TPU VM recreated after a preemption has no pin yet."""
    if entry is None:
        log(f"no pin of run {run_id} is known on this machine or on the cluster's hosts: a new TPU VM "
            f"will refuse it (re-attach from the machine that started it)")
        return
    try:
        changed = pin(provider, cluster, "run", run_id, entry)
    except TpuctlError as exc:
        log(f"could not pin run {run_id} on the cluster's hosts: {exc.one_line()}")
        return
    if changed:
        log(f"pinned run {run_id} on {', '.join(changed)}")


def pin_attempt(provider: Provider, cluster: str, run_id: str, entry: dict[str, str | None] | None,
                command: dict[str, Any], log: Callable[[str], None]) -> None:
    """Before an attempt's ``command.json`` is written: the run's entry, with the digest of where
    this attempt runs and listens (:func:`provision.runs.pins.launch_digest`), pinned on the
    cluster's hosts. A command that launches as the last one did changes nothing."""
    ensure_run_pinned(provider, cluster, run_id,
                      {**entry, "launch": pins.launch_digest(command)} if entry is not None else None, log)


def read_host_pin(provider: str, cluster: str, timeout: float = 5.0) -> pins.Pin:
    """The pin of the host this process runs on, as it is now: on GCP the ``tpuctl-pin``
    attribute from the metadata server (``TPUCTL_METADATA_URL`` replaces it in tests); on the
    local provider, whose host is this machine, the cluster's metadata file under
    ``$TPUCTL_HOME`` (mode 0600). One that cannot be read is an empty pin: nothing runs."""
    if provider == "local":
        from ..basics.config import home
        from ..cloud.local import LocalProvider

        return pins.Pin.parse(LocalProvider(home()).metadata_of("vm", "", cluster).get(pins.KEY))
    import urllib.error
    import urllib.request

    base = (os.environ.get("TPUCTL_METADATA_URL") or METADATA_URL).rstrip("/")
    req = urllib.request.Request(f"{base}/instance/attributes/{pins.KEY}", headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return pins.Pin.parse(resp.read(256 * 1024 + 1))
    except (urllib.error.URLError, OSError, ValueError):
        return pins.Pin()
