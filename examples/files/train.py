"""A training loop written the way public trainers are (nanoGPT's train.py: its flags, its
``ckpt.pt`` in ``out_dir`` saved every ``eval_interval`` and resumed with ``init_from=resume``,
its ``iter N: loss X`` line), in plain Python so it runs anywhere. It knows nothing of tpuctl:
the spec points its ``out_dir`` at ``$TPUCTL_CHECKPOINT_DIR`` and reads its progress from the
line it prints (docs/own-code.md)."""

import argparse
import json
import math
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--out_dir", default="out")
p.add_argument("--init_from", default="scratch", choices=["scratch", "resume"])
p.add_argument("--max_iters", type=int, default=300)
p.add_argument("--eval_interval", type=int, default=50)
p.add_argument("--learning_rate", type=float, default=0.05)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per iteration, to watch it")
args = p.parse_args()

os.makedirs(args.out_dir, exist_ok=True)
ckpt_path = os.path.join(args.out_dir, "ckpt.json")
if args.init_from == "resume":
    print(f"Resuming training from {args.out_dir}", flush=True)
    with open(ckpt_path) as f:
        checkpoint = json.load(f)
    w, iter_num = checkpoint["w"], checkpoint["iter_num"]
else:
    print("Initializing a new model from scratch", flush=True)
    w, iter_num = 0.0, 0

target = 3.0
while iter_num < args.max_iters:
    x = math.sin(iter_num) + 1.5                 # the batch is a function of the step
    loss = (w * x - target * x) ** 2
    w -= args.learning_rate * 2 * (w * x - target * x) * x / (1 + iter_num) ** 0.5
    iter_num += 1
    if iter_num % args.eval_interval == 0 or iter_num == args.max_iters:
        with open(ckpt_path, "w") as f:            # written in place, as torch.save does
            json.dump({"w": w, "iter_num": iter_num}, f)
        print(f"saving checkpoint to {args.out_dir}", flush=True)
    print(f"iter {iter_num}: loss {loss:.4f}, time {args.sleep * 1000:.2f}ms", flush=True)
    time.sleep(args.sleep)
