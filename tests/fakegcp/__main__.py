"""``python -m tests.fakegcp --port P [--grpc-port G] [--latency-scale X] [--project ID] [--print-env]``

Serves the fake Cloud TPU (REST /v2/, /v1/; gRPC v1 on G) and Compute Engine (/compute/v1/) APIs
on 127.0.0.1 and prints one line once both ports accept requests:
``ready http://127.0.0.1:P grpc=127.0.0.1:G``. Port 0 picks a free port. Stops on SIGTERM/SIGINT.
With --print-env the ``export`` lines of the environment tpuctl needs follow that line, for a
person to paste into the shell that runs tpuctl.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .environment import export_lines, tpuctl_env
from .grpc_v1 import serve_grpc
from .server import FakeCloud, serve_http
from .store import Latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakegcp", description=__doc__.split("\n\n")[1])
    parser.add_argument("--port", type=int, default=0, help="HTTP port (0: any free port)")
    parser.add_argument("--grpc-port", type=int, default=0, help="gRPC port for the v1 TPU API (0: any)")
    parser.add_argument("--latency-scale", type=float, default=1.0,
                        help="multiply every simulated latency (e.g. 60 for realistic minutes)")
    parser.add_argument("--project", default="tpuctl-test", help="project the admin API acts on by default")
    parser.add_argument("--print-env", action="store_true",
                        help="after the ready line, print the export lines that point tpuctl at this fake")
    args = parser.parse_args(argv)

    cloud = FakeCloud(Latencies(scale=args.latency_scale), project=args.project)
    httpd = serve_http(cloud, args.port)
    grpcd = serve_grpc(cloud, args.grpc_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ready = f"ready {cloud.base_url} grpc={cloud.grpc_target}"
    if args.print_env:  # one write, so a reader of the output never sees half of the lines
        ready += "\n" + export_lines(tpuctl_env(cloud.base_url, cloud.grpc_target, args.project))
    print(ready, flush=True)
    stop.wait()
    grpcd.stop(grace=0)
    httpd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
