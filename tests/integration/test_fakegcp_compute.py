"""Compute Engine through google-cloud-compute's REST clients, over the wire."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from tests.fakegcp import clients

ZONE = "us-central1-b"
OpStatus = compute_v1.Operation.Status


@pytest.fixture
def gce(fakegcp):
    fakegcp.set_latencies(vm_create=0.3, vm_delete=0.2)

    class Clients:
        instances = clients.compute(compute_v1.InstancesClient, fakegcp)
        zone_ops = clients.compute(compute_v1.ZoneOperationsClient, fakegcp)
        global_ops = clients.compute(compute_v1.GlobalOperationsClient, fakegcp)
        networks = clients.compute(compute_v1.NetworksClient, fakegcp)
        subnetworks = clients.compute(compute_v1.SubnetworksClient, fakegcp)
        routes = clients.compute(compute_v1.RoutesClient, fakegcp)
        addresses = clients.compute(compute_v1.GlobalAddressesClient, fakegcp)
        project = fakegcp.project

        def wait(self, op):
            """What tpuctl must do: ``ExtendedOperation.result()`` would poll compute.googleapis.com."""
            while True:
                if op.zone:
                    op = self.zone_ops.wait(project=self.project, zone=op.zone.rsplit("/", 1)[1], operation=op.name)
                else:
                    op = self.global_ops.wait(project=self.project, operation=op.name)
                if op.status == OpStatus.DONE:
                    return op

    return Clients()


def _vm(name: str, **labels: str) -> compute_v1.Instance:
    return compute_v1.Instance(
        name=name, machine_type=f"zones/{ZONE}/machineTypes/n1-standard-2", labels=labels,
        network_interfaces=[compute_v1.NetworkInterface(
            network="global/networks/default", access_configs=[compute_v1.AccessConfig(name="External NAT")])],
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))])


def _list(gce, flt: str | None = None) -> list[str]:
    req = compute_v1.ListInstancesRequest(project=gce.project, zone=ZONE, filter=flt)
    return [i.name for i in gce.instances.list(request=req)]


def test_instance_insert_wait_get_list_delete(gce):
    op = gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("host", **{"tpuctl-cluster": "bert"}))
    assert op.status in (OpStatus.PENDING, OpStatus.RUNNING) and op.operation_type == "insert"
    assert gce.instances.get(project=gce.project, zone=ZONE, instance="host").status in ("PROVISIONING", "STAGING")
    done = gce.wait(op)
    assert not done.error.errors and done.target_link.endswith(f"/zones/{ZONE}/instances/host")

    vm = gce.instances.get(project=gce.project, zone=ZONE, instance="host")
    assert vm.status == "RUNNING" and vm.labels == {"tpuctl-cluster": "bert"}
    assert vm.network_interfaces[0].network_i_p.startswith("10.128.0.")
    assert vm.network_interfaces[0].access_configs[0].nat_i_p

    gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("other", team="x")))
    assert _list(gce) == ["host", "other"]
    assert _list(gce, 'labels.tpuctl-cluster = "bert"') == ["host"]
    assert _list(gce, "labels.tpuctl-cluster=bert") == ["host"]
    assert _list(gce, 'labels.tpuctl-cluster = "nobody"') == []
    assert _list(gce, 'name = "other"') == ["other"]
    assert _list(gce, "(labels.team = x) OR (name = host)") == ["host", "other"]
    agg = gce.instances.aggregated_list(request=compute_v1.AggregatedListInstancesRequest(
        project=gce.project, filter='labels.tpuctl-cluster = "bert"'))
    assert {zone: [i.name for i in scoped.instances] for zone, scoped in agg if scoped.instances} == \
        {f"zones/{ZONE}": ["host"]}

    op = gce.instances.delete(project=gce.project, zone=ZONE, instance="host")
    assert gce.instances.get(project=gce.project, zone=ZONE, instance="host").status == "STOPPING"
    assert not gce.wait(op).error.errors
    with pytest.raises(gexc.NotFound):
        gce.instances.get(project=gce.project, zone=ZONE, instance="host")


def test_list_pages(gce):
    for i in range(3):
        gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm(f"vm{i}"))
    pager = gce.instances.list(request=compute_v1.ListInstancesRequest(project=gce.project, zone=ZONE, max_results=2))
    assert [len(page.items) for page in pager.pages] == [2, 1]


def test_duplicate_insert_fails_in_its_operation(gce):
    gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("dup")))
    op = gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("dup")))
    assert op.http_error_status_code == 409
    assert [e.code for e in op.error.errors] == ["RESOURCE_ALREADY_EXISTS"]


def test_vm_stockout(fakegcp, gce):
    fakegcp.stockout(ZONE, count=1, kind="vm")
    op = gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("a")))
    assert [e.code for e in op.error.errors] == ["ZONE_RESOURCE_POOL_EXHAUSTED"]
    assert not gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("a"))).error.errors


def test_bad_requests(gce):
    with pytest.raises(gexc.BadRequest, match="Unknown zone"):
        gce.instances.insert(project=gce.project, zone="us-central1-z", instance_resource=_vm("a"))
    with pytest.raises(gexc.BadRequest, match="resource.name"):
        gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("Bad_Name"))
    with pytest.raises(gexc.BadRequest, match="filter"):
        _list(gce, "labels.x = (")


def test_default_network_subnets_and_routes(fakegcp, gce):
    fakegcp.add_subnetwork("gke", "us-central1", "10.60.0.0/20", secondary={"pods": "10.64.0.0/14"})
    fakegcp.add_peering("servicenetworking-googleapis-com", ["10.70.0.0/16"])
    net = gce.networks.get(project=gce.project, network="default")
    assert net.auto_create_subnetworks and [p.name for p in net.peerings] == ["servicenetworking-googleapis-com"]
    assert [n.name for n in gce.networks.list(project=gce.project)] == ["default"]

    central = {s.name: s for s in gce.subnetworks.list(project=gce.project, region="us-central1")}
    assert central["default"].ip_cidr_range == "10.128.0.0/20"
    assert [(r.range_name, r.ip_cidr_range) for r in central["gke"].secondary_ip_ranges] == [("pods", "10.64.0.0/14")]
    everywhere = {scope: [s.ip_cidr_range for s in scoped.subnetworks]
                  for scope, scoped in gce.subnetworks.aggregated_list(project=gce.project) if scoped.subnetworks}
    assert everywhere["regions/europe-west4"] == ["10.164.0.0/20"]

    dests = {r.dest_range for r in gce.routes.list(project=gce.project)}
    assert {"0.0.0.0/0", "10.128.0.0/20", "10.60.0.0/20"} <= dests
    peered = gce.networks.list_peering_routes(request=compute_v1.ListPeeringRoutesNetworksRequest(
        project=gce.project, network="default", direction="INCOMING",
        peering_name="servicenetworking-googleapis-com", region="us-central1"))
    assert [r.dest_range for r in peered] == ["10.70.0.0/16"]


def test_ipv6_only_subnet_has_no_ipv4_range(fakegcp, gce):
    """An IPv6-only subnet as Compute Engine describes it. gcloud 528's bundled API definitions
    (googlecloudsdk/generated_clients/apis/compute/v1/compute_v1_messages.py) and
    google-cloud-compute's ``Subnetwork`` agree: ``stackType`` IPV6_ONLY ("New VMs in this subnet will
    only be assigned IPv6 addresses"), ``ipCidrRange`` is IPv4 only ("Only IPv4 is supported") and
    optional, the subnet's internal range is ``internalIpv6Prefix``, its access type
    ``ipv6AccessType`` (INTERNAL or EXTERNAL)."""
    fakegcp.add_subnetwork("v6only", "us-central1", "")
    sub = gce.subnetworks.get(project=gce.project, region="us-central1", subnetwork="v6only")
    assert sub.stack_type == "IPV6_ONLY" and sub.ipv6_access_type == "INTERNAL"
    assert "ip_cidr_range" not in sub and sub.ip_cidr_range == ""
    assert sub.internal_ipv6_prefix.startswith("fd20:") and sub.internal_ipv6_prefix.endswith("/64")
    listed = {s.name: s for _, scoped in gce.subnetworks.aggregated_list(project=gce.project)
              for s in scoped.subnetworks}
    assert listed["v6only"].ip_cidr_range == "" and listed["default"].ip_cidr_range
    assert sub.internal_ipv6_prefix in {r.dest_range for r in gce.routes.list(project=gce.project)}
    # instances still land in the region's IPv4 subnet
    done = gce.wait(gce.instances.insert(project=gce.project, zone=ZONE, instance_resource=_vm("v4")))
    assert not done.error.errors
    got = gce.instances.get(project=gce.project, zone=ZONE, instance="v4")
    assert got.network_interfaces[0].network_i_p.startswith("10.128.")


def test_private_services_access_range_lists_as_a_vpc_peering_address(fakegcp, gce):
    """A private services access allocation is a global address with ``purpose`` VPC_PEERING,
    ``addressType`` INTERNAL, ``address``, ``prefixLength`` and ``network`` (gcloud 528's bundled
    compute v1 API definitions: "VPC_PEERING for global internal IP addresses used for private
    services access allocated ranges"; "network ... can only be used with INTERNAL type with the
    VPC_PEERING purpose"; "prefixLength: The prefix length if the resource represents an IP range").
    ``GET .../global/addresses`` lists it in that shape."""
    import requests

    op = gce.addresses.insert(project=gce.project, address_resource=compute_v1.Address(
        name="google-managed-services-default", address="10.240.0.0", prefix_length=20, address_type="INTERNAL",
        purpose="VPC_PEERING", network=f"projects/{gce.project}/global/networks/default"))
    assert not gce.wait(op).error.errors
    items = requests.get(f"{fakegcp.url}/compute/v1/projects/{gce.project}/global/addresses", timeout=10).json()["items"]
    psa = next(a for a in items if a["name"] == "google-managed-services-default")
    assert (psa["purpose"], psa["addressType"], psa["address"], psa["prefixLength"]) == (
        "VPC_PEERING", "INTERNAL", "10.240.0.0", 20)
    assert psa["network"].endswith(f"/projects/{gce.project}/global/networks/default")
    listed = {a.name: a for a in gce.addresses.list(project=gce.project)}
    assert listed["google-managed-services-default"].prefix_length == 20


def test_every_subnet_has_its_own_route(fakegcp, gce):
    """Route names are generated; none may collide and hide another route."""
    for i in range(40):
        fakegcp.add_subnetwork(f"s{i}", "us-east1", f"10.{100 + i}.0.0/24")
    routes = list(gce.routes.list(project=gce.project))
    assert len({r.name for r in routes}) == len(routes)
    assert {f"10.{100 + i}.0.0/24" for i in range(40)} <= {r.dest_range for r in routes}


def test_reserved_ranges_cannot_overlap(gce):
    def reserve(name: str, address: str | None, prefix: int = 29):
        return gce.wait(gce.addresses.insert(project=gce.project, address_resource=compute_v1.Address(
            name=name, address=address, prefix_length=prefix, address_type="INTERNAL", purpose="VPC_PEERING",
            network=f"projects/{gce.project}/global/networks/default", labels={"tpuctl-cluster": name})))

    assert not reserve("tpu-a", "10.240.1.0").error.errors
    clash = reserve("tpu-b", "10.240.1.0", 28)
    assert clash.http_error_status_code == 400
    assert "conflicts with IP range 10.240.1.0/29" in clash.error.errors[0].message
    over_subnet = reserve("tpu-c", "10.128.0.8")
    assert "10.128.0.0/20" in over_subnet.error.errors[0].message
    auto = reserve("tpu-d", None, 24)
    assert not auto.error.errors

    got = gce.addresses.get(project=gce.project, address="tpu-a")
    assert (got.address, got.prefix_length, got.purpose, got.status) == ("10.240.1.0", 29, "VPC_PEERING", "RESERVED")
    auto_range = gce.addresses.get(project=gce.project, address="tpu-d")
    assert auto_range.prefix_length == 24 and auto_range.address.startswith("10.")
    listed = gce.addresses.list(request=compute_v1.ListGlobalAddressesRequest(
        project=gce.project, filter='labels.tpuctl-cluster = "tpu-a"'))
    assert [a.name for a in listed] == ["tpu-a"]
    assert not gce.wait(gce.addresses.delete(project=gce.project, address="tpu-a")).error.errors
    assert not reserve("tpu-b", "10.240.1.0", 28).error.errors


def test_zones_regions_and_project(fakegcp):
    zones = clients.compute(compute_v1.ZonesClient, fakegcp)
    assert zones.get(project=fakegcp.project, zone=ZONE).region.endswith("/regions/us-central1")
    region = clients.compute(compute_v1.RegionsClient, fakegcp).get(project=fakegcp.project, region="us-central1")
    assert sorted(z.rsplit("/", 1)[1] for z in region.zones) == [f"us-central1-{s}" for s in "abcf"]
    project = clients.compute(compute_v1.ProjectsClient, fakegcp).get(project=fakegcp.project)
    assert project.default_service_account.endswith("-compute@developer.gserviceaccount.com")
