"""Which devices the job runs on, chosen from the environment, the same way on every machine.

- ``TPU_NAME`` set (a TPU Node name, ``grpc://ip:8470``, or ``local`` on a TPU VM), or a TPU VM's
  ``/dev/accel0`` present: ``TPUStrategy`` through ``TPUClusterResolver``;
- else any GPU: ``MirroredStrategy`` over all of them;
- else the default strategy on the CPU.

``TPUCTL_DEVICE=cpu|gpu|tpu`` forces the choice (``cpu`` hides GPUs: a laptop run that must
not touch them). ``TPUCTL_CPU_REPLICAS=N`` splits the CPU into N logical devices under
``MirroredStrategy``, to exercise the multi-replica path (batch splitting, all-reduce, merge
calls) on a laptop before a TPU is paid for.

Mixed precision where the hardware has it: bfloat16 on TPUs and on GPUs of compute capability
8.0 or newer (no loss scaling needed), float32 elsewhere; the spec's ``precision`` overrides.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import tensorflow as tf

from .errors import ConfigError


@dataclass(frozen=True)
class Device:
    type: str        # "tpu" | "gpu" | "cpu"
    count: int       # replicas in sync (TPU cores, GPUs, logical CPUs)
    name: str        # what a person reads: "TPU (8 cores)", "NVIDIA H100 80GB HBM3", "CPU"
    precision: str   # "bfloat16" | "float32"

    def to_dict(self) -> dict:
        return asdict(self)


def select(precision: str = "auto", env: dict | None = None) -> tuple[tf.distribute.Strategy, Device]:
    """The strategy for this machine; call before TensorFlow runs its first op."""
    env = dict(os.environ if env is None else env)
    forced = (env.get("TPUCTL_DEVICE") or "").strip().lower()
    if forced not in ("", "cpu", "gpu", "tpu"):
        raise ConfigError(f"TPUCTL_DEVICE={forced!r} is not cpu, gpu or tpu; unset it to choose "
                          "automatically")
    tpu_name = (env.get("TPU_NAME") or "").strip()
    if forced == "tpu" or (not forced and (tpu_name or os.path.exists("/dev/accel0"))):
        strategy, device = _tpu(tpu_name or "local")
    elif forced == "cpu":
        tf.config.set_visible_devices([], "GPU")
        strategy, device = _cpu(env)
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if forced == "gpu" and not gpus:
            raise ConfigError("TPUCTL_DEVICE=gpu but TensorFlow sees no GPU; install the CUDA "
                              "build of TensorFlow (pip install 'tensorflow[and-cuda]') or unset "
                              "TPUCTL_DEVICE")
        strategy, device = _gpu(gpus) if gpus else _cpu(env)
    chosen = _precision(precision, device)
    return strategy, Device(device.type, device.count, device.name, chosen)


class TPUUnreachable(ConnectionError):
    """The TPU could not be found or connected to: preempted, deleted, still starting, or its
    network is down. A ConnectionError, so the job exits 42 and the supervisor, which can see
    the node's state, decides what to do."""


def _tpu(name: str) -> tuple[tf.distribute.Strategy, Device]:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        if name != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # resolver errors come from several libraries
        raise TPUUnreachable(f"cannot connect to TPU {name!r}: {type(exc).__name__}: "
                             f"{str(exc).strip()[:300]}") from exc
    n = strategy.num_replicas_in_sync
    return strategy, Device("tpu", n, f"TPU {name} ({n} cores)", "bfloat16")


def _gpu(gpus: list) -> tuple[tf.distribute.Strategy, Device]:
    strategy = tf.distribute.MirroredStrategy()
    names = []
    capable = True
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        names.append(details.get("device_name", "GPU"))
        capability = details.get("compute_capability") or (0, 0)
        capable = capable and tuple(capability) >= (8, 0)
    device = Device("gpu", strategy.num_replicas_in_sync,
                    f"{len(gpus)} x {names[0]}" if len(gpus) > 1 else names[0],
                    "bfloat16" if capable else "float32")
    return strategy, device


def _cpu(env: dict) -> tuple[tf.distribute.Strategy, Device]:
    raw = env.get("TPUCTL_CPU_REPLICAS") or "1"
    try:
        replicas = int(raw)
        if replicas < 1:
            raise ValueError
    except ValueError:
        raise ConfigError(f"TPUCTL_CPU_REPLICAS={raw!r} is not a positive integer; "
                          "use e.g. TPUCTL_CPU_REPLICAS=2") from None
    if replicas == 1:
        return tf.distribute.get_strategy(), Device("cpu", 1, "CPU", "float32")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)])
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    return strategy, Device("cpu", replicas, f"CPU ({replicas} logical replicas)", "float32")


def _precision(requested: str, device: Device) -> str:
    if requested == "auto":
        return device.precision
    if requested == "bfloat16" and device.type == "cpu":
        return "bfloat16"  # allowed (slow on most CPUs): useful to debug bf16 numerics
    return requested


def set_policy(precision: str) -> None:
    """The Keras dtype policy for layers built after this call."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bfloat16"
                                            else "float32")
