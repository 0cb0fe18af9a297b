"""Which devices a JAX run uses, and how its processes find each other.

One process per host, as on TensorFlow. With several (``TF_CONFIG``'s workers: the hosts of a
slice, or the local provider's emulated hosts) the processes join through
``jax.distributed.initialize`` before any device is touched: the coordinator is
``TPUCTL_COORDINATOR`` when the host gives one, else worker 0's address in ``TF_CONFIG`` (whose
port the TensorFlow path would give its gRPC server: on JAX nothing else listens there). On a TPU
VM without either, JAX finds its peers from the TPU's metadata itself.

The mesh is every device of every process on one axis, ``batch`` (Keras 3's
``keras.distribution.DataParallel`` names it so): the variables are replicated on it and the
global batch is split along it, so each process holds the rows its own input pipeline read
(:func:`global_batch`).
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ...errors import ConfigError
from ..distribute import Device

AXIS = "batch"


def coordinator(env: dict) -> str | None:
    """The coordinator's ``host:port`` (None: let JAX find it, as on a TPU VM)."""
    given = (env.get("TPUCTL_COORDINATOR") or "").strip()
    if given:
        return given
    raw = (env.get("TF_CONFIG") or "").strip()
    if raw:
        return json.loads(raw)["cluster"]["worker"][0]
    return None


def workers(hosts: int, host: int, env: dict | None = None) -> tuple[int, int]:
    """(processes, this one's index): ``TF_CONFIG``'s (``hosts``, ``host``, the local provider's
    emulated slices) or, without it, ``TPUCTL_NUM_WORKERS`` and ``TPUCTL_WORKER_INDEX`` (what the
    host agent gives every worker of a TPU VM slice)."""
    env = dict(os.environ if env is None else env)
    if (env.get("TF_CONFIG") or "").strip():
        return hosts, host
    try:
        count = int(env.get("TPUCTL_NUM_WORKERS") or 1)
        index = int(env.get("TPUCTL_WORKER_INDEX") or 0)
    except ValueError:
        raise ConfigError("TPUCTL_NUM_WORKERS and TPUCTL_WORKER_INDEX must be integers; the host "
                          "agent sets them, unset them to run on one host") from None
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"TPUCTL_WORKER_INDEX {index} is not one of the {count} workers of "
                          "TPUCTL_NUM_WORKERS; unset both to run on one host")
    return count, index


def connect(hosts: int, host: int, env: dict | None = None) -> None:
    """Join the run's other processes (several hosts only)."""
    env = dict(os.environ if env is None else env)
    if hosts <= 1:
        return
    try:  # CPU collectives across processes (the emulated slices); TPUs and GPUs have their own
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):
        pass
    jax.distributed.initialize(coordinator_address=coordinator(env), num_processes=hosts,
                               process_id=host)


def select(precision: str, hosts: int, host: int) -> tuple[Mesh, Device]:
    """The mesh over every device of the run, and the device as progress.json names it."""
    devices = jax.devices()
    kind = devices[0].platform
    kind = {"cuda": "gpu", "rocm": "gpu"}.get(kind, kind)
    if kind not in ("cpu", "gpu", "tpu"):
        raise ConfigError(f"JAX found {kind} devices, which tpuctl does not run on; use a TPU, "
                          "a GPU or the CPU")
    if kind == "cpu":
        name = "CPU" if len(devices) == 1 else f"CPU ({len(devices)} devices)"
    else:
        label = getattr(devices[0], "device_kind", kind.upper())
        name = label if len(devices) == 1 else f"{len(devices)} x {label}"
    default = "float32" if kind == "cpu" else "bfloat16"
    chosen = default if precision == "auto" else precision
    mesh = Mesh(np.array(devices), (AXIS,))
    return mesh, Device(kind, len(devices), name, chosen, True, hosts, host)


def replicated(mesh: Mesh, value) -> jax.Array:
    """``value`` (the same numpy array in every process) on every device of the mesh."""
    value = np.asarray(value)
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def global_batch(mesh: Mesh, local):
    """The global batch from each process's share of it (a structure of numpy arrays with a
    leading batch axis): process p holds rows [p * b, (p + 1) * b), which is how
    :meth:`jobs.runner.jax.runner.JaxRunner.input_context` splits the input."""
    sharding = NamedSharding(mesh, PartitionSpec(AXIS))
    return jax.tree.map(lambda a: jax.make_array_from_process_local_data(sharding, np.asarray(a)),
                        local)


def host_value(array) -> np.ndarray:
    """A replicated array's value on this host."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    return np.asarray(array.addressable_data(0))


def gathered(array) -> np.ndarray:
    """A batch-sharded array, whole, on every host (predictions)."""
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def any_process(flag: bool, hosts: int) -> bool:
    """Whether any process says ``flag``: every process must stop at the same step, or the
    others would wait in the next step's all-reduce."""
    if hosts <= 1:
        return flag
    votes = multihost_utils.process_allgather(np.array([int(flag)], np.int32))
    return bool(np.asarray(votes).sum() > 0)
