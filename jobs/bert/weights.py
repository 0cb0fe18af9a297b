"""Checkpoints in the original variable names: read them into a model, write them back out.

Two layouts hold BERT weights under the original TF1 names:

- an original google-research checkpoint (``bert_model.ckpt``): name-based, keys such as
  ``bert/encoder/layer_0/attention/self/query/kernel``;
- a checkpoint written by :mod:`jobs.runner.runner`: object-based (``tf.train.Checkpoint``), with the
  model's variables in a dict keyed by the same names, so a key reads
  ``model/bert.Sencoder.Slayer_0.S.../.ATTRIBUTES/VARIABLE_VALUE`` ("/" escaped as ".S").

:func:`restore` reads either, so ``init_checkpoint`` may point at a release checkpoint or at a
pretraining run of ours, and ``load_encoder`` loads both. Adam slots (``*/adam_m``, ``*/adam_v``)
and ``global_step`` in original checkpoints are optimizer state, not model weights: ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from ..errors import ConfigError

MODEL_KEY = "model"  # the attribute of the runner's tf.train.Checkpoint that holds the weights


def object_key(name: str, root: str = MODEL_KEY) -> str:
    """Key of variable ``name`` in a runner checkpoint (TensorFlow's object-graph escaping)."""
    escaped = name.replace(".", "..").replace("/", ".S")
    return f"{root}/{escaped}/.ATTRIBUTES/VARIABLE_VALUE"


def checkpoint_prefix(path: str) -> str:
    """Accept a checkpoint prefix, or a directory holding a ``checkpoint`` state file or a
    ``bert_model.ckpt``; return the prefix."""
    if tf.io.gfile.exists(path + ".index"):
        return path
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        candidate = path.rstrip("/") + "/bert_model.ckpt"
        if tf.io.gfile.exists(candidate + ".index"):
            return candidate
    raise ConfigError(f"no checkpoint at {path} ({path}.index not found); pass a checkpoint prefix "
                      "such as DIR/bert_model.ckpt or DIR/ckpt-1000")


def read_arrays(prefix: str, names: list[str]) -> tuple[dict[str, np.ndarray], list[str]]:
    """Values of ``names`` from either layout; returns (found, missing)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as exc:
        raise ConfigError(f"cannot read checkpoint {prefix}: {_first_line(exc)}; check that its "
                          ".index and .data-* files are complete") from None
    keys = reader.get_variable_to_shape_map()
    found, missing = {}, []
    for name in names:
        for key in (name, object_key(name)):
            if key in keys:
                found[name] = reader.get_tensor(key)
                break
        else:
            missing.append(name)
    return found, missing


def restore(variables: Mapping[str, tf.Variable], prefix: str, *,
            required: Callable[[str], bool] = lambda name: True,
            config_hint: str = "use the bert_config.json that came with this checkpoint") -> list[str]:
    """Assign the checkpoint's values to ``variables`` (original name -> variable).

    Variables for which ``required(name)`` is false may be absent (e.g. a classifier head when
    starting from a pretraining checkpoint). A shape that differs means the config does not
    describe this checkpoint: a one-line :class:`ConfigError` names the first such variable.
    Returns the names that were loaded.
    """
    values, missing = read_arrays(prefix, list(variables))
    absent = [n for n in missing if required(n)]
    if absent:
        more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
        raise ConfigError(f"checkpoint {prefix} has no variable {absent[0]}{more}; it is not a "
                          f"BERT checkpoint of this layout, or {config_hint}")
    for name, value in values.items():
        var = variables[name]
        want = tuple(var.shape)
        if tuple(value.shape) != want:
            raise ConfigError(f"bert_config.json does not match checkpoint {prefix}: {name} is "
                              f"{list(value.shape)} in the checkpoint but {list(want)} by the "
                              f"config; {config_hint}")
    for name, value in values.items():
        variables[name].assign(value.astype(np.float32) if value.dtype != np.float32 else value)
    return sorted(values)


def write(prefix: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Write a name-based checkpoint (the original layout) readable by TF1's Saver and by
    :func:`restore`; returns ``prefix``. Goes through TensorFlow's filesystems (gs:// works)."""
    names = sorted(arrays)
    with tf.device("/CPU:0"):
        tensors = [tf.convert_to_tensor(np.asarray(arrays[n])) for n in names]
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=tensors)
    return prefix


def values_of(variables: Mapping[str, tf.Variable]) -> dict[str, np.ndarray]:
    return {name: np.asarray(var.numpy()) for name, var in variables.items()}


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def fine_tuned_checkpoint(model_dir: str, init_checkpoint: str | None, head: str,
                          job: str) -> tuple[str, tuple[int, ...]]:
    """The checkpoint a predict-only run loads (model_dir's newest, as the runner resumes it,
    else ``init_checkpoint``) and the shape of its task ``head`` variable; a one-line
    :class:`ConfigError` when the head is missing (a pretrained, not fine-tuned, checkpoint)."""
    prefix = tf.train.latest_checkpoint(model_dir)
    if not prefix:
        if not init_checkpoint:
            raise ConfigError(f"a predict-only run needs init_checkpoint: a {job} run's "
                              "model_dir (--set init_checkpoint=DIR)")
        prefix = checkpoint_prefix(init_checkpoint)
    found, missing = read_arrays(prefix, [head])
    if missing:
        raise ConfigError(f"checkpoint {prefix} has no {head}: it is not fine-tuned by {job}; "
                          f"for a predict-only run (do_train: false) set init_checkpoint to a "
                          f"{job} run's model_dir")
    return prefix, tuple(found[head].shape)
