"""A training loop in plain Python for ``job: command`` (docs/own-code.md): it needs nothing of
tpuctl but its environment. It fits y = 3x + 1 by SGD, checkpoints to ``$TPUCTL_MODEL_DIR`` every
``--save-every`` steps and when SIGTERM (the preemption notice) comes, resumes from its newest
checkpoint, and reports its steps, loss and metric as JSON lines to ``$TPUCTL_PROGRESS_FILE``.

    python train.py --steps 200 --lr 0.05        # here: TPUCTL_MODEL_DIR defaults to ./model
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys


def batch(step: int, size: int = 16) -> list[tuple[float, float]]:
    """The batch of ``step``: a function of the step alone, so a resumed run sees the same data."""
    rng = random.Random(step)
    return [(x, 3.0 * x + 1.0) for x in (rng.uniform(-1, 1) for _ in range(size))]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save-every", type=int, default=50)
    args = parser.parse_args()
    model_dir = os.environ.get("TPUCTL_MODEL_DIR", "model")
    os.makedirs(model_dir, exist_ok=True)
    ckpt = os.path.join(model_dir, "checkpoint.json")
    state = {"step": 0, "w": 0.0, "b": 0.0}
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            state = json.load(f)
    notice = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(True))
    report = open(os.environ.get("TPUCTL_PROGRESS_FILE", os.devnull), "a", buffering=1)  # noqa: SIM115 - the whole run

    def save() -> None:
        with open(ckpt + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(ckpt + ".tmp", ckpt)
        report.write(json.dumps({"checkpoint_step": state["step"]}) + "\n")

    while state["step"] < args.steps:
        data = batch(state["step"])
        err = [state["w"] * x + state["b"] - y for x, y in data]
        state["w"] -= args.lr * 2 * sum(e * x for e, (x, _) in zip(err, data)) / len(data)
        state["b"] -= args.lr * 2 * sum(err) / len(data)
        state["step"] += 1
        report.write(json.dumps({"step": state["step"], "loss": sum(e * e for e in err) / len(err)}) + "\n")
        if state["step"] % args.save_every == 0 or notice:
            save()
        if notice:
            return 42          # saved: preempted (any exit after SIGTERM counts as one)
    save()
    report.write(json.dumps({"step": state["step"], "metrics": {"w_error": abs(state["w"] - 3.0)}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
