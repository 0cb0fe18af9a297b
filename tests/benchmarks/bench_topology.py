"""Same spec, same weights on any slice: the tiny pretraining, classifier and SQuAD specs trained
on 1 host, on an emulated v2-32 (4 workers joined by ``MultiWorkerMirroredStrategy`` through
TF_CONFIG, as the local provider emulates it), the v2-32 killed mid-run (SIGKILL after its first
checkpoint) and resumed, and 1 host with another seed; and the bytes each host's input pipeline
reads, for 1, 2 and 4 hosts.

Weight distance: for every variable of the final checkpoint, ``|a - b| / |a|`` (Frobenius norms);
the table gives the largest over variables ("max") and the distance over all of them ("all").
The claim: 4 hosts are at most 1/100 of another seed's distance from 1 host.

Bytes read: each host's training input pipeline (``job.dataset`` with that host's
``InputContext``, as ``distribute_datasets_from_function`` gives it) iterated over the same
steps in this process; the bytes are the growth of ``rchar`` in ``/proc/self/io`` (what the
process passed through read(2)/pread(2): the record files, nothing else runs meanwhile).

``python -m tests.benchmarks topology``; ``BENCH_TOPOLOGY_STEPS`` (default 150),
``BENCH_TOPOLOGY_JOBS`` (default pretrain,finetune,squad), ``BENCH_TOPOLOGY_HOSTS`` (default 4).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TEMPLATES = {"pretrain": "templates/bert-pretrain-tiny.yaml",
             "finetune": "templates/bert-finetune-tiny.yaml",
             "squad": "templates/bert-squad-tiny.yaml"}


def spec_args(kind: str, tiny: Path, steps: int, batch: int = 32) -> list[str]:
    """The tiny spec of ``kind`` at global batch ``batch`` for ``steps`` steps."""
    sets: dict = {"bert_dir": tiny, "num_train_steps": steps, "train_batch_size": batch,
                  "save_checkpoints_steps": max(1, steps // 3), "steps_per_execution": 5}
    if kind == "pretrain":
        sets.update(corpus_files=f"{tiny}/corpus.txt", max_eval_steps=1, export_bert_dir="false")
    elif kind == "finetune":
        sets.update(train_file=f"{tiny}/train.tsv", dev_file=f"{tiny}/dev.tsv")
    else:
        sets.update(train_file=f"{tiny}/squad/train-v1.1.json",
                    predict_file=f"{tiny}/squad/dev-v1.1.json")
    args = [TEMPLATES[kind]]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


def _ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(args: list[str], model_dir: Path, hosts: int, log: Path, *extra: str) -> list[subprocess.Popen]:
    """The job on ``hosts`` emulated hosts (one process each; TF_CONFIG when several)."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _ports(hosts)]}
    procs = []
    for i in range(hosts):
        env = dict(os.environ, TPUCTL_DEVICE="cpu", TPUCTL_HEARTBEAT_SECONDS="1")
        env.pop("TF_CONFIG", None)
        if hosts > 1:
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
            env["TPUCTL_SLICE_CORES"] = "32"
            env["TPUCTL_ACCELERATOR_TYPE"] = "v2-32"
        out = open(f"{log}.{i}", "a")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, "-m", "jobs", "run", *args, "--set",
                                       f"model_dir={model_dir}", *extra],
                                      cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
    return procs


def wait(procs: list[subprocess.Popen], log: Path, timeout: float = 3600) -> list[int]:
    codes = [p.wait(timeout=timeout) for p in procs]
    return codes


def train(args: list[str], model_dir: Path, hosts: int, *extra: str, stop_at: int | None = None) -> None:
    """Train to the end; with ``stop_at``, kill every host (SIGKILL, as a preempted slice) once
    the chief has checkpointed ``stop_at``, then run again to the end."""
    log = model_dir.parent / f"{model_dir.name}.log"
    procs = start(args, model_dir, hosts, log, *extra)
    if stop_at is not None:
        deadline = time.time() + 3600
        while time.time() < deadline and all(p.poll() is None for p in procs):
            try:
                progress = json.loads((model_dir / "progress.json").read_text())
            except (OSError, ValueError):
                progress = {}
            if (progress.get("checkpoint_step") or 0) >= stop_at:
                for p in procs:
                    p.send_signal(signal.SIGKILL)
                break
            time.sleep(0.2)
        codes = wait(procs, log)
        if codes != [-signal.SIGKILL] * hosts:
            raise RuntimeError(f"stopped run exited {codes}: {Path(f'{log}.0').read_text()[-2000:]}")
        procs = start(args, model_dir, hosts, log, *extra)
    codes = wait(procs, log)
    if any(codes):
        raise RuntimeError(f"{hosts} host(s) exited {codes}: {Path(f'{log}.0').read_text()[-3000:]}")


def final_weights(model_dir: Path) -> dict:
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(str(model_dir))
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model/")}


def no_gradient(kind: str, names) -> set[str]:
    """The variables the job's loss has no gradient for, which start at 0 and are moved only by
    float noise (Adam scales it up to steps of up to lr * 1e-3), so their difference between any
    two runs is noise of a noise-sized tensor (norms 1e-8..4e-4 after 150 steps, against ~1):

    - every attention key bias: softmax over the keys does not change when all logits of a
      query move by the same ``q.b_k``;
    - for SQuAD, ``cls/squad/output_bias`` and the last layer's output LayerNorm beta: the start
      and end logits are softmaxed over the positions, and both add the same amount to every
      position's logit.
    """
    names = list(names)
    found = {n for n in names if "Sattention.Sself.Skey.Sbias" in n}
    if kind == "squad":
        last = max(int(n.split("Slayer_")[1].split(".")[0]) for n in names if "Slayer_" in n)
        found |= {n for n in names if "cls.Ssquad.Soutput_bias" in n
                  or f"Slayer_{last}.Soutput.SLayerNorm.Sbeta" in n}
    return found


def distance(a: dict, b: dict, kind: str = "pretrain") -> dict:
    """Relative weight distance of b from a: ``|a - b| / |a|`` per variable, the largest over the
    variables the loss has a gradient for ("max", and which), over all variables ("all"), the
    largest including those without a gradient ("max_with_no_gradient"), and their largest norm
    in ``a`` ("no_gradient_norm")."""
    import numpy as np

    per = {k: float(np.linalg.norm(a[k] - b[k]) / max(float(np.linalg.norm(a[k])), 1e-30)) for k in a}
    total = (sum(float(np.sum((a[k] - b[k]) ** 2)) for k in a)
             / sum(float(np.sum(a[k] ** 2)) for k in a)) ** 0.5
    excluded = no_gradient(kind, a)
    trained = {k: v for k, v in per.items() if k not in excluded}
    worst = max(trained, key=trained.get)
    return {"max": trained[worst], "max_variable": worst.split("/.ATTRIBUTES")[0], "all": total,
            "max_with_no_gradient": max(per.values()),
            "no_gradient_norm": max((float(np.linalg.norm(a[k])) for k in excluded), default=0.0)}


def compare(kind: str, tiny: Path, work: Path, steps: int, hosts: int) -> dict:
    """1 host, ``hosts`` hosts (straight, and stopped at a third and resumed), another seed."""
    args = spec_args(kind, tiny, steps)
    dirs = {name: work / f"{kind}-{name}" for name in ("one", "pod", "pod-resumed", "seed")}
    train(args, dirs["one"], 1)
    train(args, dirs["seed"], 1, "--set", "seed=7")
    train(args, dirs["pod"], hosts)
    train(args, dirs["pod-resumed"], hosts, stop_at=max(1, steps // 3))
    one = final_weights(dirs["one"])
    pod, resumed = final_weights(dirs["pod"]), final_weights(dirs["pod-resumed"])
    import numpy as np

    other = distance(one, final_weights(dirs["seed"]), kind)
    same = distance(one, pod, kind)
    return {"steps": steps, "hosts": hosts,
            f"{hosts}_hosts_vs_1": same, "other_seed_vs_1": other,
            "ratio_max": same["max"] / other["max"], "ratio_all": same["all"] / other["all"],
            "resumed_bitwise_equal": all(np.array_equal(pod[k], resumed[k]) for k in pod)}


def bytes_read(kind: str, tiny: Path, work: Path, host_counts: list[int], steps: int,
               whole_stream: bool = False) -> dict:
    """Per-host bytes read by the training input of ``steps`` steps, for each host count (with
    ``whole_stream``: every host reading the whole stream and keeping its part)."""
    code = f"""
import json, sys
from tests.benchmarks.bench_topology import measure_input
print(json.dumps(measure_input({kind!r}, {str(tiny)!r}, {str(work)!r}, {host_counts!r}, {steps},
                               {whole_stream!r})))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True,
                         env=dict(os.environ, TPUCTL_DEVICE="cpu"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def measure_input(kind: str, tiny: str, work: str, host_counts: list[int], steps: int,
                  whole_stream: bool = False) -> dict:
    """In this process: prepare the job's data once, then for each H and host h iterate host h's
    input pipeline over ``steps`` global batches and count the bytes read."""
    import tensorflow as tf

    from jobs import spec as jobspec
    from jobs.runner import distribute, registry
    from jobs.runner.runner import Runner

    args = spec_args(kind, Path(tiny), steps)
    path, sets = args[0], [a.split("=", 1) for a in args[2::2]]
    spec = jobspec.load(path, [*map(tuple, sets), ("model_dir", f"{work}/input-{kind}")])
    runner = Runner(spec, registry.make_job(spec))
    tf.io.gfile.makedirs(runner.out_dir)
    runner.strategy, runner.device = distribute.select(spec.precision)
    runner.job.prepare(runner.make_context())
    report = {}
    for hosts in host_counts:
        per_host = []
        for host in range(hosts):
            ctx = tf.distribute.InputContext(num_input_pipelines=hosts, input_pipeline_id=host,
                                             num_replicas_in_sync=hosts)
            if whole_stream:  # the previous design, still the fallback without an offsets index
                from jobs import data

                dataset = data.host_batches(runner.job.stream.records(0), ctx, spec.train_batch_size,
                                            runner.job.parse)
            else:
                dataset = runner.job.dataset(ctx, 0)
            iterator = iter(dataset)
            before = _rchar()
            for _ in range(steps):
                next(iterator)
            per_host.append(_rchar() - before)
            del iterator
        report[str(hosts)] = {"per_host_bytes": per_host, "mean_per_host": sum(per_host) // hosts}
    return report


def run() -> dict:
    """The workers' gRPC servers listen on every interface: measured in a private network."""
    from tests.benchmarks.private_network import run_isolated

    return run_isolated("tests.benchmarks.bench_topology", "measure")


def measure() -> dict:
    steps = int(os.environ.get("BENCH_TOPOLOGY_STEPS", "150"))
    kinds = os.environ.get("BENCH_TOPOLOGY_JOBS", "pretrain,finetune,squad").split(",")
    hosts = int(os.environ.get("BENCH_TOPOLOGY_HOSTS", "4"))
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="tpuctl-bench-topology-") as tmp:
        tiny = Path(tmp) / "tiny"
        subprocess.run([sys.executable, "-m", "jobs.bert.tiny", str(tiny)], check=True, capture_output=True,
                       cwd=REPO)
        report["bytes_read"] = {
            "own_records": bytes_read("pretrain", tiny, Path(tmp), [1, 2, 4], 40),
            "whole_stream_then_keep_part": bytes_read("pretrain", tiny, Path(tmp), [1, 2, 4], 40, True)}
        for kind in kinds:
            report[kind] = compare(kind, tiny, Path(tmp), steps, hosts)
            print(json.dumps({kind: report[kind]}), file=sys.stderr, flush=True)
    return report
