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
    ``path``, with its vocabulary, config, labels and ``info`` beside it; returns ``path``."""
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
