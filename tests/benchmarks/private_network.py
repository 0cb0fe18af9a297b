"""Benchmarks that start emulated slice hosts run them where only loopback exists.

TensorFlow's gRPC server of each ``TF_CONFIG`` worker listens on every interface, with no
bind-address option; the local provider therefore runs a slice's hosts in a network namespace of
their own (:mod:`provision.cloud.netns`, docs/security.md). A benchmark that starts such workers
itself does the same: its measuring function runs in a child process that first enters a new
network namespace, and every worker it starts inherits it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARK = "BENCH-REPORT "


def run_isolated(module: str, function: str) -> dict:
    """``module.function()`` run in a child in a new network namespace; its dict report."""
    from provision.cloud import netns

    if not netns.available():
        raise RuntimeError("this benchmark starts TensorFlow gRPC servers, which listen on every interface: it "
                           "runs only where a network namespace can be made (root, or unprivileged user namespaces)")
    code = (f"from provision.cloud import netns; netns.enter_new()\n"
            f"import json, {module} as m\nprint({MARK!r} + json.dumps(m.{function}()), flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{module}.{function} failed in its private network (exit {proc.returncode})")
    return json.loads(lines[-1][len(MARK):])
