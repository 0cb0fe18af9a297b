"""`job: keras` with the user's own optimizer (`optimizer(params)`): its state (momentum, step)
goes into the checkpoint, so a run resumed from a checkpoint ends bitwise as the uninterrupted
run; the runner in this process."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.tf]

REPO = Path(__file__).resolve().parents[2]
OPTIMIZER = """

def optimizer(params):
    return keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)
"""


def arrays(prefix: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if not k.startswith(("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def test_the_users_optimizer_is_checkpointed_and_resumes_exactly(tmp_path):
    from jobs import spec as spec_lib
    from jobs.runner.registry import run_spec

    (tmp_path / "model.py").write_text((REPO / "examples" / "mlp" / "model.py").read_text() + OPTIMIZER)
    shutil.copy(REPO / "examples" / "mlp" / "spec.yaml", tmp_path / "spec.yaml")

    def run(model_dir: Path) -> None:
        spec = spec_lib.load(str(tmp_path / "spec.yaml"), [f"model_dir={model_dir}", "num_train_steps=40",
                                                            "save_checkpoints_steps=20"])
        assert run_spec(spec, search=[str(tmp_path)]) == 0

    run(tmp_path / "straight")
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for f in (tmp_path / "straight").glob("ckpt-20.*"):
        shutil.copy(f, resumed / f.name)
    (resumed / "checkpoint").write_text('model_checkpoint_path: "ckpt-20"\n')
    run(resumed)
    want, got = arrays(tmp_path / "straight" / "ckpt-40"), arrays(resumed / "ckpt-40")
    assert any("momentum" in k for k in want) and any(k.startswith("global_step") for k in want)
    assert sorted(want) == sorted(got)
    assert [k for k in want if not np.array_equal(want[k], got[k])] == []
    assert not np.array_equal(want["global_step/.ATTRIBUTES/VARIABLE_VALUE"],
                              arrays(tmp_path / "straight" / "ckpt-20")["global_step/.ATTRIBUTES/VARIABLE_VALUE"])
