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


def test_partial_compute_import_completes_on_demand():
    code = ("from provision.cloud.gcp_imports import compute_client, compute_types\n"
            "import sys\n"
            "c = compute_client('zone_operations')\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('google.cloud.compute_v1.services.'))\n"
            "assert not any('security_policies' in m for m in loaded), loaded\n"
            "from google.cloud import compute_v1\n"
            "assert compute_v1.ProjectsClient.__name__ == 'ProjectsClient'\n"
            "assert compute_v1.Instance is compute_types().Instance\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
