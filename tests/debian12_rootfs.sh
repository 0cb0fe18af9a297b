#!/bin/bash
# Build, once, the Debian 12 (bookworm) userland that tests/integration/test_bootstrap_debian12.py
# runs templates/host-startup.sh in: a debootstrap minbase with what a bare Debian 12 cloud image
# has of what the bootstrap uses (python3, curl, CA certificates) and nothing more: no
# python3-venv (so `python3 -m venv` fails as it does on the image), no pip, and empty apt lists
# (the bootstrap must run `apt-get update` itself). The tests never change it: each runs on an
# overlay (or a copy) of it.
#
#   bash tests/debian12_rootfs.sh DIR      # `make bootstrap-rootfs`: DIR defaults to
#                                          # ~/.cache/tpuctl/debian12-rootfs there
#
# Needs root (debootstrap, chroot) and Debian's mirror: the one this machine's apt sources name
# (TPUCTL_DEBIAN_MIRROR overrides). Installs debootstrap with apt-get if it is missing.
set -euo pipefail
ROOTFS=${1:?usage: bash tests/debian12_rootfs.sh DIR}
STAMP=.tpuctl-rootfs-v1          # bump when what goes into the rootfs changes

if [ -e "$ROOTFS/$STAMP" ]; then
  echo "debian12 rootfs: $ROOTFS (cached)"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "debian12 rootfs: needs root (debootstrap and chroot)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi

mirror() {  # the Debian archive this machine's apt already uses (deb822 .sources or one-line .list)
  python3 - <<'PY'
import glob, re
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for block in re.split(r"\n\s*\n", open(path).read()):
        fields = dict(re.findall(r"(?m)^([A-Za-z-]+):\s*(.*)$", block))
        if "bookworm" in fields.get("Suites", "").split() and "main" in fields.get("Components", "").split():
            print(fields["URIs"].split()[0])
            raise SystemExit
for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s+.*\bmain\b", line)
        if m:
            print(m.group(1))
            raise SystemExit
print("http://deb.debian.org/debian")
PY
}
MIRROR=${TPUCTL_DEBIAN_MIRROR:-$(mirror)}

mkdir -p "$(dirname -- "$ROOTFS")"
TMP="$ROOTFS.tmp.$$"
trap 'rm -rf -- "$TMP"' EXIT
rm -rf -- "$ROOTFS" "$ROOTFS".tmp.*
echo "debian12 rootfs: debootstrap bookworm minbase from $MIRROR into $ROOTFS"
start=$SECONDS
debootstrap --variant=minbase --include=python3,curl,ca-certificates bookworm "$TMP" "$MIRROR" \
  > "$TMP.log" 2>&1 || { tail -n 30 "$TMP.log" >&2; exit 1; }
rm -f -- "$TMP.log"
chroot "$TMP" apt-get clean
find "$TMP/var/lib/apt/lists" -mindepth 1 -maxdepth 1 -type f -delete
# what makes this "a Debian 12 image without python3-venv"
if chroot "$TMP" python3 -c 'import ensurepip' 2>/dev/null; then
  echo "debian12 rootfs: ensurepip is importable, python3-venv must not be installed" >&2
  exit 1
fi
chroot "$TMP" python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
touch "$TMP/$STAMP"
mv -- "$TMP" "$ROOTFS"
trap - EXIT
echo "debian12 rootfs: built in $((SECONDS - start)) s: $(du -sh -- "$ROOTFS" | cut -f1)"
