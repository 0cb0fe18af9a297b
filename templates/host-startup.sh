#!/bin/bash
# tpuctl host bootstrap: the startup script of a tpuctl host VM and of every TPU VM worker.
#
# Nothing reaches in: the host pulls. It waits until the instance metadata names the cluster's
# bucket (tpuctl-bucket, set by `tpuctl up --bucket` or by `tpuctl train`), reads which tpuctl
# wheel the cluster's runs use from gs://BUCKET/tpuctl/clusters/CLUSTER/agent.json (written by
# `tpuctl train`; until then the host waits), downloads it and installs it only if its sha256 is
# one the instance metadata pins (tpuctl-pin, written by `tpuctl train`, `sweep --detach --host`
# and `data --on`: bucket writers cannot change it, docs/security.md), into a virtual environment
# that sees the image's TensorFlow (--system-site-packages: Cloud TPU runtime images ship it
# system-wide; reinstalling it would be slow and could break the TPU runtime), and runs `tpuctl
# agent` (its files under TPUCTL_HOME, /var/lib/tpuctl, mode 0700), restarting it if it dies. The
# agent runs the attempts the supervisor assigns, takes over supervision on request, and enforces
# --autodown; it too runs only what the pin names.
#
# Works on a bare Debian 12 image and on the Ubuntu 22.04 TPU VM runtime images: their python3
# has no ensurepip until python3-venv is installed, so when `python3 -m venv` fails the script
# installs python3-venv with apt (waiting for an apt run already under way, e.g.
# unattended-upgrades at boot); curl and python3 themselves are installed the same way if missing.
#
# Every network step (metadata server, bucket, apt, pip) is retried a bounded number of times
# with growing waits. Waiting for work is not a failure: the host waits as long as it takes for
# tpuctl-bucket to appear in the metadata and for agent.json to appear in the bucket. Anything
# else that fails stops this script (set -e) after it writes the bootstrap status, so that
# `tpuctl status` and `tpuctl train` say "host bootstrap failed: ..." instead of waiting forever.
#
# Bootstrap status: once the bucket is known, the host writes
#   gs://BUCKET/tpuctl/clusters/CLUSTER/bootstrap/ROLE-WORKER.json
# (ROLE host or worker; WORKER the TPU VM worker number, or the host VM's host name):
#   {"version": 1, "cluster", "role", "worker", "host", "state": "installing"|"ok"|"failed",
#    "step", "message", "time", "started", "installing", "run_id", "wheel_object", "log_tail": [last lines]}
# ("started": when this script began; "installing": when it began installing tpuctl, kept in the
# later statuses; "time": when the status was written, so "ok"'s is when tpuctl was installed)
# "installing" when it starts installing, "ok" once `tpuctl --version` runs from the venv (just
# before the agent starts), "failed" when it stops: step says where (tools, metadata, bucket,
# agent.json, wheel, pin, venv, pip, check, agent), log_tail holds the last lines of its log (of the
# agent's log for step agent), secrets scrubbed. The full log is /var/log/tpuctl-bootstrap.log, the
# agent's /var/log/tpuctl-agent.log: both root's, mode 0600.
#
# Every value read from the metadata server or the bucket is checked against the shape tpuctl
# writes (a cluster name, a bucket name, a project id, a wheel path) before it is used, and is
# only ever used quoted, as one argument: a hostile value stops this script, it never runs. The
# access token goes to curl on stdin, never on a command line (where `ps` would show it), and
# never into a log.
#
# Values come from the metadata server; TPUCTL_METADATA_URL and TPUCTL_STORAGE_URL replace the
# Google endpoints (tests run this script against local fakes). The TPUCTL_* settings below come
# from the image's environment, never from metadata.
set -euo pipefail
umask 022

MD="${TPUCTL_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}"
GCS="${TPUCTL_STORAGE_URL:-https://storage.googleapis.com}"
VENV="${TPUCTL_VENV:-/opt/tpuctl}"
export TPUCTL_HOME="${TPUCTL_HOME:-/var/lib/tpuctl}"   # the agent's own files: work dirs, logs, its run index
LOG="${TPUCTL_AGENT_LOG:-/var/log/tpuctl-agent.log}"
BOOT_LOG="${TPUCTL_BOOTSTRAP_LOG:-/var/log/tpuctl-bootstrap.log}"
RETRY_S="${TPUCTL_BOOTSTRAP_RETRY_S:-10}"     # first wait between tries; doubles, at most 60 s
TRIES="${TPUCTL_BOOTSTRAP_TRIES:-6}"           # tries of each network step
PIP_TRIES="${TPUCTL_PIP_TRIES:-3}"             # tries of the pip install (pip retries requests itself)
POLL_S="${TPUCTL_BOOTSTRAP_POLL_S:-30}"        # between looks for agent.json while no run exists
MD_WAIT_S="${TPUCTL_METADATA_WAIT_S:-300}"     # one long poll of the metadata server
AGENT_MIN_UP_S="${TPUCTL_AGENT_MIN_UP_S:-60}"  # an agent that dies sooner died "quickly"
AGENT_QUICK_DEATHS="${TPUCTL_AGENT_QUICK_DEATHS:-5}"  # that many in a row: give up
TAIL_LINES=40
read -r -a PIP_ARGS <<< "${TPUCTL_PIP_ARGS:-}"   # an image's pip mirror; split on spaces, no globbing

NAME_RE='^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$'
BUCKET_RE='^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$'
PROJECT_RE='^[a-z][-a-z0-9.:]{4,61}[a-z0-9]$'
WORKER_RE='^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'
TOKEN_RE='^[A-Za-z0-9._~+/=-]{1,4096}$'
# where tpuctl stages its wheel: under a run's, a sweep's or a data request's prefix (runs.store.wheel_object)
WHEEL_RE='^tpuctl/(runs|sweeps|data)/[a-z0-9][a-z0-9-]{0,62}/tpuctl/[A-Za-z0-9][A-Za-z0-9_.+-]{0,200}\.whl$'

STEP=tools
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
CLUSTER="" ROLE="" WORKER="" BUCKET="" STATUS_OBJ="" RUN_ID="" WHEEL_OBJ="" FAIL_MSG="" FINAL="" INSTALLING=""

# The logs are root's alone, mode 0600, like everything under TPUCTL_HOME: they quote what pip, the
# agent and the jobs it starts print (paths, bucket names, a secret a job echoes), and the image's
# other users have no business reading them. Created so before the first write (umask 077), and a
# log an older tpuctl left readable (0644) is made private before anything is appended to it.
private_log() {  # private_log FILE: FILE exists, mode 0600, owned by root (when this runs as root)
  mkdir -p -- "$(dirname -- "$1")"
  (umask 077 && : >> "$1")
  chmod 0600 -- "$1"
  [ "$(id -u)" != 0 ] || chown 0:0 -- "$1"
}
if [ -e "$BOOT_LOG" ]; then
  mv -f -- "$BOOT_LOG" "$BOOT_LOG.1"
  chmod 0600 -- "$BOOT_LOG.1"
fi
private_log "$BOOT_LOG"
private_log "$LOG"
WORK=$(mktemp -d)

# ---- scrubbing what leaves the host ---------------------------------------------------------------
# Log lines leave the host in two places: the bootstrap status in the bucket and, when the script
# fails, the serial console (read by anyone with compute.instances.getSerialPortOutput). Each goes
# through scrub(): control characters dropped, credentials replaced by the same patterns as
# provision/basics/redact.py (SECRETS below is written from them; a test fails when they differ).
cat >"$WORK/scrub.py" <<'PY'
import re, sys
# BEGIN SECRETS: written from provision/basics/redact.py by python -m provision.basics.redact
SECRETS = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|[A-Za-z0-9+/=\s\\]*)", re.S), r"<redacted-private-key>"),
    (re.compile(r"MII[A-Za-z0-9+/=\\]{60,}"), r"<redacted-key>"),
    (re.compile(r"eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*"), r"<redacted-jwt>"),
    (re.compile(r"ya29\.[0-9A-Za-z_\-.~+/]+=*"), r"ya29.<redacted>"),
    (re.compile(r"1//[0-9A-Za-z_\-]{20,}"), r"<redacted-refresh-token>"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(bearer|basic|token|negotiate)\s+[^\s\"',;}]+"), r"\1\2 <redacted>"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!<redacted|bearer\s|basic\s|token\s|negotiate\s)[^\s\"',}]{8,}"), r"\1<redacted>"),
    (re.compile(r"(?i)\bbearer\s+(?!<redacted)[0-9A-Za-z_\-.=~+/]{8,}"), r"Bearer <redacted>"),
    (re.compile(r"(?i)((?:[?&]|%3F|%26)(?:access_token|refresh_token|id_token|client_secret|private_key_id|private_key|assertion|x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|googleaccessid|api_key|apikey|password|passwd|upload_id|aws_secret_access_key|secret_access_key|secretaccesskey|aws_session_token|sessiontoken|token|key|code|signature|sig|secret|credential)(?:=|%3D))(?!<redacted)[^&\s\"'<>)]+"), r"\1<redacted>"),
    (re.compile(r"(?i)((?:^|[\s\"'(;,])(?:access_token|refresh_token|id_token|client_secret|private_key_id|private_key|assertion|x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|googleaccessid|api_key|apikey|password|passwd|upload_id|aws_secret_access_key|secret_access_key|secretaccesskey|aws_session_token|sessiontoken)(?:=|%3D))(?!<redacted)[^&\s\"'<>)]+"), r"\1<redacted>"),
    (re.compile(r"(?i)((?:^|[\s\"'(;,{\[])(?:access_token|refresh_token|id_token|client_secret|private_key_id|private_key|assertion|x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|googleaccessid|api_key|apikey|password|passwd|upload_id|aws_secret_access_key|secret_access_key|secretaccesskey|aws_session_token|sessiontoken)[\"']?\s*[:=]\s*)(?![\"'<\s])[^\s\"',;}\]]+"), r"\1<redacted>"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/?#\s:@\"'<>]*:)(?!<redacted>@)[^/?#\s@\"'<>]+@"), r"\1<redacted>@"),
    (re.compile(r"(?i)(\bx-goog-(?:signature|credential)[\"']?\s*:\s*[\"']?)(?!<redacted)[^\s\"',}]+"), r"\1<redacted>"),
    (re.compile(r"(?i)([\"'](?:access_token|refresh_token|id_token|client_secret|private_key_id|private_key|assertion|x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|googleaccessid|api_key|apikey|password|passwd|upload_id|aws_secret_access_key|secret_access_key|secretaccesskey|aws_session_token|sessiontoken|token|secret|signature)[\"']\s*:\s*[\"'])([^\"']*)([\"'])"), r"\1<redacted>\3"),
    (re.compile(r"AIza[0-9A-Za-z_\-]{35}"), r"<redacted-api-key>"),
    (re.compile(r"(?i)(\bhttps?://hooks\.slack\.com/(?:services|triggers|workflows)/)(?!<redacted)[^\s\"'<>)]+"), r"\1<redacted>"),
    (re.compile(r"(?i)(\bhttps?://(?:[a-z]+\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d+/)(?!<redacted)[^\s\"'<>/?)]+"), r"\1<redacted>"),
    (re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9_]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"), r"<redacted-github-token>"),
    (re.compile(r"(?<![A-Za-z0-9_])(?:xox[abeprs]|xapp)-[A-Za-z0-9-]{10,}"), r"<redacted-slack-token>"),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), r"<redacted-aws-key-id>"),
]
# END SECRETS
def scrub(text):
    """text, several lines at once (a key that spans lines goes whole), without control characters or credentials"""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]", "", text)
    for pattern, repl in SECRETS:
        text = pattern.sub(repl, text)
    return text
def tail(data, n):
    """the last n lines of a log's bytes, scrubbed, each cut at 400 characters"""
    return [line[:400] for line in scrub(data[-65536:].decode("utf-8", "replace")).splitlines()[-n:]]
if __name__ == "__main__":   # scrub.py N < LOG: the log's last N lines, scrubbed, each after "  | "
    for line in tail(sys.stdin.buffer.read(), int(sys.argv[1])):
        print("  | " + line)
PY

say() { printf 'tpuctl bootstrap: %s\n' "$*" | tee -a "$BOOT_LOG" >&2; }
die() { FAIL_MSG="$*"; say "$*; not starting the agent"; exit 1; }

backoff() {  # backoff SECONDS: the next wait, doubled, at most 60 s
  awk -v d="$1" 'BEGIN { d *= 2; if (d > 60) d = 60; print d }'
}

# ---- the bootstrap status in the bucket -----------------------------------------------------------

write_status() {  # write_status STATE MESSAGE [LOGFILE]: best effort, bounded, never fails the script
  [ -n "$BUCKET" ] && [ -n "$STATUS_OBJ" ] || return 0
  local body="$WORK/bootstrap.json"
  python3 - "$body" "${3:-}" "$TAIL_LINES" "$1" "$STEP" "$2" "$CLUSTER" "$ROLE" "$WORKER" "$STARTED" \
      "$RUN_ID" "$WHEEL_OBJ" "$INSTALLING" "$WORK/scrub.py" <<'PY' 2>>"$BOOT_LOG" || { say "could not write the bootstrap status"; return 0; }
import json, runpy, socket, sys, time
out, logfile, tail_lines, state, step, message, cluster, role, worker, started, run_id, wheel, installing, scrub = \
    sys.argv[1:15]
scrubber = runpy.run_path(scrub)
try:
    with open(logfile, "rb") as f:
        lines = scrubber["tail"](f.read(), int(tail_lines))
except OSError:
    lines = []
doc = {"version": 1, "cluster": cluster, "role": role, "worker": worker, "host": socket.gethostname(),
       "state": state, "step": step, "message": scrubber["scrub"](message)[:400], "started": started, "installing": installing or None,
       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "run_id": run_id or None,
       "wheel_object": wheel or None, "log_tail": lines}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
PY
  if gcs_put "$STATUS_OBJ" "$body"; then
    say "bootstrap status $1 written to gs://$BUCKET/$STATUS_OBJ"
  else
    say "could not write the bootstrap status to gs://$BUCKET/$STATUS_OBJ"
  fi
  return 0
}

scrubbed_tail() {  # scrubbed_tail LOGFILE: its last lines, scrubbed, to stderr (the serial console)
  python3 "$WORK/scrub.py" "$TAIL_LINES" <"$1" >&2 2>/dev/null || say "(its lines are not shown: python3 could not scrub them)"
}

on_exit() {
  local code=$?
  set +e
  if [ "$code" -ne 0 ] && [ "$FINAL" != failed ]; then
    [ -n "$FAIL_MSG" ] || FAIL_MSG="step $STEP failed (exit code $code)"
    FINAL=failed
    if [ -n "$STATUS_OBJ" ]; then
      write_status failed "$FAIL_MSG" "$BOOT_LOG"
    else
      say "failed before the cluster's bucket was known: no bootstrap status written"
    fi
    say "the last lines of $BOOT_LOG:"
    scrubbed_tail "$BOOT_LOG"
  fi
  rm -rf -- "$WORK"
}
trap on_exit EXIT

# ---- packages -------------------------------------------------------------------------------------

apt_install() {  # apt_install PKG...: bounded tries; waits for an apt or dpkg run already under way
  command -v apt-get >/dev/null || { say "no apt-get on this image: install $* into the image"; return 1; }
  local n=1 delay=$RETRY_S
  export DEBIAN_FRONTEND=noninteractive
  say "installing $* with apt-get"
  while :; do
    # the first try uses the lists the image has; later ones refresh them first
    if [ "$n" -gt 1 ] || ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
      apt-get -q -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 update >>"$BOOT_LOG" 2>&1 || true
    fi
    if apt-get -q -y -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3 install --no-install-recommends "$@" \
        >>"$BOOT_LOG" 2>&1; then
      return 0
    fi
    if [ "$n" -ge "$TRIES" ]; then
      say "apt-get install $* failed $n times"
      return 1
    fi
    say "apt-get install $* failed (try $n of $TRIES); again in ${delay}s"
    sleep "$delay"
    n=$((n + 1))
    delay=$(backoff "$delay")
  done
}

ensure_tools() {
  local missing=()
  command -v curl >/dev/null || missing+=(curl ca-certificates)
  command -v python3 >/dev/null || missing+=(python3)
  [ "${#missing[@]}" -eq 0 ] || apt_install "${missing[@]}"
}

# ---- HTTP: the metadata server and Cloud Storage ----------------------------------------------------

token() {
  curl -sSf --connect-timeout 5 --max-time 30 -H 'Metadata-Flavor: Google' \
      "$MD/instance/service-accounts/default/token" 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])' 2>/dev/null
}

http() {  # http AUTH URL DEST CURL-ARGS...: prints the HTTP status (000: no answer)
  local auth=$1 url=$2 dest=$3 tok="" code
  shift 3
  if [ "$auth" = auth ]; then tok=$(token) || tok=""; fi
  if [[ -n "$tok" && "$tok" =~ $TOKEN_RE ]]; then
    code=$(printf 'header = "Authorization: Bearer %s"\n' "$tok" \
      | curl -sS -K - -o "$dest" -w '%{http_code}' --connect-timeout 10 "$@" "$url" 2>>"$BOOT_LOG") || true
  else
    code=$(curl -sS -o "$dest" -w '%{http_code}' --connect-timeout 10 "$@" "$url" 2>>"$BOOT_LOG") || true
  fi
  printf '%s' "${code:-000}"
}

fetch() {  # fetch AUTH URL DEST CURL-ARGS...: 0; 3 for a 404; 1 once $TRIES tries got no good answer
  local auth=$1 url=$2 dest=$3 n=1 delay=$RETRY_S code
  shift 3
  while :; do
    code=$(http "$auth" "$url" "$dest" --max-time 300 "$@")
    case "$code" in
      2??) return 0 ;;
      404) return 3 ;;
    esac
    if [ "$n" -ge "$TRIES" ]; then
      say "GET ${url%%\?*}: HTTP $code, $n tries; giving up"
      return 1
    fi
    say "GET ${url%%\?*}: HTTP $code (try $n of $TRIES); again in ${delay}s"
    sleep "$delay"
    n=$((n + 1))
    delay=$(backoff "$delay")
  done
}

md() {  # md PATH [CURL-ARGS...]: the metadata value on stdout; 3 if the server has no such value
  local out rc=0
  out=$(mktemp -p "$WORK")
  fetch noauth "$MD/$1" "$out" -H 'Metadata-Flavor: Google' "${@:2}" || rc=$?
  [ "$rc" -eq 0 ] && cat -- "$out"
  rm -f -- "$out"
  return "$rc"
}
attr() { md "instance/attributes/$1"; }

quote() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }

gcs_get() {  # gcs_get OBJECT DEST: 0; 3 if there is no such object; 1 after bounded tries
  local obj
  obj=$(quote "$1")
  fetch auth "$GCS/storage/v1/b/$BUCKET/o/$obj?alt=media" "$2"
}

gcs_put() {  # gcs_put OBJECT FILE: a JSON object, bounded tries
  local obj n=1 delay=$RETRY_S code
  obj=$(quote "$1")
  while :; do
    code=$(http auth "$GCS/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=$obj" /dev/null \
             --max-time 60 -X POST -H 'Content-Type: application/json' --data-binary "@$2")
    case "$code" in 2??) return 0 ;; esac
    if [ "$n" -ge "$TRIES" ]; then
      say "upload of gs://$BUCKET/$1: HTTP $code, $n tries; giving up"
      return 1
    fi
    sleep "$delay"
    n=$((n + 1))
    delay=$(backoff "$delay")
  done
}

# ---- the steps ------------------------------------------------------------------------------------

ensure_tools || die "curl and python3 are missing and could not be installed"

STEP=metadata
rc=0; CLUSTER=$(attr tpuctl-cluster) || rc=$?
[ "$rc" -ne 3 ] || die "no tpuctl-cluster in metadata"
[ "$rc" -eq 0 ] || die "the metadata server did not answer"
[[ "$CLUSTER" =~ $NAME_RE ]] || die "tpuctl-cluster in metadata is not a cluster name"
rc=0; ROLE=$(attr tpuctl-role) || rc=$?
[ "$rc" -eq 0 ] || { [ "$rc" -eq 3 ] && ROLE=host; } || die "cannot read tpuctl-role from the metadata server"
[[ "$ROLE" == host || "$ROLE" == worker ]] || die "tpuctl-role in metadata is neither host nor worker"
PROJECT=$(md project/project-id) || die "the metadata server has no project id"
[[ "$PROJECT" =~ $PROJECT_RE ]] || die "the project id in metadata is not a project id"
# a Compute Engine TPU worker's number is tpuctl's (tpuctl-worker-number, per-instance metadata of its
# MIG); a Cloud TPU API worker's is Google's (agent-worker-number); a host VM has neither
rc=0; WORKER=$(attr tpuctl-worker-number) || rc=$?
[ "$rc" -ne 3 ] || { rc=0; WORKER=$(attr agent-worker-number) || rc=$?; }
if [ "$rc" -eq 3 ]; then
  WORKER=$(hostname 2>/dev/null || python3 -c 'import socket; print(socket.gethostname())')
  WORKER="${WORKER%%.*}"
elif [ "$rc" -ne 0 ]; then
  die "cannot read agent-worker-number from the metadata server"
fi
[[ "$WORKER" =~ $WORKER_RE ]] || die "the worker number (or host name) is not a plain name"

STEP=bucket
announced=""
until [ -n "$BUCKET" ]; do
  rc=0; RAW=$(attr tpuctl-bucket) || rc=$?
  if [ "$rc" -eq 0 ]; then
    BUCKET="${RAW#gs://}"
    BUCKET="${BUCKET%%/*}"
    if [[ "$RAW" != gs://* ]] || ! [[ "$BUCKET" =~ $BUCKET_RE ]]; then
      say "ignoring tpuctl-bucket in metadata: not gs://BUCKET; waiting for a valid one"
      BUCKET=""
      sleep "$RETRY_S"
    fi
  elif [ "$rc" -ne 3 ]; then
    die "cannot read tpuctl-bucket from the metadata server"
  elif [ -z "$announced" ]; then
    say "no tpuctl-bucket in metadata yet: waiting for tpuctl up --bucket or tpuctl train"
    announced=1
  fi
  if [ -z "$BUCKET" ]; then
    md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=$MD_WAIT_S" \
        --max-time $((MD_WAIT_S + 30)) >/dev/null 2>&1 || sleep "$RETRY_S"
  fi
done
STATUS_OBJ="tpuctl/clusters/$CLUSTER/bootstrap/$ROLE-$WORKER.json"

STEP=agent.json
AGENT_JSON="tpuctl/clusters/$CLUSTER/agent.json"
wait_for_agent_json() {
  local announced="" rc
  while :; do
    rc=0; gcs_get "$AGENT_JSON" "$WORK/agent.json" || rc=$?
    [ "$rc" -ne 0 ] || return 0
    [ "$rc" -eq 3 ] || die "cannot read gs://$BUCKET/$AGENT_JSON (check the hosts' service account: roles/storage.objectUser on the bucket)"
    if [ -z "$announced" ]; then
      say "no gs://$BUCKET/$AGENT_JSON yet: waiting for tpuctl train"
      announced=1
    fi
    sleep "$POLL_S"
  done
}
read_agent_json() {  # the wheel_object and run_id of agent.json, one a line
  python3 - "$WORK/agent.json" 2>>"$BOOT_LOG" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
wheel, run = doc["wheel_object"], doc.get("run_id")
one_line = lambda v: isinstance(v, str) and v.isprintable()
if not one_line(wheel):
    sys.exit("wheel_object is not one line of text")
print(wheel)
print(run if one_line(run) else "")
PY
}
wheel_pinned() {  # wheel_pinned PIN_FILE SHA256: whether the pin names that wheel digest
  python3 - "$1" "$2" 2>>"$BOOT_LOG" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
kinds = [doc.get(k) for k in ("run", "sweep", "data")] if isinstance(doc, dict) and doc.get("version") == 1 else []
wheels = {f.get("wheel") for kind in kinds if isinstance(kind, dict) for f in kind.values() if isinstance(f, dict)}
sys.exit(0 if sys.argv[2] in wheels else 1)
PY
}

# the wheel agent.json names, downloaded and installed only if the instance metadata pins its sha256;
# a pin that names another wheel gets one more look after the metadata changes (a train under way)
WHEEL=""
looks=0
pin_announced=""
while [ -z "$WHEEL" ]; do
  STEP=agent.json
  wait_for_agent_json
  AGENT_FIELDS=$(read_agent_json) || die "gs://$BUCKET/$AGENT_JSON names no wheel_object"
  WHEEL_OBJ=$(printf '%s\n' "$AGENT_FIELDS" | sed -n 1p)
  RUN_ID=$(printf '%s\n' "$AGENT_FIELDS" | sed -n 2p)
  if ! [[ "$WHEEL_OBJ" =~ $WHEEL_RE ]]; then
    WHEEL_OBJ=""
    die "the wheel_object in agent.json is not a tpuctl wheel of a run"
  fi
  [[ "$RUN_ID" =~ ^[a-z0-9][a-z0-9-]{0,119}$ ]] || RUN_ID=""

  STEP=wheel
  candidate="$WORK/$(basename -- "$WHEEL_OBJ")"
  gcs_get "$WHEEL_OBJ" "$candidate" || die "cannot download gs://$BUCKET/$WHEEL_OBJ"
  digest=$(python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
             "$candidate") || die "cannot read the downloaded wheel"

  STEP=pin
  while :; do
    rc=0; attr tpuctl-pin > "$WORK/pin.json" || rc=$?
    [ "$rc" -eq 3 ] || break
    # waiting for work: a TPU VM recreated after a preemption is pinned by its supervisor once READY
    [ -n "$pin_announced" ] || say "no tpuctl-pin in metadata yet: waiting for tpuctl train to pin what this host may run"
    pin_announced=1
    md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=$MD_WAIT_S" \
        --max-time $((MD_WAIT_S + 30)) >/dev/null 2>&1 || sleep "$RETRY_S"
  done
  [ "$rc" -eq 0 ] || die "cannot read tpuctl-pin from the metadata server"
  if wheel_pinned "$WORK/pin.json" "$digest"; then
    WHEEL="$candidate"
    break
  fi
  looks=$((looks + 1))
  [ "$looks" -lt 2 ] || die "gs://$BUCKET/$WHEEL_OBJ has sha256 $digest, which tpuctl-pin in this VM's metadata does not name: not installing it"
  say "gs://$BUCKET/$WHEEL_OBJ (sha256 ${digest:0:12}) is not pinned in this VM's metadata: waiting for the pin to change"
  rm -f -- "$candidate"
  md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=$MD_WAIT_S" \
      --max-time $((MD_WAIT_S + 30)) >/dev/null 2>&1 || sleep "$RETRY_S"
done
INSTALLING=$(date -u +%Y-%m-%dT%H:%M:%SZ)
write_status installing "installing tpuctl from gs://$BUCKET/$WHEEL_OBJ (sha256 ${digest:0:12}, pinned)" "$BOOT_LOG"

STEP=venv
make_venv() {
  if "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    return 0
  fi
  rm -rf -- "$VENV"
  if python3 -m venv --system-site-packages "$VENV" >>"$BOOT_LOG" 2>&1; then
    return 0
  fi
  # Debian and Ubuntu keep ensurepip in python3-venv; without it venv leaves a directory with no pip
  rm -rf -- "$VENV"
  say "python3 -m venv failed (no ensurepip): installing python3-venv"
  apt_install python3-venv || return 1
  python3 -m venv --system-site-packages "$VENV" >>"$BOOT_LOG" 2>&1 || { rm -rf -- "$VENV"; return 1; }
}
make_venv || die "cannot create the virtual environment $VENV (python3 -m venv, python3-venv)"

STEP=pip
n=1
delay=$RETRY_S
say "installing $(basename -- "$WHEEL") into $VENV"
until "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input --progress-bar off \
        --retries 5 --timeout 60 "${PIP_ARGS[@]}" "$WHEEL" >>"$BOOT_LOG" 2>&1; do
  [ "$n" -lt "$PIP_TRIES" ] || die "pip install $(basename -- "$WHEEL") failed $n times"
  say "pip install failed (try $n of $PIP_TRIES); again in ${delay}s"
  sleep "$delay"
  n=$((n + 1))
  delay=$(backoff "$delay")
done

STEP=check
"$VENV/bin/tpuctl" --version >>"$BOOT_LOG" 2>&1 || die "the installed tpuctl does not run"
mkdir -p -m 0700 -- "$TPUCTL_HOME"
FINAL=ok
write_status ok "tpuctl installed; starting the agent" "$BOOT_LOG"

STEP=agent
quick=0
delay=$RETRY_S
while :; do
  began=$SECONDS
  rc=0
  "$VENV/bin/tpuctl" agent --cluster "$CLUSTER" --bucket "gs://$BUCKET" --project "$PROJECT" \
      --worker "$WORKER" --role "$ROLE" >>"$LOG" 2>&1 || rc=$?
  if [ "${TPUCTL_AGENT_ONCE:-}" = "1" ]; then
    [ "$rc" -eq 0 ] || FAIL_MSG="the agent exited with $rc"
    exit "$rc"
  fi
  if [ $((SECONDS - began)) -lt "$AGENT_MIN_UP_S" ]; then quick=$((quick + 1)); else quick=0; delay=$RETRY_S; fi
  if [ "$quick" -ge "$AGENT_QUICK_DEATHS" ]; then
    FINAL=failed
    write_status failed "the agent exited $quick times in a row within ${AGENT_MIN_UP_S}s (last exit code $rc)" "$LOG"
    say "the agent keeps dying (exit code $rc): see $LOG; giving up"
    scrubbed_tail "$LOG"
    exit 1
  fi
  say "the agent exited with $rc; restarting it in ${delay}s"
  sleep "$delay"
  delay=$(backoff "$delay")
done
