"""A pod slice's worker addresses, from Google's v2 ``networkEndpoints`` to the job's ``TPU_NAME``.

The fake serves what ``tpu_v2.NetworkEndpoint`` carries (google-cloud-tpu 1.28: ``ip_address``,
the worker's internal address; ``port``; ``access_config.external_ip`` when the node has external
IPs), one per worker, read here through Google's own client; the GCP adapter keeps them in worker
order, and the launch plan turns them into the client's ``grpc://`` list. A slice recreated after
a preemption comes back with other addresses, and the next attempt's plan carries those.
"""

from __future__ import annotations

import ipaddress

from google.cloud import tpu_v2

from provision.cloud.base import Arch
from provision.cloud.gcp import GcpProvider
from provision.runs.launch import plan
from tests.fakegcp import clients
from tests.fakegcp.clients import FAST_POLLING

ZONE = "us-central1-b"
SUBNET = ipaddress.ip_network("10.128.0.0/20")    # the default network's us-central1 subnetwork


def _create(v2, fake, name: str, external: bool) -> tpu_v2.Node:
    op = v2.create_node(parent=f"projects/{fake.project}/locations/{ZONE}", node_id=name, node=tpu_v2.Node(
        accelerator_type="v2-32", runtime_version="tpu-vm-tf-2.16.1-pod-pjrt",
        network_config=tpu_v2.NetworkConfig(enable_external_ips=external)))
    return op.result(timeout=10, polling=FAST_POLLING)


def _client_tpu_name(node) -> str:
    return plan(provider="gcp", arch=Arch.VM, accelerator_type=node.accelerator_type, tpu_name=node.name,
                zone=node.zone, project="tpuctl-test", runtime=node.version,
                endpoints=node.endpoints).workers[0].env["TPU_NAME"]


def test_every_worker_of_a_slice_has_an_endpoint_and_the_client_gets_them_in_worker_order(fakegcp_env):
    fakegcp_env.set_latencies(tpu_create=0.1, tpu_delete=0.1)
    v2 = clients.tpu_v2(fakegcp_env)
    public = _create(v2, fakegcp_env, "pod", external=True)
    private = _create(v2, fakegcp_env, "pod-private", external=False)
    assert len(public.network_endpoints) == 4                       # a v2-32: 4 hosts
    addresses = [e.ip_address for e in public.network_endpoints]
    assert len(set(addresses)) == 4 and all(ipaddress.ip_address(a) in SUBNET for a in addresses)
    assert {e.port for e in public.network_endpoints} == {8470}
    assert all(e.access_config.external_ip for e in public.network_endpoints)
    assert not any(e.access_config.external_ip for e in private.network_endpoints)

    node = GcpProvider(fakegcp_env.project).get_tpu(ZONE, "pod")
    assert [(e.ip_address, e.port) for e in node.endpoints] == [(a, 8470) for a in addresses]
    assert _client_tpu_name(node) == ",".join(f"grpc://{a}:8470" for a in addresses)

    # preempted, deleted and made again (what the supervisor's recreate does): new workers
    fakegcp_env.preempt(ZONE, "pod")
    v2.delete_node(name=public.name).result(timeout=10, polling=FAST_POLLING)
    again = _create(v2, fakegcp_env, "pod", external=True)
    fresh = [e.ip_address for e in again.network_endpoints]
    assert set(fresh).isdisjoint(addresses)
    assert _client_tpu_name(GcpProvider(fakegcp_env.project).get_tpu(ZONE, "pod")) == \
        ",".join(f"grpc://{a}:8470" for a in fresh)
