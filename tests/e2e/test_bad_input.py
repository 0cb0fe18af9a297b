"""Bad and hostile input through the real CLI: exit code 2, one ``tpuctl: error:`` line that names
the fix, no traceback, and nothing created, on the local provider (no records, no bucket files,
no runs) and against the fake cloud (no API call at all for what validation can see, and never
a create call).

Hostile values: shell metacharacters, ``$(...)``, backticks, newlines (also a trailing one, which
Python's ``$`` would let through), NULs, very long strings, look-alike Unicode letters and
digits, path traversal in bucket URLs, ``tpuctl stage`` paths and object names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from provision.basics.config import home

CREATES = ("compute.instances.insert", "tpu.v1.nodes.create", "tpu.v2.nodes.create", "tpu.v2.queuedResources.create",
           "compute.projects.setCommonInstanceMetadata", "compute.instances.setMetadata", "tpu.v2.nodes.patch")

LONG = "a" * 5000
HOSTILE_NAMES = ["x; touch /tmp/tpuctl-pwned", "$(touch /tmp/tpuctl-pwned)", "`id`", "bert\nlab", "bert\n", "bert\x00",
                 "a" * 64, "b\u0435rt", "BERT", "../etc", LONG, "bert lab", "bert-", "\u202ebert"]


def snapshot() -> set[str]:
    """Every file tpuctl keeps (records, buckets, runs), locks aside."""
    root = home()
    if not root.exists():
        return set()
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")}


def one_error(r, fragment: str | tuple[str, ...]) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
    assert len(lines) == 1, r.err
    fragments = (fragment,) if isinstance(fragment, str) else fragment
    assert any(f in lines[0] for f in fragments), lines[0]
    assert "; " in lines[0], f"the line names no fix: {lines[0]}"
    assert all(ch.isprintable() for ch in lines[0]), repr(lines[0])
    return lines[0]


UP_CASES = [
    # names
    *[(["up", name], "invalid cluster name") for name in HOSTILE_NAMES],
    # labels
    (["up", "b", "--label", "team=$(id)"], "invalid label value"),
    (["up", "b", "--label", "team=a\nb"], "invalid label value"),
    (["up", "b", "--label", "team=nlp\n"], "invalid label value"),
    (["up", "b", "--label", "te am=x"], "invalid label key"),
    (["up", "b", "--label", "\uff54eam=x"], "invalid label key"),
    (["up", "b", "--label", "tpuctl-cluster=other"], "reserved for tpuctl"),
    (["up", "b", "--label", f"k{'x' * 63}=v"], "invalid label key"),
    (["up", "b", "--label", "team=" + LONG], "invalid label value"),
    # zones
    (["up", "b", "--zone", "us-central1-b;id"], "invalid zone"),
    (["up", "b", "--zone", "us-central1-b\n"], "invalid zone"),
    (["up", "b", "--zone", "\u00fas-central1-b"], "invalid zone"),
    (["up", "b", "--zone", "../../projects/x"], "invalid zone"),
    (["up", "b", "--zone", "us-central1-b,$(id)"], "invalid zone"),
    (["up", "b", "--zone", "us-central1-b,,"], "invalid zone"),
    # accelerator types
    (["up", "b", "-a", "v2-8;id"], "unknown accelerator type"),
    (["up", "b", "-a", "$(id)"], "unknown accelerator type"),
    (["up", "b", "-a", "v2-9999"], "not a v2 slice size"),
    (["up", "b", "-a", "v\uff12-8"], "unknown accelerator type"),
    (["up", "b", "-a", LONG], "unknown accelerator type"),
    # CIDRs
    (["up", "b", "--arch", "node", "--cidr", "10.240.0.0/29;id"], "invalid CIDR"),
    (["up", "b", "--arch", "node", "--cidr", "10.240.0.1/29"], "host bits zero"),
    (["up", "b", "--arch", "node", "--cidr", "8.8.8.0/29"], "not private"),
    (["up", "b", "--arch", "node", "--cidr", "fd00::/64"], "not IPv4"),
    (["up", "b", "--arch", "node", "--cidr", "10.240.0.0/33"], "invalid CIDR"),
    # durations
    (["up", "b", "--timeout", "30m;id"], "invalid duration"),
    (["up", "b", "--timeout", "nan"], "invalid duration"),
    (["up", "b", "--timeout", "inf"], "invalid duration"),
    (["up", "b", "--timeout", "-1s"], "invalid duration"),
    (["up", "b", "--timeout", "1" * 400], "invalid duration"),
    (["up", "b", "--autodown", "$(id)"], "invalid duration"),
    (["up", "b", "--queued", "--valid-until", "1e9"], "invalid duration"),
    # buckets
    (["up", "b", "--bucket", "gs://bucket/../x"], "invalid object prefix"),
    (["up", "b", "--bucket", "gs://b$(id)ucket"], "invalid bucket name"),
    (["up", "b", "--bucket", "gs://bucket\n"], "invalid bucket name"),
    (["up", "b", "--bucket", "gs://bucket/a\x00b"], "invalid object prefix"),
    (["up", "b", "--bucket", "gs://goog-bucket"], "invalid bucket name"),
    (["up", "b", "--bucket", "gs://my-google-bucket"], "invalid bucket name"),
    (["up", "b", "--bucket", "s3://bucket"], "use gs://BUCKET"),
    (["up", "b", "--bucket", "gs://ex..ample"], "invalid bucket name"),
    # everything else that reaches a resource path or metadata
    (["up", "b", "--network", "default;id"], "invalid network name"),
    (["up", "b", "--subnetwork", "../../x"], "invalid subnetwork name"),
    (["up", "b", "--machine-type", "$(id)"], "invalid machine type"),
    (["up", "b", "--runtime-version", "`id`"], "invalid --runtime-version"),
    (["up", "b", "--arch", "node", "--tf-version", "2.12.0\n"], "invalid --tf-version"),
    (["up", "b", "--service-account", "a@b.c; id"], "invalid service account"),
    (["up", "b", "--project", "proj;id"], "invalid project id"),
    # click's own parse errors, in the same one-line form
    (["up", "b", "--arch", "gpu"], "Invalid value for '--arch'"),
    (["up", "b", "--zon", "x"], "tpuctl up has no option --zon; did you mean --zone?"),
    (["up"], "missing NAME; usage: tpuctl up [OPTIONS] NAME"),
]


@pytest.mark.parametrize("args, fragment", UP_CASES, ids=[f"up-{i}" for i in range(len(UP_CASES))])
def test_bad_up_input_on_the_local_provider(tpuctl, args, fragment):
    before = snapshot()
    r = tpuctl(*args)
    one_error(r, fragment)
    assert snapshot() == before
    assert not os.path.exists("/tmp/tpuctl-pwned")


@pytest.mark.parametrize("args, fragment", UP_CASES, ids=[f"up-{i}" for i in range(len(UP_CASES))])
def test_bad_up_input_against_the_fake_cloud(fakegcp_env, tpuctl, args, fragment, monkeypatch):
    monkeypatch.setenv("TPUCTL_ZONE", "us-central1-b")
    fakegcp_env.clear_calls()
    r = tpuctl(*args)
    one_error(r, fragment)
    counts = fakegcp_env.call_counts()
    assert not counts, counts      # refused before any API call


def test_an_unoffered_zone_needs_the_cloud_but_creates_nothing(fakegcp_env, tpuctl):
    r = tpuctl("up", "b", "--zone", "europe-west4-c", "-a", "v3-8")
    one_error(r, "not offered")
    assert not any(fakegcp_env.call_counts().get(c) for c in CREATES)


def test_json_mode_keeps_one_document_for_every_kind_of_error(tpuctl):
    for args in (["up", "Bad"], ["up", "b", "--arch", "gpu"], ["frobnicate"], ["stage", "a", "gs://x"]):
        r = tpuctl(*args, "--json")
        assert r.code == 2
        doc = json.loads(r.out)
        assert doc["ok"] is False and doc["exit_code"] == 2 and "\n" not in doc["error"]
        one_error(r, doc["error"][:20])


OTHER_CASES = [
    (["status", "--zone", "moon;id"], "invalid zone"),
    (["status", "x;id"], "invalid cluster name"),
    (["down", "$(id)"], "invalid cluster name"),
    (["down", "b", "--timeout", "forever"], "invalid duration"),
    (["down", "--idle", "--idle-for", "1e400"], "invalid duration"),
    (["simulate", "preempt", "b\n"], "invalid cluster name"),
    (["logs", "../../etc/passwd"], "invalid run id"),
    (["logs", "run\nid"], "invalid run id"),
    (["train", "b;id", "--job", "x.yaml"], "invalid cluster name"),
    (["train", "b", "--job", "/nonexistent/spec.yaml"], "not found"),
    (["train", "b", "--job", "x", "--set", "a;b=1"], "invalid --set"),
    (["train", "b", "--job", "x", "--set", "__import__('os').system('id')=1"], "invalid --set"),
    (["train", "b", "--job", "x", "--set", "novalue"], "invalid --set"),
    (["job", "run", "/nonexistent.yaml"], "not found"),
    (["job", "run", "x.yaml", "--set", "$(id)=1"], "invalid --set"),
]


@pytest.mark.parametrize("args, fragment", OTHER_CASES, ids=[f"cmd-{i}" for i in range(len(OTHER_CASES))])
def test_bad_input_to_other_commands(tpuctl, args, fragment):
    before = snapshot()
    one_error(tpuctl(*args), fragment)
    assert snapshot() == before


# --- tpuctl stage: bucket URLs and paths ------------------------------------------------------------

STAGE_URLS = ["gs://bucket/../../etc", "gs://bucket/a/../../b", "gs://bucket/./x", "gs://bucket/a\nb",
              "gs://bucket/a\x00b", "gs://b$(id)", "gs://bucket/" + "x" * 1000, "gs:/bucket/x", "gs:bucket",
              "s3://bucket/x", "file:///etc/passwd", "gs://bucket/a//b", "gs://BUCKET/x"]


@pytest.mark.parametrize("url", STAGE_URLS)
def test_stage_refuses_hostile_bucket_urls_in_either_position(tpuctl, tmp_path, url):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("x")
    before = snapshot()
    one_error(tpuctl("stage", str(src), url), ("invalid", "unsupported location", "empty path segment"))
    one_error(tpuctl("stage", url, str(tmp_path / "dst")), ("invalid", "unsupported location", "empty path segment"))
    assert snapshot() == before and not (tmp_path / "dst").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--jobs", "0"], "--jobs 0 is out of range"),
    (["--jobs", "100000"], "out of range"),
    (["--part-size", "9" * 400 + "M"], "invalid size"),
    (["--part-size", "1e9"], "invalid size"),
    (["--part-size", "1K"], "too small"),
    (["--location", "us;id"], "invalid bucket location"),
    (["--location", "us\n"], "invalid bucket location"),
])
def test_stage_refuses_bad_options(tpuctl, tmp_path, args, fragment):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("x")
    before = snapshot()
    one_error(tpuctl("stage", str(src), "gs://my-bucket/x", *args), fragment)
    assert snapshot() == before


def test_stage_never_writes_outside_dest_for_hostile_object_names(gcs_env, gcs_client, gcs_bucket, tpuctl, tmp_path):
    bucket = gcs_client.bucket(gcs_bucket)
    bucket.blob("data/ok.txt").upload_from_string(b"ok")
    bucket.blob("data/../../escape.txt").upload_from_string(b"evil")
    bucket.blob("data/a/./b.txt").upload_from_string(b"evil")
    dest = tmp_path / "deep" / "dest"
    names = {b.name for b in gcs_client.list_blobs(gcs_bucket)}
    assert "data/../../escape.txt" in names      # fake-gcs-server keeps the name as given, as GCS does
    r = tpuctl("stage", f"gs://{gcs_bucket}/data", str(dest))
    one_error(r, "is not a safe local path")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "deep" / "escape.txt").exists()
    assert not dest.exists() or not any(dest.rglob("*"))   # refused before anything was written
    # leaving them out is the fix the message names, and then only the safe object arrives
    r = tpuctl("stage", f"gs://{gcs_bucket}/data", str(dest), "--exclude", "../", "--exclude", "a/")
    if r.code == 0:
        assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == ["ok.txt"]


# --- job specs and checkpoint directories ----------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_bert) -> Path:
    return tiny_bert


def _spec(tmp_path: Path, tiny: Path, **values) -> Path:
    data = {"job": "bert-finetune", "model_dir": str(tmp_path / "model"), "bert_dir": str(tiny),
            "train_file": str(tiny / "train.tsv"), "max_seq_length": 32, "num_train_steps": 10}
    data.update(values)
    path = tmp_path / "spec.yaml"
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in data.items() if v is not None))
    return path


def _raw_spec(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "raw.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _bomb() -> str:
    parts = ['&x0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    parts += [f"&x{i} [" + ",".join([f"*x{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "job: bert-finetune\nmodel_dir: [" + ", ".join(parts) + "]\n"


SPEC_CASES = [
    ("wrong-type-int", lambda t, b: _spec(t, b, num_train_steps="ten"), "num_train_steps must be an integer"),
    ("wrong-type-map", lambda t, b: _spec(t, b, labels={"a": 1}), "labels must be a comma-separated list"),
    ("wrong-type-bool", lambda t, b: _spec(t, b, do_lower_case="maybe"), "do_lower_case must be a boolean"),
    ("infinite", lambda t, b: _spec(t, b, learning_rate=float("inf")), ("learning_rate must be", "learning_rate is")),
    ("huge-int", lambda t, b: _spec(t, b, num_train_steps=10 ** 30), "num_train_steps must be an integer"),
    ("unknown-key", lambda t, b: _spec(t, b, num_train_step=5), "did you mean 'num_train_steps'"),
    ("missing-train-file", lambda t, b: _spec(t, b, train_file=str(t / "nope.tsv")), "train_file"),
    ("not-a-mapping", lambda t, b: _raw_spec(t, "- job\n- bert-finetune\n"), ("must be a mapping", "is not a mapping")),
    ("scalar", lambda t, b: _raw_spec(t, "just text\n"), ("must be a mapping", "is not a mapping")),
    ("int-key", lambda t, b: _raw_spec(t, "1: x\njob: bert-finetune\n"), "is not a name"),
    ("unhashable-job", lambda t, b: _raw_spec(t, "job: [a, b]\n"), "unknown job"),
    ("billion-laughs", lambda t, b: _raw_spec(t, _bomb()), ("alias", "model_dir must be a string")),
    ("deep-nesting", lambda t, b: _raw_spec(t, "job: bert-finetune\nmodel_dir: " + "[" * 3000 + "]" * 3000 + "\n"),
     ("nests", "model_dir must be a string")),
    ("not-utf8", lambda t, b: _raw_spec(t, b"job: bert-finetune\nmodel_dir: \xff\xfe\n"), ("UTF-8", "not valid YAML")),
    ("nul-in-value", lambda t, b: _spec(t, b, train_file="a\x00b.tsv"), "train_file"),
    ("bert-dir-hostile", lambda t, b: _spec(t, b, bert_dir="$(touch /tmp/tpuctl-pwned)"), "bert_dir"),
]


def _bert_copy(tmp_path: Path, tiny: Path) -> Path:
    d = tmp_path / "bert"
    shutil.copytree(tiny, d)
    return d


def _config(d: Path, **changes) -> Path:
    cfg = json.loads((d / "bert_config.json").read_text())
    cfg.update(changes)
    (d / "bert_config.json").write_text(json.dumps(cfg))
    return d


CKPT_CASES = [
    ("no-vocab", lambda d: (d / "vocab.txt").unlink(), "has no vocab.txt"),
    ("no-config", lambda d: (d / "bert_config.json").unlink(), "has no bert_config.json"),
    ("config-not-json", lambda d: (d / "bert_config.json").write_text("{oops"), "not valid JSON"),
    ("config-wrong-type", lambda d: _config(d, hidden_size="32"), "not a positive integer"),
    ("config-zero-heads", lambda d: _config(d, num_attention_heads=0), "not a positive integer"),
    ("hidden-mismatch", lambda d: _config(d, hidden_size=64), "does not match checkpoint"),
    ("layers-fewer", lambda d: _config(d, num_hidden_layers=1), "more than num_hidden_layers 1"),
    ("layers-more", lambda d: _config(d, num_hidden_layers=4), "has no bert/encoder/layer_2"),
    ("vocab-mismatch", lambda d: _config(d, vocab_size=64), ("vocab.txt has", "does not match checkpoint")),
    ("no-data-shard", lambda d: next(d.glob("bert_model.ckpt.data-*")).unlink(), "is missing"),
    ("no-index", lambda d: (d / "bert_model.ckpt.index").unlink(), "no bert_model.ckpt.index"),
    ("corrupt-index", lambda d: (d / "bert_model.ckpt.index").write_bytes(b"\0" * 100), "not a TensorFlow checkpoint"),
]


@pytest.mark.parametrize("name, make, fragment", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_bad_job_specs_are_refused_by_job_run(tpuctl, tmp_path, tiny, name, make, fragment, monkeypatch):
    execs = []
    monkeypatch.setattr(os, "execv", lambda *a: execs.append(a))
    one_error(tpuctl("job", "run", str(make(tmp_path, tiny))), fragment)
    assert not execs and not os.path.exists("/tmp/tpuctl-pwned")


@pytest.mark.parametrize("name, damage, fragment", CKPT_CASES, ids=[c[0] for c in CKPT_CASES])
def test_bad_checkpoint_dirs_are_refused_by_job_run_before_tensorflow(tpuctl, tmp_path, tiny, name, damage, fragment,
                                                                     monkeypatch):
    execs = []
    monkeypatch.setattr(os, "execv", lambda *a: execs.append(a))
    d = _bert_copy(tmp_path, tiny)
    damage(d)
    one_error(tpuctl("job", "run", str(_spec(tmp_path, d))), fragment)
    assert not execs


@pytest.fixture
def cluster(tpuctl):
    assert tpuctl("up", "bad-in", "--no-vm").code == 0
    return "bad-in"


def _no_run_started(cluster: str) -> None:
    from provision.runs import store as runs

    assert runs.latest_for(cluster) is None
    assert not (home() / "local" / "buckets" / "tpuctl-local" / "tpuctl" / "runs").exists()


def test_bad_specs_and_checkpoints_are_refused_by_train_before_any_run(tpuctl, tmp_path, tiny, cluster):
    for name, make, fragment in SPEC_CASES:
        case = tmp_path / name
        case.mkdir()
        one_error(tpuctl("train", cluster, "--job", str(make(case, tiny))), fragment)
    for name, damage, fragment in CKPT_CASES:
        case = tmp_path / name
        case.mkdir()
        d = _bert_copy(case, tiny)
        damage(d)
        one_error(tpuctl("train", cluster, "--job", str(_spec(case, d))), fragment)
    _no_run_started(cluster)


def test_set_values_reach_the_job_as_data_never_through_a_shell(tpuctl, tmp_path, tiny, cluster, monkeypatch):
    marker = tmp_path / "pwned"
    hostile = f"$(touch {marker}); `touch {marker}` | touch {marker} && touch {marker}\n"
    spec = _spec(tmp_path, tiny)
    # tpuctl job run: the job process is exec'd with an argv list; the value is one argument
    execs = []
    monkeypatch.setattr(os, "execv", lambda path, argv: execs.append(argv))
    r = tpuctl("job", "run", str(spec), "--set", f"model_dir={hostile}")
    assert r.code == 0, r.err
    assert execs and execs[0][-2:] == ["--set", f"model_dir={hostile}"]
    # tpuctl train: the resolved spec carries it as a YAML string
    r = tpuctl("train", cluster, "--job", str(spec), "--set", f"model_dir={tmp_path}/m {hostile.strip()}",
               "--dry-run", "--json")
    assert r.code == 0, r.err
    assert r.json()["model_dir"].endswith(hostile.strip())
    assert not marker.exists()
    _no_run_started(cluster)
