#!/usr/bin/env bash
# `make demo`: the whole tpuctl flow on the embedded local provider, in a scratch TPUCTL_HOME.
#
# The "TPU" is this machine's CPU (or GPU), the bucket a directory; the control plane is the real
# one. A tiny BERT (2 layers) pretrains with a preemption injected halfway, resumes from its last
# checkpoint on a recreated TPU, and is then fine-tuned on a small classification task; a small
# sweep then tries two learning rates of that fine-tune at once.
#
# Its clusters, runs and sweep live in a TPUCTL_HOME of its own, $DEMO/home (.demo/home), apart
# from yours; the end says how to look at them. A re-run starts that state afresh and deletes
# only what the demo made: the README tour's .demo/tiny and .demo/runs stay.
#
# The parts are functions, so tests can run one: `source templates/demo.sh` defines them and runs
# nothing.
set -euo pipefail

demo_env() {  # the demo's own TPUCTL_HOME, in DEMO (default: .demo in the current directory)
  DEMO="${DEMO_DIR:-$PWD/.demo}"
  export TPUCTL_HOME="$DEMO/home"
  export TPUCTL_CONFIG="$DEMO/home/config.toml"
  export TPUCTL_PROVIDER=local
  export TPUCTL_LOCAL_TPU_CREATE_SECONDS="${TPUCTL_LOCAL_TPU_CREATE_SECONDS:-3}"
}

demo_reset() {  # what an earlier demo made, and nothing else in DEMO
  rm -rf "$DEMO/home" "$DEMO/tiny-bert" "$DEMO/sweep.yaml"
  mkdir -p "$DEMO"
}

demo_epilogue() {  # how to see the demo's clusters and runs afterwards; $1: the demo's exit status
  printf '\nThe demo keeps its clusters, runs and sweep in %s, apart from your own tpuctl home.\n' "$TPUCTL_HOME"
  if [ "${1:-0}" = 0 ]; then
    printf 'To look at them (bert-lab was deleted at the end; its runs, costs and sweep remain):\n\n'
  else
    printf 'It stopped early (exit %s), and bert-lab may still be up. To look at it, then delete it:\n\n' "$1"
  fi
  printf '  export TPUCTL_HOME=%q TPUCTL_PROVIDER=local\n' "$TPUCTL_HOME"
  printf '  tpuctl status\n  tpuctl cost bert-lab\n'
  if [ -n "${RUN:-}" ]; then printf '  tpuctl logs %s --events\n' "$RUN"; fi
  if [ -n "${SWEEP:-}" ]; then printf '  tpuctl sweep status %s\n' "$SWEEP"; fi
  if [ "${1:-0}" != 0 ]; then printf '  tpuctl down bert-lab\n'; fi
}

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
progress() {  # the step of the run's progress record (0 if none yet)
  python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("step") or 0)
except Exception: print(0)' "$1"
}

demo_main() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  demo_env
  demo_reset
  trap 'demo_epilogue $?' EXIT

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
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  demo_main
fi
