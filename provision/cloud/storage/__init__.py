"""Buckets: Google Cloud Storage (gcs.py) and bucket directories for the local provider (local.py).

The one entry point the rest of tpuctl uses::

    from provision.cloud.storage import open_bucket
    bucket = open_bucket("gs://my-bucket/runs/r1", target)   # prefix ignored: names are full
    bucket.write_bytes("runs/r1/progress.json", data)         # atomic, CRC32C-verified
    bucket.read_bytes("runs/r1/progress.json")

Under the ``local`` provider ``gs://BUCKET`` is the directory ``$TPUCTL_HOME/local/buckets/BUCKET``;
under ``gcp`` it is Cloud Storage (``STORAGE_EMULATOR_HOST`` and ``TPUCTL_CREDENTIALS=anonymous``
honoured). google-cloud-storage is imported only when a gcp bucket is opened.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .base import (
    OBJECT_ROLE,
    PARTS_PREFIX,
    Bucket,
    BucketNotFound,
    ChecksumMismatch,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    TransferJob,
)
from .local import LocalBucket

if TYPE_CHECKING:
    from ...basics.config import Target
    from ...basics.validate import BucketUrl

__all__ = [
    "LOCAL_DEFAULT_BUCKET",
    "OBJECT_ROLE",
    "PARTS_PREFIX",
    "Bucket",
    "BucketNotFound",
    "ChecksumMismatch",
    "LocalBucket",
    "ObjectInfo",
    "ObjectNotFound",
    "PreconditionFailed",
    "TransferJob",
    "local_bucket",
    "local_buckets_dir",
    "open_bucket",
]

_clients: dict[tuple, object] = {}

# The bucket of a local cluster that was given none: a directory under $TPUCTL_HOME.
LOCAL_DEFAULT_BUCKET = "gs://tpuctl-local"


def local_buckets_dir():
    from ...basics.config import home

    return home() / "local" / "buckets"


def local_bucket(name: str) -> LocalBucket:
    """The local provider's bucket ``name``: a directory under ``$TPUCTL_HOME``."""
    from ...basics.config import home

    return LocalBucket(local_buckets_dir() / name, url=f"gs://{name}",
                       meta_path=home() / "local" / "bucket-meta" / f"{name}.json", private=True)


def open_bucket(url: str | BucketUrl, target: Target, *, pool_size: int = 16) -> Bucket:
    """The bucket that ``gs://BUCKET[/PREFIX]`` names, for the target's provider (prefix ignored)."""
    from ...basics.validate import BucketUrl, bucket_url

    parsed = url if isinstance(url, BucketUrl) else bucket_url(url)
    if target.provider == "local":
        return local_bucket(parsed.bucket)
    from .gcs import GcsBucket

    return GcsBucket(parsed.bucket, _client(target.project, pool_size))


def _client(project: str | None, pool_size: int):
    """One client per project and endpoint for the process: connections are reused."""
    key = (project, os.environ.get("STORAGE_EMULATOR_HOST"), os.environ.get("TPUCTL_CREDENTIALS"),
           os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"), pool_size)
    client = _clients.get(key)
    if client is None:
        from .gcs import make_client

        client = _clients[key] = make_client(project, pool_size)
    return client
