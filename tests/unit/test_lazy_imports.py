"""Cheap answers stay cheap: `tpuctl --help` loads no cloud library and never TensorFlow, and a
mistake that the first check finds (a missing sweep spec, a path that is no SavedModel) is
answered before the heavy imports of what would come next."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "google.cloud", "google.api_core", "google.auth", "grpc", "keras", "numpy")


def _modules_after(code: str, prefixes: tuple[str, ...] = HEAVY) -> set[str]:
    # the modules on one marked line: the help text printed before them names libraries too
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('MODULES ' + ' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    loaded = next(line for line in out.splitlines() if line.startswith("MODULES ")).split()[1:]
    return {m for m in loaded if m.split(".")[0] in prefixes or m.startswith(prefixes)}


def test_cli_import_and_help_load_no_heavy_library():
    assert _modules_after("import provision.cli") == set()
    assert _modules_after("from provision.cli import main\ntry:\n main(['--help'])\nexcept SystemExit: pass") == set()
    assert _modules_after("from provision.cli import main\nmain(['up', '--help'])") == set()
    # nor what only some commands use, once they run (each costs milliseconds of every --help)
    assert _modules_after("from provision.cli import main\ntry:\n main(['--help'])\nexcept SystemExit: pass",
                          ("json", "hashlib", "difflib")) == set()


def test_a_missing_sweep_spec_is_answered_before_the_job_side_or_the_cloud_loads(tmp_path):
    code = (f"from provision.cli import main\nassert main(['sweep', '{tmp_path}/missing.yaml', '--provider', 'local']) == 2")
    assert _modules_after(code, ("jobs", "yaml", "optuna", "numpy", "provision.cloud", "provision.cluster",
                                 "provision.sweeps.create", "provision.runs")) == set()
    r = subprocess.run([str(Path(sys.executable).with_name("tpuctl")), "sweep", str(tmp_path / "missing.yaml")],
                       capture_output=True, text=True, cwd=REPO, check=False)
    assert (r.returncode, r.stderr) == (2, (f"tpuctl: error: sweep spec {tmp_path}/missing.yaml not found; "
                                           "pass the path of a sweep spec YAML (docs/sweeps.md)\n"))


def test_predict_says_not_a_saved_model_before_tensorflow_loads(tmp_path):
    text = tmp_path / "texts.tsv"
    text.write_text("a good film\n")
    code = (f"from jobs.bert.predict import main\nassert main(['{tmp_path}/nope', '{text}']) == 2")
    assert _modules_after(code, ("tensorflow", "keras", "numpy")) == set()
    r = subprocess.run([sys.executable, "-m", "jobs.bert.predict", str(tmp_path / "nope"), str(text)],
                       capture_output=True, text=True, cwd=REPO, check=False)
    assert (r.returncode, r.stderr) == (2, (f"tpuctl: error: {tmp_path}/nope is not a SavedModel "
                                           "directory (no saved_model.pb); pass a fine-tune's "
                                           "<model_dir>/saved_model\n"))


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
