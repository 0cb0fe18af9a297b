"""The environment a tpuctl process needs to reach a running fake cloud: one list for
``FakeGCP.env()`` (the tests) and for ``python -m tests.fakegcp --print-env`` (a person's shell)."""

from __future__ import annotations

import shlex


def tpuctl_env(url: str, grpc_target: str, project: str) -> dict[str, str]:
    """The GCP provider, anonymous credentials and the fake's endpoints (docs/fakegcp.md)."""
    return {
        "TPUCTL_PROVIDER": "gcp",
        "TPUCTL_PROJECT": project,
        "TPUCTL_CREDENTIALS": "anonymous",
        "TPUCTL_TPU_API_ENDPOINT": url,
        # google-cloud-compute's api_endpoint is the bare host: its paths start with /compute/v1/
        "TPUCTL_COMPUTE_API_ENDPOINT": url,
        "TPUCTL_TPU_GRPC_ENDPOINT": grpc_target,
        "TPUCTL_IAM_API_ENDPOINT": url,       # service accounts (up --least-privilege): /v1/projects/P/serviceAccounts
        "TPUCTL_BILLING_API_ENDPOINT": url,
        # Cloud Monitoring: timeSeries.create is served (a run's goodput export); timeSeries.list is
        # not (404), so `down --idle --min-duty-cycle` says the duty cycle is unavailable and decides
        # by the runs' progress, with no request leaving this machine
        "TPUCTL_MONITORING_API_ENDPOINT": url,
    }


def export_lines(env: dict[str, str]) -> str:
    """``export NAME=value`` lines a POSIX shell can paste or ``eval``."""
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items())
