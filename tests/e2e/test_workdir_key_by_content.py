"""`tpuctl train --workdir DIR` refuses a service-account key saved under the name the Cloud
console gives it (``PROJECT-1a2b3c4d5e6f.json``): no name rule catches that one, so a JSON file is
also refused by what it holds (a credential's "type", a "private_key"), unless the
``.tpuctlignore`` names it. Ordinary JSON (a model's config) still ships. Whatever is staged is
readable by everyone who reads the bucket, and by the job and its dependencies on the hosts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bert_dirs import config_only_bert
from tests.conftest import run_tpuctl_process

KEY = {"type": "service_account", "project_id": "my-proj", "private_key_id": "1a2b3c4d5e6f",
       "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n",
       "client_email": "trainer@my-proj.iam.gserviceaccount.com"}


def test_a_service_account_key_under_its_download_name_is_left_out_unless_named(tmp_path):
    code = tmp_path / "code"
    (code / "conf").mkdir(parents=True)
    (code / "main.py").write_text("print('hi')\n")
    (code / "my-proj-1a2b3c4d5e6f.json").write_text(json.dumps(KEY, indent=2))
    (code / "conf" / "model.json").write_text(json.dumps({"hidden_size": 16, "type": "bert"}))
    (code / "conf" / "deploy.JSON").write_text(json.dumps({"private_key": "x", "note": "named below"}))
    (code / ".tpuctlignore").write_text("!conf/deploy.JSON\n")
    bert = config_only_bert(tmp_path)
    (tmp_path / "train.tsv").write_text("a\t0\n")
    spec: Path = tmp_path / "job.yaml"
    spec.write_text(f"job: bert-finetune\nbert_dir: {bert}\ntrain_file: {tmp_path}/train.tsv\n"
                    "init_checkpoint: none\nmax_seq_length: 32\nnum_train_steps: 10\n")
    assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
    doc = run_tpuctl_process("train", "lab", "--job", str(spec), "--workdir", str(code), "--dry-run",
                             "--provider", "local", "--json").json()
    assert [f for f in doc["would_stage"] if f.startswith("workdir/")] == [
        "workdir/conf/deploy.JSON", "workdir/conf/model.json", "workdir/main.py"]
    assert {"path": "my-proj-1a2b3c4d5e6f.json",
            "why": ("a credentials file by its content (a service-account key, a user's credentials): a line "
                    "!my-proj-1a2b3c4d5e6f.json in .tpuctlignore ships it")} in doc["workdir_left_out"]
