"""What a run installs into its environment on the hosts: a ``job: command`` program's requirements,
and the JAX backend of the built-in jobs (pure: no I/O).

The spec's ``requirements`` (a file in the workdir, or a list) and the framework releases it
asks for (``tensorflow: X``, ``jax: X``) become one requirements text. Frameworks are installed
only when the spec asks and the image does not already have that release, the way Google's own
TensorFlow release tests do on base TPU runtimes (GoogleCloudPlatform/ml-auto-solutions):
``tensorflow-tpu==X`` with libtpu from Google's libtpu release index, and ``jax[tpu]==X`` from
JAX's libtpu release page. On the local provider the CPU builds from PyPI stand in for them.
Each decision comes with the line ``train`` prints: never silently.

A built-in job on the JAX backend (``backend: jax``, or ``auto`` on TPU7x: :mod:`jobs.spec.backends`)
installs :data:`JAX_BACKEND` the same way; on TensorFlow it keeps the image's TensorFlow.

The wheels are resolved where ``train`` runs (:mod:`provision.runs.wheelhouse`), for the hosts'
platform (:func:`host_target`): the TPU VM images are Ubuntu 22.04 with Python 3.10 on x86-64
(glibc 2.35), TPU7x's Compute Engine image Ubuntu 24.04 with Python 3.12 (glibc 2.39).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog import images

TF_INDEX = "https://storage.googleapis.com/libtpu-tf-releases/index.html"
JAX_INDEX = "https://storage.googleapis.com/jax-releases/libtpu_releases.html"
HOST_PYTHON = "3.10"
HOST_PLATFORM = "manylinux_2_35_x86_64"
# The hosts' Python and platform by OS image: Ubuntu 22.04 (every Cloud TPU API runtime image, and the
# v5p/v6e family on Compute Engine) has Python 3.10 and glibc 2.35; Ubuntu 24.04 (TPU7x's family on
# Compute Engine, ubuntu-accel-2404-amd64-tpu-tpu7x: provision.catalog.compute_tpus) Python 3.12, glibc 2.39.
UBUNTU_2204 = (HOST_PYTHON, HOST_PLATFORM)
UBUNTU_2404 = ("3.12", "manylinux_2_39_x86_64")

# The JAX backend of tpuctl's own jobs (backend: jax) on a TPU host: these releases, the ones the job
# side is built and tested with (pyproject's jax and train extras; tests/unit/test_backends.py checks
# they agree). jax[tpu] brings its libtpu; tensorflow-cpu feeds it with tf.data and keeps the checkpoint
# format (never tensorflow-tpu: TensorFlow must not claim the TPU that JAX drives). The one place for them.
JAX_BACKEND = {"jax": "0.10.2", "keras": "3.15.1", "tensorflow-cpu": "2.21.0"}
JAX_BACKEND_PYTHON = (3, 11)        # Requires-Python of jax 0.10.2 and keras 3.15.1: >=3.11


@dataclass(frozen=True)
class Needs:
    lines: tuple[str, ...]          # requirement lines (and --find-links lines) for pip
    said: tuple[str, ...]           # what train says about each framework it installs or does not
    host: tuple[str, str] = UBUNTU_2204     # the hosts' (Python, platform) the wheels are resolved for


def host_target(api: str | None, accelerator_type: str | None) -> tuple[str, str]:
    """The (Python, platform) of a TPU's hosts: Ubuntu 24.04's on a Compute Engine TPU whose image
    family is 24.04 (TPU7x), Ubuntu 22.04's elsewhere."""
    if api == "compute" and accelerator_type:
        from ..catalog.compute_tpus import shape_family

        if "-2404-" in shape_family(accelerator_type):
            return UBUNTU_2404
    return UBUNTU_2204


def jax_backend(provider: str, host: tuple[str, str] = UBUNTU_2204) -> Needs:
    """What a TPU host installs for a built-in job on the JAX backend (:data:`JAX_BACKEND`); on the local
    provider nothing (the job runs with this machine's packages: the ``jax`` extra)."""
    if provider == "local":
        return Needs((), (), host)
    jax, keras, tf = JAX_BACKEND["jax"], JAX_BACKEND["keras"], JAX_BACKEND["tensorflow-cpu"]
    lines = (f"--find-links {JAX_INDEX}", f"jax[tpu]=={jax}", f"tensorflow-cpu=={tf}", f"keras=={keras}")
    said = (f"JAX backend: installing jax[tpu]=={jax} with its libtpu (JAX's libtpu releases), "
            f"tensorflow-cpu=={tf} (tf.data, the checkpoint format) and keras=={keras} into the run's "
            f"environment (Python {host[0]} hosts)")
    return Needs(lines, (said,), host)


def jax_backend_problem(host: tuple[str, str], where: str) -> str | None:
    """Why the JAX backend's releases cannot install on hosts of ``host``'s Python, or None."""
    python = tuple(int(p) for p in host[0].split("."))
    if python >= JAX_BACKEND_PYTHON:
        return None
    need = ".".join(map(str, JAX_BACKEND_PYTHON))
    return (f"the JAX backend (jax {JAX_BACKEND['jax']}, keras {JAX_BACKEND['keras']}) needs Python {need} or newer, "
            f"and {where} runs Ubuntu 22.04 with Python {host[0]}")


def needs(requirements: list[str], *, tensorflow: str | None, jax: str | None, provider: str,
          runtime: str | None, local_versions: dict[str, str | None] | None = None,
          host: tuple[str, str] = UBUNTU_2204) -> Needs:
    """The requirements text of a run: the user's ``requirements`` lines, then the frameworks the
    spec asks for where the image (``runtime``; on the local provider this machine's packages,
    ``local_versions``) has another release."""
    lines = [r.strip() for r in requirements if r.strip() and not r.strip().startswith("#")]
    said = []
    local = provider == "local"
    if tensorflow:
        have = (local_versions or {}).get("tensorflow") if local else _image_tf(runtime)
        where = "this machine" if local else f"the image {runtime or '(unknown)'}"
        if have == tensorflow:
            said.append(f"TensorFlow {tensorflow}: {where} has it, nothing to install")
        elif local:
            lines.append(f"tensorflow=={tensorflow}")
            said.append(f"TensorFlow {tensorflow}: {where} has {have or 'none'}; installing tensorflow=={tensorflow} "
                        f"(the CPU build) into the run's environment")
        else:
            lines += [f"--find-links {TF_INDEX}", f"tensorflow-tpu=={tensorflow}"]
            said.append(f"TensorFlow {tensorflow}: {where} has {have or 'none'}; installing tensorflow-tpu=={tensorflow} "
                        f"and its libtpu (Google's libtpu release index) into the run's environment")
    if jax:
        have = (local_versions or {}).get("jax") if local else None
        if local and have == jax:
            said.append(f"JAX {jax}: this machine has it, nothing to install")
        elif local:
            lines += [f"jax=={jax}", f"jaxlib=={jax}"]
            said.append(f"JAX {jax}: this machine has {have or 'none'}; installing jax=={jax} and jaxlib (CPU) "
                        f"into the run's environment")
        else:
            lines += [f"--find-links {JAX_INDEX}", f"jax[tpu]=={jax}"]
            said.append(f"JAX {jax}: installing jax[tpu]=={jax} with its libtpu (JAX's libtpu releases) into the "
                        f"run's environment")
    return Needs(tuple(lines), tuple(said), host)


def _image_tf(runtime: str | None) -> str | None:
    image = images.parse(runtime or "")
    return image.tf_version if image else None


def pip_argv(requirements_file: str, dest: str, *, provider: str,
             host: tuple[str, str] = UBUNTU_2204) -> list[str]:
    """pip's arguments (after ``python -m pip``) that put every wheel the requirements resolve to
    in ``dest``: for this machine (local provider: ``pip wheel``, sdists built here), or for the
    TPU VM hosts (binary wheels of their platform and Python, ``host``, only)."""
    if provider == "local":
        return ["wheel", "--disable-pip-version-check", "--no-input", "--wheel-dir", dest, "-r", requirements_file]
    python, platform = host
    return ["download", "--disable-pip-version-check", "--no-input", "--dest", dest, "--only-binary=:all:",
            "--platform", platform, "--python-version", python, "--implementation", "cp",
            "-r", requirements_file]
