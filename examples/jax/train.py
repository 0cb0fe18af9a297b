"""A JAX training loop for ``job: command`` (docs/own-code.md): a small MLP fit to a fixed
function with plain ``jax`` (no Flax), on every worker of a slice (``hosts: all``). It joins the
slice's workers with ``jax.distributed.initialize`` at ``$TPUCTL_COORDINATOR`` when there are
several, checkpoints to ``$TPUCTL_MODEL_DIR`` (fsspec: gs:// needs gcsfs in requirements) every
``--save-every`` steps and on SIGTERM, resumes from there, and reports progress lines.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys

import fsspec
import jax
import jax.numpy as jnp
import numpy as np


def init(seed: int, hidden: int) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w1": jax.random.normal(k1, (1, hidden)) * 0.5, "b1": jnp.zeros(hidden),
            "w2": jax.random.normal(k2, (hidden, 1)) * 0.5, "b2": jnp.zeros(1)}


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


@jax.jit
def step_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array, lr: float):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss


def batch(step: int, size: int = 64) -> tuple[jax.Array, jax.Array]:
    """The batch of ``step``: a function of the step, so a resumed run sees the same data."""
    x = jax.random.uniform(jax.random.PRNGKey(step), (size, 1), minval=-2.0, maxval=2.0)
    return x, jnp.sin(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save-every", type=int, default=100)
    args = parser.parse_args()
    workers = int(os.environ.get("TPUCTL_NUM_WORKERS", "1"))
    if workers > 1:
        jax.distributed.initialize(os.environ["TPUCTL_COORDINATOR"], workers, int(os.environ["TPUCTL_WORKER_INDEX"]))
    model_dir = os.environ.get("TPUCTL_MODEL_DIR", "model").rstrip("/")
    ckpt = f"{model_dir}/checkpoint.npz"
    fs, _ = fsspec.core.url_to_fs(ckpt)
    params, step = init(0, 16), 0
    if fs.exists(ckpt):
        with fsspec.open(ckpt, "rb") as f:
            saved = dict(np.load(io.BytesIO(f.read())))
        step = int(saved.pop("step"))
        params = {k: jnp.asarray(v) for k, v in saved.items()}
    notice = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(True))
    report = open(os.environ.get("TPUCTL_PROGRESS_FILE", os.devnull), "a", buffering=1)  # noqa: SIM115 - the whole run

    def save() -> None:
        if jax.process_index() != 0:
            return
        buf = io.BytesIO()
        np.savez(buf, step=step, **{k: np.asarray(v) for k, v in params.items()})
        fs.makedirs(model_dir, exist_ok=True)
        with fsspec.open(ckpt + ".tmp", "wb") as f:
            f.write(buf.getvalue())
        fs.mv(ckpt + ".tmp", ckpt)
        report.write(json.dumps({"checkpoint_step": step}) + "\n")

    while step < args.steps:
        params, loss = step_fn(params, *batch(step), args.lr)
        step += 1
        report.write(json.dumps({"step": step, "loss": float(loss)}) + "\n")
        if step % args.save_every == 0 or notice:
            save()
        if notice:
            return 42
    save()
    report.write(json.dumps({"step": step, "metrics": {"eval_loss": float(loss_fn(params, *batch(-1)))}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
