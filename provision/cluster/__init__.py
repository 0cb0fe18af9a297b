"""Clusters: a host VM and a TPU, found by label, brought up, recreated, viewed and taken down.

The pure decisions (``cidr``: which block is free; ``failover``: which zone next; ``plan``: what
``up`` will do) sit beside the modules that apply them through the provider protocol (``up`` and its
steps ``survey``, ``apply``, ``rollback``, ``recreate``; ``down``, ``view``), the local spec cache
(``cache``) and the cost ledger every lifetime change is written to (``ledger``).
"""

from __future__ import annotations

from .cache import (
           bucket_for,
           cache_dir,
           cache_spec,
           cached_names,
           cached_spec,
           cached_specs,
           uncache,
)
from .down import DownResult, delete_tpu, down
from .recreate import recreate_tpu
from .resources import (
           LOCAL_DEFAULT_ZONE,
           Found,
           default_zone,
           delete_request,
           find,
           tpu_hourly,
           tpu_price,
)
from .result import UpResult
from .up import up
from .view import PREEMPTION_GRACE_S, ClusterView, preempt, status

__all__ = ["LOCAL_DEFAULT_ZONE", "PREEMPTION_GRACE_S", "ClusterView", "DownResult", "Found", "UpResult", "bucket_for", "cache_dir",
           "cache_spec", "cached_names", "cached_spec", "cached_specs", "default_zone", "delete_request", "delete_tpu", "down", "find", "preempt", "recreate_tpu",
           "status", "tpu_hourly", "tpu_price", "uncache", "up"]
