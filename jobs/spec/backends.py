"""Which Keras 3 backend a job runs on: the spec's ``backend: auto | jax | tensorflow`` and where it runs.

Pure and standard library only (no TensorFlow, JAX or Keras): ``tpuctl train`` decides with it on a
machine that has none of them, and ``python -m jobs run`` decides with it before Keras is imported
(Keras 3 reads ``KERAS_BACKEND`` once, at import).

The rule for ``auto``:

- on a TPU whose images have no TensorFlow TPU runtime (:data:`NO_TENSORFLOW_TPU_RUNTIME`): jax;
- on any other TPU: tensorflow, the TensorFlow its runtime image ships;
- with no TPU (the local provider, this machine's CPU or GPUs): tensorflow where it is installed,
  else jax where JAX and Keras are, else tensorflow (the job needs the train extra, as always).

``tensorflow`` asked for on a TPU without a TensorFlow TPU runtime is refused (one line, the fix
``backend: jax``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass

from .base import BACKENDS, SpecError, show

# Generations whose TPU images have no TensorFlow TPU runtime. Sources, read 2026-12-06:
# - "TPU software versions", docs.cloud.google.com/tpu/docs/runtimes: its TensorFlow table (TensorFlow
#   release -> libtpu.so) ends at TensorFlow 2.18.0 with libtpu 1.12.0, and the Cloud TPU API, where
#   those tpu-vm-tf-* runtimes live, "is not supported on TPU7x and later TPU versions";
# - "Train a model using TPU7x (Ironwood)", docs.cloud.google.com/tpu/docs/tpu7x-training: a training
#   workload with MaxText (JAX) or TorchTitan on TPU (PyTorch), nothing for TensorFlow;
# - "TPU7x (Ironwood)", docs.cloud.google.com/tpu/docs/tpu7x: TPU7x supports JAX and PyTorch,
#   TensorFlow is not supported (shared/REFERENCES-compute-engine-tpu.md section 6, [7X]).
# Every older generation (v2 to v6e) has tpu-vm-tf-* runtime images.
NO_TENSORFLOW_TPU_RUNTIME: dict[str, str] = {
    "tpu7x": "TPU7x images have no TensorFlow TPU runtime: Google's TPU7x guides offer JAX and PyTorch, and "
             "its TensorFlow TPU runtimes end at TF 2.18 / libtpu 1.12",
}
DEVICES_WITHOUT_TPU = ("cpu", "gpu")     # TPUCTL_DEVICE values of the local provider (no TPU)


@dataclass(frozen=True)
class Choice:
    name: str        # "jax" or "tensorflow"
    reason: str      # why, as one clause: what `tpuctl train` prints in "backend: NAME (REASON)"

    def line(self) -> str:
        return f"backend: {self.name} ({self.reason})"


def generation(accelerator_type: str | None) -> str | None:
    """The TPU generation of an accelerator type (``tpu7x-8`` -> ``tpu7x``), None for no TPU."""
    text = (accelerator_type or "").strip().lower()
    if not text or text in DEVICES_WITHOUT_TPU:
        return None
    return text.rsplit("-", 1)[0] if "-" in text else text


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here, without importing it."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def jax_installed() -> bool:
    """Whether JAX and Keras can be imported here, without importing them."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in ("jax", "keras"))
    except (ImportError, ValueError):
        return False


def resolve(requested: str | None, accelerator_type: str | None, *,
            tensorflow_importable: bool | None = None) -> Choice:
    """The backend of a job asking for ``requested`` (auto, jax, tensorflow; None is auto) on
    ``accelerator_type`` (a TPU such as ``tpu7x-8``; None, "" or cpu/gpu: no TPU, this machine).
    ``tensorflow_importable`` (no TPU only): whether TensorFlow is installed here; None looks.
    Raises :class:`SpecError` (one line naming the fix) for a backend that cannot run there."""
    asked = "auto" if requested is None else requested
    if asked not in BACKENDS:
        raise SpecError(f"backend {show(asked)} is not one of {', '.join(BACKENDS)}; "
                        "use --set backend=auto (or jax, tensorflow)")
    gen = generation(accelerator_type)
    missing = NO_TENSORFLOW_TPU_RUNTIME.get(gen) if gen else None
    if asked == "tensorflow":
        if missing:
            raise SpecError(f"backend tensorflow cannot run on {accelerator_type} ({missing}); use backend: jax "
                            f"(--set backend=jax) or backend: auto")
        return Choice("tensorflow", "set in the spec")
    if asked == "jax":
        return Choice("jax", "set in the spec")
    if gen is not None:
        if missing:
            return Choice("jax", f"auto: {missing}")
        return Choice("tensorflow", f"auto: {accelerator_type} runs TensorFlow from its TPU runtime image")
    importable = tensorflow_installed() if tensorflow_importable is None else tensorflow_importable
    if importable:
        return Choice("tensorflow", "auto: no TPU here, and TensorFlow is installed")
    if jax_installed():
        return Choice("jax", "auto: no TPU here, and TensorFlow is not installed")
    # neither: the job side is not installed here (a laptop that only provisions, or a dry run);
    # the job will need the train extra, as it always did
    return Choice("tensorflow", "auto: no TPU here, and neither TensorFlow nor JAX is installed: the job "
                                "needs pip install 'tpuctl[train]'")


ENV = "TPUCTL_BACKEND"                 # what tpuctl train resolved, in a run's launch environment
FORCE_DEVICES = "--xla_force_host_platform_device_count"


def for_job(requested: str | None, env: Mapping[str, str]) -> Choice:
    """The backend of ``python -m jobs run`` here: the spec's ``backend`` (``requested``) as written,
    else ``TPUCTL_BACKEND`` (what ``tpuctl train`` resolved for the run), else :func:`resolve` for
    ``TPUCTL_ACCELERATOR_TYPE`` (no TPU when ``TPUCTL_DEVICE`` is cpu or gpu: the local provider)."""
    device = (env.get("TPUCTL_DEVICE") or "").strip().lower()
    accelerator = None if device in DEVICES_WITHOUT_TPU else (env.get("TPUCTL_ACCELERATOR_TYPE") or "").strip()
    chosen = (env.get(ENV) or "").strip()
    if chosen and requested in (None, "auto"):
        if chosen not in BACKENDS[1:]:
            raise SpecError(f"{ENV}={show(chosen)} is not jax or tensorflow; unset it (tpuctl train sets it) "
                            "or set the spec's backend")
        resolve(chosen, accelerator or None)      # tensorflow where there is none is refused here too
        return Choice(chosen, f"auto, as tpuctl train resolved it ({ENV})")
    return resolve(requested, accelerator or None)


def xla_flags(existing: str | None, cpu_replicas: str | None) -> str | None:
    """``XLA_FLAGS`` for the JAX backend with ``TPUCTL_CPU_REPLICAS`` (the TensorFlow runner's CPU
    replicas) virtual CPU devices: ``existing`` flags kept, one ``--xla_force_host_platform_device_count``
    set to it; None where nothing is asked. Raises :class:`SpecError` for a count that is no positive integer."""
    raw = (cpu_replicas or "").strip()
    if not raw:
        return None
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise SpecError(f"TPUCTL_CPU_REPLICAS={show(raw)} is not a positive integer; use e.g. TPUCTL_CPU_REPLICAS=2")
    kept = [flag for flag in (existing or "").split() if not flag.startswith(FORCE_DEVICES + "=")]
    return " ".join([*kept, f"{FORCE_DEVICES}={count}"])
