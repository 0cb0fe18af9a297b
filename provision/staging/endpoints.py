"""SRC and DEST of ``tpuctl stage``: a bucket (or directory) plus the prefix files live under.

``gs://BUCKET[/PREFIX]`` opens a bucket through :func:`provision.cloud.storage.open_bucket` (Cloud
Storage, or under the local provider the directory ``$TPUCTL_HOME/local/buckets/BUCKET``); any
other text is a local path. A SRC that is one file (or one object) stages just that file into DEST.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..basics.errors import UsageError
from ..cloud.storage import Bucket, LocalBucket, ObjectInfo

if TYPE_CHECKING:
    from ..basics.config import Target

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Endpoint:
    text: str  # as the user wrote it
    bucket: Bucket
    prefix: str  # object-name prefix the relative paths live under; "" for the root
    is_bucket: bool  # gs:// (Cloud Storage, or a local provider bucket directory)
    single: str | None = None  # SRC is this one file: its name relative to prefix

    @property
    def local(self) -> bool:
        return self.bucket.kind == "local"

    def name(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def rel(self, name: str) -> str:
        return name[len(self.prefix) + 1:] if self.prefix else name

    def path(self, rel: str) -> Path:
        assert isinstance(self.bucket, LocalBucket)
        return self.bucket.path(self.name(rel))

    def root_dir(self) -> Path | None:
        if not isinstance(self.bucket, LocalBucket):
            return None
        return self.bucket.root.joinpath(*self.prefix.split("/")) if self.prefix else self.bucket.root

    def describe(self) -> str:
        root = self.root_dir()
        if self.is_bucket and root is not None:
            return f"{self.text} (directory {root})"
        return self.text

    def listing(self) -> dict[str, ObjectInfo]:
        """Files under this endpoint, by relative path (internal names left out)."""
        if self.single is not None:
            info = self._single_info()
            return {} if info is None else {self.single: info}
        base = f"{self.prefix}/" if self.prefix else ""
        return {self.rel(o.name): o for o in self.bucket.list(base)}

    def _single_info(self) -> ObjectInfo | None:
        assert self.single is not None
        if isinstance(self.bucket, LocalBucket):
            try:
                st = self.path(self.single).stat()
            except OSError:
                return None
            return ObjectInfo(self.name(self.single), st.st_size, None, st.st_mtime_ns)
        return self.bucket.stat(self.name(self.single))

    def as_single(self) -> Endpoint | None:
        """A gs:// SRC whose prefix names one object rather than a folder, seen that way."""
        if not self.prefix or self.single is not None or self.bucket.stat(self.prefix) is None:
            return None
        parent, _, base = self.prefix.rpartition("/")
        return replace(self, prefix=parent, single=base)


def is_bucket_url(text: str) -> bool:
    return text.startswith("gs://")


def open_endpoint(text: str, target: Target | None, *, pool_size: int = 16) -> Endpoint:
    from ..basics.validate import bucket_url
    from ..cloud.storage import open_bucket

    if not text or not text.strip():
        raise UsageError("empty SRC or DEST", hint="give a local path or gs://BUCKET/PREFIX")
    if "\x00" in text:
        raise UsageError("SRC or DEST contains a NUL byte", hint="give a local path or gs://BUCKET/PREFIX")
    if is_bucket_url(text):
        url = bucket_url(text)
        assert target is not None
        return Endpoint(text, open_bucket(url, target, pool_size=pool_size), url.prefix, True)
    if _SCHEME_RE.match(text) or text.startswith("gs:"):
        raise UsageError(f"unsupported location {text!r}", hint="use gs://BUCKET[/PREFIX] or a local path")
    path = Path(os.path.expanduser(text))
    try:
        if path.is_file():
            return Endpoint(text, LocalBucket(path.parent), "", False, single=path.name)
    except OSError as exc:   # a name longer than the filesystem allows, a path through a file, ...
        raise UsageError(f"cannot use {_shown(text)} as a local path: {exc.strerror}",
                         hint="give an existing file or directory, or a directory to create") from None
    too_long = [part for part in path.parts if len(os.fsencode(part)) > 255]
    if too_long or len(os.fsencode(str(path))) > 4096:
        raise UsageError(f"cannot use {_shown(text)} as a local path: a name is longer than the filesystem allows",
                         hint="use names of at most 255 bytes")
    return Endpoint(text, LocalBucket(path), "", False)


_BUCKET_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")


def meant_bucket(text: str) -> str | None:
    """``my-bucket/x`` as a local DEST: a relative path whose first folder does not exist here and
    is shaped like a bucket name most likely lost its ``gs://``; the URL it would be, else None.
    ``./my-bucket/x`` says a local folder is meant."""
    if text.startswith((".", "~", "/")) or "/" not in text.strip("/"):
        return None
    first = text.split("/", 1)[0]
    if not _BUCKET_NAME_RE.fullmatch(first) or Path(first).exists():
        return None
    return f"gs://{text}"


def _shown(text: str) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return repr(text if len(text) <= 60 else text[:57] + "...")
