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
# Values come from the metadata server; TPUCTL_METADATA_URL and TPUCTL_STORAGE_URL replace the
# Google endpoints (tests run this script against local fakes).
set -u
MD="${TPUCTL_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
GCS="${TPUCTL_STORAGE_URL:-https://storage.googleapis.com}"
VENV="${TPUCTL_VENV:-/opt/tpuctl}"
LOG="${TPUCTL_AGENT_LOG:-/var/log/tpuctl-agent.log}"

md() { curl -sf -H 'Metadata-Flavor: Google' "$MD/$1"; }
attr() { md "instance/attributes/$1"; }
token() {
  md "instance/service-accounts/default/token" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])' 2>/dev/null
}
gcs_get() {  # gcs_get BUCKET OBJECT DEST
  local obj auth=()
  obj=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$2")
  local tok; tok=$(token)
  [ -n "$tok" ] && auth=(-H "Authorization: Bearer $tok")
  curl -sf "${auth[@]}" -o "$3" "$GCS/storage/v1/b/$1/o/$obj?alt=media"
}

CLUSTER=$(attr tpuctl-cluster) || { echo "tpuctl: no tpuctl-cluster in metadata" >&2; exit 1; }
ROLE=$(attr tpuctl-role || echo host)
PROJECT=$(md project/project-id)
WORKER=$(attr agent-worker-number 2>/dev/null || hostname)

BUCKET=""
until [ -n "$BUCKET" ]; do
  BUCKET=$(attr tpuctl-bucket 2>/dev/null | sed 's#^gs://##; s#/.*##')
  [ -n "$BUCKET" ] || md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=300" >/dev/null || sleep 10
done

WORK=$(mktemp -d)
until gcs_get "$BUCKET" "tpuctl/clusters/$CLUSTER/agent.json" "$WORK/agent.json"; do sleep 10; done
WHEEL_OBJ=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel_object"])' "$WORK/agent.json")
WHEEL="$WORK/$(basename "$WHEEL_OBJ")"
until gcs_get "$BUCKET" "$WHEEL_OBJ" "$WHEEL"; do sleep 10; done

[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${TPUCTL_PIP_ARGS:-} "$WHEEL"

while true; do
  "$VENV/bin/tpuctl" agent --cluster "$CLUSTER" --bucket "gs://$BUCKET" --project "$PROJECT" \
      --worker "$WORKER" --role "$ROLE" >>"$LOG" 2>&1
  [ "${TPUCTL_AGENT_ONCE:-}" = "1" ] && break
  sleep 5
done
