"""A PyTorch training loop for ``job: command`` (docs/own-code.md): a small MLP fit to a fixed
function. On a TPU VM the same loop runs on PyTorch/XLA (``requirements: [torch_xla[tpu]]``, the
device ``torch_xla.core.xla_model.xla_device()``); here it runs on the CPU. It checkpoints to
``$TPUCTL_MODEL_DIR`` (fsspec: gs:// needs gcsfs in requirements) every ``--save-every`` steps
and on SIGTERM, resumes from there, and reports progress lines.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys

import fsspec
import torch


def batch(step: int, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of ``step``: a function of the step, so a resumed run sees the same data."""
    gen = torch.Generator().manual_seed(step)
    x = torch.rand(size, 1, generator=gen) * 4 - 2
    return x, torch.sin(x)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save-every", type=int, default=100)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model_dir = os.environ.get("TPUCTL_MODEL_DIR", "model").rstrip("/")
    ckpt = f"{model_dir}/checkpoint.pt"
    fs, _ = fsspec.core.url_to_fs(ckpt)
    step = 0
    if fs.exists(ckpt):
        with fsspec.open(ckpt, "rb") as f:
            saved = torch.load(io.BytesIO(f.read()))
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step = saved["step"]
    notice = []
    signal.signal(signal.SIGTERM, lambda *_: notice.append(True))
    report = open(os.environ.get("TPUCTL_PROGRESS_FILE", os.devnull), "a", buffering=1)  # noqa: SIM115 - the whole run

    def save() -> None:
        buf = io.BytesIO()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, buf)
        fs.makedirs(model_dir, exist_ok=True)
        with fsspec.open(ckpt + ".tmp", "wb") as f:
            f.write(buf.getvalue())
        fs.mv(ckpt + ".tmp", ckpt)
        report.write(json.dumps({"checkpoint_step": step}) + "\n")

    loss_fn = torch.nn.MSELoss()
    while step < args.steps:
        x, y = batch(step)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        report.write(json.dumps({"step": step, "loss": loss.item()}) + "\n")
        if step % args.save_every == 0 or notice:
            save()
        if notice:
            return 42
    save()
    with torch.no_grad():
        eval_loss = loss_fn(model(batch(-1)[0]), batch(-1)[1]).item()
    report.write(json.dumps({"step": step, "metrics": {"eval_loss": eval_loss}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
