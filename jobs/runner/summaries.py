"""TensorBoard scalars without the ``tensorboard`` package.

``tf.summary.scalar`` lives in the tensorboard package, which TensorFlow 2.21 no longer
installs (and a TPU image may lack). The event files only need the core ``tf.summary.write`` op
plus the metadata that marks a value as a scalar, which is what this writes: TensorBoard shows
the result exactly like ``tf.summary.scalar``'s.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# Where a run's event files go, under its model_dir: a directory of their own, so that
# `tensorboard --logdir <model_dir>/tb` reads only them. TensorBoard lists everything under its
# logdir, recursively, on every reload; on GCS, a logdir that holds the checkpoints too (every
# ckpt-N.data and .index of every save) is listed object by object, which is what makes
# TensorBoard slow on a bucket.
SUBDIR = "tb"

_SCALAR = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR,
).SerializeToString()


class ScalarWriter:
    def __init__(self, logdir: str):
        self.writer = tf.summary.create_file_writer(logdir)

    def write(self, step: int, values: Mapping[str, float]) -> None:
        with self.writer.as_default():
            for name, value in values.items():
                tf.summary.write(name, tf.constant(float(value), tf.float32), step=step,
                                 metadata=_SCALAR)
        self.writer.flush()
