"""Checkpoints in model_dir: save every N steps, keep several, resume from the newest good one.

``tf.train.CheckpointManager`` writes a checkpoint's data and index first and the ``checkpoint``
state file last, so a process killed mid-save leaves the previous state intact. A checkpoint can
still be damaged after the fact (a preemption cutting an upload, tensorflow#61552), so on start
we try candidates newest first and fall back to older ones; the candidates are those in the state
file plus any ``ckpt-N.index`` found beside it (a state file that lags behind loses nothing).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tensorflow as tf

from ..errors import ConfigError
from ..exitcodes import is_infrastructure_error

CHECKPOINT_NAME = "ckpt"
_STEP_RE = re.compile(r"-(\d+)$")


@dataclass
class Restored:
    path: str | None                  # the checkpoint restored, None if nothing to resume
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (damaged path, error)
    legacy: bool = False              # restored through the ``legacy`` checkpoint (fewer parts)


def step_of(path: str) -> int:
    m = _STEP_RE.search(path)
    return int(m.group(1)) if m else -1


def candidates(manager: tf.train.CheckpointManager, directory: str) -> list[str]:
    """Checkpoint prefixes in ``directory``, newest (highest step) first."""
    found = set(manager.checkpoints)
    for index in tf.io.gfile.glob(f"{directory.rstrip('/')}/{CHECKPOINT_NAME}-*.index"):
        found.add(index[: -len(".index")])
    return sorted(found, key=step_of, reverse=True)


def restore_newest(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager,
                   directory: str, log: Callable[[str], None] = print,
                   legacy: tf.train.Checkpoint | None = None) -> Restored:
    """Restore the newest checkpoint that reads back completely.

    Every variable exists before this is called, so a damaged file fails here (DataLoss,
    OutOfRange, NotFound...) rather than half-way through training. If checkpoints exist and
    none restores, that is an error for a person to look at, not a reason to silently start
    over from step 0. ``legacy``: the same objects less those added in a later version (the
    input position); a checkpoint written before them restores through it (``Restored.legacy``).
    """
    skipped: list[tuple[str, str]] = []
    for path in candidates(manager, directory):
        is_legacy = False
        try:
            try:
                checkpoint.restore(path).assert_existing_objects_matched()
            except AssertionError:
                if legacy is None:
                    raise
                legacy.restore(path).assert_existing_objects_matched()
                is_legacy = True
        except Exception as exc:  # DataLoss, OutOfRange, IndexError ("read less bytes")...
            if is_infrastructure_error(exc):
                raise  # storage unreachable is not damage: retry later, do not fall back
            reason = (getattr(exc, "message", None) or str(exc)).strip().splitlines()
            reason_line = reason[0] if reason else type(exc).__name__
            log(f"checkpoint {path} does not restore ({type(exc).__name__}: {reason_line}); "
                "trying the one before")
            skipped.append((path, reason_line))
            continue
        return Restored(path, skipped, is_legacy)
    if skipped:
        names = ", ".join(p.rsplit("/", 1)[-1] for p, _ in skipped)
        raise ConfigError(f"no checkpoint in {directory} restores ({names}: {skipped[0][1]}); "
                          "move the damaged ckpt-* files away to start over from init_checkpoint, "
                          "or point model_dir at a new directory")
    return Restored(None, skipped)


def set_aside(manager: tf.train.CheckpointManager, directory: str, damaged: list[str],
              log: Callable[[str], None] = print) -> None:
    """Rename damaged checkpoints' files to ``*.damaged`` and drop them from the state file.

    Otherwise the manager would count them among the ``keep_checkpoint_max`` it keeps, and
    delete good older checkpoints in their place.
    """
    for path in damaged:
        for name in tf.io.gfile.glob(path + ".*"):
            if not name.endswith(".damaged"):
                tf.io.gfile.rename(name, name + ".damaged", overwrite=True)
        log(f"set aside damaged checkpoint {path} (*.damaged)")
    remaining = [p.rsplit("/", 1)[-1] for p in manager.checkpoints if p not in damaged]
    if remaining:  # the state file is a small text proto; written as temp file + rename
        state = f"{directory.rstrip('/')}/checkpoint"
        now = time.time()
        text = f'model_checkpoint_path: "{remaining[-1]}"\n' + "".join(
            f'all_model_checkpoint_paths: "{name}"\n' for name in remaining) + "".join(
            f"all_model_checkpoint_timestamps: {now}\n" for _ in remaining)
        with tf.io.gfile.GFile(state + ".tmp", "w") as f:
            f.write(text)
        tf.io.gfile.rename(state + ".tmp", state, overwrite=True)


def open_manager(checkpoint: tf.train.Checkpoint, directory: str, keep: int,
                 log: Callable[[str], None] = print, legacy: tf.train.Checkpoint | None = None,
                 ) -> tuple[tf.train.CheckpointManager, Restored]:
    """The manager for ``directory`` with the newest good checkpoint restored (if any)."""
    def make() -> tf.train.CheckpointManager:
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep,
                                          checkpoint_name=CHECKPOINT_NAME)

    manager = make()
    restored = restore_newest(checkpoint, manager, directory, log, legacy)
    if restored.skipped and restored.path:
        set_aside(manager, directory, [p for p, _ in restored.skipped], log)
        manager = make()
    return manager, restored
