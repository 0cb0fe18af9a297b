"""Which TPU VM runtime image a TPU gets: a pure choice among the images a zone offers.

Google names TensorFlow images ``tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se][-FAMILY]``
(cloud.google.com/tpu/docs/runtimes): ``-pod`` for multi-host slices, and since TF 2.18 a family
suffix that says which generations the image is built for (``-v5e-and-v6``, ``-v5p-and-below``).
Which names exist differs by zone and changes over time, so tpuctl never trusts a table for
them: ``up`` lists the zone's runtime versions (``runtimeVersions.list``) and picks here. The
table at the end (:data:`SEEN`) is only the dated fallback the local provider rehearses with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# TensorFlow versions the job side runs on: pyproject's train extra (``tensorflow>=2.16,<2.22``);
# tests/unit/test_images.py checks the two agree. (lowest, first unsupported)
SUPPORTED_TF: tuple[tuple[int, int], tuple[int, int]] = ((2, 16), (2, 22))

# Which generations a family suffix serves (the suffix names them; an image without one serves all)
FAMILIES: dict[str, frozenset[str]] = {
    "v5e-and-v6": frozenset({"v5litepod", "v6e"}),
    "v5p-and-below": frozenset({"v2", "v3", "v4", "v5p"}),
}

_TF_IMAGE = re.compile(r"^tpu-vm-tf-(\d+)\.(\d+)\.(\d+)(-pod)?(?:-(pjrt|se))?(?:-(v5e-and-v6|v5p-and-below))?$")


@dataclass(frozen=True)
class TfImage:
    name: str
    version: tuple[int, int, int]
    pod: bool
    device_api: str            # "pjrt", "se" or "" (before TF 2.15 there was no choice)
    family: str | None         # "v5e-and-v6", "v5p-and-below" or None (every generation)

    @property
    def tf_version(self) -> str:
        return ".".join(map(str, self.version))

    def serves(self, generation: str) -> bool:
        return self.family is None or generation in FAMILIES[self.family]


def parse(name: str) -> TfImage | None:
    """A TensorFlow runtime image name, or None for any other image (JAX/PyTorch bases, typos)."""
    m = _TF_IMAGE.match(name or "")
    if not m:
        return None
    return TfImage(name, (int(m.group(1)), int(m.group(2)), int(m.group(3))), bool(m.group(4)),
                   m.group(5) or "", m.group(6))


def supported(image: TfImage, tf_range: tuple[tuple[int, int], tuple[int, int]] = SUPPORTED_TF) -> bool:
    lo, hi = tf_range
    return lo <= image.version[:2] < hi


def tensorflow_images(offered: Iterable[str], generation: str | None = None) -> list[str]:
    """The TensorFlow images among ``offered`` (for ``generation``, if given), newest first."""
    images = [i for i in (parse(n) for n in set(offered)) if i is not None]
    if generation:
        images = [i for i in images if i.serves(generation)]
    return [i.name for i in sorted(images, key=_rank, reverse=True)]


def _rank(image: TfImage) -> tuple:
    # newest TensorFlow first; at equal versions an image built for the generation beats a generic
    # one, PJRT beats the stream executor (TF 2.15+ on v5e/v5p/v6e runs only with PJRT)
    return (image.version, image.family is not None, image.device_api == "pjrt", image.name)


@dataclass(frozen=True)
class Pick:
    """The image chosen for one zone, or why there is none (``image`` None, ``why`` one line)."""

    image: str | None
    why: str = ""
    usage: bool = False        # the refusal is about what the user asked for (exit 2)

    @property
    def ok(self) -> bool:
        return self.image is not None


def pick(offered: Iterable[str], generation: str, multi_host: bool, *, requested: str | None = None,
         tf_version: str | None = None, keep: str | None = None,
         tf_range: tuple[tuple[int, int], tuple[int, int]] = SUPPORTED_TF) -> Pick:
    """The runtime image for a ``generation`` TPU VM in a zone that offers ``offered``.

    ``requested`` (``--runtime-version``) must be offered as it is; ``tf_version`` (``--tf-version``)
    picks the best image of that TensorFlow version; ``keep`` (a recreated node's image) is kept
    when the zone still offers it. Otherwise: the newest PJRT TensorFlow image for the generation,
    of the pod flavour exactly when the slice is multi-host, whose TensorFlow the job side runs.
    """
    names = set(offered)
    flavour = "pod" if multi_host else "single-host"
    if requested:
        asked = parse(requested)
        if asked is not None and not asked.serves(generation):
            # a zone lists every generation's images: one built for another family is listed, but not for this TPU
            return Pick(None, f"runtime version {requested} is built for {asked.family}, not {generation}; its "
                              f"TensorFlow images for {generation}: {_listing(names, generation, multi_host)}", usage=True)
        if requested in names:
            return Pick(requested)
        return Pick(None, f"runtime version {requested} is not offered there; its TensorFlow images for "
                          f"{generation}: {_listing(names, generation, multi_host)}", usage=True)
    if keep and keep in names:
        return Pick(keep)
    candidates = [i for i in (parse(n) for n in names) if i is not None and i.serves(generation)
                  and i.pod == multi_host and i.device_api == "pjrt"]
    if tf_version:
        chosen = [i for i in candidates if i.tf_version == tf_version or i.tf_version.startswith(tf_version + ".")]
        if not chosen:
            return Pick(None, f"no {flavour} TensorFlow {tf_version} image for {generation} there; its "
                              f"TensorFlow images for {generation}: {_listing(names, generation, multi_host)}", usage=True)
    else:
        chosen = [i for i in candidates if supported(i, tf_range)]
        if not chosen:
            lo, hi = tf_range
            return Pick(None, f"no {flavour} PJRT TensorFlow image for {generation} with TensorFlow "
                              f">={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]} there (its TensorFlow images: "
                              f"{_listing(names, generation, multi_host)})")
    return Pick(max(chosen, key=_rank).name)


def _listing(names: Iterable[str], generation: str, multi_host: bool | None = None, limit: int = 6) -> str:
    found = tensorflow_images(names, generation)
    if multi_host is not None:      # the flavour the slice needs first
        found.sort(key=lambda n: (parse(n).pod != multi_host))  # type: ignore[union-attr]
    if not found:
        return "none"
    return ", ".join(found[:limit]) + (f" (+{len(found) - limit} more)" if len(found) > limit else "")


# Dated fallback (the local provider's rehearsal catalogue; the GCP provider always asks the zone).
# Every name was seen in public use; where, per row. Read 2026-11-24.
SEEN: tuple[tuple[str, frozenset[str], str], ...] = (
    ("tpu-vm-tf-2.16.1-pjrt", frozenset({"v2", "v3", "v4", "v5litepod", "v5p", "v6e"}),
     "cloud.google.com/tpu/docs/supported-tpu-versions (TF list); Prz00124/tpu-vm-examples-2025 (v5litepod-8)"),
    ("tpu-vm-tf-2.16.1-pod-pjrt", frozenset({"v2", "v3", "v4", "v5litepod", "v5p", "v6e"}),
     "cloud.google.com/tpu/docs/supported-versions (-pod-pjrt naming); Prz00124/tpu-vm-examples-2025 (v5litepod-16)"),
    ("tpu-vm-tf-2.17.0-pjrt", frozenset({"v2", "v3", "v4", "v5litepod"}),
     "GoogleCloudPlatform/python-docs-samples TPU tests (v2-8, v5litepod-1)"),
    ("tpu-vm-tf-2.17.0-pod-pjrt", frozenset({"v2", "v3", "v4"}),
     "a user's gcloud script in the public code index (v3-8, europe-west4-a)"),
    ("tpu-vm-tf-2.17.1-pjrt", frozenset({"v2", "v3", "v4"}),
     "cloud.google.com/tpu/docs/preemptible (v3-8)"),
    ("tpu-vm-tf-2.18.0-pjrt-v5p-and-below", frozenset({"v2", "v3", "v4", "v5p"}),
     "user scripts choosing it from `gcloud compute tpus tpu-vm versions list` for v2-8/v3-8/v4 (public code index)"),
    ("tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", frozenset({"v5litepod", "v6e"}),
     "Prz00124/tpu-vm-examples-2025 tensorflow/v5e-4-tf-2-18-0.sh (July 2025)"),
    ("tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6", frozenset({"v5litepod", "v6e"}),
     "Prz00124/tpu-vm-examples-2025 tensorflow/v5e-16-tf-2-18-0.sh (July 2025)"),
)


def seen_images(generations: Iterable[str] | None = None) -> list[str]:
    gens = set(generations) if generations is not None else None
    return [name for name, serves, _ in SEEN if gens is None or serves & gens]
