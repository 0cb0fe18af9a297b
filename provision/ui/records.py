"""Reading what the page shows: the provider's clusters, and the run and sweep records in the
buckets this machine knows (its run and sweep index under ``$TPUCTL_HOME``). Read-only: nothing
here writes, so a viewer needs only read access (``roles/storage.objectViewer`` on the buckets,
``roles/tpu.viewer`` and ``roles/compute.viewer`` for the clusters).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..basics.config import Target
from . import shape

CACHE_S = 3.0


def _bucket(entry: dict[str, Any], target: Target) -> Any:
    from ..cloud.storage import open_bucket

    provider = entry.get("provider") if entry.get("provider") in ("local", "gcp") else target.provider
    project = entry.get("project") if provider == "gcp" else None
    return open_bucket(str(entry["bucket"]), Target(provider=provider, project=project or target.project, zone=None))


def _json(bucket: Any, name: str) -> Any:
    from ..basics.errors import NotFound

    try:
        return json.loads(bucket.read_bytes(name))
    except (NotFound, ValueError):
        return None


class Records:
    """The documents of the page, each read at most every ``CACHE_S`` seconds."""

    def __init__(self, target: Target, provider: Any | None):
        self.target = target
        self.provider = provider
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}

    def _cached(self, key: str, make: Any) -> Any:
        with self._lock:
            hit = self._cache.get(key)
            if hit and time.monotonic() - hit[0] < CACHE_S:
                return hit[1]
        value = make()
        with self._lock:
            self._cache[key] = (time.monotonic(), value)
        return value

    # ---- the overview ------------------------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        return self._cached("overview", lambda: {"provider": self.target.provider, "project": self.target.project,
                                                 "clusters": self._clusters(), "runs": self._runs(),
                                                 "sweeps": self._sweeps(), "time": time.time()})

    def _clusters(self) -> dict[str, Any]:
        from ..cluster.view import status
        from ..runs.store import latest_by_cluster

        if self.provider is None:
            return {"error": "no provider", "items": []}
        try:
            views = status(self.provider, run_lookup=latest_by_cluster().get)
        except Exception as exc:  # noqa: BLE001 - the page says why, and shows the rest
            from ..basics.errors import TpuctlError
            from ..basics.redact import redact

            msg = exc.one_line() if isinstance(exc, TpuctlError) else type(exc).__name__
            return {"error": redact(msg), "items": []}
        items = []
        for v in views:
            t = v.tpu
            items.append({"name": v.name, "zone": v.zone, "state": t.state.value if t else None,
                          "health": t.health.value if t else None,
                          "accelerator_type": t.accelerator_type if t else None,
                          "preemptible": bool(t and t.interruptible), "hourly_usd": v.hourly,
                          "uptime_seconds": v.uptime_seconds, "vm": v.vm.state.value if v.vm else None,
                          "vm_machine_type": v.vm.machine_type if v.vm else None,
                          "hosts": [{"worker": i, "ip": e.ip_address, "port": e.port}
                                    for i, e in enumerate(t.endpoints if t else [])][:64],
                          "host_count": (t.hosts if t else None),
                          "run": shape.text((v.run or {}).get("run_id"), 120)})
        return {"error": None, "items": items}

    def _runs(self) -> list[dict[str, Any]]:
        from ..runs.store import RUNS_PREFIX, known_runs

        out = []
        for entry in reversed(known_runs()[-200:]):
            try:
                rec = _json(_bucket(entry, self.target), f"{RUNS_PREFIX}/{entry['run_id']}/run.json")
            except Exception:  # noqa: BLE001, S112 - a bucket not reachable now: left out this refresh
                continue
            if isinstance(rec, dict):
                out.append(shape.run_summary(rec))
        return out

    def _sweeps(self) -> list[dict[str, Any]]:
        from ..sweeps.store import SWEEPS_PREFIX, known

        out = []
        for entry in reversed(known()[-100:]):
            try:
                rec = _json(_bucket(entry, self.target), f"{SWEEPS_PREFIX}/{entry['sweep_id']}/sweep.json")
            except Exception:  # noqa: BLE001, S112 - not reachable now
                continue
            if isinstance(rec, dict):
                spec = rec.get("spec") if isinstance(rec.get("spec"), dict) else {}
                best = rec.get("best") if isinstance(rec.get("best"), dict) else {}
                out.append({"sweep_id": shape.text(rec.get("sweep_id"), 120), "state": shape.text(rec.get("state"), 40),
                            "metric": shape.text(spec.get("metric"), 80), "best_metric": shape.num(best.get("metric")),
                            "best_trial": shape.num(best.get("trial")), "max_trials": shape.num(rec.get("max_trials")),
                            "created_at": shape.num(rec.get("created_at"))})
        return out

    # ---- one run, one sweep ------------------------------------------------------------------------
    def run(self, run_id: str) -> dict[str, Any] | None:
        return self._cached(f"run:{run_id}", lambda: self._run(run_id))

    def _run(self, run_id: str) -> dict[str, Any] | None:
        from ..billing.costs import hourly
        from ..runs.store import RunStore, cluster_spec_name, lookup

        try:
            entry = lookup(run_id)
            store = RunStore(_bucket(entry, self.target), run_id)
            rec = _json(store.bucket, f"{store.prefix}/run.json")
        except Exception:  # noqa: BLE001 - unknown here, or unreachable: the page says not found
            return None
        if not isinstance(rec, dict):
            return None
        try:
            raw_events = store.events()
        except Exception:  # noqa: BLE001 - an events file that is not JSON lines: none shown
            raw_events = []
        spec = _json(store.bucket, cluster_spec_name(str(rec.get("cluster")))) if rec.get("cluster") else None
        acc, rate = None, None
        if isinstance(spec, dict) and isinstance(spec.get("accelerator_type"), str):
            acc = spec["accelerator_type"].split(",")[0]
            interruptible = bool(spec.get("preemptible") or spec.get("spot"))
            rate = hourly(acc, interruptible, shape.text(rec.get("zone"), 60)) or None
        return shape.run_document(rec, raw_events, hourly_usd=rate, accelerator_type=acc,
                                  goodput=self._goodput(run_id, rec))

    def _goodput(self, run_id: str, rec: dict[str, Any]) -> dict[str, Any] | None:
        """The run's wall time by cause (provision.runs.goodput), priced as ``tpuctl cost RUN`` prices
        it: the cost ledger's TPU lifetimes and the provider's prices. None when it cannot be read."""
        from ..billing import costs

        if self.provider is None or not isinstance(rec.get("cluster"), str):
            return None
        try:
            report = costs.cluster_cost(self.provider, self.target, rec["cluster"], None, now=time.time(),
                                        run_ids={run_id})
        except Exception:  # noqa: BLE001 - the page shows the rest without it
            return None
        g = next((r.goodput for r in report.runs if r.run_id == run_id), None)
        # no TPU lifetime of the cluster in the ledgers this machine reads: its dollars are unknown, not $0
        return {**g, "badput_usd": None, "no_tpu_recorded": True} if g and not report.lives else g

    def sweep(self, sweep_id: str) -> dict[str, Any] | None:
        return self._cached(f"sweep:{sweep_id}", lambda: self._sweep(sweep_id))

    def _sweep(self, sweep_id: str) -> dict[str, Any] | None:
        from ..sweeps.store import SweepStore, lookup

        try:
            entry = lookup(sweep_id)
            if entry is None:
                return None
            store = SweepStore(_bucket(entry, self.target), sweep_id)
            rec = store.read_json("sweep.json")
            trials = [t.to_dict() for t in store.trials()]
        except Exception:  # noqa: BLE001 - unknown or unreachable
            return None
        return shape.sweep_document(rec, trials) if isinstance(rec, dict) else None
