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

from ..basics.errors import TpuctlError, UsageError
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


def placement_refusal(entry: dict[str, str | None], record: Any, zones: tuple[str, ...] = ()) -> str | None:
    """Why a supervisor may not plan attempts from ``record`` (run.json as read from the bucket,
    which its writers can rewrite) under the run's pin ``entry``; None when it may. Everything
    in run.json that decides where an attempt runs and listens (:data:`provision.runs.pins.PLACEMENT_FIELDS`)
    must be what ``tpuctl train`` pinned, and its zone one of the cluster's (``zones``: from the
    cluster spec pinned with the run; empty: not checked)."""
    run_id = getattr(record, "run_id", None) or "?"
    pinned = entry.get("placement")
    if pinned is None:
        return (f"run {run_id} was pinned by an older tpuctl, without where its attempts run, so its run.json "
                f"cannot be checked against the pin: not supervising it")
    found = pins.placement_digest(record)
    if found != pinned:
        return (f"run.json of run {run_id} in the bucket does not say where its attempts run as tpuctl train pinned "
                f"it (its {', '.join(pins.PLACEMENT_FIELDS)}: sha256 {found[:12]}, pinned {pinned[:12]}): "
                f"not supervising it")
    zone = getattr(record, "zone", None)
    if zones and zone not in zones:
        return (f"run.json of run {run_id} in the bucket puts it in zone {zone}, not one of cluster "
                f"{getattr(record, 'cluster', '?')}'s pinned zones ({', '.join(zones)}): not supervising it")
    return None


def check_placement(entry: dict[str, str | None] | None, record: Any, zones: tuple[str, ...] = ()) -> None:
    """:func:`placement_refusal` as the one-line error a supervisor stops with (exit 2), before it
    launches anything; nothing to check without a pin (hosts then run no attempt of the run)."""
    if entry is None:
        return
    refusal = placement_refusal(entry, record, zones)
    if refusal:
        raise UsageError(refusal, hint=f"start the run again with tpuctl train {getattr(record, 'cluster', 'CLUSTER')}")


def pin_attempt(provider: Provider, cluster: str, run_id: str, entry: dict[str, str | None] | None,
                command: dict[str, Any], log: Callable[[str], None], *, record: Any) -> None:
    """Before an attempt's ``command.json`` is written: the run's entry, with the digest of where
    this attempt runs and listens (:func:`provision.runs.pins.launch_digest`), pinned on the
    cluster's hosts. A command that launches as the last one did changes nothing. ``record``: the
    run record the command was planned from; one whose placement is not the pinned one is refused
    (:func:`check_placement`) and nothing is pinned: the supervisor may write metadata, a bucket
    writer may not, and the launch it would pin is where the job's servers listen."""
    check_placement(entry, record)
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
