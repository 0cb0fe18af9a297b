"""Hand a sweep to a cluster's host VM (``tpuctl sweep --detach --host CLUSTER`` on GCP).

The laptop may go offline, so the controller runs on an always-on host VM that tpuctl already
made: the laptop writes ``tpuctl/clusters/<host>/sweeps/<id>.json`` in the bucket and the host's
agent (provision.host.agent ``watch_sweeps``) runs ``tpuctl sweep resume <id> --where host``,
restarting it while the sweep is live. The host is checked before the sweep is written, so a
missing or stopped host VM, or one whose agent watches another bucket, creates nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..basics import validate
from ..basics.digest import sha256_file
from ..basics.errors import UsageError
from ..cloud.base import Arch, ClusterSpec, Provider, VmState
from ..runs import store as runs
from .store import SweepStore, host_request_name

BUCKET_KEY = "tpuctl-bucket"     # the host's metadata key its bootstrap and agent read the bucket from


@dataclass(frozen=True)
class Host:
    cluster: str
    zone: str
    bucket: str | None            # the bucket its agent watches (its metadata); None: not told yet
    # the host VM's service account, as `up` made it on this machine (None: the default, or unknown)
    service_account: str | None = None


def check_host(provider: Provider, name: str, *, purpose: str = "run the sweep's controller",
               option: str = "--host") -> Host:
    """The cluster NAME's host VM, which must exist and run (read-only: nothing is created)."""
    from .. import cluster as clusters

    validate.cluster_name(name)
    found = clusters.find(provider, name)
    if found.empty:
        raise UsageError(f"no cluster named {name} ({provider.name} provider)",
                         hint=f"tpuctl status lists the clusters; create one with tpuctl up {name}, or pass "
                              f"{option} an existing cluster")
    vm = found.vm
    if vm is None:
        raise UsageError(f"cluster {name} has no host VM to {purpose}",
                         hint=f"create one with tpuctl up {name} --zone ZONE (add --autodown 30m to keep only the "
                              f"VM once its TPU idles), or pass {option} a cluster that has a host VM")
    if vm.state in (VmState.STOPPING, VmState.STOPPED, VmState.SUSPENDING, VmState.SUSPENDED, VmState.TERMINATED):
        raise UsageError(f"host VM {name} is {vm.state.value}",
                         hint=f"start it (gcloud compute instances start {vm.name} --zone {vm.zone}) or pass "
                              f"another {option}")
    bucket = provider.metadata_of("vm", vm.zone, vm.name).get(BUCKET_KEY) or None
    cached = clusters.cached_spec(provider, name) or {}
    return Host(cluster=name, zone=vm.zone, bucket=bucket, service_account=cached.get("service_account") or None)


def check_bucket(host: Host, bucket: str) -> None:
    """One agent watches one bucket: the sweep must live in the host's, if it has one."""
    if host.bucket and host.bucket.rstrip("/") != bucket.rstrip("/"):
        raise UsageError(f"host {host.cluster}'s agent watches {host.bucket}, not {bucket}",
                         hint=f"pass --bucket {host.bucket}, or a --host whose bucket is {bucket}")


def hand_over(provider: Provider, store: SweepStore, host: Host, *, log: Any) -> str:
    """Pin the sweep on the host, then tell its agent to run the sweep's controller; return where
    it runs, for the user. The pin holds the sweep's job spec and defining record as they are in
    the bucket now: the controller there drives this sweep and no other."""
    from ..runs.pins import sha256

    bucket = store.bucket
    fields = {"job": sha256(bucket.read_bytes(store.name("job.yaml"))), "record": store.load().digest()}
    prepare_host(provider, bucket, host, log=log, wheel_prefix=store.prefix, kind="sweep", ident=store.sweep_id,
                 fields=fields)
    bucket.write_bytes(host_request_name(host.cluster, store.sweep_id),
                       json.dumps({"sweep": store.sweep_id, "time": time.time()}).encode())
    return f"the host VM {host.cluster}'s agent"


def prepare_host(provider: Provider, bucket: Any, host: Host, *, log: Any, wheel_prefix: str, kind: str,
                 ident: str, fields: dict[str, str | None]) -> None:
    """Pin ``kind`` ``ident`` (with this tpuctl's wheel) in the host VM's metadata, point its agent
    at ``bucket`` (its bootstrap waits for it in its metadata before it installs tpuctl) and, if
    it never ran anything, stage this tpuctl for it. The pin comes first: a host that sees the
    request finds it pinned."""
    from ..basics.config import home
    from ..runs import pinning
    from ..runs.wheel import build_wheel

    wheel = build_wheel(home() / "wheels")
    pinned = pinning.pin(provider, host.cluster, kind, ident, {**fields, "wheel": sha256_file(wheel)})
    if pinned:
        log(f"pinned {kind} {ident} on {', '.join(pinned)}")
    if not host.bucket and hasattr(provider, "point_hosts_at"):
        provider.point_hosts_at(_spec(provider, host), bucket.url)
    if bucket.stat(runs.agent_name(host.cluster)) is None:
        wheel_object = runs.wheel_object(wheel_prefix, wheel.name)
        bucket.upload_file(wheel, wheel_object)
        bucket.write_bytes(runs.agent_name(host.cluster), json.dumps({"wheel_object": wheel_object}).encode())
        log(f"staged {wheel.name} for host {host.cluster}'s bootstrap")


def _spec(provider: Provider, host: Host) -> ClusterSpec:
    return ClusterSpec(name=host.cluster, accelerator_type="v2-8", zones=(host.zone,), provider=provider.name,
                       project=provider.project, arch=Arch.VM)
