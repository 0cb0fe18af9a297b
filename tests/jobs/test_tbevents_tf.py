"""tpuctl's TensorFlow-free event-file reader (provision.host.tbevents) against files TensorFlow's
own writer made, cross-checked with TensorFlow's own reader (``summary_iterator``): every scalar
the one sees, the other sees, at the same step with the same value; histograms and text are not
scalars; a file cut anywhere gives a prefix of the events and the rest once it is whole."""

from __future__ import annotations

import pytest

from provision.host import tbevents

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf


def _scalars_plugin(name: str = "scalars"):
    return tf.compat.v1.SummaryMetadata(plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name=name))


def _write(logdir) -> None:
    """A TF2 program's summaries (tf.summary.scalar writes a float32 tensor with the scalars plugin:
    TensorBoard's summary_v2.scalar), TF1's simple_value, and what is not a scalar."""
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step in range(1, 31):
            tf.summary.write("train/loss", tf.constant(3.0 / step, tf.float32), step=step, metadata=_scalars_plugin())
            tf.summary.write("lr", tf.constant(0.5 ** step, tf.float64), step=step, metadata=_scalars_plugin())
            tf.summary.write("tokens", tf.constant(1000 * step, tf.int64), step=step, metadata=_scalars_plugin())
            tf.summary.write("weights", tf.constant([[0.0, 1.0, 3.0]]), step=step,
                             metadata=_scalars_plugin("histograms"))
            tf.summary.write("note", tf.constant("hello"), step=step, metadata=_scalars_plugin("text"))
            if step % 10 == 0:
                old = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag="eval/accuracy",
                                                                              simple_value=step / 40)])
                tf.summary.experimental.write_raw_pb(old.SerializeToString(), step=step)
        writer.flush()
    writer.close()


def _reference(path) -> list[tuple[int, dict[str, float]]]:
    """TensorFlow's reading of the file: scalars by step (one-element numeric tensors of the scalars
    plugin, and simple_value)."""
    out = []
    for event in tf.compat.v1.train.summary_iterator(str(path)):
        values = {}
        for v in event.summary.value:
            if v.HasField("simple_value"):
                values[v.tag] = float(v.simple_value)
            elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name in ("", "scalars"):
                array = tf.make_ndarray(v.tensor)
                if array.size == 1 and array.dtype.kind in "fiu":
                    values[v.tag] = float(array.reshape(()))
        if values:
            out.append((event.step, values))
    return out


def _ours(items) -> list[tuple[int, dict[str, float]]]:
    out = []
    for item in items:
        values = dict(item.get("metrics", {}))
        if "loss" in item:
            values["train/loss"] = item["loss"]
        out.append((item["step"], values))
    return out


def test_what_tensorflow_writes_is_read_as_tensorflow_reads_it(tmp_path):
    _write(tmp_path)
    (path,) = tmp_path.glob("events.out.tfevents.*")
    expected = _reference(path)
    assert len(expected) == 3 * 30 + 3 and expected[1] == (1, {"lr": 0.5}) and expected[-1] == (30, {"eval/accuracy": 0.75})
    files = tbevents.EventFiles([tmp_path])
    items = files.read()
    assert _ours(items) == [(s, v) for s, v in sorted(expected, key=lambda e: e[0])]
    assert items[-1]["step"] == 30 and "weights" not in str(items) and "note" not in str(items)
    assert files.read() == [] and files.problems == []


@pytest.mark.parametrize("cut", [5, 12, 40, 111, 500, -3])
def test_a_file_cut_anywhere_gives_its_whole_events_now_and_the_rest_later(tmp_path, cut):
    _write(tmp_path / "w")
    (path,) = (tmp_path / "w").glob("events.out.tfevents.*")
    data = path.read_bytes()
    logdir = tmp_path / "read"
    logdir.mkdir()
    partial = logdir / path.name
    partial.write_bytes(data[:cut])
    files = tbevents.EventFiles([logdir])
    first = files.read()
    with open(partial, "ab") as fh:
        fh.write(data[cut:] if cut >= 0 else data[len(data) + cut:])
    rest = files.read()
    assert _ours(first + rest) == _ours(tbevents.EventFiles([tmp_path / "w"]).read())
    assert files.problems == []
