"""A fleet whose TPUs are on Compute Engine (``tpuctl up --api compute``): the benchmark's second
kind (``BENCH_FLEET_KIND=compute``) and the Compute Engine fleet test's.

Each cluster is a host VM and a Compute Engine TPU, with the labels and metadata ``up`` writes
(tests/fleet.py's, the same members: preempted, young, training, kept, idle, cached by index):

- most TPUs are one TPU VM instance (single-host v6e-8, v5p-8 or tpu7x-8 by zone, spot), put
  straight into the fake (``/_admin/bulk``) with the body ``up`` sends (gce_tpu.Request.instance);
  a preempted one is TERMINATED;
- every ``slice_every``-th is a multi-host v5p-16 slice (a MIG with its workload policy and
  template, two workers), made by the provider's own create over the wire; they alternate spot
  and flex-start (a resize request), so a fleet of slices carries both kinds of MIG.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from provision.basics.validate import CLUSTER_LABEL
from provision.cloud import gce_tpu
from provision.cloud.base import ClusterSpec
from provision.cloud.gcp import SCOPES
from tests import fleet
from tests.fakegcp import catalog

# zone -> the single-host type the fake lists there (tests/fakegcp/catalog.py)
SINGLE = {"us-east5-a": "v6e-8", "us-east5-c": "v5p-8", "us-central1-c": "tpu7x-8"}
ZONES = tuple(SINGLE)
SLICE = ("us-east5-c", "v5p-16")
IMAGES = {"tpu7x": catalog.ACCELERATOR_IMAGES["ubuntu-accel-2404-amd64-tpu-tpu7x"]}
V5_IMAGE = catalog.ACCELERATOR_IMAGES["ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"]
# what the fake takes to make a slice's workers or grant a flex-start request: near nothing
FAST = {"vm_create": 0.05, "queued_provisioning": 0.05}
HOST_MACHINE = "e2-standard-2"      # offered in every zone above


def is_slice(i: int, slice_every: int) -> bool:
    return slice_every > 0 and i % slice_every == slice_every - 1


def spec(m: fleet.Member, project: str, *, slice_every: int, bucket: str | None) -> ClusterSpec:
    """The cluster as ``up --api compute`` gets it."""
    if is_slice(m.index, slice_every):
        zone, accelerator = SLICE
        capacity = ("flex-start",) if (m.index // slice_every) % 2 else ("spot",)
    else:
        zone = ZONES[m.index % len(ZONES)]
        accelerator, capacity = SINGLE[zone], ("spot",)
    return ClusterSpec(name=m.name, accelerator_type=accelerator, zones=(zone,), provider="gcp", project=project,
                       machine_type=HOST_MACHINE, bucket=bucket, api="compute", capacity=capacity,
                       labels={"tpuctl-keep": "true"} if m.keep else {})


def _image(accelerator: str) -> str:
    return IMAGES.get(accelerator.split("-")[0], V5_IMAGE)


def build(fake: Any, gcs_url: str | None, home: Path, n: int, *, slice_every: int = 10, start: int = 0,
          now: float | None = None) -> list[fleet.Member]:
    """Put ``n`` Compute Engine TPU clusters in ``fake`` (a running FakeGCP); runs and caches as
    tests/fleet.py makes them (``gcs_url`` None: no runs, no bucket); ``start``: the first index,
    to grow a fleet already there."""
    import time

    now = time.time() if now is None else now
    bucket = f"gs://{fleet.BUCKET}" if gcs_url else None
    members = [fleet.member(i, now) for i in range(start, start + n)]
    specs = {m.name: spec(m, fake.project, slice_every=slice_every, bucket=bucket) for m in members}
    script = fleet.startup_script()
    singles = [m for m in members if not is_slice(m.index, slice_every)]
    for first in range(0, len(members), fleet.CHUNK):
        part = members[first:first + fleet.CHUNK]
        fake.bulk(instances=[{"zone": specs[m.name].zone, "body": _host(m, specs[m.name], script), "created": m.created}
                             for m in part])
    for first in range(0, len(singles), fleet.CHUNK):
        part = singles[first:first + fleet.CHUNK]
        fake.bulk(instances=[{"zone": specs[m.name].zone, "body": _tpu_instance(m, specs[m.name], fake.project, script),
                              "status": "TERMINATED" if m.state == "PREEMPTED" else "RUNNING", "created": m.created}
                             for m in part])
    slices = [specs[m.name] for m in members if is_slice(m.index, slice_every)]
    if slices:
        _make_slices(fake, slices, gcs_url)
    if gcs_url:
        fleet.runs_and_caches(gcs_url, home, fake.project, members, now, spec_of=specs.get)
    return members


def _host(m: fleet.Member, s: ClusterSpec, script: str) -> dict[str, Any]:
    body = fleet.host_body(m, script)
    zone = s.zone
    body["machineType"] = f"zones/{zone}/machineTypes/{HOST_MACHINE}"
    body["labels"] = {**s.resource_labels("host")}
    return body


def _tpu_instance(m: fleet.Member, s: ClusterSpec, project: str, script: str) -> dict[str, Any]:
    meta = {"startup-script": script, "tpuctl-cluster": m.name, "tpuctl-role": "worker"}
    if s.bucket:
        meta["tpuctl-bucket"] = s.bucket
    req = gce_tpu.Request(spec=s, zone=s.zone, project=project, image=_image(s.accelerator_type), metadata=meta,
                          scopes=SCOPES)
    return req.instance()


def _make_slices(fake: Any, specs: list[ClusterSpec], gcs_url: str | None) -> None:
    """Each slice by the provider's own create (policy, template, MIG, workers or resize request)."""
    from provision.cloud.gcp import GcpProvider

    fake.set_latencies(**FAST)
    with _environ({**fake.env(), **({"STORAGE_EMULATOR_HOST": gcs_url} if gcs_url else {})}):
        provider = GcpProvider(fake.project)
        if gcs_url:
            fleet.ensure_bucket(gcs_url, fake.project)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: provider.create_tpu(s, s.zone, None), specs))
        _wait_ready(provider, [s.name for s in specs])


def _wait_ready(provider: Any, names: list[str], timeout: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while True:
        nodes = provider.list_tpus()
        ready = {n.labels.get(CLUSTER_LABEL) for n in nodes if n.state.value == "READY"}
        if all(name in ready for name in names) or time.monotonic() > deadline:
            return
        time.sleep(0.2)


@contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
