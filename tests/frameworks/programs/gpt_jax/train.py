"""A JAX trainer in the shape of the Flax examples' train.py, small enough for a test:
``--workdir`` for its checkpoints, ``checkpoint_<step>`` files written to a temporary name and
renamed (as flax.training.checkpoints.save_checkpoint does), the oldest removed beyond
``--keep`` (its ``keep``), restored from the newest at start, and a checkpoint saved when it gets
SIGTERM, as Orbax's preemption handling does. It knows nothing of tpuctl."""

import argparse
import glob
import os
import re
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--workdir", required=True)
p.add_argument("--num_train_steps", type=int, default=300)
p.add_argument("--checkpoint_every_steps", type=int, default=25)
p.add_argument("--keep", type=int, default=2)
p.add_argument("--learning_rate", type=float, default=0.1)
p.add_argument("--step_sleep", type=float, default=0.0, help="seconds per step (a real step takes longer)")
args = p.parse_args()
os.makedirs(args.workdir, exist_ok=True)

preempted = []
signal.signal(signal.SIGTERM, lambda *_: preempted.append(True))


def latest():
    found = sorted((int(m.group(1)), f) for f in glob.glob(os.path.join(args.workdir, "checkpoint_*"))
                   if (m := re.search(r"checkpoint_(\d+)$", f)))
    return found[-1] if found else (0, None)


def save(step, w):
    path = os.path.join(args.workdir, f"checkpoint_{step}")
    with open(path + ".tmp", "wb") as f:
        np.save(f, np.asarray(w))
    os.replace(path + ".tmp", path)
    for _, old in sorted((int(re.search(r"(\d+)$", f).group(1)), f)
                         for f in glob.glob(os.path.join(args.workdir, "checkpoint_*")) if f[-1].isdigit())[:-args.keep]:
        os.remove(old)
    print(f"Saved checkpoint at step {step}", flush=True)


step, path = latest()
w = jnp.zeros(4)
if path:
    with open(path, "rb") as f:
        w = jnp.asarray(np.load(f))
    print(f"Restored checkpoint at step {step}", flush=True)


@jax.jit
def train_step(w, x, y):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - args.learning_rate * g, loss


while step < args.num_train_steps:
    x = jax.random.normal(jax.random.PRNGKey(step), (16, 4))
    w, loss = train_step(w, x, x @ jnp.arange(1.0, 5.0))
    step += 1
    time.sleep(args.step_sleep)
    print(f"step {step}: train_loss={float(loss):.5f}", flush=True)
    if step % args.checkpoint_every_steps == 0 or preempted or step == args.num_train_steps:
        save(step, w)
    if preempted:
        raise SystemExit(0)
