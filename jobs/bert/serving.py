"""``<model_dir>/saved_model``: a fine-tuned model as a TensorFlow SavedModel for serving.

The ``serving_default`` signature takes the original feature names ``input_ids``,
``input_mask``, ``segment_ids`` (int32, ``[batch, seq]``) and returns the classifier's
``probabilities`` ``[batch, labels]`` (labels in the ``labels.txt`` asset, in order) or SQuAD's
``start_logits`` / ``end_logits`` ``[batch, seq]``. The model is rebuilt in float32 from the
trained values (whatever precision trained it, and outside any distribution strategy), so the
SavedModel loads and runs the same on a CPU, a GPU or TensorFlow Serving. ``vocab.txt``,
``bert_config.json``, ``labels.txt`` and ``tpuctl_model.json`` (kind, casing, sequence length)
go beside ``saved_model.pb``: everything needed to tokenize text for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from .export_layout import CLASSIFIER, MODEL_INFO

ON_TENSORFLOW = "python -m jobs.bert.serving"  # the export of a JAX run, in a TensorFlow process

SIGNATURE = [tf.TensorSpec([None, None], tf.int32, name="input_ids"),
             tf.TensorSpec([None, None], tf.int32, name="input_mask"),
             tf.TensorSpec([None, None], tf.int32, name="segment_ids")]


class _Serving(tf.Module):
    def __init__(self, model, kind: str, labels_path: str | None):
        super().__init__()
        self.model = model
        self.kind = kind
        if labels_path:
            self.labels = tf.saved_model.Asset(labels_path)

    @tf.function(input_signature=SIGNATURE)
    def serve(self, input_ids, input_mask, segment_ids):
        out = self.model({"token_ids": input_ids, "padding_mask": input_mask,
                          "segment_ids": segment_ids}, training=False)
        if self.kind == CLASSIFIER:
            return {"probabilities": tf.nn.softmax(tf.cast(out["logits"], tf.float32), axis=-1)}
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}


def export(path: str, kind: str, build: Callable[[], keras.Model],
           values: Mapping[str, np.ndarray], bert_dir: str, info: dict,
           labels: list[str] | None = None) -> str:
    """Write the SavedModel of ``build()`` holding ``values`` (original name -> array) to
    ``path``, with its vocabulary, config, labels and ``info`` beside it; returns ``path``.

    On the JAX backend the same SavedModel is written by a TensorFlow-backend process from the
    trained values (:func:`main`): one serving graph whichever backend trained the model, made
    of TensorFlow's own ops, so TensorFlow Serving and ``saved_model_cli`` run it anywhere
    (Keras' own export from JAX wraps the JAX graph in an ``XlaCallModule`` op instead)."""
    if keras.backend.backend() != "tensorflow":
        return _export_from_jax(path, kind, build, values, bert_dir, info, labels)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        model = build()
    finally:
        keras.mixed_precision.set_global_policy(previous)
    for name, variable in model.original_variables().items():
        variable.assign(np.asarray(values[name], np.float32))
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)  # a resumed run rewrites the whole export
    tf.io.gfile.makedirs(path)
    labels_path = None
    if labels is not None:
        labels_path = f"{path}/labels.txt"
        with tf.io.gfile.GFile(labels_path, "w") as f:
            f.write("".join(f"{label}\n" for label in labels))
    for name in ("bert_config.json", "vocab.txt"):
        tf.io.gfile.copy(f"{bert_dir.rstrip('/')}/{name}", f"{path}/{name}", overwrite=True)
    with tf.io.gfile.GFile(f"{path}/{MODEL_INFO}", "w") as f:
        f.write(json.dumps({"kind": kind, **info, **({"labels": labels} if labels else {})},
                           indent=2) + "\n")
    module = _Serving(model, kind, labels_path)
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def _export_from_jax(path: str, kind: str, build: Callable[[], keras.Model],
                     values: Mapping[str, np.ndarray], bert_dir: str, info: dict,
                     labels: list[str] | None) -> str:
    import os
    import subprocess
    import sys
    import tempfile

    from ..errors import ConfigError

    config = build().config
    with tempfile.TemporaryDirectory(prefix="tpuctl-export-") as tmp:
        np.savez(os.path.join(tmp, "values.npz"), **{k: np.asarray(v) for k, v in values.items()})
        request = {"path": path, "kind": kind, "config": json.loads(config.to_json()),
                   "bert_dir": bert_dir, "info": info, "labels": labels,
                   "values": os.path.join(tmp, "values.npz")}
        with open(os.path.join(tmp, "request.json"), "w") as f:
            json.dump(request, f)
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        done = subprocess.run([sys.executable, "-m", "jobs.bert.serving",
                               os.path.join(tmp, "request.json")], env=env, check=False,
                              capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise ConfigError(f"the SavedModel export ({ON_TENSORFLOW}) failed: {tail[0]}")
    return path


def main(argv: list[str]) -> int:
    """``python -m jobs.bert.serving REQUEST.json``: the export of :func:`export`, on TensorFlow,
    for a run that trained on JAX."""
    from .config import BertConfig
    from .export_layout import SQUAD
    from .modeling import ClassifierModel, SquadModel

    with open(argv[0]) as f:
        request = json.load(f)
    config = BertConfig.from_dict(request["config"])
    labels = request["labels"]
    if request["kind"] == SQUAD:
        def build():
            return SquadModel(config)
    else:
        def build():
            return ClassifierModel(config, len(labels))
    with np.load(request["values"]) as data:
        values = {k: data[k] for k in data.files}
    export(request["path"], request["kind"], build, values, request["bert_dir"], request["info"],
           labels)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
