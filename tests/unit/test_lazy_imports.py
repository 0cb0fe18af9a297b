"""`tpuctl --help` stays instant because the CLI loads no cloud library and never TensorFlow."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "google.cloud", "google.api_core", "google.auth", "grpc", "keras", "numpy")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    return {m for m in out.split() if m.startswith(HEAVY)}


def test_cli_import_and_help_load_no_heavy_library():
    assert _modules_after("import provision.cli") == set()
    assert _modules_after("from provision.cli import main\ntry:\n main(['--help'])\nexcept SystemExit: pass") == set()
    assert _modules_after("from provision.cli import main\nmain(['up', '--help'])") == set()


def test_local_status_loads_no_cloud_library():
    code = "from provision.cli import main\nmain(['status', '--provider', 'local'])"
    assert _modules_after(code) == set()


def test_provision_never_imports_tensorflow():
    for path in (REPO / "provision").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert not name.startswith(("tensorflow", "keras")), f"{path} imports {name}"


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_provision_calls_google_cloud_without_generated_clients():
    """Cloud TPU and Compute Engine go over REST through google-auth's AuthorizedSession
    (provision/cloud/gcp_rest.py): no generated client (google-cloud-compute's ~2,300 message
    classes, the TPU clients, proto-plus) anywhere in provision. The fake cloud's tests keep those
    clients as the reference of the wire format. (That `status` loads no gRPC either is checked at
    run time, in tests/integration/test_gcp_tpu_vm_first.py.)"""
    banned = ("google.cloud.compute", "google.cloud.tpu", "proto", "tenacity")
    for path in (REPO / "provision").rglob("*.py"):
        for name in _imports(path):
            assert not name.startswith(banned), f"{path.relative_to(REPO)} imports {name}"
