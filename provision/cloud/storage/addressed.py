"""Objects named by their sha256 (a workdir archive, a requirement's wheel): whether the bucket
already holds those bytes, so that staging may skip sending them.

Hosts take such an object only if its bytes have the sha256 their pin names (docs/security.md).
A bucket writer can plant an object under the name tpuctl will use, with the right size, and even
the right CRC32C (a CRC is linear: four chosen bytes give any value). Had staging trusted size or
CRC32C, it would never send the real bytes, and every later run of that code would be refused.
Custom metadata proves nothing either: the same writer sets it. So :func:`holds` proves it from
the bytes: it reads the object back and hashes it. That costs one download, once per object
version: Cloud Storage gives every write a new generation (a writer cannot choose it, and no
write keeps it), so a generation this machine wrote (:func:`wrote`) or hashed before still holds
those bytes, and it is remembered under ``TPUCTL_HOME`` (``staged.json``, a cache: an entry lost
means one more read). An unchanged workdir or wheel staged again costs one stat, as before.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from ...basics import private, statefile
from ...basics.config import home
from ...basics.digest import sha256_file
from ...basics.errors import TpuctlError

KEPT = 4096        # remembered object versions, newest kept


def _memo() -> Path:
    return home() / "staged.json"


def _key(bucket: Any, name: str) -> str:
    return f"{str(bucket.url).rstrip('/')}/{name}"


def holds(bucket: Any, name: str, sha256: str, size: int) -> bool:
    """Whether ``bucket`` holds ``name`` with exactly the bytes whose sha256 is ``sha256``: one
    stat for a version this machine wrote or verified before; else the object is read back and
    hashed (a download of ``size`` bytes). False for anything else, which staging overwrites."""
    there = bucket.stat(name)
    if there is None or there.size != size:
        return False
    if there.generation is not None:
        try:
            seen = statefile.read_json(_memo(), {})
        except TpuctlError:
            seen = {}             # a damaged cache: read the object back instead
        entry = seen.get(_key(bucket, name)) if isinstance(seen, dict) else None
        if isinstance(entry, list) and entry[:2] == [there.generation, sha256]:
            return True
    with tempfile.TemporaryDirectory(dir=private.make_dirs(home())) as tmp:
        copy = Path(tmp) / "object"
        try:
            bucket.download_file(name, copy)
        except (TpuctlError, OSError):
            return False          # gone, or unreadable: sending it again settles it
        same = sha256_file(copy) == sha256
    # the bytes hashed are ``there``'s if the object is still at that generation after the read
    # (generations only grow: none came and went in between)
    if same and there.generation is not None:
        after = bucket.stat(name)
        if after is not None and after.generation == there.generation:
            wrote(bucket, name, sha256, after)
    return same


def wrote(bucket: Any, name: str, sha256: str, info: Any) -> None:
    """Remember that ``info``'s generation of ``name`` holds the bytes of ``sha256``: written by
    this tpuctl, or read back and hashed by it."""
    generation = getattr(info, "generation", None)
    if generation is None:
        return
    key = _key(bucket, name)

    def put(doc: Any) -> dict[str, Any]:
        doc = {k: v for k, v in doc.items() if isinstance(v, list) and len(v) == 3} if isinstance(doc, dict) else {}
        doc[key] = [generation, sha256, time.time()]
        if len(doc) > KEPT:
            doc = dict(sorted(doc.items(), key=lambda kv: kv[1][2])[-KEPT:])
        return doc

    try:
        statefile.update_json(_memo(), put, default={})
    except (TpuctlError, OSError):
        with contextlib.suppress(TpuctlError, OSError):   # a damaged cache starts over; a lost one costs a read
            statefile.write_json(_memo(), put({}))
