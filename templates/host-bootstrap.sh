#!/bin/bash
# tpuctl bootstrap: the startup-script metadata of a host VM and of every TPU VM worker.
#
# It is small on purpose: every list of instances or TPU nodes returns each one's metadata, and a
# fleet lists thousands. It waits for tpuctl-bucket in the metadata (as host-startup.sh did when it
# was the startup script), fetches tpuctl's startup script (templates/host-startup.sh) from
# gs://BUCKET/tpuctl/startup/SHA256.sh, written there by whoever set tpuctl-bucket, and runs it only
# if its sha256 is the one tpuctl wrote into this file: a bucket writer cannot make a host run
# code (docs/security.md). Every network step is retried a bounded number of times; the bucket
# value is checked against the shape tpuctl writes, and a wrong one is ignored (still waiting).
# tpuctl removes these comment lines when it writes the metadata, and fills in H.
set -u
H=@TPUCTL_STARTUP_SHA256@
MD=${TPUCTL_METADATA_URL:-http://metadata.google.internal/computeMetadata/v1}
GCS=${TPUCTL_STORAGE_URL:-https://storage.googleapis.com}
T=${TPUCTL_BOOTSTRAP_RETRY_S:-10} N=${TPUCTL_BOOTSTRAP_TRIES:-6} W=$(mktemp -d) B= n=0
trap 'rm -rf -- "$W"' EXIT
say() { echo "tpuctl bootstrap: $*" >&2; }
# get URL FILE CURL-ARGS...: the HTTP status (000: no answer)
get() { curl -sS -o "$2" -w '%{http_code}' --max-time 330 "${@:3}" "$1" 2>/dev/null; }
md() { get "$MD/$1" "$2" -H Metadata-Flavor:Google; }
# an image without curl: apt-get installs it (waiting up to 300 s for an apt run under way)
command -v curl >/dev/null || { apt-get -qy update; DEBIAN_FRONTEND=noninteractive apt-get -qy -o \
  DPkg::Lock::Timeout=300 install curl; } >&2 || { say "no curl, and apt-get cannot install it"; exit 1; }
while :; do
  c=$(md instance/attributes/tpuctl-bucket "$W/b")
  if [ "$c" = 200 ]; then
    v=$(cat "$W/b") B=${v#gs://} B=${B%%/*}
    [[ $v == gs://* && $B =~ ^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$ ]] && break
    say "ignoring tpuctl-bucket in metadata: not gs://BUCKET" && sleep "$T"
  elif [ "$c" != 404 ] && n=$((n + 1)) && [ "$n" -ge "$N" ]; then
    say "the metadata server did not answer (HTTP $c)" && exit 1
  fi
  # until the metadata changes (at most 300 s)
  md "instance/attributes/?recursive=true&wait_for_change=true&timeout_sec=300" /dev/null >/dev/null || sleep "$T"
done
O=tpuctl/startup/$H.sh n=0
until
  k=$(md instance/service-accounts/default/token - | sed -n 's/.*"access_token" *: *"\([A-Za-z0-9._~+\/=-]*\)".*/\1/p')
  # the token goes to curl on stdin, never on a command line
  c=$({ [ -z "$k" ] || echo "header = \"Authorization: Bearer $k\""; } | get \
    "$GCS/storage/v1/b/$B/o/${O//\//%2F}?alt=media" "$W/s" -K -)
  [ "$c" = 200 ]
do
  n=$((n + 1)) && [ "$n" -lt "$N" ] || { say "cannot read gs://$B/$O (HTTP $c): not starting"; exit 1; }
  sleep "$T"
done
d=$(sha256sum "$W/s") d=${d%% *}
[ "$d" = "$H" ] || { say "gs://$B/$O has sha256 $d, not the $H pinned here: not running it"; exit 1; }
bash "$W/s"
