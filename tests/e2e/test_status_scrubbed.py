"""``tpuctl status`` in text scrubs credentials from what others wrote, as ``--json`` does.

A host's bootstrap message and log line and a run's reason come from the bucket (written by the
hosts, the supervisor, or anyone who can write the bucket) and may quote a credential a job or
library logged: a chat webhook, a GitHub or Slack token, an AWS key id. Only ``--json`` scrubbed
them; the text a person reads (and pastes into a ticket) showed them as they were."""

from __future__ import annotations

import json
import os
import subprocess

from provision.cloud.storage import local_bucket
from provision.runs import store as runs
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

SLACK = "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/a1B2c3D4e5F6g7H8i9J0k1L2"
GITHUB = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
AWS = "AKIAIOSFODNN7EXAMPLE"
SLACK_BOT = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"


def test_status_text_scrubs_bootstrap_messages_log_lines_and_run_reasons():
    assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
    rec = runs.RunRecord(run_id=runs.new_run_id("lab"), cluster="lab", provider="local", project="local",
                         zone="us-central1-b", bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/m",
                         num_train_steps=10, save_checkpoints_steps=5, status="gave_up", attempts=1,
                         reason=f"notify failed: POST {SLACK} answered 404; key {AWS}")
    bucket = local_bucket("tpuctl-local")
    runs.RunStore(bucket, rec.run_id).save(rec)
    runs.remember(rec)
    bucket.write_bytes("tpuctl/clusters/lab/bootstrap/host-0.json", json.dumps({
        "role": "host", "worker": "0", "state": "failed", "step": "pip",
        "message": f"pip failed with GITHUB_TOKEN {GITHUB}", "log_tail": [f"slack said no to {SLACK_BOT}"]}).encode())
    res = subprocess.run([str(TPUCTL_BIN), "status", "--provider", "local"], cwd=REPO, env=dict(os.environ),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    for secret in (SLACK, GITHUB, AWS, SLACK_BOT, "a1B2c3D4e5F6g7H8i9J0k1L2"):
        assert secret not in res.stdout + res.stderr, secret
    lines = res.stdout.splitlines()
    assert ("lab: host bootstrap failed: host-0 at pip: pip failed with GITHUB_TOKEN <redacted-github-token> (its "
            "log: tpuctl-bootstrap.log on that host; last line: slack said no to <redacted-slack-token>)") in lines
    assert (f"{rec.run_id} stopped: notify failed: POST https://hooks.slack.com/services/<redacted> answered 404; "
            "key <redacted-aws-key-id>") in lines
