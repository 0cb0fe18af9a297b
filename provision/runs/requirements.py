"""What a ``job: command`` run installs into its environment on the hosts (pure: no I/O).

The spec's ``requirements`` (a file in the workdir, or a list) and the framework releases it
asks for (``tensorflow: X``, ``jax: X``) become one requirements text. Frameworks are installed
only when the spec asks and the image does not already have that release, the way Google's own
TensorFlow release tests do on base TPU runtimes (GoogleCloudPlatform/ml-auto-solutions):
``tensorflow-tpu==X`` with libtpu from Google's libtpu release index, and ``jax[tpu]==X`` from
JAX's libtpu release page. On the local provider the CPU builds from PyPI stand in for them.
Each decision comes with the line ``train`` prints: never silently.

The wheels are resolved where ``train`` runs (:mod:`provision.runs.wheelhouse`), for the hosts'
platform: the TPU VM images are Ubuntu 22.04 with Python 3.10 on x86-64 (glibc 2.35).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog import images

TF_INDEX = "https://storage.googleapis.com/libtpu-tf-releases/index.html"
JAX_INDEX = "https://storage.googleapis.com/jax-releases/libtpu_releases.html"
HOST_PYTHON = "3.10"
HOST_PLATFORM = "manylinux_2_35_x86_64"


@dataclass(frozen=True)
class Needs:
    lines: tuple[str, ...]          # requirement lines (and --find-links lines) for pip
    said: tuple[str, ...]           # what train says about each framework it installs or does not


def needs(requirements: list[str], *, tensorflow: str | None, jax: str | None, provider: str,
          runtime: str | None, local_versions: dict[str, str | None] | None = None) -> Needs:
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
    return Needs(tuple(lines), tuple(said))


def _image_tf(runtime: str | None) -> str | None:
    image = images.parse(runtime or "")
    return image.tf_version if image else None


def pip_argv(requirements_file: str, dest: str, *, provider: str) -> list[str]:
    """pip's arguments (after ``python -m pip``) that put every wheel the requirements resolve to
    in ``dest``: for this machine (local provider: ``pip wheel``, sdists built here), or for the
    TPU VM hosts (binary wheels of their platform and Python only)."""
    if provider == "local":
        return ["wheel", "--disable-pip-version-check", "--no-input", "--wheel-dir", dest, "-r", requirements_file]
    return ["download", "--disable-pip-version-check", "--no-input", "--dest", dest, "--only-binary=:all:",
            "--platform", HOST_PLATFORM, "--python-version", HOST_PYTHON, "--implementation", "cp",
            "-r", requirements_file]
