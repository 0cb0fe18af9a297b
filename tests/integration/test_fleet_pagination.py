"""Lists of more than one page, as Google pages them, read by tpuctl and by Google's own client.

1,100 host VMs and 1,100 TPU VMs (tests/fleet.py's bodies, without the startup script to keep the
pages small) are put in the fake cloud; each reader must see every item exactly once:

- Compute ``instances.aggregatedList``: maxResults "Acceptable values are 0 to 500, inclusive.
  (Default: 500)" (https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList),
  so 1,100 instances are three pages whatever the client asks; tpuctl's ``list_vms`` (its
  ``_aggregated`` pager) and google-api-python-client's ``aggregatedList_next``.
- Cloud TPU ``nodes.list``: ``pageSize`` "The maximum number of items to return" and
  ``pageToken`` (https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes/list;
  v1 alike); Google's client pages through v2 and v1 with pageSize 500, tpuctl's ``list_tpus``.
- Cloud Billing ``services.skus.list``: ``pageSize`` "Requested page size. Defaults to 5000."
  and at most 5000 (https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list);
  Google's client in pages of 3, and tpuctl's ``list_skus``, find the same SKUs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests import fleet
from tests.fakegcp.fixture import FakeGCP

N = 1100


@pytest.fixture(scope="module")
def big_fake():
    with FakeGCP() as fake:
        members = [fleet.member(i, 0.0) for i in range(N)]
        for start in range(0, N, fleet.CHUNK):
            part = members[start:start + fleet.CHUNK]
            fake.bulk(instances=[{"zone": m.zone, "body": fleet.host_body(m, "")} for m in part],
                      nodes=[{"zone": m.zone, "nodeId": m.name, "body": fleet.tpu_body(m, fake.project, "")}
                             for m in part])
        yield fake


def _names() -> Counter[str]:
    return Counter(fleet.member(i, 0.0).name for i in range(N))


def _google(fake: FakeGCP, api: str, version: str, root: str) -> Any:
    import httplib2
    from googleapiclient.discovery import build

    return build(api, version, http=httplib2.Http(), static_discovery=True, cache_discovery=False,
                 client_options={"api_endpoint": root})


def test_compute_aggregated_list_pages_hold_at_most_500_and_tpuctl_sees_every_vm_once(big_fake, monkeypatch):
    from provision.cloud.gcp import GcpProvider

    for key, value in big_fake.env().items():
        monkeypatch.setenv(key, value)
    big_fake.clear_calls()
    vms = GcpProvider(big_fake.project).list_vms()
    assert Counter(v.name for v in vms) == _names()
    pages = [c for c in big_fake.calls() if c["call"] == "compute.instances.aggregatedList"]
    assert len(pages) == 3, pages      # 500 + 500 + 100

    compute = _google(big_fake, "compute", "v1", f"{big_fake.url}/compute/v1/")
    seen: Counter[str] = Counter()
    sizes = []
    request = compute.instances().aggregatedList(project=big_fake.project, maxResults=1000)
    while request is not None:
        page = request.execute()
        found = [i["name"] for scoped in page["items"].values() for i in scoped.get("instances", [])]
        sizes.append(len(found))
        seen.update(found)
        request = compute.instances().aggregatedList_next(request, page)
    assert seen == _names()
    assert sizes == [500, 500, 100]


def test_compute_instances_list_pages_by_max_results(big_fake):
    compute = _google(big_fake, "compute", "v1", f"{big_fake.url}/compute/v1/")
    zone = fleet.ZONES[0]
    seen: Counter[str] = Counter()
    request = compute.instances().list(project=big_fake.project, zone=zone, maxResults=100)
    calls = 0
    while request is not None:
        page = request.execute()
        calls += 1
        seen.update(i["name"] for i in page.get("items", []))
        request = compute.instances().list_next(request, page)
    assert seen == Counter(fleet.member(i, 0.0).name for i in range(0, N, len(fleet.ZONES)))
    assert calls == 3      # 220 instances in the zone, 100 a page


@pytest.mark.parametrize("version", ["v2", "v2alpha1", "v1"])
def test_tpu_nodes_list_pages_with_google_client(big_fake, version):
    tpu = _google(big_fake, "tpu", version, f"{big_fake.url}/")
    seen: Counter[str] = Counter()
    nodes = tpu.projects().locations().nodes()
    request = nodes.list(parent=f"projects/{big_fake.project}/locations/-", pageSize=500)
    pages = 0
    while request is not None:
        page = request.execute()
        pages += 1
        assert len(page.get("nodes", [])) <= 500
        seen.update(n["name"].rsplit("/", 1)[-1] for n in page.get("nodes", []))
        request = nodes.list_next(request, page)
    assert seen == _names()
    assert pages == 3


def test_tpuctl_lists_every_tpu_once(big_fake, monkeypatch):
    from provision.cloud.gcp import GcpProvider

    for key, value in big_fake.env().items():
        monkeypatch.setenv(key, value)
    tpus = GcpProvider(big_fake.project).list_tpus()
    assert Counter(t.name for t in tpus) == _names()


def test_billing_sku_pages(big_fake, monkeypatch):
    from google.auth.credentials import AnonymousCredentials

    from provision.cloud import gcp_billing
    from provision.cloud.gcp_rest import Rest

    service = "services/E000-3F24-B8AA"      # Cloud TPU
    billing = _google(big_fake, "cloudbilling", "v1", f"{big_fake.url}/")
    seen: Counter[str] = Counter()
    skus = billing.services().skus()
    request = skus.list(parent=service, pageSize=3)
    pages = 0
    while request is not None:
        page = request.execute()
        pages += 1
        seen.update(s["skuId"] for s in page.get("skus", []))
        request = skus.list_next(request, page) if page.get("nextPageToken") else None
    whole = skus.list(parent=service, pageSize=100000).execute()
    assert "nextPageToken" not in whole or not whole["nextPageToken"]
    assert seen == Counter(s["skuId"] for s in whole["skus"])
    assert pages > 1 and max(seen.values()) == 1

    monkeypatch.setenv("TPUCTL_BILLING_API_ENDPOINT", big_fake.url)
    ours = gcp_billing.list_skus(Rest(AnonymousCredentials()).call, service.split("/", 1)[1])
    assert Counter(s["skuId"] for s in ours) == seen
