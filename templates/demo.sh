#!/usr/bin/env bash
# `make demo`: the whole tpuctl flow on the embedded local provider, in a scratch TPUCTL_HOME.
set -euo pipefail
export TPUCTL_HOME="${TPUCTL_HOME:-$PWD/.demo/home}"
export TPUCTL_PROVIDER=local
rm -rf "$TPUCTL_HOME"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
step tpuctl up bert-lab --zone us-central1-b --accelerator-type v2-8 --preemptible
step tpuctl status
step tpuctl down bert-lab
step tpuctl status
