"""A run's requirements as a wheelhouse in its bucket, pinned wheel by wheel.

``train`` resolves the requirements (:mod:`provision.runs.requirements`) into wheels with pip,
once per requirements text and target (cached under ``$TPUCTL_HOME/wheelhouses``), and stages
each wheel content-addressed (``tpuctl/wheelhouse/<sha256>/<file>``) with a manifest of file
names and sha256s (``tpuctl/wheelhouse/<digest>.json``). The run's pin holds the manifest's
digest (:func:`provision.runs.pins.manifest`), so a bucket writer can neither swap a wheel nor add
one. Each host installs exactly those wheels, checked against the manifest, with pip from the
bucket alone (``--no-index --no-deps``) into a directory of its own per manifest, kept across
attempts; a recreated TPU reads them from the bucket, not from the package index.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..basics import private
from ..basics.config import home
from ..basics.digest import sha256_file
from ..basics.errors import UsageError
from . import pins

PREFIX = "tpuctl/wheelhouse"
_WHEEL = re.compile(r"[A-Za-z0-9_.+-]+\.whl")


def manifest_name(digest: str) -> str:
    return f"{PREFIX}/{digest}.json"


def wheel_name(sha: str, filename: str) -> str:
    return f"{PREFIX}/{sha}/{filename}"


def cache_key(lines: tuple[str, ...], provider: str, host: tuple[str, str] | None = None) -> str:
    """The name of the cache of ``lines`` resolved for ``provider``'s hosts: this machine's Python on
    the local provider, ``host`` (Python, platform: :func:`provision.runs.requirements.host_target`) on GCP."""
    from .requirements import UBUNTU_2204

    target: list = list(sys.version_info[:2]) if provider == "local" else list(host or UBUNTU_2204)
    return hashlib.sha256(json.dumps([provider, target, list(lines)]).encode()).hexdigest()


def build(lines: tuple[str, ...], provider: str, log: Callable[[str], None],
          host: tuple[str, str] | None = None) -> list[tuple[str, Path, str]]:
    """The wheels ``lines`` resolve to for the hosts (``host``: their Python and platform on GCP), as
    (file name, path, sha256), from the cache when the same text was resolved for the same target
    before; UsageError (one line, pip's reason) when pip cannot resolve them."""
    cache = home() / "wheelhouses" / cache_key(lines, provider, host)
    index = cache / "wheels.json"
    if index.is_file():
        wheels = [(name, cache / name, sha) for name, sha in json.loads(index.read_text())]
        if all(p.is_file() and sha256_file(p) == sha for _, p, sha in wheels):
            return wheels
    private.make_dirs(cache.parent)
    from .requirements import pip_argv

    with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(lines) + "\n")
        dest = Path(tmp) / "wheels"
        log(f"resolving the run's requirements into wheels ({len(lines)} line(s)) with pip")
        argv = pip_argv(str(req), str(dest), provider=provider, **({"host": host} if host else {}))
        proc = subprocess.run([sys.executable, "-m", "pip", *argv],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            why = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise UsageError(f"pip cannot resolve the run's requirements: {(why or ['no output'])[-1][:300]}",
                             hint="fix requirements (each line must install with pip on the hosts' platform), "
                                  "then train again")
        shutil.rmtree(cache, ignore_errors=True)
        private.make_dirs(cache)
        wheels = []
        for path in sorted(dest.glob("*.whl")):
            target = cache / path.name
            shutil.copyfile(path, target)
            wheels.append((path.name, target, sha256_file(target)))
    index.write_text(json.dumps([[name, sha] for name, _p, sha in wheels]))
    return wheels


def stage(bucket: Any, wheels: list[tuple[str, Path, str]]) -> str:
    """Upload the wheels and their manifest; returns its digest (the pin's). A wheel is skipped
    only when the bucket holds its very bytes (:func:`provision.cloud.storage.addressed.holds`): one of
    the same name and size planted by a bucket writer, which hosts would refuse, is replaced."""
    from ..cloud.storage import addressed

    entries = sorted((name, sha) for name, _p, sha in wheels)
    digest = pins.manifest(entries)
    for name, path, sha in wheels:
        obj = wheel_name(sha, name)
        if not addressed.holds(bucket, obj, sha, path.stat().st_size):
            addressed.wrote(bucket, obj, sha, bucket.upload_file(path, obj))
    bucket.write_bytes(manifest_name(digest), json.dumps({"wheels": [[n, s] for n, s in entries]}).encode())
    return digest


def install(bucket: Any, digest: str, target: Path, log: Callable[[str], None]) -> Path:
    """The run's pinned wheels installed into ``target/site`` (once per manifest: reused by later
    attempts on this host); raises ValueError naming what does not match the pin."""
    site, done = target / "site", target / "installed"
    if done.is_file():
        return site
    raw = bucket.read_bytes(manifest_name(digest))
    doc = json.loads(raw)
    entries = [(str(n), str(s)) for n, s in doc.get("wheels") or []] if isinstance(doc, dict) else []
    if pins.manifest(entries) != digest:
        raise ValueError(f"the wheelhouse manifest in the bucket is not the one pinned (sha256 {digest[:12]})")
    wheels = target / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    wheels.mkdir(parents=True, mode=0o700)
    paths = []
    for name, sha in entries:
        if not _WHEEL.fullmatch(name) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError(f"a wheelhouse entry that is not a wheel: {name[:80]!r}")
        path = wheels / name
        bucket.download_file(wheel_name(sha, name), path)
        if sha256_file(path) != sha:
            raise ValueError(f"wheel {name} in the bucket is not the one pinned (sha256 {sha[:12]})")
        paths.append(str(path))
    log(f"installing {len(paths)} pinned wheel(s) of the run's requirements from the bucket")
    if paths:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                               "--no-index", "--no-deps", "--target", str(site), *paths],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ValueError(f"pip could not install the run's wheels: {(proc.stderr or proc.stdout).strip()[-300:]}")
    else:
        site.mkdir(mode=0o700, exist_ok=True)
    done.write_text(digest)
    os.chmod(done, 0o600)
    return site
