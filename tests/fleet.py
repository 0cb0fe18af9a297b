"""A fleet of tpuctl clusters put straight into the fake cloud: the benchmark's and the fleet test's.

Each cluster is what ``tpuctl up NAME --arch vm`` leaves on GCP: a host VM and a TPU VM, labelled
``tpuctl-cluster``/``tpuctl-role``, whose metadata carries what ``up`` writes today (the startup
script's bootstrap, ``tpuctl-cluster``, ``tpuctl-role``, ``tpuctl-bucket``). They are spread over five
zones in three regions, and which cluster is what is a function of its index, so the same ``n``
always builds the same fleet:

- every 10th (index 3 mod 10) TPU is PREEMPTED: it holds quota, ``down --idle`` deletes it;
- index 1 mod 10 was created five minutes ago: within any ``--idle-for``, kept;
- index 2 and 6 mod 10 have a live run whose last progress was two minutes ago: training, kept;
- index 5 mod 20 is labelled ``tpuctl-keep=true``;
- the rest were created three days ago and have no run: idle, deleted.

The bodies are posted to the fake's ``/_admin/bulk`` (no operations, nothing to wait for), and the
runs' pointers and records written to a fake-gcs-server bucket with the custom metadata tpuctl
gives them (the pointer's run, the record's summary), so 2,000 clusters take seconds. Every fourth
cluster also has the local cluster cache ``up`` writes, naming its bucket.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.basics.validate import CLUSTER_LABEL, ROLE_LABEL
from provision.cloud.base import ClusterSpec
from provision.cloud.gcp import HOST_IMAGE, SCOPES
from provision.runs.store import (
    POINTER_RUN_KEY,
    SUMMARY_KEY,
    RunRecord,
    current_name,
    record_summary,
)

ZONES = ("us-central1-b", "us-central1-c", "us-central1-f", "europe-west4-a", "asia-east1-c")
ACCELERATOR = "v2-8"
RUNTIME = "tpu-vm-tf-2.15.0-pjrt"
HOST_MACHINE = "n1-standard-2"
BUCKET = "fleet-runs"
DAY = 86400.0
CHUNK = 250          # clusters per admin call: bounded request bodies


@dataclass(frozen=True)
class Member:
    """One cluster of the fleet and what ``down --idle`` should make of it."""

    index: int
    name: str
    zone: str
    state: str           # the TPU's state
    created: float       # unix seconds
    training: bool
    keep: bool
    cached: bool


def member(i: int, now: float) -> Member:
    kind = i % 10
    return Member(index=i, name=f"fleet-{i:04d}", zone=ZONES[i % len(ZONES)],
                  state="PREEMPTED" if kind == 3 else "READY",
                  created=now - 300.0 if kind == 1 else now - 3 * DAY,
                  training=kind in (2, 6), keep=i % 20 == 5, cached=i % 4 == 0)


def startup_script() -> str:
    """The ``startup-script`` metadata value ``up`` writes on every host VM and TPU VM: the small
    bootstrap that fetches the pinned script (provision/cloud/startup.py). The BEFORE table of
    docs/scale.md was measured with the whole script there, as ``up`` wrote it then."""
    from provision.cloud import startup

    return startup.current().bootstrap


def _metadata(m: Member, role: str, script: str) -> dict[str, str]:
    return {"startup-script": script, "tpuctl-cluster": m.name, "tpuctl-role": role,
            "tpuctl-bucket": f"gs://{BUCKET}"}


def _labels(m: Member, role: str) -> dict[str, str]:
    labels = {CLUSTER_LABEL: m.name, ROLE_LABEL: role}
    if m.keep:
        labels["tpuctl-keep"] = "true"
    return labels


def host_body(m: Member, script: str) -> dict[str, Any]:
    """The ``instances.insert`` body of the host VM, as provision/cloud/gcp.py ``create_vm`` sends it."""
    meta = _metadata(m, "host", script)
    return {"name": m.name, "machineType": f"zones/{m.zone}/machineTypes/{HOST_MACHINE}",
            "labels": _labels(m, "host"),
            "disks": [{"boot": True, "autoDelete": True,
                       "initializeParams": {"sourceImage": HOST_IMAGE, "diskSizeGb": "50"}}],
            "networkInterfaces": [{"network": "global/networks/default",
                                   "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
            "serviceAccounts": [{"email": "default", "scopes": list(SCOPES)}],
            "metadata": {"items": [{"key": k, "value": v} for k, v in meta.items()]}}


def tpu_body(m: Member, project: str, script: str) -> dict[str, Any]:
    """The v2 ``nodes.create`` body of the TPU VM, as ``create_tpu`` sends it (preemptible)."""
    return {"acceleratorType": ACCELERATOR, "runtimeVersion": RUNTIME,
            "networkConfig": {"network": f"projects/{project}/global/networks/default", "enableExternalIps": True},
            "schedulingConfig": {"preemptible": True, "spot": False},
            "labels": _labels(m, "tpu"), "metadata": _metadata(m, "worker", script)}


def run_record(m: Member, project: str, now: float) -> RunRecord:
    return RunRecord(run_id=f"{m.name}-run", cluster=m.name, provider="gcp", project=project, zone=m.zone,
                     bucket=f"gs://{BUCKET}", model_dir=f"gs://{BUCKET}/models/{m.name}", num_train_steps=10000,
                     save_checkpoints_steps=500, job="bert-finetune", status="running", created_at=now - DAY,
                     updated_at=now - 120.0, attempts=1, last_progress={"time": now - 120.0, "step": 4000})


def build(fake: Any, gcs_url: str, home: Path, n: int, *, now: float | None = None) -> list[Member]:
    """Put ``n`` clusters in ``fake`` (a running :class:`tests.fakegcp.fixture.FakeGCP`), their runs in
    fake-gcs-server at ``gcs_url`` and the cache of some under ``home`` (TPUCTL_HOME)."""
    now = time.time() if now is None else now
    script = startup_script()
    members = [member(i, now) for i in range(n)]
    for start in range(0, n, CHUNK):
        part = members[start:start + CHUNK]
        fake.bulk(instances=[{"zone": m.zone, "body": host_body(m, script), "created": m.created} for m in part],
                  nodes=[{"zone": m.zone, "nodeId": m.name, "body": tpu_body(m, fake.project, script),
                          "state": m.state, "created": m.created} for m in part])
    runs_and_caches(gcs_url, home, fake.project, members, now)
    return members


def ensure_bucket(gcs_url: str, project: str) -> None:
    """The fleet's bucket in fake-gcs-server (made once: a second create is a conflict)."""
    import urllib.error

    try:
        _gcs(gcs_url, "POST", f"/storage/v1/b?project={project}", json.dumps({"name": BUCKET}).encode())
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def runs_and_caches(gcs_url: str, home: Path, project: str, members: list[Member], now: float, *,
                    spec_of: Callable[[str], ClusterSpec | None] = lambda name: None) -> None:
    """The training members' run records in the bucket, and the local cache of the cached ones
    (``spec_of``: the cluster's spec when it is not this module's TPU API one)."""
    ensure_bucket(gcs_url, project)
    for m in members:
        if m.training:
            rec = run_record(m, project, now)
            pointer = {"run_id": rec.run_id}      # with the metadata RunStore.write_current sets
            _upload(gcs_url, current_name(m.name), pointer, {POINTER_RUN_KEY: rec.run_id})
            _upload(gcs_url, f"{rec.prefix}/run.json", rec.to_dict(),      # and as RunStore.save writes it
                    {SUMMARY_KEY: json.dumps(record_summary(rec.to_dict()), sort_keys=True)})
        if m.cached:
            _cache(home, project, m, spec_of(m.name))


def _cache(home: Path, project: str, m: Member, spec: ClusterSpec | None = None) -> None:
    """The cluster cache ``up`` writes (provision/cluster/cache.py ``cache_spec``)."""
    spec = spec or ClusterSpec(name=m.name, accelerator_type=ACCELERATOR, zones=(m.zone,), provider="gcp",
                               project=project, preemptible=True, machine_type=HOST_MACHINE,
                               runtime_version=RUNTIME, bucket=f"gs://{BUCKET}")
    data = {**spec.to_dict(), "zone": spec.zone, "cidr": None, "updated_at": m.created}
    path = home / "clusters" / "gcp" / project / f"{m.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _upload(gcs_url: str, name: str, data: Any, metadata: dict[str, str] | None = None) -> None:
    """One object; with ``metadata``, a multipart upload carrying it (as google-cloud-storage sends it)."""
    from urllib.parse import quote

    body = json.dumps(data).encode()
    if metadata is None:
        _gcs(gcs_url, "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={quote(name, safe='')}",
             body)
        return
    sep = b"==tpuctl-fleet=="
    head = json.dumps({"name": name, "metadata": metadata}).encode()
    parts = (b"--" + sep + b"\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n" + head
             + b"\r\n--" + sep + b"\r\ncontent-type: application/json\r\n\r\n" + body + b"\r\n--" + sep + b"--")
    _gcs(gcs_url, "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart", parts,
         f'multipart/related; boundary="{sep.decode()}"')


def _gcs(gcs_url: str, method: str, path: str, body: bytes, ctype: str = "application/json") -> None:
    req = urllib.request.Request(gcs_url + path, data=body, method=method,
                                 headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()
