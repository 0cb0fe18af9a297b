"""How an attempt is launched on a TPU: which workers run the job, how the job finds its TPU,
and the environment each worker gets. Pure: the supervisor passes what it knows of the TPU.

TensorFlow on a TPU VM pod slice (v2-32, v3-32, v4-16 and up) has one client: the job runs on
worker 0 only with ``TPU_LOAD_LIBRARY=0`` (the client must not claim worker 0's chips for
itself: the ``-pod`` runtime image serves them) and ``TPU_NAME`` set to every worker's TPU
server, ``grpc://IP:8470,grpc://IP:8470,...`` in worker order, from the v2 node's
``networkEndpoints`` (one per worker, ``ipAddress`` internal, ``port`` 8470). TensorFlow's
client reads such a name without any API call (TF 2.21,
``tensorflow/python/tpu/client/client.py``: ``Client._use_api`` is false for a name starting
with ``grpc://``, and ``network_endpoints()`` splits it on commas; ``tpu_cluster_resolver.py``
``cluster_spec()`` then gives ``{"worker": ["IP:8470", ...]}``, job ``worker``, ``master()`` the
first address, no coordinator job unless one is asked for). Resolving the slice by *name*
instead goes through the Cloud TPU v1 API with the TPU VM's own service account, which needs
``tpu.nodes.get`` and the ``googleapiclient`` package on the image: a dedicated
``--service-account`` with only bucket roles fails there with a 403 on every attempt. The name
is kept only when the cloud reported no endpoint per worker. ``TPU_LOAD_LIBRARY`` is read by
libtpu's loader, not by the resolver, so it applies either way. ``TPUStrategy`` then trains over
every core and runs one input pipeline per host. Google runs its TensorFlow pod tests on worker
0 alone with ``TPU_LOAD_LIBRARY=0`` (GoogleCloudPlatform/ml-auto-solutions,
dags/solutions_team/configs/tensorflow/solutionsteam_tf_nightly_supported_config.py:
``all_workers=not is_pod``). The other workers run no job; their agents only report that they
are alive, so a lost worker restarts the whole group. A slice recreated after a preemption has
new addresses: every attempt is planned from the node as read when it starts.

A single-host TPU VM runs the job on its one worker with ``TPU_NAME=local`` and, on ``-pjrt``
images, the PJRT plug-in (``NEXT_PLUGGABLE_DEVICE_USE_C_API=true``,
``TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so``, the same source). A TPU Node's job runs on
the host VM and resolves the Node by name (in ``TPUCTL_TPU_ZONE`` and ``TPUCTL_TPU_PROJECT``).

A TPU VM's job (either API) also learns where it stands in its slice:
``TPUCTL_WORKER_INDEX`` (its worker number), ``TPUCTL_NUM_WORKERS`` and ``TPUCTL_COORDINATOR``
(worker 0's address and port :data:`COORDINATOR_PORT`, for ``jax.distributed.initialize`` or any
program's own rendezvous). Compute Engine is not known to set the TPU worker metadata on MIG VMs
(``agent-worker-number``, ``worker-network-endpoints``: not found in Google's docs), so tpuctl passes
these from the addresses it read back, worker 0 first.

A built-in job on Keras 3's JAX backend (:func:`backend_plan`; ``tpuctl train`` resolved it:
:mod:`jobs.spec.backends`) runs on every worker of a TPU VM slice instead, as JAX programs do, with
the worker variables above and none of TensorFlow's TPU client variables; every plan of the runner
tells its workers the backend as ``TPUCTL_BACKEND``.

The local provider emulates a slice of H hosts with H processes on this machine joined by
``MultiWorkerMirroredStrategy`` through ``TF_CONFIG``: every worker runs the job, as TensorFlow
documents for multi-worker training. Each worker's TensorFlow server listens on every interface,
so the hosts run in a network of their own (:mod:`provision.cloud.netns`); where this machine
cannot make one, only a user who accepts the exposure runs the slice (:func:`slice_network`). Every plan tells the job the slice's type and core count
(``TPUCTL_ACCELERATOR_TYPE``, ``TPUCTL_SLICE_CORES``), so a batch that a real slice could not
split fails the same way on a laptop.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.command import COORDINATOR_PORT  # worker 0's coordinator port: the job side's one fact

from ..basics.errors import UsageError
from ..catalog.accelerators import AcceleratorType, parse
from ..cloud.base import Arch, Endpoint

LIBTPU = "/lib/libtpu.so"
# set to 1: run an emulated multi-host slice where no private network can be made for it, its
# hosts' gRPC servers on every interface of this machine (anyone who reaches it can use them)
SLICE_OPT_IN = "TPUCTL_SLICE_GRPC_ON_ALL_INTERFACES"




@dataclass(frozen=True)
class WorkerLaunch:
    worker: int
    runs_job: bool                 # False: the agent only reports the worker alive
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchPlan:
    accelerator: AcceleratorType
    resolver: str                  # "local", "grpc://..." (pod), the TPU's name, "TF_CONFIG" or "default"
    workers: tuple[WorkerLaunch, ...]

    @property
    def job_workers(self) -> tuple[int, ...]:
        return tuple(w.worker for w in self.workers if w.runs_job)

    def to_command(self) -> dict[str, Any]:
        """The per-worker part of an attempt's ``command.json`` (read by the host agent)."""
        return {"workers": {str(w.worker): {"run": w.runs_job, "env": dict(w.env)}
                            for w in self.workers},
                "resolver": self.resolver}


def plan(*, provider: str, arch: Arch, accelerator_type: str, tpu_name: str, zone: str,
         project: str, runtime: str | None = None, device: str | None = None,
         ports: Sequence[int] = (), endpoints: Sequence[Endpoint] = (),
         program_hosts: str | None = None, backend: str | None = None) -> LaunchPlan:
    """The launch of one attempt. ``device`` (local provider): ``cpu`` or ``gpu:N``; ``ports``
    (local provider): one free port per emulated host, for ``TF_CONFIG`` or a program's
    coordinator; ``endpoints``: the TPU's ``networkEndpoints`` as the cloud reports them now, one
    per worker in worker order; ``program_hosts``: a ``job: command`` program's ``hosts``
    (:func:`program_plan`), None for the runner; ``backend``: the runner's Keras backend as
    ``tpuctl train`` resolved it (:func:`backend_plan`), None for a run that recorded none."""
    runner = _plan(provider=provider, arch=arch, accelerator_type=accelerator_type, tpu_name=tpu_name, zone=zone,
                   project=project, runtime=runtime, device=device, ports=ports, endpoints=endpoints,
                   program_hosts=program_hosts)
    if program_hosts is not None or backend is None:
        return runner
    return backend_plan(runner, backend, provider=provider, arch=arch, endpoints=endpoints)


# What only TensorFlow's TPU client reads: the slice's TPU servers, libtpu's loader on a pod's
# worker 0, the PJRT plug-in. A JAX job drives its own host's chips through libtpu, and the
# TensorFlow beside it (tensorflow-cpu, for tf.data) must not load the TPU as a pluggable device.
TENSORFLOW_TPU_ENV = ("TPU_NAME", "TPU_LOAD_LIBRARY", "NEXT_PLUGGABLE_DEVICE_USE_C_API",
                      "TF_PLUGGABLE_DEVICE_LIBRARY_PATH")
BACKEND_ENV = "TPUCTL_BACKEND"     # jobs.spec.backends.ENV: the backend the job runs on


def backend_plan(runner: LaunchPlan, backend: str, *, provider: str, arch: Arch,
                 endpoints: Sequence[Endpoint] = ()) -> LaunchPlan:
    """The runner's launch on ``backend`` (``jax`` or ``tensorflow``), told to every worker that runs
    the job as ``TPUCTL_BACKEND``. TensorFlow's plan is ``runner``. JAX on a TPU VM runs on every
    worker of a slice, as JAX programs do (:func:`program_plan` with ``hosts: all``: each worker
    drives its own chips, worker 0's ``TPUCTL_COORDINATOR`` for ``jax.distributed``), without
    :data:`TENSORFLOW_TPU_ENV`. The local provider's emulated slice is the same for both: every
    worker runs, ``TF_CONFIG`` names them (JAX's coordinator is worker 0's address there)."""
    if backend not in ("jax", "tensorflow"):
        raise ValueError(f"backend {backend!r} is not jax or tensorflow")
    if backend == "jax" and provider != "local":
        if arch == Arch.NODE:
            raise UsageError("backend jax cannot run on a TPU Node (JAX drives the chips of a TPU VM only)",
                             hint="use backend: tensorflow, or a TPU VM cluster (tpuctl up without --arch node)")
        every = program_plan(runner, "all", provider=provider, endpoints=endpoints)
        runner = LaunchPlan(every.accelerator, "jax", tuple(
            WorkerLaunch(w.worker, w.runs_job, {k: v for k, v in w.env.items() if k not in TENSORFLOW_TPU_ENV})
            for w in every.workers))
    return LaunchPlan(runner.accelerator, runner.resolver, tuple(
        WorkerLaunch(w.worker, w.runs_job, {**w.env, BACKEND_ENV: backend} if w.runs_job else dict(w.env))
        for w in runner.workers))


def _plan(*, provider: str, arch: Arch, accelerator_type: str, tpu_name: str, zone: str,
          project: str, runtime: str | None = None, device: str | None = None,
          ports: Sequence[int] = (), endpoints: Sequence[Endpoint] = (),
          program_hosts: str | None = None) -> LaunchPlan:
    acc = parse(accelerator_type)
    common = {"TPUCTL_ACCELERATOR_TYPE": acc.name, "TPUCTL_SLICE_CORES": str(acc.cores)}
    if program_hosts is not None:
        tf = plan(provider=provider, arch=arch, accelerator_type=accelerator_type, tpu_name=tpu_name, zone=zone,
                  project=project, runtime=runtime, device=device, endpoints=endpoints,
                  ports=ports if provider == "local" and acc.hosts > 1 else ())
        return program_plan(tf, program_hosts, provider=provider, ports=ports, endpoints=endpoints)
    if provider == "local":
        return _local(acc, common, device or "cpu", ports)
    if arch == Arch.NODE:
        env = {**common, "TPU_NAME": tpu_name, "TPUCTL_TPU_ZONE": zone, "TPUCTL_TPU_PROJECT": project}
        return LaunchPlan(acc, tpu_name, (WorkerLaunch(0, True, env),))
    if acc.multi_host:
        name = pod_tpu_name(endpoints, acc.hosts) or tpu_name
        client = {**common, "TPU_NAME": name, "TPUCTL_TPU_ZONE": zone,
                  "TPUCTL_TPU_PROJECT": project, "TPU_LOAD_LIBRARY": "0", **worker_env(0, acc.hosts, endpoints)}
        rest = tuple(WorkerLaunch(i, False) for i in range(1, acc.hosts))
        return LaunchPlan(acc, name, (WorkerLaunch(0, True, client),) + rest)
    env = {**common, "TPU_NAME": "local", **worker_env(0, 1, endpoints)}
    if runtime is None or runtime.endswith("-pjrt"):
        env.update(NEXT_PLUGGABLE_DEVICE_USE_C_API="true", TF_PLUGGABLE_DEVICE_LIBRARY_PATH=LIBTPU)
    return LaunchPlan(acc, "local", (WorkerLaunch(0, True, env),))


def worker_env(index: int, workers: int, endpoints: Sequence[Endpoint]) -> dict[str, str]:
    """Where a worker stands in its slice: its index, how many there are, and worker 0's address
    (when the cloud reported it) as the coordinator."""
    env = {"TPUCTL_WORKER_INDEX": str(index), "TPUCTL_NUM_WORKERS": str(workers)}
    if endpoints and endpoints[0].ip_address:
        env["TPUCTL_COORDINATOR"] = f"{endpoints[0].ip_address}:{COORDINATOR_PORT}"
    return env


def pod_tpu_name(endpoints: Sequence[Endpoint], hosts: int) -> str | None:
    """``grpc://IP:PORT,...`` for every worker of a slice, in worker order; None unless the cloud
    reported one endpoint with an address per worker (then only the slice's name can find them)."""
    if len(endpoints) != hosts or not all(e.ip_address for e in endpoints):
        return None
    return ",".join(f"grpc://{e.ip_address}:{e.port or 8470}" for e in endpoints)


def _local(acc: AcceleratorType, common: dict[str, str], device: str,
           ports: Sequence[int]) -> LaunchPlan:
    gpus = int(device.split(":", 1)[1]) if device.startswith("gpu:") else 0
    if acc.hosts == 1:
        env = {**common, "TPUCTL_DEVICE": "gpu" if gpus else "cpu"}
        return LaunchPlan(acc, "default", (WorkerLaunch(0, True, env),))
    if len(ports) != acc.hosts:
        raise ValueError(f"{acc.name} emulates {acc.hosts} hosts: give one port each")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    per_host = gpus // acc.hosts   # GPUs shared out whole; too few and every host uses the CPU
    workers = []
    for i in range(acc.hosts):
        env = {**common, "TPUCTL_DEVICE": "gpu" if per_host else "cpu",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}},
                                       separators=(",", ":"))}
        if per_host:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i * per_host + g) for g in range(per_host))
        workers.append(WorkerLaunch(i, True, env))
    return LaunchPlan(acc, "TF_CONFIG", tuple(workers))


def program_plan(tf: LaunchPlan, hosts: str, *, provider: str, ports: Sequence[int] = (),
                 endpoints: Sequence[Endpoint] = ()) -> LaunchPlan:
    """A ``job: command`` program's launch, from the TensorFlow runner's plan ``tf`` of the same
    TPU. ``hosts: first`` is TensorFlow's one client: the runner's plan (worker 0 only on a pod
    slice), with the contract's variables. ``hosts: all`` runs the program on every worker, as
    JAX and PyTorch/XLA expect (each worker drives its own chips: no ``TPU_LOAD_LIBRARY=0``), and
    tells each its index, the count and worker 0's ``host:port``: its internal address from the
    TPU's ``networkEndpoints`` and :data:`jobs.command.COORDINATOR_PORT`, or on the local
    provider a free port of this machine (the emulated hosts share a network). No ``TF_CONFIG``:
    the program starts its own group (``jax.distributed.initialize``, ``torch.distributed``)."""
    count = len(tf.workers) if hosts == "all" else 1
    if provider == "local":
        coordinator: str | None = f"127.0.0.1:{ports[0]}" if ports else None
    elif count == 1:
        coordinator = f"127.0.0.1:{COORDINATOR_PORT}"
    else:
        first = endpoints[0].ip_address if endpoints else None
        coordinator = f"{first}:{COORDINATOR_PORT}" if first else None
    drop = {"TF_CONFIG"} | ({"TPU_LOAD_LIBRARY"} if hosts == "all" else set())
    workers = []
    for w in tf.workers:
        runs = w.worker == 0 or (hosts == "all" and count > 1)
        env = {k: v for k, v in (w.env if w.env else tf.workers[0].env).items() if k not in drop}
        if runs:
            env.update(TPUCTL_WORKER_INDEX=str(w.worker if hosts == "all" else 0), TPUCTL_NUM_WORKERS=str(count))
            if coordinator:
                env["TPUCTL_COORDINATOR"] = coordinator
        workers.append(WorkerLaunch(w.worker, runs, env if runs else {}))
    return LaunchPlan(tf.accelerator, tf.resolver, tuple(workers))


def slice_network(accelerator_type: str, *, private_possible: bool, exposed_ok: bool) -> bool:
    """Whether the local provider runs an emulated slice's hosts in a network of their own: True
    for a multi-host slice where this machine can make one; False for one host (it opens no
    server) or where the user accepted the exposure (``exposed_ok``). Where neither, a
    UsageError before anything is created or started: TensorFlow's gRPC server has no bind
    address, and anyone who reaches it can read and write the user's files."""
    acc = parse(accelerator_type)
    if not acc.multi_host:
        return False
    if private_possible:
        return True
    if exposed_ok:
        return False
    raise UsageError(f"an emulated {acc.name} runs a TensorFlow gRPC server for each of its {acc.hosts} hosts, on "
                     f"every network interface of this machine, and this machine cannot give them a network of "
                     f"their own (a Linux network namespace: root, or unprivileged user namespaces)",
                     hint=f"whoever reaches this machine could then read and write your files through them: use a "
                          f"one-host type such as v2-8, or set {SLICE_OPT_IN}=1 to accept that")


# The batches that must split evenly over the slice. Evaluation and prediction batches need not:
# the job pads them to whole per-replica batches with weight-0 rows (jobs.runner.runner fitted_batch).
SPLIT_BATCHES = ("train_batch_size",)


def check_batches(resolved: Mapping[str, Any], accelerator_type: str) -> None:
    """The training batch of the spec must split evenly over the slice's cores (and so over its
    hosts): say so before a run is created, in the words of the fix."""
    acc = parse(accelerator_type)
    for key in SPLIT_BATCHES:
        size = resolved.get(key)
        if not isinstance(size, int) or isinstance(size, bool):
            continue
        if size % acc.cores:
            fits = (size // acc.cores + 1) * acc.cores
            raise UsageError(f"{key} {size} does not divide over the {acc.cores} cores of a "
                             f"{acc.name}" + (f" ({acc.hosts} hosts)" if acc.multi_host else ""),
                             hint=f"use a multiple of {acc.cores}, e.g. --set {key}={fits}")
