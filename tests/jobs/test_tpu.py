"""TPU resolution: the Node's zone and project reach TPUClusterResolver (a Node recreated in
another zone of the region is found), and a TPU that cannot be resolved or initialised is a job
error (exit 1), not a preemption (42) that would burn the preemption budget."""

from __future__ import annotations

import http.server
import threading

import pytest

tf = pytest.importorskip("tensorflow")

from jobs.runner import distribute

from .conftest import finetune_spec, job_env, read_progress, run_job

pytestmark = pytest.mark.tf

VM_ZONE, VM_PROJECT = "us-central1-b", "vm-project"   # where the host VM runs
NODE_ZONE, NODE_PROJECT = "us-central1-c", "lab"      # where the recreated Node lives


METADATA = {"/computeMetadata/v1/instance/zone": f"projects/123/zones/{VM_ZONE}",
            "/computeMetadata/v1/project/project-id": VM_PROJECT}


class MetadataServer(http.server.BaseHTTPRequestHandler):
    """The GCE metadata server of the host VM, on loopback (TF's client honours GCE_METADATA_HOST)."""

    def do_GET(self):
        body = METADATA.get(self.path)
        if body is None or self.headers.get("Metadata-Flavor") != "Google":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetadataServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()
    server.server_close()


class FakeTpuApi:
    """The Cloud TPU v1 API object TF's resolver calls (``projects().locations().nodes()
    .get(name=...).execute()``), knowing one READY Node; it records the names asked for."""

    def __init__(self, nodes: dict[str, dict]):
        self.known, self.asked = nodes, []

    def projects(self):
        return self

    def locations(self):
        return self

    def nodes(self):
        return self

    def get(self, name):
        self.asked.append(name)
        return self._Request(self.known.get(name), name)

    class _Request:
        def __init__(self, node, name):
            self.node, self.name = node, name

        def execute(self):
            if self.node is None:  # what the API answers for a Node that is not there
                raise LookupError(f"<HttpError 404 \"Resource '{self.name}' was not found\">")
            return self.node


NODE = f"projects/{NODE_PROJECT}/locations/{NODE_ZONE}/nodes/bert-lab"
READY = {"state": "READY", "networkEndpoints": [{"ipAddress": "10.240.1.2", "port": 8470}]}


def test_a_node_recreated_in_another_zone_is_resolved(metadata):
    api = FakeTpuApi({NODE: READY})
    env = {"TPU_NAME": "bert-lab", "TPUCTL_TPU_ZONE": NODE_ZONE, "TPUCTL_TPU_PROJECT": NODE_PROJECT}
    resolver = distribute.tpu_resolver("bert-lab", env, service=api)
    assert resolver.master() == "grpc://10.240.1.2:8470"
    assert resolver.cluster_spec().as_dict() == {"worker": ["10.240.1.2:8470"]}
    assert set(api.asked) == {NODE}

    # Without the zone the resolver looks where the host VM runs, and the Node is not there:
    # what every restart after a zone change did before (and exited 42 on).
    blind = distribute.tpu_resolver("bert-lab", {}, service=api)
    with pytest.raises(ValueError, match="Could not lookup TPU metadata"):
        blind.cluster_spec()
    assert api.asked[-1] == f"projects/{VM_PROJECT}/locations/{VM_ZONE}/nodes/bert-lab"


def test_the_project_defaults_to_the_vms_and_grpc_addresses_need_no_lookup(metadata):
    api = FakeTpuApi({f"projects/{VM_PROJECT}/locations/{NODE_ZONE}/nodes/bert-lab": READY})
    resolver = distribute.tpu_resolver("bert-lab", {"TPUCTL_TPU_ZONE": NODE_ZONE}, service=api)
    assert resolver.master() == "grpc://10.240.1.2:8470"
    direct = distribute.tpu_resolver("grpc://10.0.0.7:8470", {"TPUCTL_TPU_ZONE": NODE_ZONE})
    assert direct.master() == "grpc://10.0.0.7:8470"


@pytest.mark.slow
@pytest.mark.parametrize("case", ["node-not-resolvable", "no-tpu-here"])
def test_a_tpu_that_cannot_be_resolved_is_a_job_error_not_a_preemption(tmp_path, tiny_dir, case):
    spec = finetune_spec(tmp_path, tiny_dir)
    if case == "node-not-resolvable":
        # The Node's name in a zone where the Cloud TPU API cannot be asked (no API client, or
        # an endpoint that refuses): nothing leaves this machine.
        env = job_env(TPU_NAME="bert-lab", TPUCTL_TPU_ZONE="europe-west4-a",
                      TPUCTL_TPU_PROJECT="lab", GCE_METADATA_HOST="127.0.0.1:9",
                      TPU_API_DISCOVERY_URL="http://127.0.0.1:9/{api}/{apiVersion}")
        env.pop("TPUCTL_DEVICE")
        expected = "cannot resolve TPU 'bert-lab' in zone europe-west4-a, project lab"
    else:
        env = job_env(TPUCTL_DEVICE="tpu")  # a TPU VM's "local" TPU, on a machine without one
        expected = "TPU 'local' does not initialise"
    proc = run_job(spec, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert expected in proc.stderr
    record = read_progress(tmp_path / "run")
    assert record["status"] == "failed" and expected in record["message"]
