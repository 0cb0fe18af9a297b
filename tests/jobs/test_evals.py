"""Evaluation during training: ``eval_every_steps`` fills progress.json's ``evals`` (what a
sweep's pruner reads), the ``eval/`` scalars and, with ``hparams``, a TensorBoard HParams
session; a stopped and resumed run keeps its earlier entries and reproduces the same metrics."""

from __future__ import annotations

import json
import signal
import struct

import pytest

from jobs import spec as spec_lib
from jobs.runner import progress
from jobs.spec import SpecError

from .conftest import finetune_spec, job_env, read_progress, run_job, start_job, wait_for

TF = [pytest.mark.tf]


# -- the contract the control plane reads, without TensorFlow ---------------------------------

def test_reported_metrics_by_job_and_by_spec(tmp_path, tiny_dir):
    assert spec_lib.reported_metrics("bert-finetune") == ("eval_accuracy", "eval_loss")
    assert spec_lib.reported_metrics(spec_lib.SquadSpec) == ("exact_match", "f1")
    assert spec_lib.reported_metrics("bert-pretrain") == (
        "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss")
    with pytest.raises(SpecError, match="unknown job 'bert-nope'"):
        spec_lib.reported_metrics("bert-nope")
    spec = spec_lib.load(str(finetune_spec(tmp_path, tiny_dir)))
    assert spec_lib.reported_metrics(spec) == ("eval_accuracy", "eval_loss")
    spec = spec_lib.load(str(finetune_spec(tmp_path, tiny_dir, dev_file=None)))
    assert spec_lib.reported_metrics(spec) == ()  # no dev set: nothing to evaluate


def test_eval_and_hparams_keys_are_checked_in_one_line(tmp_path, tiny_dir):
    path = str(finetune_spec(tmp_path, tiny_dir))
    spec = spec_lib.load(path, ["eval_every_steps=50", "hparams=learning_rate,labels,seed"])
    assert spec.eval_every_steps == 50
    assert spec.hparam_values() == {"learning_rate": 1e-3, "labels": "null", "seed": 12345}
    with pytest.raises(SpecError) as bad:
        spec_lib.load(path, ["eval_every_steps=-1"])
    assert "eval_every_steps is -1" in str(bad.value) and "\n" not in str(bad.value)
    with pytest.raises(SpecError) as bad:
        spec_lib.load(path, ["hparams=learning_rate,learnig_rate"])
    message = str(bad.value)
    assert "\n" not in message
    assert "hparams names 'learnig_rate'" in message and "did you mean 'learning_rate'?" in message
    assert "valid keys: " in message and "train_batch_size" in message and "dev_file" in message


def test_old_records_parse_and_malformed_evals_are_skipped():
    old = progress.parse('{"step": 3, "status": "finished", "metrics": {"eval_accuracy": 0.5}}')
    assert old.evals == [] and json.loads(old.to_json())["evals"] == []
    evals = [{"step": 20, "metrics": {"eval_loss": 0.5, "eval_accuracy": 0.75}},
             {"step": 10, "metrics": {"eval_accuracy": 0.5, "note": "x"}},
             {"step": "30", "metrics": {}}, None, {"step": 40}]
    assert progress.metric_curve(evals, "eval_accuracy") == [(10, 0.5), (20, 0.75)]
    assert progress.metric_curve(evals, "eval_loss") == [(20, 0.5)]
    assert progress.clean_evals(evals)[0] == {"step": 10, "metrics": {"eval_accuracy": 0.5}}
    assert progress.metric_curve("garbage", "f1") == []


# -- the job side ------------------------------------------------------------------------------

def hparams_sessions(model_dir) -> list[dict]:
    """The HParams session start infos in ``model_dir``'s event files, decoded with protobuf
    from the plugin's field numbers (tensorboard/plugins/hparams/plugin_data.proto)."""
    import tensorflow as tf
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="hp_test.proto", package="hp_test",
                                              syntax="proto3",
                                              dependency=["google/protobuf/struct.proto"])
    info = file.message_type.add(name="SessionStartInfo")
    entry = info.nested_type.add(name="HparamsEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Value")
    info.field.add(name="hparams", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                   type_name=".hp_test.SessionStartInfo.HparamsEntry")
    info.field.add(name="group_name", number=4, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    info.field.add(name="start_time_secs", number=5, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    data = file.message_type.add(name="HParamsPluginData")
    data.field.add(name="version", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    data.field.add(name="session_start_info", number=3, type=F.TYPE_MESSAGE,
                   label=F.LABEL_OPTIONAL, type_name=".hp_test.SessionStartInfo")
    pool = descriptor_pool.DescriptorPool()
    struct_file = descriptor_pb2.FileDescriptorProto()
    struct_pb2.DESCRIPTOR.CopyToProto(struct_file)
    pool.Add(struct_file)
    pool.Add(file)
    PluginData = message_factory.GetMessageClass(pool.FindMessageTypeByName("hp_test.HParamsPluginData"))

    sessions = []
    for events in sorted((model_dir / "tb").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                assert value.metadata.plugin_data.plugin_name == "hparams"
                assert value.tag == "_hparams_/session_start_info"
                start = PluginData.FromString(value.metadata.plugin_data.content).session_start_info
                sessions.append({k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                                 for k, v in start.hparams.items()})
    return sessions


def eval_scalars(model_dir) -> dict[int, dict[str, float]]:
    import tensorflow as tf

    out: dict[int, dict[str, float]] = {}
    for events in sorted((model_dir / "tb" / "eval").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                number = struct.unpack("<f", value.tensor.tensor_content)[0] \
                    if value.tensor.tensor_content else value.tensor.float_val[0]
                out.setdefault(event.step, {})[value.tag] = number
    return out


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.long
def test_finetune_evals_survive_a_stop_and_resume_with_the_same_metrics(tmp_path, tiny_dir):
    """Two replicas (MirroredStrategy), 80 steps, evaluation every 20. The straight run has
    evals at 20, 40, 60, 80. The other run is SIGTERMed after its eval at 20 and resumed with
    ``eval_every_steps=40``: it keeps the entry at 20, evaluates at 40 and 80 with the straight
    run's metrics -- and since it skipped the straight run's evaluation at 60 and still ends with
    the same metrics, evaluating disturbs neither the input stream nor the dropout keys."""
    settings = {"num_train_steps": 80, "eval_every_steps": 20, "save_checkpoints_steps": 50,
                "steps_per_execution": 5,
                "hparams": ["learning_rate", "train_batch_size", "do_lower_case", "precision"]}
    env = job_env(TPUCTL_CPU_REPLICAS="2", TPUCTL_HEARTBEAT_SECONDS="0.2")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    straight = run_job(finetune_spec(tmp_path / "a", tiny_dir, **settings), env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "2 replica(s)" in straight.stderr
    a_dir = tmp_path / "a" / "run"
    record = read_progress(a_dir)
    want = {e["step"]: e["metrics"] for e in record["evals"]}
    assert sorted(want) == [20, 40, 60, 80]
    assert all(set(m) == {"eval_accuracy", "eval_loss"} for m in want.values())
    assert {k: record["metrics"][k] for k in want[80]} == want[80]  # the final metrics, as before
    results = json.loads((a_dir / "eval_results.json").read_text())
    assert results["eval_examples"] == 160 and results["eval_accuracy"] == want[80]["eval_accuracy"]
    assert want[80]["eval_accuracy"] > want[20]["eval_accuracy"]  # it learns between evals
    scalars = eval_scalars(a_dir)
    assert sorted(scalars) == [20, 40, 60, 80]
    assert scalars[40]["eval_accuracy"] == pytest.approx(want[40]["eval_accuracy"], rel=1e-6)
    assert hparams_sessions(a_dir) == [{"learning_rate": pytest.approx(1e-3), "train_batch_size": 16,
                                        "do_lower_case": True, "precision": "auto"}]

    spec = finetune_spec(tmp_path / "b", tiny_dir, **settings)
    b_dir = tmp_path / "b" / "run"
    proc = start_job(spec, env=env)
    wait_for(lambda: (read_progress(b_dir) or {}).get("step", 0) >= 25, proc, what="step 25")
    proc.send_signal(signal.SIGSTOP)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 42, output[-3000:]
    stopped = read_progress(b_dir)
    assert 25 <= stopped["step"] < 80 and stopped["evals"][0]["step"] == 20

    resumed = run_job(spec, "eval_every_steps=40", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {b_dir / 'ckpt-'}" in resumed.stderr
    got = {e["step"]: e["metrics"] for e in read_progress(b_dir)["evals"]}
    assert 20 in got and 40 in got and 80 in got and set(got) <= {20, 40, 60, 80}
    for step, metrics in got.items():
        assert metrics == pytest.approx(want[step], rel=1e-6), step
