"""A PyTorch trainer in the shape of karpathy/nanoGPT's train.py, small enough for a test: its
globals as the config, overridden by ``--key=value`` (its configurator), ``out_dir`` made with
``os.makedirs``, ``ckpt.pt`` written with ``torch.save`` every ``eval_interval`` iterations and
read back with ``init_from='resume'``, and its ``iter N: loss X, time Tms`` line. It knows nothing
of tpuctl and has no SIGTERM handler: the notice simply ends it, and it resumes from its last
periodic checkpoint."""

import ast
import os
import sys
import time

import torch

out_dir = "out"
eval_interval = 20
max_iters = 200
init_from = "scratch"          # 'scratch' or 'resume'
learning_rate = 0.05
iter_sleep = 0.0
for arg in sys.argv[1:]:       # nanoGPT's configurator: --key=value
    key, val = arg[2:].split("=", 1)
    assert key in globals(), f"Unknown config key: {key}"
    try:
        val = ast.literal_eval(val)
    except (SyntaxError, ValueError):
        pass
    globals()[key] = val

os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
iter_num = 0
if init_from == "resume":
    print(f"Resuming training from {out_dir}", flush=True)
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"))
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]


def get_batch(i):
    g = torch.Generator().manual_seed(i)           # the batch is a function of the iteration
    x = torch.randn(32, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


while True:
    if iter_num % eval_interval == 0 and iter_num > 0:
        checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num}
        print(f"saving checkpoint to {out_dir}", flush=True)
        torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
    if iter_num >= max_iters:
        break
    t0 = time.time()
    x, y = get_batch(iter_num)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    time.sleep(iter_sleep)
    print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.2f}ms", flush=True)
    iter_num += 1
