"""The pure parts of notifications: what an event says, the formats, retries, the rate limit and
the stall rule, on a fake clock."""

from __future__ import annotations

import json

import pytest

from provision.basics.errors import UsageError
from provision.notify import formats
from provision.notify.messages import RunContext, notice_for, reaped_notice, sweep_notice
from provision.notify.policy import RateLimit, Retry, retriable_status
from provision.notify.settings import from_dict, parse_names, select
from provision.runs.stall import since_progress, stalled

RUN = RunContext(run_id="lab-1", cluster="lab", num_train_steps=400,
                 last_progress={"loss": 0.25, "metrics": {"eval_accuracy": 0.91, "odd": "x"}},
                 preemptions=2, seconds_lost=95.0)


def test_each_run_event_people_are_told_of_has_its_words():
    said = {e: notice_for({"event": e, "time": 1.0, **f}, RUN) for e, f in (
        ("preempted", {"preemption": 2, "step": 160, "checkpoint_step": 150, "cause": "the TPU was PREEMPTED"}),
        ("recreated", {"zone": "us-central1-b", "seconds": 61.2}),
        ("resumed", {"step": 150, "steps_lost": 10, "seconds_lost": 95.0}),
        ("stalled", {"step": 160, "seconds": 1900}),
        ("job_failed", {"exit_code": 1, "reason": "job error"}),
        ("gave_up", {"reason": "4 job errors (max 3)"}),
        ("finished", {"step": 400}),
        ("budget_stop", {"spent_usd": 120.5, "budget_usd": 120}))}
    assert said["preempted"].text == ("run lab-1 preempted (preemption 2) at step 160/400; last checkpoint 150; "
                                      "the TPU was PREEMPTED; tpuctl is recreating the TPU")
    assert said["recreated"].text == "run lab-1: TPU recreated in us-central1-b after 1m1s; the job restarts"
    assert said["resumed"].text == "run lab-1 resumed at step 150/400; lost 10 step(s) and 1m35s"
    assert said["stalled"].text == "run lab-1 stalled at step 160/400: no new step for 31m40s while the TPU bills"
    assert said["job_failed"].kind == "failed" and not said["job_failed"].final
    assert said["gave_up"].kind == "failed" and said["gave_up"].final
    assert said["finished"].text == ("run lab-1 finished at step 400/400: loss 0.25, eval_accuracy 0.91; "
                                     "2 preemption(s) cost 1m35s")
    assert said["finished"].fields["metrics"] == {"loss": 0.25, "eval_accuracy": 0.91} and said["finished"].final
    assert said["budget_stop"].final and said["budget_stop"].fields["spent_usd"] == 120.5
    assert notice_for({"event": "attempt_started"}, RUN) is None
    assert notice_for({"event": "notify_sent"}, RUN) is None


def test_odd_fields_from_the_bucket_are_left_out_not_fatal():
    n = notice_for({"event": "preempted", "preemption": "many", "step": [1], "cause": {"x": 1}}, RUN)
    assert n.text == "run lab-1 preempted at step ?; tpuctl is recreating the TPU"
    assert notice_for({"event": ["preempted"]}, RUN) is None


def test_reaped_and_sweep_notices_say_what_they_save_and_which_trial_leads():
    r = reaped_notice("lab", "lab", "us-central1-b", "v3-8", 2.4, "idle for 31m (no live run)", 5.0)
    assert r.text == ("cluster lab: TPU lab deleted (v3-8 in us-central1-b): idle for 31m (no live run); "
                      "saves $2.40/hour at list price")
    b = sweep_notice("sweep_best", "sweep-1", metric_name="eval_accuracy", metric=0.9134, trial=3,
                     params={"learning_rate": 3e-5}, when=1.0)
    assert b.text == "sweep sweep-1: new best trial 3 eval_accuracy 0.9134 (learning_rate=3e-05)" and not b.final
    e = sweep_notice("sweep_ended", "sweep-1", metric_name="eval_accuracy", metric=None, trial=None, params=None,
                     when=1.0, state="finished")
    assert e.final and e.text == "sweep sweep-1 finished; no trial reported"


def test_the_webhook_signature_covers_the_timestamp_and_the_body():
    n = notice_for({"event": "finished", "step": 400, "time": 2.0}, RUN)
    body = formats.webhook_body(n)
    sig = formats.signature("key-123", 1700000000, body)
    assert formats.verify("key-123", "1700000000", body, sig)
    assert not formats.verify("key-123", "1700000001", body, sig)
    assert not formats.verify("other", "1700000000", body, sig)
    assert json.loads(body)["schema"] == "tpuctl.notification/v1"


def test_slack_text_escapes_what_mrkdwn_would_read_as_links_or_mentions():
    n = notice_for({"event": "gave_up", "reason": "<!channel> & <http://evil|click>"}, RUN)
    doc = json.loads(formats.slack_body(n))
    assert "<!channel>" not in doc["text"] and "&lt;!channel&gt; &amp; &lt;http://evil|click&gt;" in doc["text"]


def test_retries_back_off_with_jitter_up_to_a_cap_then_give_up():
    r = Retry(attempts=5, base=2.0, cap=10.0)
    assert [r.delay(i, 0.999999) for i in range(1, 5)] == pytest.approx([2.0, 4.0, 8.0, 10.0], rel=1e-5)
    assert r.delay(1, 0.0) == 1.0 and r.delay(5, 0.5) is None
    assert [s for s in (400, 401, 403, 404, 408, 429, 500, 503) if retriable_status(s)] == [408, 429, 500, 503]


def test_a_storm_is_one_notice_per_window_and_the_rest_summed_up():
    limit = RateLimit(window=600)
    storm = [notice_for({"event": "preempted", "preemption": i, "time": i}, RUN) for i in range(1, 11)]
    sent = [limit.offer(n, now=100 + i) for i, n in enumerate(storm)]
    assert sent[0] is storm[0] and sent[1:] == [None] * 9
    assert limit.due(now=650) == [] and limit.next_due() == 700
    [summary] = limit.due(now=700)
    assert summary.fields["preemption"] == 10 and summary.held == 8          # it stands for 2..9 too
    assert limit.due(now=1400) == [] and limit.next_due() is None
    # another kind, another run and a notice that ends the run are never held by this one
    assert limit.offer(notice_for({"event": "resumed"}, RUN), now=101) is not None
    other = RunContext(run_id="lab-2")
    assert limit.offer(notice_for({"event": "preempted"}, other), now=101) is not None
    end = notice_for({"event": "finished"}, RUN)
    assert limit.offer(end, now=102) is end and limit.offer(end, now=103) is end


def test_a_stall_is_no_new_step_for_long_while_the_job_runs_on_a_billing_tpu():
    last = since_progress({"step_time": 1000.0}, attempt_started_at=900.0)
    assert last == 1000.0 and since_progress({"step_time": None}, 1200.0) == 1200.0
    assert stalled(now=2800, last_moved=last, job_running=True, tpu_billing=True, stall_after=1800) == 1800
    assert stalled(now=2799, last_moved=last, job_running=True, tpu_billing=True, stall_after=1800) is None
    assert stalled(now=9999, last_moved=last, job_running=False, tpu_billing=True, stall_after=1800) is None
    assert stalled(now=9999, last_moved=last, job_running=True, tpu_billing=False, stall_after=1800) is None
    assert stalled(now=9999, last_moved=last, job_running=True, tpu_billing=True, stall_after=None) is None


SAVED = {"team": {"kind": "slack", "secret": "local:team"},
         "mail": {"kind": "email", "secret": "sm://projects/my-project/secrets/smtp", "smtp": "smtp.example.com:587",
                  "from": "tpuctl@example.com", "to": ["me@example.com"], "user": "bot"}}


def test_the_channels_come_from_notify_then_the_cluster_then_the_default():
    config = {"default": ["team"], "clusters": {"bert-lab": {"channels": ["mail"]}}, "stall_after": "45m"}
    assert [c.name for c in select(None, "other", config, SAVED).channels] == ["team"]
    assert [c.name for c in select(None, "bert-lab", config, SAVED).channels] == ["mail"]
    assert [c.name for c in select(["mail", "team"], "x", config, SAVED).channels] == ["mail", "team"]
    assert select(["none"], "x", config, SAVED).channels == ()
    assert select(None, "x", config, SAVED).stall_after_s == 2700
    assert parse_names(("a,b", "c")) == ["a", "b", "c"] and parse_names(()) is None


@pytest.mark.parametrize("config,names,message", [
    ({}, ["nope"], "no notification channel named nope"),
    ({"events": ["preemptd"]}, ["team"], "[notify] events: unknown kind 'preemptd'"),
    ({"channels": {"x": {"kind": "slack", "secret": "https://hooks.slack.com/services/T/B/X"}}}, ["x"],
     "channel x: secret must be a reference, not a URL"),
    ({"channels": {"m": {"kind": "email", "secret": "local:m", "smtp": "smtp", "from": "a@b.c", "to": "d@e.f"}}},
     ["m"], "channel m: smtp must be HOST:PORT"),
    ({"rate_limit": "soon"}, ["team"], "[notify] rate_limit: invalid duration 'soon'"),
])
def test_bad_settings_are_one_line_that_names_the_fix(config, names, message):
    with pytest.raises(UsageError) as err:
        select(names, None, config, SAVED)
    assert err.value.message == message and err.value.hint


def test_a_notify_json_read_back_keeps_only_what_it_may_hold():
    s = select(["team", "mail"], None, {"events": ["finished"]}, SAVED)
    back = from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    assert from_dict({"channels": [{"name": "x", "kind": "slack", "secret": "file:///etc/shadow"}]}) is None
    assert from_dict([1, 2]) is None


def test_a_detached_gcp_run_cannot_use_a_secret_kept_on_this_machine(tmp_path, monkeypatch):
    """The host VM supervises it and cannot read this machine's file: refused before anything."""
    import os
    from pathlib import Path

    from provision.notify.runtime import chosen

    Path(os.environ["TPUCTL_CONFIG"]).write_text(
        '[notify.channels.here]\nkind = "slack"\nsecret = "local:here"\n'
        '[notify.channels.sm]\nkind = "slack"\nsecret = "sm://projects/my-project/secrets/slack"\n')
    assert [c.name for c in chosen(["here"], None, provider="gcp", detached=False).channels] == ["here"]
    assert [c.name for c in chosen(["here"], None, provider="local", detached=True).channels] == ["here"]
    assert [c.name for c in chosen(["sm"], None, provider="gcp", detached=True).channels] == ["sm"]
    with pytest.raises(UsageError) as err:
        chosen(["sm", "here"], None, provider="gcp", detached=True)
    assert err.value.message.startswith("channel here's secret is kept on this machine")
    assert "sm://projects/PROJECT/secrets/NAME" in err.value.hint


def test_strings_from_a_bucket_reach_a_notification_through_the_terminal_filter():
    """docs/security.md, Output: one filter for every string from a bucket on its way to a person,
    a notification's too (a bucket writer's reason with an OSC 8 link, or a bidi override)."""
    from provision.notify.messages import _text

    assert _text("stopped \x1b]8;;https://evil.example\x07here\x1b]8;;\x07 \u202etxt") == \
        "stopped ?]8;;https://evil.example?here?]8;;? ?txt"
