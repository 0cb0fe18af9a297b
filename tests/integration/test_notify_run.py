"""Notifications of a scripted run on the local provider, received by real servers on loopback.

The supervisor is the real one on the local provider (its TPU really goes PREEMPTED and is
recreated); the job is scripted as in test_overlapping_preemptions (no TensorFlow). Channels are
added with the installed ``tpuctl notify add`` (secrets on stdin) and chosen by the config file,
as a user does; the notifier is the one ``tpuctl train`` and the host's supervisor build from
the run's pinned notify.json. The receivers are an HTTP server (the webhook, and Slack's
incoming webhook) and aiosmtpd with STARTTLS and a login.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from provision.basics.config import home
from provision.cloud.local import LocalProvider
from provision.cloud.storage import local_bucket
from provision.notify import formats
from provision.notify.runtime import NOTIFY_FILE, chosen, digest, encode, for_run
from provision.runs import training
from provision.runs.policy import JobPhase
from provision.runs.store import RunRecord, RunStore
from provision.runs.supervisor import Supervisor
from tests.conftest import TPUCTL_BIN, run_tpuctl_process
from tests.integration.test_overlapping_preemptions import STEPS, ScriptedJob
from tests.receivers import http_receiver, smtp_server

SIGNING_KEY = "whsec-9f8e7d6c5b4a39281706"
SMTP_PASSWORD = "smtp-pass-5d4c3b2a1908"


@pytest.fixture
def receivers(tmp_path, monkeypatch, isolated_env):
    hook, slack = http_receiver(), http_receiver()
    mail = smtp_server(tmp_path, "tpuctl-bot", SMTP_PASSWORD)
    monkeypatch.setenv("SSL_CERT_FILE", str(mail.cert))       # the SMTP server's CA, as a real one's would be
    urls = {"hook": f"{hook.url}/in/hook-token-0123456789abcdef", "slack": f"{slack.url}/services/T01/B02/slacktoken0123456789"}
    for args, stdin in ((["hook", "--webhook"], f"{urls['hook']}\n{SIGNING_KEY}\n"),
                        (["slack", "--slack"], urls["slack"] + "\n"),
                        (["mail", "--email", "--smtp", mail.hostport, "--from", "tpuctl@example.com",
                          "--to", "oncall@example.com", "--user", "tpuctl-bot"], SMTP_PASSWORD + "\n")):
        proc = subprocess.run([str(TPUCTL_BIN), "notify", "add", *args], input=stdin, text=True,
                              capture_output=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        assert not any(s in proc.stdout + proc.stderr for s in (*urls.values(), SIGNING_KEY, SMTP_PASSWORD))
    Path(os.environ["TPUCTL_CONFIG"]).write_text(
        '[notify]\ndefault = ["hook", "slack", "mail"]\nretry_after = "0.2s"\nrate_limit = "2s"\n')
    yield hook, slack, mail, [*urls.values(), SIGNING_KEY, SMTP_PASSWORD, "hook-token-0123456789abcdef",
                              "slacktoken0123456789"]
    hook.close()
    slack.close()
    mail.close()


@pytest.fixture
def lab(monkeypatch):
    for var, value in (("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "0.1"), ("TPUCTL_LOCAL_VM_CREATE_SECONDS", "0.05"),
                       ("TPUCTL_LOCAL_DELETE_SECONDS", "0.05")):
        monkeypatch.setenv(var, value)
    assert run_tpuctl_process("up", "lab", "--preemptible").code == 0
    return LocalProvider(home())


def _run(provider: LocalProvider, tmp_path: Path, run_id: str, *, pin_it: bool = True):
    """A run record and its notify.json as train writes them, and the notifier its supervisor gets."""
    bucket = local_bucket("tpuctl-local")
    if not bucket.exists():
        bucket.create("local")
    store = RunStore(bucket, run_id)
    tpu = provider.get_tpu(*next((t.zone, t.name) for t in provider.list_tpus()))
    rec = RunRecord(run_id=run_id, cluster="lab", provider="local", project="local", zone=tpu.zone,
                    bucket="gs://tpuctl-local", model_dir=str(tmp_path / "model"), num_train_steps=STEPS,
                    save_checkpoints_steps=20, job="bert-finetune")
    store.save(rec)
    raw = encode(chosen(None, "lab", provider="local", detached=False))
    store.bucket.write_bytes(f"{store.prefix}/{NOTIFY_FILE}", raw)
    said: list[str] = []
    notifier = for_run(store, rec, {"notify": digest(raw)} if pin_it else None, said.append)
    spec = training.cluster_spec_for(provider, "lab", tpu, bucket=rec.bucket)
    return store, notifier, spec, said


def test_each_channel_gets_exactly_the_preemption_the_recreation_the_resume_and_the_finish(lab, receivers, tmp_path):
    hook, slack, mail, secrets = receivers
    hook.fail_next = 2                      # the webhook is down for its first two deliveries
    store, notifier, spec, said = _run(lab, tmp_path, "lab-notify")
    assert notifier is not None
    job = ScriptedJob(lab, tmp_path / "model", preempt_at=50)
    sup = Supervisor(lab, spec, store, job, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=said.append, notifier=notifier)
    rec = sup.run()                         # closes the notifier: the last notices go out first
    assert rec.status == "finished" and rec.preemptions == 1, said

    kinds = [r.json()["kind"] for r in hook.received]
    assert kinds == ["preempted", "recreated", "resumed", "finished"], kinds
    for r in hook.received:                 # signed, and the signature checks out
        assert formats.verify(SIGNING_KEY, r.headers["X-Tpuctl-Timestamp"], r.body, r.headers["X-Tpuctl-Signature"])
        assert r.json()["schema"] == "tpuctl.notification/v1" and r.json()["subject"] == "lab-notify"
    assert len(hook.refused) == 2 and hook.refused[0].body == hook.received[0].body
    finished = hook.received[-1].json()
    assert finished["fields"]["step"] == STEPS and finished["fields"]["preemptions"] == 1
    assert [r.json()["blocks"][0]["text"]["text"] for r in slack.received] == [
        "run lab-notify preempted (preemption 1)", "run lab-notify: TPU recreated in " + rec.zone,
        "run lab-notify resumed at step 40/100", "run lab-notify finished at step 100/100"]
    assert [m["Subject"] for m in mail.messages] == [
        "[tpuctl] run lab-notify preempted (preemption 1)", f"[tpuctl] run lab-notify: TPU recreated in {rec.zone}",
        "[tpuctl] run lab-notify resumed at step 40/100", "[tpuctl] run lab-notify finished at step 100/100"]
    assert mail.logins == [("tpuctl-bot", "ok")] * 4 and all(mail.tls_before_login)

    events = store.events()
    sent = [(e["channel"], e["notice"], e["tries"]) for e in events if e["event"] == "notify_sent"]
    assert sorted(sent) == sorted([("hook", "preempted", 3)] + [("hook", k, 1) for k in kinds[1:]]
                                  + [(c, k, 1) for c in ("slack", "mail") for k in kinds]), sent
    assert not [e for e in events if e["event"] == "notify_failed"]
    # no secret in what the supervisor said, the run's records, nor what tpuctl prints
    outputs = ["\n".join(said), store.bucket.read_bytes(f"{store.prefix}/events.jsonl").decode(),
               store.bucket.read_bytes(f"{store.prefix}/run.json").decode(),
               store.bucket.read_bytes(f"{store.prefix}/{NOTIFY_FILE}").decode()]
    for args in (("notify", "list"), ("notify", "list", "--json"), ("logs", "lab-notify", "--events"),
                 ("status", "--json")):
        r = run_tpuctl_process(*args)
        outputs.append(r.out + r.err)
    leaked = [s for s in secrets for out in outputs if s in out]
    assert not leaked, leaked


def test_a_preemption_storm_is_one_message_per_window_and_the_end_is_never_held(lab, receivers, tmp_path):
    hook, slack, mail, _secrets = receivers
    store, notifier, _spec, _said = _run(lab, tmp_path, "lab-storm")
    rec = store.load()
    t0 = time.time()
    for n in range(1, 7):                   # six preemptions within a second (rate_limit: 2s)
        notifier.run_event(store.event("preempted", preemption=n, step=10 * n, cause="the TPU was PREEMPTED"), rec)
    assert time.time() - t0 < 2.0           # queued, never waited for
    notifier.run_event(store.event("finished", step=STEPS), rec)
    deadline = time.time() + 20
    while len(hook.received) < 3 and time.time() < deadline:
        time.sleep(0.05)
    notifier.close()
    docs = [r.json() for r in hook.received]
    assert [(d["kind"], d["held_back"]) for d in docs] == [("preempted", 0), ("finished", 0), ("preempted", 4)], docs
    assert docs[2]["fields"]["preemption"] == 6          # the newest held one, standing for 2..5
    assert len(slack.received) == len(mail.messages) == 3
    assert "4 more like it held back" in slack.received[2].json()["text"]


def test_a_receiver_that_is_down_fails_the_message_not_the_run(lab, receivers, tmp_path):
    hook, slack, mail, secrets = receivers
    hook.close()                            # nothing listens there any more
    store, notifier, _spec, said = _run(lab, tmp_path, "lab-down")
    t0 = time.time()
    notifier.run_event(store.event("gave_up", reason="job errors: 4 (max 3)"), store.load())
    assert time.time() - t0 < 1.0
    notifier.close()
    failed = [e for e in store.events() if e["event"] == "notify_failed"]
    assert [(e["channel"], e["notice"], e["tries"], e["error"]) for e in failed] == [
        ("hook", "failed", 5, "connection refused")]
    assert len(slack.received) == 1 and len(mail.messages) == 1
    assert not [s for s in secrets if s in "\n".join(said) + json.dumps(store.events())]


def test_a_notify_json_a_bucket_writer_changed_is_not_used(lab, receivers, tmp_path):
    """The channels are pinned with the run: a notify.json that is not the pinned one sends nothing."""
    hook, _slack, _mail, _secrets = receivers
    _store, notifier, _spec, said = _run(lab, tmp_path, "lab-pinned", pin_it=False)
    assert notifier is None and "not the one pinned" in said[0]
    assert hook.received == []


def test_a_stuck_job_on_a_billing_tpu_is_stalled_once(lab, receivers, tmp_path):
    hook, _slack, _mail, _secrets = receivers
    store, notifier, spec, said = _run(lab, tmp_path, "lab-stall")

    class Stuck(ScriptedJob):
        def poll(self, rec, n):
            if self.step >= 30:             # stops moving at step 30, its TPU still READY
                return JobPhase.RUNNING, None
            return super().poll(rec, n)

    job = Stuck(lab, tmp_path / "model", preempt_at=None)
    sup = Supervisor(lab, spec, store, job, lambda rec, n, tpu: {"workers": {"0": {}}}, where="test",
                     poll_s=0.05, log=said.append, notifier=notifier, stall_after_s=0.5)
    sup.lease.acquire()
    deadline = time.time() + 10
    while time.time() < deadline and not any(e["event"] == "stalled" for e in store.events()):
        sup.step()
        time.sleep(0.05)
    for _ in range(5):
        sup.step()
    notifier.close()
    stalled = [e for e in store.events() if e["event"] == "stalled"]
    assert len(stalled) == 1 and stalled[0]["step"] == 30 and stalled[0]["seconds"] >= 0.5, stalled
    assert [r.json()["kind"] for r in hook.received] == ["stalled"]
    assert "no new step for" in hook.received[0].json()["text"]
