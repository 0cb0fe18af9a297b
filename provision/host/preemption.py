"""The guest's preemption notice, passed to the job as SIGTERM at once.

Compute Engine tells a VM it is preempting: the metadata server's ``instance/preempted`` turns
``TRUE``, then the guest gets the ACPI soft-off and, for a Spot VM, 30 seconds later it is powered
off (compute v1 discovery document, ``Scheduling.skipGuestOsShutdown``: "120 seconds ... 30
seconds for Spot"; the metadata key is the one public preemption watchers poll). The job
checkpoints when it gets SIGTERM (the job contract: SIGTERM is the preemption notice, and an exit
after it is a preemption), so the sooner it hears, the more of the window it has: the agent's
attempt wrapper long-polls the key (``?wait_for_change=true``, with the ETag of the value it
saw: compute/docs/metadata/querying-metadata) and signals the job the moment it reads ``TRUE``.

``TPUCTL_METADATA_URL`` replaces the metadata server (as in templates/host-startup.sh; the fake
cloud serves each instance's view under ``/_guest/...``). A host that has no metadata server (not
on Compute Engine) stops watching after a few failed tries, quietly.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1"
WAIT_S = 60          # one long poll
FAILURES = 3         # tries in a row before a host without a metadata server gives up


def metadata_url() -> str:
    return (os.environ.get("TPUCTL_METADATA_URL") or METADATA_URL).rstrip("/")


def _read(url: str, etag: str | None) -> tuple[str, str | None]:
    # the first read answers at once; the next ones wait for a change from the value (ETag) last seen
    query = "" if etag is None else f"?wait_for_change=true&timeout_sec={WAIT_S}" + (
        f"&last_etag={etag}" if etag != "-" else "")
    req = urllib.request.Request(f"{url}/instance/preempted{query}", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=WAIT_S + 10) as resp:
        return resp.read().decode(errors="replace").strip(), resp.headers.get("ETag") or "-"


def watch(on_notice: Callable[[], None], done: threading.Event, url: str | None = None) -> threading.Thread:
    """Call ``on_notice`` once, as soon as the guest reads ``instance/preempted`` TRUE, unless ``done`` first."""
    base = url or metadata_url()

    def run() -> None:
        etag: str | None = None
        failures = 0
        while not done.is_set():
            try:
                value, etag = _read(base, etag)
            except (urllib.error.URLError, OSError, ValueError):
                failures += 1
                if failures >= FAILURES:
                    return
                time.sleep(min(5.0, 0.5 * 2 ** failures))
                continue
            failures = 0
            if value.upper() == "TRUE":
                if not done.is_set():
                    on_notice()
                return

    thread = threading.Thread(target=run, name="tpuctl-preemption-watch", daemon=True)
    thread.start()
    return thread
