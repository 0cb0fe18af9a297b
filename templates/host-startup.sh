#!/bin/bash
# tpuctl host bootstrap: the startup script of a tpuctl host VM and of every TPU VM worker.
#
# Nothing reaches in: the host pulls. It waits until the instance metadata names the cluster's
# bucket (tpuctl-bucket, set by `tpuctl up --bucket` or by `tpuctl train`), reads which tpuctl
# wheel the cluster's runs use from gs://BUCKET/tpuctl/clusters/CLUSTER/agent.json, installs it
# into a virtual environment that sees the image's TensorFlow (--system-site-packages: Cloud TPU
# and Deep Learning VM images ship it; reinstalling it would be slow and could break the TPU
# runtime), and runs `tpuctl agent`, restarting it if it dies. The agent runs the attempts the
# supervisor assigns, takes over supervision on request, and enforces --autodown.
#
# Every value read from the metadata server or the bucket is checked against the shape tpuctl
# writes (a cluster name, a bucket name, a project id, a wheel path) before it is used, and is
# only ever used quoted, as one argument: a hostile value stops this script, it never runs. The
# access token goes to curl on stdin, never on a command line (where `ps` would show it).
#
# Values come from the metadata server; TPUCTL_METADATA_URL and TPUCTL_STORAGE_URL replace the
# Google endpoints (tests run this script against local fakes).
set -u
MD="${TPUCTL_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
GCS="${TPUCTL_STORAGE_URL:-https://storage.googleapis.com}"
VENV="${TPUCTL_VENV:-/opt/tpuctl}"
LOG="${TPUCTL_AGENT_LOG:-/var/log/tpuctl-agent.log}"
RETRY_S="${TPUCTL_BOOTSTRAP_RETRY_S:-10}"

NAME_RE='^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$'
BUCKET_RE='^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$'
PROJECT_RE='^[a-z][-a-z0-9.:]{4,61}[a-z0-9]$'
WORKER_RE='^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
TOKEN_RE='^[A-Za-z0-9._~+/=-]{1,4096}$'
WHEEL_RE='^tpuctl/runs/[a-z0-9][a-z0-9-]{0,62}/tpuctl/[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}\.whl$'

say() { printf 'tpuctl bootstrap: %s\n' "$*" >&2; }
die() { say "$*; not starting the agent"; exit 1; }
md() { curl -sf -H 'Metadata-Flavor: Google' "$MD/$1"; }
attr() { md "instance/attributes/$1"; }
token() {
  md "instance/service-accounts/default/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])' 2>/dev/null
}
gcs_get() {  # gcs_get BUCKET OBJECT DEST
  local obj tok
  obj=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$2") || return 1
  tok=$(token)
  if [[ -n "$tok" && "$tok" =~ $TOKEN_RE ]]; then
    printf 'header = "Authorization: Bearer %s"\n' "$tok" | curl -sf -K - -o "$3" "$GCS/storage/v1/b/$1/o/$obj?alt=media"
  else
    curl -sf -o "$3" "$GCS/storage/v1/b/$1/o/$obj?alt=media"
  fi
}

CLUSTER=$(attr tpuctl-cluster) || die "no tpuctl-cluster in metadata"
[[ "$CLUSTER" =~ $NAME_RE ]] || die "tpuctl-cluster in metadata is not a cluster name"
ROLE=$(attr tpuctl-role) || ROLE=host
[[ "$ROLE" == host || "$ROLE" == worker ]] || die "tpuctl-role in metadata is neither host nor worker"
PROJECT=$(md project/project-id) || die "the metadata server has no project id"
[[ "$PROJECT" =~ $PROJECT_RE ]] || die "the project id in metadata is not a project id"
WORKER=$(attr agent-worker-number 2>/dev/null) || WORKER=$(hostname)
[[ "$WORKER" =~ $WORKER_RE ]] || die "the worker number (or host name) is not a plain name"

BUCKET=""
until [ -n "$BUCKET" ]; do
  RAW=$(attr tpuctl-bucket 2>/dev/null) || RAW=""
  BUCKET="${RAW#gs://}"
  BUCKET="${BUCKET%%/*}"
  if [ -n "$RAW" ] && { [[ "$RAW" != gs://* ]] || ! [[ "$BUCKET" =~ $BUCKET_RE ]]; }; then
    say "ignoring tpuctl-bucket in metadata: not gs://BUCKET; waiting for a valid one"
    BUCKET=""
    sleep "$RETRY_S"
  fi
  [ -n "$BUCKET" ] || md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=300" >/dev/null || sleep "$RETRY_S"
done

WORK=$(mktemp -d)
until gcs_get "$BUCKET" "tpuctl/clusters/$CLUSTER/agent.json" "$WORK/agent.json"; do sleep "$RETRY_S"; done
WHEEL_OBJ=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel_object"])' "$WORK/agent.json") \
  || die "gs://$BUCKET/tpuctl/clusters/$CLUSTER/agent.json names no wheel_object"
[[ "$WHEEL_OBJ" =~ $WHEEL_RE ]] || die "the wheel_object in agent.json is not a tpuctl wheel of a run"
WHEEL="$WORK/$(basename -- "$WHEEL_OBJ")"
until gcs_get "$BUCKET" "$WHEEL_OBJ" "$WHEEL"; do sleep "$RETRY_S"; done

[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
# TPUCTL_PIP_ARGS comes from the environment (an image's pip mirror), never from metadata
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${TPUCTL_PIP_ARGS:-} "$WHEEL"

while true; do
  "$VENV/bin/tpuctl" agent --cluster "$CLUSTER" --bucket "gs://$BUCKET" --project "$PROJECT" \
      --worker "$WORKER" --role "$ROLE" >>"$LOG" 2>&1
  [ "${TPUCTL_AGENT_ONCE:-}" = "1" ] && break
  sleep 5
done
