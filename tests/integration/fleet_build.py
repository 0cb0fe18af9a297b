"""A fleet of clusters made in the fake cloud the way ``tpuctl up`` makes each one's resources.

Each cluster is a host VM and a preemptible v2-8 TPU VM, created with the GCP provider's own
``create_vm`` / ``create_tpu`` (so they carry the labels and metadata, startup script included,
that tpuctl writes), spread over the five zones that offer v2 (three regions). Nothing is cached
locally: what a command knows of the fleet it reads from the cloud, as on another machine.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from provision.catalog.zones import zones_of

ZONES = zones_of("v2")
RUNTIME = "tpu-vm-tf-2.16.1-pjrt"


def name(i: int) -> str:
    return f"c{i:04d}"


def zone_of(i: int) -> str:
    return ZONES[i % len(ZONES)]


def build_fleet(project: str, count: int, *, start: int = 0, bucket: str | None = None, threads: int = 8) -> None:
    """Clusters ``start`` .. ``start + count - 1``; the fake's latencies decide when they are READY."""
    from provision.cloud.base import ClusterSpec
    from provision.cloud.gcp import GcpProvider

    provider = GcpProvider(project)

    def one(i: int) -> None:
        spec = ClusterSpec(name=name(i), accelerator_type="v2-8", zones=(zone_of(i),), provider="gcp", project=project,
                           machine_type="n1-standard-2", runtime_version=RUNTIME, bucket=bucket, preemptible=True)
        provider.create_vm(spec, spec.zone)
        provider.create_tpu(spec, spec.zone, None)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(start, start + count)))
