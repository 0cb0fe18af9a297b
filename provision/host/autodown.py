"""Autodown: the agent on a cluster's host that deletes the TPU once it has been idle for the
cluster's ``--autodown`` duration (keeping the host VM).

On GCP it is a thread of the host VM's ``tpuctl agent`` (the duration comes from the VM's
``tpuctl-autodown-seconds`` metadata); on the local provider, whose "host VM" is this machine, it is
a detached process (``python -m provision.host.autodown autodown``) that exits once the cluster's
VM is gone. Both judge and delete through :func:`provision.billing.reaper.reap`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..basics import private
from ..basics.config import Target, resolve
from ..basics.procs import AUTODOWN_MODULE, alive, is_autodown_agent
from ..basics.validate import format_duration
from ..billing.reaper import reap
from ..cloud import get_provider
from ..cloud.base import Provider, Vm, VmState
from ..runs.pinning import METADATA_URL

# How often an autodown agent looks: the bound on billed idle time is --autodown + this + a delete.
AUTODOWN_EVERY_S = 10.0


def autodown_every() -> float:
    return max(0.2, float(os.environ.get("TPUCTL_AUTODOWN_EVERY_S") or AUTODOWN_EVERY_S))


def start_autodown(provider: Provider, spec: Any, vm: Vm | None, *, created_vm: bool) -> str:
    """Called by ``tpuctl up --autodown``: make sure the cluster's host enforces it; returns a note."""
    human = format_duration(spec.autodown_seconds)
    if provider.name != "local":
        note = (f"autodown: the host VM's agent deletes the TPU once idle for {human} "
                f"(metadata tpuctl-autodown-seconds={int(spec.autodown_seconds)}; the VM stays)")
        if vm is not None and not created_vm:
            note += (f"; the host VM {vm.name} already existed and keeps the setting it was created with "
                     f"(tpuctl down {spec.name} then up again changes it)")
        return note
    if vm is None:
        return "autodown: no host VM to enforce it; run tpuctl down --idle from cron (see docs/idle.md)"
    current = provider.agent(vm.zone, vm.name)
    if current is not None:
        return f"autodown: already enforced by the local agent (pid {current['pid']})"
    log_path = provider.root / "agents" / f"{spec.name}.log"
    private.make_dirs(log_path.parent)
    import subprocess

    with open(log_path, "ab", opener=private.opener) as out:
        proc = subprocess.Popen([sys.executable, "-m", AUTODOWN_MODULE, "autodown", "--cluster", spec.name,
                                 "--zone", vm.zone, "--idle-for", str(spec.autodown_seconds)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                env=dict(os.environ))
    provider.claim_agent(vm.zone, vm.name, proc.pid)
    return (f"autodown: a local agent (pid {proc.pid}) deletes the TPU once idle for {human} and keeps the VM; "
            f"its log: {log_path}")


def local_agent(cluster: str, zone: str, idle_for: float, *, every: float | None = None) -> int:
    """The local provider's host agent: enforce autodown until the cluster's VM is gone."""
    target = resolve(provider="local")
    provider = get_provider(target)
    me = os.getpid()
    every = every or autodown_every()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not provider.claim_agent(zone, cluster, me):
        print(f"tpuctl agent: another agent already enforces autodown for {cluster}", flush=True)
        return 0
    print(f"tpuctl agent: pid {me} enforces autodown {format_duration(idle_for)} for cluster {cluster}", flush=True)
    while True:
        vm = provider.get_vm(zone, cluster)
        holder = provider.agent(zone, cluster) if vm is not None else None
        if vm is None or vm.state == VmState.STOPPING or (holder is not None and holder["pid"] != me):
            print(f"tpuctl agent: the VM of {cluster} is gone; exiting", flush=True)
            return 0
        _reap_logged(provider, target, cluster, idle_for)
        time.sleep(every)


def _reap_logged(provider: Provider, target: Any, cluster: str, idle_for: float, bucket: str | None = None) -> None:
    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    try:
        res = reap(provider, target, cluster=cluster, idle_for=idle_for, bucket=bucket, who="autodown", log=log)
        for r in res.deleted:
            log(f"autodown: deleted TPU {r.node.name} ({r.verdict.reason}): "
                + ("its price is unknown" if r.hourly is None else f"saves ${r.hourly:.2f}/hour at list price"
                   if r.hourly else "bills nothing while dead; frees its quota"))
        for q in res.requests:
            if q.deleted:
                log(f"autodown: {q.line(False)}")
        if res.deleted:
            from ..notify.runtime import announce_reaped

            announce_reaped(res.deleted, target, log)
    except Exception as exc:  # noqa: BLE001 - an agent logs and tries again next time
        log(f"autodown: {type(exc).__name__}: {exc}")


def metadata_autodown(timeout: float = 2.0) -> float | None:
    """``tpuctl-autodown-seconds`` from the instance metadata (``TPUCTL_METADATA_URL`` overrides)."""
    import urllib.request

    base = (os.environ.get("TPUCTL_METADATA_URL") or METADATA_URL).rstrip("/")
    req = urllib.request.Request(f"{base}/instance/attributes/tpuctl-autodown-seconds",
                                 headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return float(resp.read().decode().strip())
    except Exception:  # noqa: BLE001 - not on GCP, or not set
        return None


def start_host_autodown(cluster: str, bucket_url: str, project: str, autodown_s: float | None,
                        stop: threading.Event | None = None) -> threading.Thread | None:
    """On a GCP host VM (``agent_loop``, role host): enforce autodown in a background thread."""
    if autodown_s is None:
        autodown_s = metadata_autodown()
    if not autodown_s:
        return None
    target = Target(provider="gcp", project=project, zone=None)
    provider = get_provider(target)
    stop = stop or threading.Event()
    every = autodown_every()
    print(f"tpuctl agent: enforcing autodown {format_duration(autodown_s)} for cluster {cluster} "
          f"(every {every:g}s)", file=sys.stderr, flush=True)

    def loop() -> None:
        while not stop.is_set():
            _reap_logged(provider, target, cluster, autodown_s, bucket=bucket_url)
            stop.wait(every)

    thread = threading.Thread(target=loop, name="tpuctl-autodown", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {AUTODOWN_MODULE}")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("autodown", help="the local provider's host agent (started by tpuctl up --autodown)")
    a.add_argument("--cluster", required=True)
    a.add_argument("--zone", required=True)
    a.add_argument("--idle-for", type=float, required=True)
    a.add_argument("--every", type=float, default=None)
    args = parser.parse_args(argv)
    return local_agent(args.cluster, args.zone, args.idle_for, every=args.every)


def stop_agents(home: Path, timeout: float = 5.0) -> list[int]:
    """Stop every local autodown agent recorded under a TPUCTL_HOME (tests and benchmarks clean up
    with this); returns the pids that were running."""
    import json

    pids = []
    for path in (Path(home) / "local" / "vms").glob("*/*.json"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(((json.loads(path.read_text()) or {}).get("agent") or {}).get("pid") or 0)
            if pid and is_autodown_agent(pid):
                pids.append(pid)
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return pids


if __name__ == "__main__":
    sys.exit(main())
