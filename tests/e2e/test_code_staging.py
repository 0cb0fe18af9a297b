"""`tpuctl train --workdir DIR` stages what the user meant to ship, and `--dry-run` lists it: never a
dot path (a `.git/config` holding an access token went to the bucket), never a symlink (it may
point anywhere), nothing `.gitignore` or `.tpuctlignore` excludes (git's semantics: nested files,
anchored patterns, `!`, no way back under an excluded directory), no `__pycache__`, no file named
like a credential (`credentials.json`, `id_rsa`, `*.pem`, `terraform.tfstate`) unless the
`.tpuctlignore` names it (`!ca.pem`). The list is
read from the installed tpuctl's dry run; staging packs exactly it into the workdir archive (no
TensorFlow needed). `--code`, the old name, still works and says it is deprecated."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

from provision.basics.config import home
from provision.cloud.base import ClusterSpec
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.runs import store as runs
from provision.runs.training import Prepared, stage_run
from provision.staging import workdir
from provision.staging.selection import select
from tests.bert_dirs import config_only_bert
from tests.conftest import run_tpuctl_process

TOKEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
STAGED = ["ca.pem", "important.log", "main.py", "pkg/__init__.py", "pkg/data.csv", "pkg/mod.py"]
LEFT_OUT = [
    (".env", "a dot path"), (".git/", "a dot path"), (".gitignore", "a dot path"), (".tpuctlignore", "a dot path"),
    ("build/", "ignored by .gitignore"),
    ("credentials.json", ("a credentials file (a service-account key, an OAuth client secret): a line "
                          "!credentials.json in .tpuctlignore ships it")),
    ("creds", "a symlink"), ("data.csv", "ignored by .gitignore"), ("debug.log", "ignored by .gitignore"),
    ("id_rsa", "an SSH private key: a line !id_rsa in .tpuctlignore ships it"),
    ("infra/terraform.tfstate", ("Terraform state (it holds resources' secrets in plain text): a line "
                                 "!infra/terraform.tfstate in .tpuctlignore ships it")),
    ("linkdir", "a symlink"), ("notes.tmp", "ignored by .tpuctlignore"),
    ("pkg/.gitignore", "a dot path"), ("pkg/.secret.py", "a dot path"), ("pkg/__pycache__/", "Python bytecode"),
    ("pkg/generated.py", "ignored by pkg/.gitignore"),
    ("pkg/server.pem", "a private key or a certificate bundle: a line !pkg/server.pem in .tpuctlignore ships it"),
]


def _code_dir(root: Path) -> Path:
    outside = root / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text(TOKEN)
    code = root / "code"
    for rel, text in {
        "main.py": "import pkg.mod\n", "pkg/__init__.py": "", "pkg/mod.py": "X = 1\n", "pkg/data.csv": "a,b\n",
        "pkg/generated.py": "", "pkg/.secret.py": TOKEN, "pkg/__pycache__/mod.cpython-311.pyc": "",
        ".git/config": f"[remote \"origin\"]\n\turl = https://x-access-token:{TOKEN}@github.com/o/r.git\n",
        ".env": f"TOKEN={TOKEN}\n", "build/out.bin": "", "build/keep.txt": "", "debug.log": "",
        "important.log": "", "notes.tmp": "", "data.csv": "",
        # secrets by their names, and a public certificate the .tpuctlignore names, so it ships
        "credentials.json": f'{{"type": "service_account", "private_key": "{TOKEN}"}}', "id_rsa": TOKEN,
        "pkg/server.pem": TOKEN, "infra/terraform.tfstate": TOKEN, "ca.pem": "a public CA certificate\n",
        # git cannot re-include a file whose directory is excluded (build/keep.txt stays out)
        ".gitignore": "build/\n*.log\n!important.log\n!build/keep.txt\n/data.csv\n",
        "pkg/.gitignore": "generated.py\n", ".tpuctlignore": "*.tmp\n!ca.pem\n",
    }.items():
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        (code / rel).write_text(text)
    os.symlink(outside / "id_rsa", code / "creds")
    os.symlink(outside, code / "linkdir")
    return code


def _job_spec(root: Path) -> Path:
    bert = config_only_bert(root)
    (root / "train.tsv").write_text("a\t0\n")
    spec = root / "job.yaml"
    spec.write_text(f"job: bert-finetune\nbert_dir: {bert}\ntrain_file: {root}/train.tsv\ninit_checkpoint: none\n"
                    "max_seq_length: 32\nnum_train_steps: 10\n")
    return spec


def test_train_dry_run_lists_the_code_it_would_stage_and_leaves_secrets_and_links_out(tmp_path):
    code, spec = _code_dir(tmp_path), _job_spec(tmp_path)
    assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
    args = ["train", "lab", "--job", str(spec), "--workdir", str(code), "--dry-run", "--provider", "local"]
    doc = run_tpuctl_process(*args, "--json").json()
    assert doc["would_stage"] == ["spec.yaml", "tpuctl wheel"] + [f"workdir/{f}" for f in STAGED]
    assert [(s["path"], s["why"]) for s in doc["workdir_left_out"]] == LEFT_OUT
    human = run_tpuctl_process(*args)
    assert human.code == 0, human.err
    assert f"would stage 6 file(s) of the workdir {code}:\n" + "".join(f"  workdir/{f}\n" for f in STAGED) \
        in human.out
    assert "  left out .git/ (a dot path)\n" in human.out and "  left out creds (a symlink)\n" in human.out
    assert "  left out id_rsa (an SSH private key: a line !id_rsa in .tpuctlignore ships it)\n" in human.out
    old = run_tpuctl_process(*[a if a != "--workdir" else "--code" for a in args])
    assert old.code == 0 and "  workdir/main.py\n" in old.out, old.err
    assert "tpuctl: warning: --code is deprecated: pass --workdir DIR (the same directory)\n" in old.err


def test_staging_packs_exactly_the_selection_once(tmp_path):
    code = _code_dir(tmp_path)
    rec = runs.RunRecord(run_id=runs.new_run_id("lab"), cluster="lab", provider="local", project="local",
                         zone="us-central1-b", bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/m",
                         num_train_steps=10, save_checkpoints_steps=5, code=True)
    bucket = local_bucket("tpuctl-local")
    store = runs.RunStore(bucket, rec.run_id)
    prep = Prepared(record=rec, spec_yaml=b"job: bert-finetune\n", code=select(code),
                    cluster=ClusterSpec(name="lab", accelerator_type="v2-8", zones=("us-central1-b",)))
    said: list[str] = []
    entry = stage_run(store, prep, log=said.append, provider=LocalProvider(home()))
    archive = bucket.root / workdir.object_name(entry["workdir"])
    with tarfile.open(archive) as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == STAGED
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["workdir"]
    assert not any(TOKEN.encode() in p.read_bytes() for p in bucket.root.rglob("*") if p.is_file())
    # the same files again (another run of them): the archive has the same bytes and is not sent again
    rec2 = runs.RunRecord(**{**rec.to_dict(), "run_id": runs.new_run_id("lab")})
    again = stage_run(runs.RunStore(bucket, rec2.run_id), Prepared(record=rec2, spec_yaml=prep.spec_yaml,
                      code=select(code), cluster=prep.cluster), log=said.append, provider=LocalProvider(home()))
    assert again["workdir"] == entry["workdir"]
    assert any(line.startswith(f"already staged the workdir {code}: 6 files") for line in said)
