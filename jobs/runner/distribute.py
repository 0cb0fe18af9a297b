"""Which devices the job runs on, chosen from the environment, the same way on every machine.

- ``TPU_NAME`` set (a TPU Node name, ``grpc://ip:8470`` or several comma-separated, or ``local``
  on a TPU VM), or a TPU VM's ``/dev/accel0`` present: ``TPUStrategy`` through
  ``TPUClusterResolver``;
- else GPUs: one GPU runs under the default strategy (so the whole train step, optimizer
  included, compiles with XLA), several under ``MirroredStrategy``;
- else the default strategy on the CPU.

A TPU Node is found through the Cloud TPU API in ``TPUCTL_TPU_ZONE`` and ``TPUCTL_TPU_PROJECT``
(the supervisor sets them; without them the resolver would assume the host VM's own zone and
project, and a Node recreated in another zone of the region would not be found). A name that
cannot be resolved, or a TPU system that does not initialise for another reason than a lost
connection, is a job error (:class:`TPUResolutionError`, exit 1), not a preemption: retrying it
would only burn the preemption budget. A TPU that is not READY (preempted, being recreated) or a
connection lost while connecting is :class:`TPUUnreachable` (exit 42).

Several hosts: on a TPU VM pod slice one process (on worker 0) is the client of the whole slice:
``TPU_NAME`` lists every worker's TPU server (``grpc://IP:8470,grpc://IP:8470,...``, worker
order), which TensorFlow's client turns into the cluster spec without calling the Cloud TPU API
(so the TPU VM's account needs no ``tpu.nodes.get`` and the image no ``googleapiclient``); a
slice *name* would be looked up through that API. ``TPUStrategy`` runs one input pipeline per
host. Without a TPU, ``TF_CONFIG`` listing
several workers (the local provider's emulated pod slice, or GPU hosts) gives
``MultiWorkerMirroredStrategy``: every worker runs this same program, worker 0 is the chief
(checkpoints, summaries, progress, exports) and the others write to ``<model_dir>/workers/<i>``.

``TPUCTL_DEVICE=cpu|gpu|tpu`` forces the choice (``cpu`` hides GPUs: a laptop run that must
not touch them). ``TPUCTL_CPU_REPLICAS=N`` splits the CPU into N logical devices under
``MirroredStrategy``, to exercise the multi-replica path (batch splitting, all-reduce, merge
calls) on a laptop before a TPU is paid for.

Mixed precision where the hardware has it: bfloat16 on TPUs and on GPUs of compute capability
8.0 or newer (no loss scaling needed), float32 elsewhere; the spec's ``precision`` overrides.
XLA: on by default on GPUs (TPUs compile everything anyway); ``TPUCTL_XLA=1|0`` forces it on
or off (on a CPU too, to debug the compiled path before a GPU is paid for).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import tensorflow as tf

from .. import exitcodes
from ..errors import ConfigError


@dataclass(frozen=True)
class Device:
    type: str        # "tpu" | "gpu" | "cpu"
    count: int       # replicas in sync (TPU cores, GPUs, logical CPUs)
    name: str        # what a person reads: "TPU (8 cores)", "NVIDIA H100 80GB HBM3", "CPU"
    precision: str   # "bfloat16" | "float32"
    xla: bool = False  # jit-compile the train step (GPU default; TPUs compile everything anyway)
    hosts: int = 1     # input pipelines: the slice's hosts, or the workers of TF_CONFIG
    host: int = 0      # this process's worker index (0: the chief, the only writer)

    def to_dict(self) -> dict:
        return asdict(self)


def workers(env: dict | None = None) -> tuple[int, int]:
    """(workers, this worker's index) from ``TF_CONFIG``; (1, 0) without it. Read before the
    strategy exists: the runner must know who writes progress.json before TensorFlow starts."""
    env = dict(os.environ if env is None else env)
    raw = (env.get("TF_CONFIG") or "").strip()
    if not raw:
        return 1, 0
    try:
        config = json.loads(raw)
        addresses = config["cluster"]["worker"]
        task = config.get("task") or {}
        index = int(task.get("index", 0))
        if task.get("type", "worker") != "worker" or not isinstance(addresses, list) or \
                not 0 <= index < len(addresses):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise ConfigError("TF_CONFIG is not {\"cluster\": {\"worker\": [\"host:port\", ...]}, "
                          "\"task\": {\"type\": \"worker\", \"index\": I}}; fix or unset it") from None
    return len(addresses), index


def select(precision: str = "auto", env: dict | None = None) -> tuple[tf.distribute.Strategy, Device]:
    """The strategy for this machine; call before TensorFlow runs its first op."""
    env = dict(os.environ if env is None else env)
    forced = (env.get("TPUCTL_DEVICE") or "").strip().lower()
    if forced not in ("", "cpu", "gpu", "tpu"):
        raise ConfigError(f"TPUCTL_DEVICE={forced!r} is not cpu, gpu or tpu; unset it to choose "
                          "automatically")
    tpu_name = (env.get("TPU_NAME") or "").strip()
    hosts, host = workers(env)
    if forced == "tpu" or (not forced and (tpu_name or os.path.exists("/dev/accel0"))):
        strategy, device = _tpu(tpu_name or "local", env)
    elif hosts > 1:
        strategy, device = _multi_worker(json.loads(env["TF_CONFIG"]), forced, hosts, host)
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
    # XLA by default on one GPU host only: GPU workers under MultiWorkerMirroredStrategy have not
    # been run here (no multi-GPU machine); TPUCTL_XLA=1 turns it on for them
    return strategy, Device(device.type, device.count, device.name, chosen,
                            _xla(env, device.type == "gpu" and device.hosts == 1),
                            device.hosts, device.host)


def _xla(env: dict, default: bool) -> bool:
    raw = (env.get("TPUCTL_XLA") or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"TPUCTL_XLA={raw!r} is not 1 or 0; unset it to choose automatically")


class TPUUnreachable(ConnectionError):
    """The TPU is there but cannot be used now: not READY (preempted, being recreated) or the
    connection to it failed. A ConnectionError, so the job exits 42 and the supervisor, which
    can see the node's state, decides what to do."""


class TPUResolutionError(RuntimeError):
    """The TPU cannot be found or set up as configured: no such Node in that zone and project,
    no Cloud TPU API client or credentials, no TPU on this machine, a TPU system that refuses to
    initialise. A job error (exit 1): a restart on the same configuration would fail the same
    way, so it must not be mistaken for a preemption."""


# The resolver says this when the Node exists but is not READY (PREEMPTED, CREATING, ...).
_NOT_READY = "is not yet ready"


def tpu_location(env: dict) -> tuple[str | None, str | None]:
    """(zone, project) of a TPU Node from the environment; None: the resolver asks the host
    VM's metadata server (its own zone and project)."""
    zone = (env.get("TPUCTL_TPU_ZONE") or "").strip() or None
    project = ((env.get("TPUCTL_TPU_PROJECT") or env.get("TPUCTL_PROJECT") or "").strip()
               or None)
    return zone, project


def tpu_resolver(name: str, env: dict | None = None,
                 **kwargs) -> tf.distribute.cluster_resolver.TPUClusterResolver:
    """The resolver for TPU ``name`` (a Node name, ``grpc://ip:port`` or ``local``), with the
    Node's zone and project from the environment. ``kwargs`` go to ``TPUClusterResolver`` (a
    test passes ``service``, a stand-in for the Cloud TPU API)."""
    env = dict(os.environ if env is None else env)
    if name == "local" or name.startswith("grpc://"):
        return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name, **kwargs)
    zone, project = tpu_location(env)
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name, zone=zone,
                                                             project=project, **kwargs)


def _tpu(name: str, env: dict) -> tuple[tf.distribute.Strategy, Device]:
    zone, project = tpu_location(env)
    where = ""
    if name != "local" and not name.startswith("grpc://"):
        where = f" in zone {zone or 'of the host VM'}, project {project or 'of the host VM'}"
    try:
        resolver = tpu_resolver(name, env)
        if name != "local":
            resolver.cluster_spec()  # looks the Node up now: a wrong name or zone fails here
    except Exception as exc:  # resolver errors come from several libraries
        if _NOT_READY in str(exc):
            raise TPUUnreachable(f"TPU {name!r}{where} is not usable now: {_line(exc)}") from exc
        raise TPUResolutionError(f"cannot resolve TPU {name!r}{where}: {type(exc).__name__}: "
                                 f"{_line(exc)}; check TPU_NAME, TPUCTL_TPU_ZONE and "
                                 "TPUCTL_TPU_PROJECT") from exc
    try:
        if name != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as exc:  # classified below: a lost connection or a configuration
        if exitcodes.is_infrastructure_error(exc):
            raise TPUUnreachable(f"cannot connect to TPU {name!r}{where}: {type(exc).__name__}: "
                                 f"{_line(exc)}") from exc
        raise TPUResolutionError(f"TPU {name!r}{where} does not initialise: {type(exc).__name__}: "
                                 f"{_line(exc)}") from exc
    n = strategy.num_replicas_in_sync
    hosts = int(getattr(strategy.extended, "num_hosts", 1) or 1)
    label = f"TPU {tpu_label(name)} ({n} cores" + (f", {hosts} hosts)" if hosts > 1 else ")")
    return strategy, Device("tpu", n, label, "bfloat16", hosts=hosts)


def tpu_label(name: str) -> str:
    """What a person reads for ``TPU_NAME``: a list of worker addresses shortened to its first."""
    addresses = [a for a in name.split(",") if a]
    if len(addresses) > 1:
        return f"{addresses[0]} and {len(addresses) - 1} more workers"
    return name


def _multi_worker(config: dict, forced: str, hosts: int, host: int
                  ) -> tuple[tf.distribute.Strategy, Device]:
    """Every worker of TF_CONFIG runs this program; collectives join them (ring all-reduce on
    CPUs, NCCL between GPUs). The cluster comes from the environment given to ``select``."""
    if forced == "cpu":
        tf.config.set_visible_devices([], "GPU")
    gpus = [] if forced == "cpu" else tf.config.list_physical_devices("GPU")
    if forced == "gpu" and not gpus:
        raise ConfigError("TPUCTL_DEVICE=gpu but TensorFlow sees no GPU; unset TPUCTL_DEVICE")
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(config["cluster"]), task_type="worker", task_id=host,
        rpc_layer="grpc")
    impl = (tf.distribute.experimental.CommunicationImplementation.NCCL if gpus
            else tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=impl))
    n = strategy.num_replicas_in_sync
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capable = tuple(details.get("compute_capability") or (0, 0)) >= (8, 0)
        name = f"{n} x {details.get('device_name', 'GPU')} on {hosts} workers"
        return strategy, Device("gpu", n, name, "bfloat16" if capable else "float32",
                                hosts=hosts, host=host)
    return strategy, Device("cpu", n, f"CPU x {hosts} workers", "float32", hosts=hosts, host=host)


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def _gpu(gpus: list) -> tuple[tf.distribute.Strategy, Device]:
    # One GPU: the default strategy, whose merge calls are plain calls, so XLA can compile the
    # whole step (optimizer included); several: MirroredStrategy (all-reduce between them).
    strategy = tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
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
