"""TensorBoard HParams for a run, without the ``tensorboard`` package.

``spec.hparams`` names spec keys; the run writes their values into ``<model_dir>`` as the
HParams plugin's *session start info* (what ``tensorboard.plugins.hparams.api.hparams`` writes),
and its evaluations write scalars into ``<model_dir>/eval``. ``tensorboard --logdir`` over
several model_dirs (a sweep's trials) then shows one session per run in the HParams dashboard's
table, parallel-coordinates and scatter views, with the eval scalars as its metrics (TensorBoard
infers the hparams' domains and the metrics when no experiment config is written).

Like :mod:`jobs.runner.summaries`, this needs only TensorFlow: TensorFlow 2.21 no longer installs
tensorboard (and ``jobs`` imports no ``google.*`` module), so the plugin's two small messages
are encoded here by hand, field numbers as in tensorboard/plugins/hparams/plugin_data.proto.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Mapping

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

PLUGIN_NAME = "hparams"
SESSION_START_INFO_TAG = "_hparams_/session_start_info"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire_type)
    if wire_type == 2:  # length-delimited
        return key + _varint(len(payload)) + payload
    return key + payload


def _value(value: bool | float | str) -> bytes:
    """A google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4."""
    if isinstance(value, bool):
        return _field(4, 0, _varint(int(value)))
    if isinstance(value, (int, float)):
        return _field(2, 1, struct.pack("<d", float(value)))
    return _field(3, 2, str(value).encode("utf-8"))


def session_start_content(values: Mapping[str, bool | float | str], group_name: str,
                          start_time_secs: float) -> bytes:
    """HParamsPluginData{version 0, session_start_info = 3: SessionStartInfo{hparams = 1 (map
    entries key = 1, value = 2), group_name = 4, start_time_secs = 5}}, serialized."""
    info = b"".join(_field(1, 2, _field(1, 2, name.encode("utf-8")) + _field(2, 2, _value(v)))
                    for name, v in sorted(values.items()))
    info += _field(4, 2, group_name.encode("utf-8")) + _field(5, 1, struct.pack("<d", start_time_secs))
    return _field(3, 2, info)


def group_name(values: Mapping[str, object]) -> str:
    """TensorBoard's default session group: a hash of the values, so runs with equal hparams
    group together (as ``hparams(values)`` without a trial id does)."""
    text = json.dumps(dict(values), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write(logdir: str, values: Mapping[str, bool | float | str],
          start_time_secs: float | None = None) -> None:
    """Write the session start info of ``values`` to an event file in ``logdir``."""
    content = session_start_content(values, group_name(values),
                                    time.time() if start_time_secs is None else start_time_secs)
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=SESSION_START_INFO_TAG,
        metadata=summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=content)),
        tensor=tf.make_tensor_proto([], dtype=tf.float32, shape=[0]))
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=0)
    writer.flush()
    writer.close()
