"""The guest's preemption notice reaches the job as SIGTERM at once, inside the Spot window.

The fake cloud preempts a Spot TPU VM as Compute Engine does: its guest's metadata server answers
``instance/preempted`` TRUE from the decision on, and the VM goes ``notice`` seconds later (30 s on
Google Cloud for Spot). The watcher the host agent runs per attempt (provision/host/preemption.py)
long-polls that key through the fake's per-instance metadata server and signals the job process.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from provision.host.preemption import watch

JOB = """
import signal, sys, time
def term(*_):
    print("SIGTERM", flush=True)
    sys.exit(42)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
time.sleep(60)
"""


def _spot_vm(fake, name: str) -> None:
    import json
    import urllib.request

    body = {"name": name, "machineType": "zones/us-central1-c/machineTypes/tpu7x-standard-1t",
            "scheduling": {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                           "onHostMaintenance": "TERMINATE"},
            "networkInterfaces": [{"network": "global/networks/default"}]}
    req = urllib.request.Request(f"{fake.url}/compute/v1/projects/{fake.project}/zones/us-central1-c/instances",
                                 data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def test_the_preemption_notice_reaches_the_job_as_sigterm_before_the_vm_goes(fakegcp):
    _spot_vm(fakegcp, "w0")
    job = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "ready"
    done = threading.Event()
    noticed: list[float] = []

    def notice() -> None:
        noticed.append(time.monotonic())
        job.send_signal(15)

    watch(notice, done, url=fakegcp.guest_metadata_url("us-central1-c", "w0"))
    time.sleep(0.5)                          # the watcher is waiting for a change: nothing yet
    assert not noticed and job.poll() is None
    preempted_at = time.monotonic()
    fakegcp.preempt_instance("us-central1-c", "w0", notice=2.0)
    assert job.wait(timeout=10) == 42 and job.stdout.read().strip() == "SIGTERM"
    assert noticed and noticed[0] - preempted_at < 2.0          # well inside the window
    # the VM (termination action DELETE) is still there while the job checkpoints, then gone
    names = [i["name"] for i in fakegcp.resources()["instances"]]
    assert "w0" in names
    time.sleep(2.5)
    assert "w0" not in [i["name"] for i in fakegcp.resources()["instances"]]
    done.set()


def test_a_host_without_a_metadata_server_stops_watching_quietly():
    done = threading.Event()
    t = watch(lambda: done.set(), done, url="http://127.0.0.1:9")      # nothing listens on port 9
    t.join(timeout=20)
    assert not t.is_alive() and not done.is_set()
