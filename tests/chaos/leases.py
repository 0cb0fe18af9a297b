"""Many contenders racing for a run's and a sweep's lease, then appending events all at once.

A round: the lease starts absent, released, stale (a dead holder's) or live (someone else's, fresh);
every contender (a thread, or a separate process) tries to take it at the same instant, then each
appends its share of events to the same run's events.jsonl. Invariants: exactly one contender wins
a free lease and none wins a live one, the lease then names the winner, and every appended event
is in the log exactly once. ``python -m tests.chaos --leases N`` runs long campaigns;
tests/integration/test_leases.py runs a few rounds of each kind in ``make test``.

Processes are real ``python -m tests.chaos.leases worker`` children, started once and told each
round over stdin (with a start instant a little ahead, so their requests overlap).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
STATES = ("absent", "released", "stale", "live")
KINDS = ("run", "sweep")


def open_bucket(spec: str):
    """``dir:/path`` (the local provider's directory bucket) or ``gs://name`` (Cloud Storage)."""
    if spec.startswith("dir:"):
        from provision.cloud.storage import LocalBucket

        return LocalBucket(spec[4:])
    from provision.cloud.storage.gcs import GcsBucket, make_client

    return GcsBucket(spec[5:], make_client(os.environ.get("TPUCTL_PROJECT", "tpuctl-test")))


def lease_for(bucket, kind: str, key: str, owner: str):
    """The lease a supervisor (run) or a sweep controller (sweep) takes, with its own rules."""
    from provision.runs.store import RunStore

    identity = {"owner": owner, "host": f"contender-{owner}", "pid": os.getpid(), "where": "race",
                "heartbeat_at": time.time()}
    if kind == "run":
        from provision.runs.supervisor import RunLease

        return RunLease(RunStore(bucket, key), identity)
    from provision.sweeps.controller import controller_lease
    from provision.sweeps.store import SweepStore

    return controller_lease(SweepStore(bucket, key), identity)


def contend(bucket, kind: str, key: str, owner: str) -> bool:
    """One try, no waiting: True if this contender now holds the lease."""
    from provision.runs.lease import LeaseBusy

    lease = lease_for(bucket, kind, key, owner)
    try:
        if kind == "run":
            lease.acquire()
        else:
            from provision.sweeps.controller import take_controller_lease

            take_controller_lease(lease, key)
        return True
    except LeaseBusy:
        return False


def append_events(bucket, key: str, owner: str, count: int) -> None:
    from provision.runs.store import RunStore

    store = RunStore(bucket, key)
    for i in range(count):
        store.event("race", owner=owner, i=i)


def prepare(bucket, kind: str, key: str, state: str) -> None:
    """Put the lease in ``state`` before the contenders start."""
    if state == "absent":
        return
    holder = {"owner": "previous", "host": "elsewhere", "pid": 1, "where": "race",
              "heartbeat_at": time.time() - (3600 if state == "stale" else 0)}
    if state == "released":
        holder["released"] = True
    lease = lease_for(bucket, kind, key, "previous")
    bucket.write_bytes(lease.name, json.dumps(holder).encode())


@dataclass
class Round:
    kind: str
    state: str
    key: str
    winners: list[str] = field(default_factory=list)
    contenders: int = 0
    events_expected: int = 0
    violations: list[str] = field(default_factory=list)


def check(bucket, rnd: Round, owners: list[str], per: int) -> None:
    from provision.runs.store import RunStore

    want = 0 if rnd.state == "live" else 1
    if len(rnd.winners) != want:
        rnd.violations.append(f"{rnd.kind} lease {rnd.state}: {len(rnd.winners)} winners of {rnd.contenders}, "
                              f"want {want}")
    holder = lease_for(bucket, rnd.kind, rnd.key, "reader").holder() or {}
    expected_holder = rnd.winners[0] if len(rnd.winners) == 1 else "previous"
    if len(rnd.winners) <= 1 and holder.get("owner") != expected_holder:
        rnd.violations.append(f"{rnd.kind} lease {rnd.state}: held by {holder.get('owner')}, "
                              f"but {expected_holder} won")
    got = [(e.get("owner"), e.get("i")) for e in RunStore(bucket, rnd.key).events() if e.get("event") == "race"]
    expect = sorted((o, i) for o in owners for i in range(per))
    if sorted(got) != expect:
        rnd.violations.append(f"events of {rnd.key}: {len(got)} read back, {len(expect)} appended "
                              f"({len(set(expect) - set(got))} lost, {len(got) - len(set(got))} doubled)")


def thread_round(bucket, kind: str, state: str, contenders: int, per: int) -> Round:
    rnd = Round(kind=kind, state=state, key=f"race-{secrets.token_hex(4)}", contenders=contenders)
    prepare(bucket, kind, rnd.key, state)
    owners = [f"t{i}-{secrets.token_hex(3)}" for i in range(contenders)]
    barrier = threading.Barrier(contenders)
    lock = threading.Lock()
    errors: list[str] = []

    def body(owner: str) -> None:
        try:
            barrier.wait()
            if contend(bucket, kind, rnd.key, owner):
                with lock:
                    rnd.winners.append(owner)
            append_events(bucket, rnd.key, owner, per)
        except Exception as exc:  # noqa: BLE001 - reported as a violation
            errors.append(f"{owner}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=body, args=(o,)) for o in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rnd.violations.extend(errors)
    check(bucket, rnd, owners, per)
    return rnd


class Workers:
    """``count`` contender processes, each holding its own client (its own connections)."""

    def __init__(self, bucket_spec: str, count: int, env: dict[str, str] | None = None):
        self.procs = [subprocess.Popen([sys.executable, "-m", "tests.chaos.leases", "worker", bucket_spec],
                                       cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env={**os.environ, **(env or {})})
                      for _ in range(count)]
        for p in self.procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a contender process did not start: {line!r}")

    def round(self, bucket, kind: str, state: str, per: int) -> Round:
        rnd = Round(kind=kind, state=state, key=f"race-{secrets.token_hex(4)}", contenders=len(self.procs))
        prepare(bucket, kind, rnd.key, state)
        owners = [f"p{i}-{secrets.token_hex(3)}" for i in range(len(self.procs))]
        at = time.time() + 0.15
        for p, owner in zip(self.procs, owners):
            p.stdin.write(json.dumps({"kind": kind, "key": rnd.key, "owner": owner, "per": per, "at": at}) + "\n")
            p.stdin.flush()
        for p, owner in zip(self.procs, owners):
            out = json.loads(p.stdout.readline() or "{}")
            if out.get("error"):
                rnd.violations.append(f"{owner}: {out['error']}")
            if out.get("won"):
                rnd.winners.append(owner)
        check(bucket, rnd, owners, per)
        return rnd

    def close(self) -> None:
        for p in self.procs:
            p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()


def worker(bucket_spec: str) -> int:
    bucket = open_bucket(bucket_spec)
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        time.sleep(max(0.0, job["at"] - time.time()))
        try:
            won = contend(bucket, job["kind"], job["key"], job["owner"])
            append_events(bucket, job["key"], job["owner"], job["per"])
            print(json.dumps({"won": won}), flush=True)
        except Exception as exc:  # noqa: BLE001 - the parent reports it
            print(json.dumps({"won": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 0


def campaign(bucket_spec: str, rounds: int, threads: int = 8, processes: int = 4, per: int = 5,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """``rounds`` rounds of every kind and state, by threads and by processes."""
    bucket = open_bucket(bucket_spec)
    out: dict[str, Any] = {"bucket": bucket_spec, "rounds": 0, "contests": 0, "events": 0, "violations": []}
    workers = Workers(bucket_spec, processes, env)
    try:
        for _ in range(rounds):
            for kind in KINDS:
                for state in STATES:
                    for rnd in (thread_round(bucket, kind, state, threads, per),
                                workers.round(bucket, kind, state, per)):
                        out["rounds"] += 1
                        out["contests"] += rnd.contenders
                        out["events"] += rnd.contenders * per
                        out["violations"].extend(rnd.violations)
    finally:
        workers.close()
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        sys.exit(worker(sys.argv[2]))
    sys.exit(2)
