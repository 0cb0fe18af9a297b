"""A world of records a bucket writer has filled (tests/e2e/test_terminal_escapes.py and
tests/e2e/test_hostile_files.py): a cluster ``lab`` with a run and a sweep whose records, event
log, job log and host status carry terminal escapes, and the commands that print them.

Every command that shows what a bucket holds is listed in :data:`COMMANDS`; the tests run each,
as the installed ``tpuctl``, against this world, so a command added later that prints records
is one row here, not a test of its own."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provision.cloud.storage import local_bucket
from provision.runs import store as runs
from tests.conftest import REPO, TPUCTL_BIN, run_tpuctl_process

# What a terminal acts on: CSI (clear the screen), an OSC 8 hyperlink whose text hides its target,
# C1 controls (U+009B is CSI in one character on a UTF-8 xterm; U+0085 a line break), a
# right-to-left override that makes "exe.png" read "gnp.exe", a bell
HOSTILE = "\x1b[2J\x1b]8;;https://evil.example/\x07here\x1b]8;;\x07\x9b31m\x85\u202eexe.png\x07"
# ... as a person sees it through tpuctl: each of those characters one "?"
SHOWN = "?[2J?]8;;https://evil.example/?here?]8;;??31m??exe.png?"
# the same in an object's name (a "/" there is a folder): an export a writer left in the bucket
HOSTILE_NAME = HOSTILE.replace("/", "_")
SHOWN_NAME = SHOWN.replace("/", "_")
EXPORTS = "gs://tpuctl-local/exports"
# an OAuth access token as a job that printed its credentials would leave it in its log
TOKEN = "ya29.a0AfH6SMBxHostileTokenValue_0123456789"

RUN = "lab-20261206-070000-abcd"

CONFIG = {"vocab_size": 8, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 32, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 64, "type_vocab_size": 2,
          "initializer_range": 0.02}


def bert_dir(root: Path) -> Path:
    """Config and vocabulary, no checkpoint: enough for a spec that trains from scratch."""
    bert = root / "bert"
    bert.mkdir()
    (bert / "bert_config.json").write_text(json.dumps(CONFIG))
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\n")
    return bert


def sweep_spec(root: Path, text: str | None = None) -> Path:
    bert = bert_dir(root)
    (root / "train.tsv").write_text("a\t0\n")
    (root / "job.yaml").write_text(f"job: bert-finetune\nbert_dir: {bert}\ntrain_file: {root}/train.tsv\n"
                                   f"dev_file: {root}/train.tsv\ninit_checkpoint: none\nmax_seq_length: 32\n"
                                   "num_train_steps: 10\n")
    spec = root / "sweep.yaml"
    spec.write_text(text if text is not None else
                    "job: job.yaml\nmetric: eval_accuracy\ngoal: maximize\nmethod: grid\n"
                    "parameters:\n  learning_rate: {values: [0.001, 0.01]}\n")
    return spec


def made_sweep(tmp_path: Path) -> tuple[str, Path]:
    """A sweep made as `tpuctl sweep start` makes it (its record, spec and job in the bucket),
    with no controller: the state `sweep resume` continues from."""
    from provision.basics.config import resolve
    from provision.cloud.storage import open_bucket
    from provision.sweeps import create
    from provision.sweeps.store import SweepStore

    spec = sweep_spec(tmp_path)
    plan = create.plan(str(spec), provider="local", project="local", bucket="gs://tpuctl-local",
                       zones=["us-central1-b"], accelerator_type="v2-8", preemptible=False, spot=False,
                       max_concurrent=1, max_trials=None, budget_usd=None, poll_s=1.0, max_failures=3)
    bucket = open_bucket("gs://tpuctl-local", resolve(provider="local"))
    bucket.create("local")
    store = SweepStore(bucket, plan.record.sweep_id)
    create.write(store, plan)
    return plan.record.sweep_id, bucket.root / store.name("study/journal")


@dataclass
class World:
    run: str
    sweep: str
    bucket: Path            # the local bucket's directory
    scratch: Path           # a local directory commands may write to (stage's destination)

    def run_json(self) -> Path:
        return self.bucket / f"tpuctl/runs/{self.run}/run.json"

    def patch_run(self, **fields) -> None:
        """Change run.json's fields as a bucket writer would (its bytes, nothing else)."""
        data = json.loads(self.run_json().read_text())
        data.update(fields)
        self.run_json().write_text(json.dumps(data))


def make_world(tmp_path: Path) -> World:
    """The cluster (made by the installed tpuctl), then its bucket's records filled with escapes."""
    from provision.sweeps.store import SweepStore, TrialRecord, remember

    assert run_tpuctl_process("up", "lab", "-a", "v2-8", "--provider", "local").code == 0
    bucket = local_bucket("tpuctl-local")
    rec = runs.RunRecord(run_id=RUN, cluster="lab", provider="local", project="local", zone="us-central1-b",
                         bucket="gs://tpuctl-local", model_dir="gs://tpuctl-local/m", num_train_steps=10,
                         save_checkpoints_steps=5, status="gave_up", attempts=1, reason=f"why{HOSTILE}",
                         seconds_by_state={f"training{HOSTILE}": 60.0, "idle": 5.0},
                         last_progress={"step": 3, "loss": 1.5, "time": 1.0})
    store = runs.RunStore(bucket, RUN)
    store.save(rec)
    runs.remember(rec)
    world = World(run=RUN, sweep="", bucket=bucket.root, scratch=tmp_path / "scratch")
    world.patch_run(status=f"gave_up{HOSTILE}")          # what a writer can do, and save() would not
    bucket.write_bytes(f"{store.attempt_prefix(1)}/log-0.txt",
                       f"step 1{HOSTILE}\nauthorizing with {TOKEN}\n".encode())
    store.event("note", message=f"see{HOSTILE}")
    bucket.write_bytes("tpuctl/clusters/lab/bootstrap/host-0.json", json.dumps({
        "role": "host", "worker": "0", "state": "failed", "step": "pip", "message": f"pip failed{HOSTILE}",
        "log_tail": [f"last{HOSTILE}"]}).encode())
    bucket.write_bytes(f"exports/model{HOSTILE_NAME}.txt", b"weights\n")
    sweep_id, _journal = made_sweep(tmp_path)
    sweeps = SweepStore(bucket, sweep_id)
    srec = sweeps.load()
    srec.state, srec.reason = "stopped", f"stopped{HOSTILE}"
    sweeps.save(srec)
    remember(srec)
    sweeps.save_trial(TrialRecord(trial=0, params={"learning_rate": f"0.1{HOSTILE}"}, state="finished",
                                  run=f"run{HOSTILE}", cluster="lab", metric=0.5, steps=10))
    world.sweep = sweep_id
    return world


# Every command that prints what a bucket holds: its words, and whether it reports on one record
# (a malformed one is then its error: exit 2) or lists many (one malformed record is named, the
# rest still shown: exit 0). Every command of the CLI is here or in EXEMPT
# (tests/e2e/test_terminal_escapes.py walks the click group).
COMMANDS = {
    "status": (["status"], "lists"),
    "status-NAME": (["status", "lab"], "lists"),
    "logs": (["logs", "{run}"], "one"),
    "logs-events": (["logs", "{run}", "--events"], "one"),
    "logs-follow": (["logs", "{run}", "--follow"], "one"),
    "cost": (["cost"], "lists"),
    "cost-since": (["cost", "--since", "7d"], "lists"),
    "cost-CLUSTER": (["cost", "lab"], "lists"),
    "cost-RUN": (["cost", "{run}"], "one"),
    "sweep-status": (["sweep", "status", "{sweep}"], "one"),
    "sweep-stop": (["sweep", "stop", "{sweep}"], "one"),
    "down-idle-dry-run": (["down", "--idle", "--idle-for", "1s", "--dry-run"], "lists"),
    "down-idle": (["down", "--idle", "--idle-for", "1s"], "lists"),
    "train-attach": (["train", "lab", "--attach"], "one"),
    "stage-download-dry-run": (["stage", EXPORTS, "{scratch}/exports", "--dry-run"], "lists"),
}

# The commands that print nothing a bucket holds, each with the reason (a command added to the CLI
# is in one of the two, or the walk fails). A command is covered by any of its rows: ``train`` by
# --attach (a new run prints local files' plan), ``down`` by --idle (with a name it prints the
# cloud's resources), ``stage`` by a download (an upload prints local names).
EXEMPT = {
    "up": "prints the cloud's resources and prices; reads no record from a bucket",
    "estimate": "prices and this machine's ledger of past runs (under TPUCTL_HOME), no bucket record",
    "data": "makes shards from local files and stages them: local paths, counts and sizes",
    "sweep start": "creates a sweep from a local spec; its trials then print as sweep status prints them",
    "sweep resume": ("refuses the world's stopped sweep; on a live one it drives the trials and prints the "
                     "sweep with sweep status's printer (sweep-status)"),
    "notify add": "channels are kept on this machine (TPUCTL_HOME), not in a bucket",
    "notify list": "channels are kept on this machine (TPUCTL_HOME), not in a bucket",
    "notify test": "sends tpuctl's own test message to this machine's channels",
    "notify remove": "channels are kept on this machine (TPUCTL_HOME), not in a bucket",
    "ui": "serves an HTML page (its escaping tested with the page) and prints only its own URL",
    "simulate preempt": "acts on the cloud's TPU and prints its state",
    "job run": "runs a spec on this machine: prints the job's own output, no bucket's",
    "supervise": "hidden: runs detached, writing to its log file (logs and status show what it records)",
    "agent": "hidden: runs on the hosts, writing to their log files (logs and status show what it records)",
}


def run_command(world: World, name: str) -> subprocess.CompletedProcess:
    """``tpuctl <words>`` as a user runs it, its output as bytes (what reaches the terminal)."""
    world.scratch.mkdir(parents=True, exist_ok=True)
    words = [w.format(run=world.run, sweep=world.sweep, scratch=world.scratch) for w in COMMANDS[name][0]]
    return subprocess.run([str(TPUCTL_BIN), *words, "--provider", "local"], cwd=REPO, env=dict(os.environ),
                          capture_output=True, timeout=120, check=False)


def controls(data: bytes) -> list[str]:
    """The characters of a command's output that a terminal would act on (lines and tabs aside)."""
    text = data.decode("utf-8")
    return sorted({repr(c) for c in text if not c.isprintable() and c not in "\n\t"})
