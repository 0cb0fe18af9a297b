"""A pod slice's client resolves every worker from the environment tpuctl's launch plan gives,
without a call to the Cloud TPU API or the metadata server.

Resolving the slice by name goes through the Cloud TPU v1 API with the TPU VM's account
(``tensorflow/python/tpu/client/client.py``: ``discovery.build('tpu', 'v1', ...)``,
``nodes().get``), which a ``--service-account`` with only bucket roles may not call (403), and
which needs ``googleapiclient`` on the image. The plan hands the client the workers' addresses
from the v2 node's ``networkEndpoints`` instead; these tests build TensorFlow's own
``TPUClusterResolver`` from that environment (no TPU is initialised: cheap) and hold every HTTP
request to a recording server that must stay silent.
"""

from __future__ import annotations

import http.server
import threading
import urllib.request
from typing import ClassVar

import pytest

tf = pytest.importorskip("tensorflow")

from jobs.runner import distribute
from provision.cloud.base import Arch, Endpoint
from provision.runs.launch import plan

pytestmark = pytest.mark.tf


class Recorder(http.server.BaseHTTPRequestHandler):
    """Stands in for the metadata server and the API discovery service: records, answers 404."""

    seen: ClassVar[list[str]] = []

    def do_GET(self):
        Recorder.seen.append(self.path)
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def no_http(monkeypatch):
    """Every way TF's client could reach Google points at a recorder; urlopen itself is refused."""
    Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    where = f"127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("GCE_METADATA_HOST", where)
    monkeypatch.setenv("TPU_API_DISCOVERY_URL", f"http://{where}/discovery/{{api}}/{{apiVersion}}")

    def refused(*args, **kwargs):
        raise AssertionError(f"HTTP request made while resolving the slice: {args[:1]}")

    monkeypatch.setattr(urllib.request, "urlopen", refused)
    yield Recorder.seen
    server.shutdown()
    server.server_close()


def pod_env(hosts: int, accelerator_type: str) -> dict[str, str]:
    endpoints = [Endpoint(f"10.130.0.{2 + i}", 8470) for i in range(hosts)]
    p = plan(provider="gcp", arch=Arch.VM, accelerator_type=accelerator_type, tpu_name="pod",
             zone="us-central2-b", project="p-1", runtime="tpu-vm-tf-2.18.0-pod-pjrt",
             endpoints=endpoints)
    return dict(p.workers[0].env)


@pytest.mark.parametrize("accelerator_type, hosts", [("v4-16", 2), ("v2-32", 4)])
def test_the_pod_client_resolves_every_worker_from_tpu_name_without_an_api_call(no_http, accelerator_type,
                                                                                 hosts):
    env = pod_env(hosts, accelerator_type)
    assert env["TPU_LOAD_LIBRARY"] == "0"
    resolver = distribute.tpu_resolver(env["TPU_NAME"], env)
    workers = [f"10.130.0.{2 + i}:8470" for i in range(hosts)]
    assert resolver.cluster_spec().as_dict() == {"worker": workers}
    assert resolver.get_job_name() == "worker"
    assert resolver.master() == "grpc://10.130.0.2:8470"     # the client's session target: worker 0
    assert resolver.get_coordination_service_leader() == "/job:worker/task:0"
    assert no_http == []


def test_resolution_reads_tpu_name_from_the_environment_as_tensorflow_does(no_http, monkeypatch):
    """A script that builds ``TPUClusterResolver()`` with no argument (Google's pod examples)
    finds the same workers through the ``TPU_NAME`` variable tpuctl sets."""
    env = pod_env(2, "v4-16")
    monkeypatch.setenv("TPU_NAME", env["TPU_NAME"])
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    assert resolver.cluster_spec().as_dict() == {"worker": ["10.130.0.2:8470", "10.130.0.3:8470"]}
    assert no_http == []


def test_a_slice_name_would_need_the_cloud_tpu_api_which_is_why_the_plan_lists_addresses(no_http):
    """The contrast: given only the slice's name, TensorFlow's client asks the metadata server
    for the zone and project before it can call the Cloud TPU API."""
    with pytest.raises(AssertionError, match="HTTP request made"):
        tf.distribute.cluster_resolver.TPUClusterResolver(tpu="pod")


def test_the_job_names_a_pod_by_its_first_worker():
    assert distribute.tpu_label("grpc://10.0.0.2:8470,grpc://10.0.0.3:8470,grpc://10.0.0.4:8470") == \
        "grpc://10.0.0.2:8470 and 2 more workers"
    assert distribute.tpu_label("local") == "local"
