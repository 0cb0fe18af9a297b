#!/usr/bin/env bash
# `make demo`: the whole tpuctl flow on the embedded local provider, in a scratch TPUCTL_HOME.
#
# The "TPU" is this machine's CPU (or GPU), the bucket a directory; the control plane is the real
# one. A tiny BERT (2 layers) pretrains with a preemption injected halfway, resumes from its last
# checkpoint on a recreated TPU, and is then fine-tuned on a small classification task; a small
# sweep then tries two learning rates of that fine-tune at once.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO="${DEMO_DIR:-$PWD/.demo}"
export TPUCTL_HOME="$DEMO/home"
export TPUCTL_CONFIG="$DEMO/home/config.toml"
export TPUCTL_PROVIDER=local
export TPUCTL_LOCAL_TPU_CREATE_SECONDS="${TPUCTL_LOCAL_TPU_CREATE_SECONDS:-3}"
rm -rf "$DEMO"
mkdir -p "$DEMO"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
progress() {  # the step of the run's progress record (0 if none yet)
  python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("step") or 0)
except Exception: print(0)' "$1"
}

step python -m jobs.bert.tiny "$DEMO/tiny-bert"
step tpuctl up bert-lab --zone us-central1-b --accelerator-type v2-8 --preemptible
step tpuctl status
step tpuctl stage "$DEMO/tiny-bert" gs://demo-bucket/bert/tiny --create-bucket

# Pretraining, supervised in the foreground; a preemption lands once it passes step 120.
MODEL="$TPUCTL_HOME/local/buckets/demo-bucket/runs/pretrain"
printf '\n\033[1m$ %s\033[0m\n' "tpuctl train bert-lab --job templates/bert-pretrain-tiny.yaml ... (preempted at step ~120)"
tpuctl train bert-lab --job templates/bert-pretrain-tiny.yaml --bucket gs://demo-bucket --poll 2 \
    --set bert_dir=gs://demo-bucket/bert/tiny --set corpus_files=gs://demo-bucket/bert/tiny/corpus.txt \
    --set model_dir=gs://demo-bucket/runs/pretrain --set num_train_steps=400 &
TRAIN=$!
until [ "$(progress "$MODEL/progress.json")" -ge 120 ] || ! kill -0 $TRAIN 2>/dev/null; do sleep 0.5; done
step tpuctl simulate preempt bert-lab
wait $TRAIN

step tpuctl status
RUN=$(ls -t "$TPUCTL_HOME/runs" | grep -v supervisor | head -1 | sed 's/\.json$//')
step tpuctl logs "$RUN" --events

# Fine-tuning starts from the checkpoint the pretraining run exported, in the original BERT format.
step tpuctl train bert-lab --job templates/bert-finetune-tiny.yaml --bucket gs://demo-bucket --poll 2 \
    --set bert_dir=gs://demo-bucket/runs/pretrain/export \
    --set train_file=gs://demo-bucket/bert/tiny/train.tsv --set dev_file=gs://demo-bucket/bert/tiny/dev.tsv \
    --set model_dir=gs://demo-bucket/runs/finetune
step tpuctl status

# A small sweep: two learning rates of the fine-tune, both at once on a pool of two local TPUs
# that the sweep creates and deletes (docs/sweeps.md).
cat > "$DEMO/sweep.yaml" <<'YAML'
job: templates/bert-finetune-tiny.yaml
set: {bert_dir: gs://demo-bucket/runs/pretrain/export, train_file: gs://demo-bucket/bert/tiny/train.tsv,
      dev_file: gs://demo-bucket/bert/tiny/dev.tsv, num_train_steps: 50}
metric: eval_accuracy
parameters:
  learning_rate: {values: [3.0e-4, 3.0e-3]}
YAML
step tpuctl sweep "$DEMO/sweep.yaml" --max-concurrent 2 --bucket gs://demo-bucket --poll 2
SWEEP=$(ls "$TPUCTL_HOME/sweeps" | grep '^sweep-.*\.json$' | sed 's/\.json$//' | tail -1)
step tpuctl sweep status "$SWEEP"
# Nothing trains now: the reaper deletes the idle TPU (the host VM stays), then what it all cost.
step tpuctl down --idle --idle-for 0s
step tpuctl cost bert-lab
step tpuctl down bert-lab
step tpuctl status
