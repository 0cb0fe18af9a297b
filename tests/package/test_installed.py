"""What users install: the sdist and the wheel that ``python -m build`` makes (the wheel built from
the sdist, as pip builds one), each installed into a fresh venv in a temporary folder outside the
checkout, its dependencies from the package registry and without the train extra, then the
installed ``tpuctl`` run from a folder with no ``templates/`` in it, as a user runs it.

The checkout's editable install never shows what a wheel lacks: its ``templates/`` is a folder
next to the code. ``make test-package`` runs this module (in .ci/run); ``make test`` leaves it
out (marked ``package``): it installs two venvs from the registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.package

TEMPLATES = sorted(p.name for p in (REPO / "templates").iterdir() if p.is_file())


def _sources() -> list[str]:
    """The checkout's Python files under provision/ and jobs/, as git tracks them."""
    out = subprocess.run(["git", "ls-files", "provision", "jobs"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.split()
    return sorted(p for p in out if p.endswith(".py"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist and the wheel of this checkout."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], cwd=out,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"python -m build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


@dataclass(frozen=True)
class Installed:
    """A fresh venv with tpuctl installed from one artifact, and a folder outside the checkout."""

    kind: str
    venv: Path
    cwd: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", **extra)
        return env

    def tpuctl(self, *args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "tpuctl"), *args], cwd=self.cwd, env=self.env(**extra),
                              capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(request, dist, tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp(f"installed-{request.param}")
    artifact = _one(dist, "*.whl" if request.param == "wheel" else "*.tar.gz")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # --no-compile: byte-compiling the dependencies was a third of the install (36 s vs 24 s)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
                           "--disable-pip-version-check", str(artifact)], cwd=root, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"pip install {artifact.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (root / "work").mkdir()
    return Installed(request.param, venv, root / "work")


def test_the_wheel_ships_the_templates_and_the_code_not_the_tests(dist):
    with zipfile.ZipFile(_one(dist, "*.whl")) as whl:
        names = set(whl.namelist())
    assert "provision/templates/host-startup.sh" in names and "provision/templates/host-bootstrap.sh" in names
    missing = [n for n in [f"provision/templates/{t}" for t in TEMPLATES] + _sources() if n not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert not [n for n in names if n.startswith("tests/")], "the fake cloud and the tests are test-only"


def test_the_sdist_holds_what_the_wheel_is_built_from(dist):
    sdist = _one(dist, "*.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    missing = [n for n in ["pyproject.toml", "README.md", *[f"templates/{t}" for t in TEMPLATES], *_sources()]
               if n not in names]
    assert not missing, f"the sdist lacks {missing}"
    assert not [n for n in names if n.startswith("tests/")]


def test_help_answers_from_the_installed_copy(installed):
    r = installed.tpuctl("--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: tpuctl"), r
    where = subprocess.run([str(installed.venv / "bin" / "python"), "-c", "import provision; print(provision.__file__)"],
                           cwd=installed.cwd, env=installed.env(), capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(installed.venv)), where.stdout  # not the checkout's


def test_local_up_train_dry_run_down(installed, tiny_bert):
    """The README tour's commands on the local provider, --job named as the docs name it."""
    steps = [
        ["up", "lab", "--provider", "local", "--zone", "us-central1-b", "--accelerator-type", "v2-8"],
        ["stage", str(tiny_bert), "gs://my-bucket/bert/tiny", "--create-bucket", "--provider", "local"],
        ["train", "lab", "--provider", "local", "--job", "templates/bert-pretrain-tiny.yaml", "--bucket",
         "gs://my-bucket", "--dry-run", "--json", "--set", "bert_dir=gs://my-bucket/bert/tiny",
         "--set", "corpus_files=gs://my-bucket/bert/tiny/corpus.txt"],
        ["down", "lab", "--provider", "local"],
    ]
    for argv in steps:
        r = installed.tpuctl(*argv)
        assert r.returncode == 0, (installed.kind, argv, r.stderr[-2000:])
        if argv[0] == "train":
            doc = json.loads(r.stdout)     # the tiny spec tpuctl ships: 300 steps
            assert (doc["job"], doc["num_train_steps"]) == ("bert-pretrain", 300), doc
    r = installed.tpuctl("status", "--provider", "local", "--json")
    assert json.loads(r.stdout)["clusters"] == []


def test_gcp_up_down_against_the_fake_cloud(installed, fakegcp):
    """`up` on Google Cloud sends the host's bootstrap (templates/host-bootstrap.sh, pinning the
    sha256 of templates/host-startup.sh) as VM metadata: a wheel without them ended `internal error:
    FileNotFoundError`."""
    r = installed.tpuctl("up", "lab", "--zone", "us-central1-b", "--accelerator-type", "v2-8", "--preemptible",
                         **fakegcp.env())
    assert r.returncode == 0, (installed.kind, r.stderr[-2000:])
    scripts = {item["key"]: item["value"] for vm in fakegcp.resources()["instances"]
               for item in vm.get("metadata", {}).get("items", [])}
    import hashlib

    from provision.cloud import startup

    assert scripts["startup-script"] == startup.current().bootstrap
    assert hashlib.sha256((REPO / "templates" / "host-startup.sh").read_bytes()).hexdigest() in scripts["startup-script"]
    r = installed.tpuctl("down", "lab", **fakegcp.env())
    assert r.returncode == 0, (installed.kind, r.stderr[-2000:])
    assert not fakegcp.resources()["instances"] and not fakegcp.resources()["nodes"]
