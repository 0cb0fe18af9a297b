"""What a zone offers a cluster: which API makes its TPU, its image and host machine type, asked once per zone.

``up`` calls :func:`fit` for every candidate zone before it creates anything (and a caller that
tries several accelerator types can call it per (zone, type)): a zone that offers no suitable
image or machine type is left out with its reason, and when no zone is left the reason is one
line (exit 2 when it is about what the user asked for). What a zone lists is cached for the
life of the :class:`Offers` (one command invocation): one runtime-versions call and one
machine-types call per zone, however many checks.

Which API makes the TPU (``--api auto``): Compute Engine where the zone lists the generation's
machine type (the same machine-types call, asked about the TPU types too; never a table of
zones), else the Cloud TPU API where it offers the type. A zone that offers it through neither
is left out. On Compute Engine the image is the generation's TPU image family's newest
(``compute_tpu_image``, once per family), or ``--runtime-version`` as given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..basics.errors import CloudError, UsageError
from ..catalog import compute_tpus, images, machines
from ..catalog.accelerators import AcceleratorType
from ..cloud.base import Arch, ClusterSpec, Provider
from ..cloud.failures import Scope, failure
from ..cloud.gce_tpu import MAX_CLUSTER_NAME


class Offers:
    """The zone catalogues one command has asked for (thread-safe, asked at most once each)."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._runtimes: dict[str, list[str]] = {}
        self._machines: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self._offered: dict[tuple[str, str], bool] = {}
        self._images: dict[str, str] = {}

    def runtime_versions(self, zone: str) -> list[str]:
        with self._lock:
            if zone not in self._runtimes:
                self._runtimes[zone] = list(self.provider.runtime_versions(zone))
            return self._runtimes[zone]

    def machine_types(self, zone: str, names: tuple[str, ...]) -> list[str]:
        key = (zone, names)
        with self._lock:
            if key not in self._machines:
                self._machines[key] = list(self.provider.machine_types(zone, names))
            return self._machines[key]

    def names(self, spec: ClusterSpec, *, vm: bool) -> tuple[str, ...]:
        """The machine types to ask a zone about for ``spec``: the host's candidates, and the TPU
        machine types when one of its accelerator types is sold on Compute Engine (one call)."""
        host = machines.asked_about(spec.machine_type) if vm and spec.machine_type else ()
        tpu = (compute_tpus.machine_types() if self.provider.offers_compute_tpus and spec.arch == Arch.VM
               and spec.api != "tpu" and not spec.queued and any(compute_tpus.served(a) for a in spec.candidates)
               else ())
        return host + tpu

    def api(self, zone: str, acc: AcceleratorType, spec: ClusterSpec, *, vm: bool) -> str:
        """Which API makes ``acc`` in ``zone`` for ``spec`` ("compute", "tpu"), or "" for neither."""
        shape = compute_tpus.shape(acc)
        if spec.arch == Arch.VM and spec.api != "tpu" and not spec.queued and shape is not None \
                and self.provider.offers_compute_tpus and shape.machine_type in self.machine_types(zone, self.names(spec, vm=vm)):
            return "compute"
        if spec.api == "compute" or not acc.served_by("tpu"):
            return ""
        key = (zone, acc.name)
        with self._lock:
            known = self._offered.get(key)
        if known is None:
            known = bool(self.provider.offered(zone, acc.name))
            with self._lock:
                self._offered[key] = known
        return "tpu" if known else ""

    def compute_image(self, accelerator_type: str) -> str:
        family = compute_tpus.shape_family(accelerator_type)
        with self._lock:
            if family in self._images:
                return self._images[family]
        image = self.provider.compute_tpu_image(accelerator_type)
        with self._lock:
            self._images[family] = image
        return image


@dataclass(frozen=True)
class ZoneFit:
    """One zone's answer for one cluster spec: the image and machine type it would get, or why not."""

    zone: str
    runtime_version: str | None = None
    machine_type: str | None = None
    why: str = ""              # empty when the zone fits
    usage: bool = False        # the refusal is about what the user asked for
    about: str = ""            # what was refused: "image", "machine type" or "zone"
    api: str = ""              # which API makes the TPU there: "compute" or "tpu" ("": not asked)

    @property
    def ok(self) -> bool:
        return not self.why

    def apply(self, spec: ClusterSpec) -> ClusterSpec:
        """``spec`` as it is created in this zone (the chosen image and host machine type)."""
        import dataclasses

        changes: dict[str, str] = {}
        if self.runtime_version:
            changes["runtime_version"] = self.runtime_version
        if self.machine_type:
            changes["machine_type"] = self.machine_type
        if self.api:
            changes["api"] = self.api
        return dataclasses.replace(spec, **changes) if changes else spec


def fit(offers: Offers, spec: ClusterSpec, zone: str, *, tpu: bool = True, vm: bool = True,
        keep_image: str | None = None) -> ZoneFit:
    """Whether ``zone`` can host ``spec``: its TPU VM's image (``tpu``) and its host VM (``vm``)."""
    acc = spec.accelerator
    image = None
    api = ""
    if tpu:
        api = offers.api(zone, acc, spec, vm=vm)
        if not api:
            return ZoneFit(zone, why=f"{zone}: {acc.name} is not offered there{_through(spec)}", about="zone")
    if tpu and api == "compute":
        if len(spec.name) > MAX_CLUSTER_NAME:
            return ZoneFit(zone, why=f"cluster name {spec.name} is too long for a Compute Engine TPU (its workers are "
                                     f"named NAME-tpu-N)", usage=True, about="zone")
        image = spec.runtime_version or keep_image or offers.compute_image(acc.name)
    elif tpu and spec.arch == Arch.VM:
        got = images.pick(offers.runtime_versions(zone), acc.generation.name, acc.multi_host,
                          requested=spec.runtime_version, tf_version=spec.tensorflow_version, keep=keep_image)
        if not got.ok:
            return ZoneFit(zone, why=f"{zone}: {got.why}", usage=got.usage, about="image", api=api)
        image = got.image
    machine = None
    if vm and spec.machine_type:
        offered = offers.machine_types(zone, offers.names(spec, vm=True))
        got_m = machines.pick(offered, spec.machine_type)
        if not got_m.ok:
            return ZoneFit(zone, why=f"{zone}: {got_m.why}", usage=got_m.usage, about="machine type")
        machine = got_m.machine_type
    return ZoneFit(zone, image, machine, api=api)


def _through(spec: ClusterSpec) -> str:
    return {"compute": " as a Compute Engine machine type", "tpu": " by the Cloud TPU API"}.get(spec.api, "")


def plan_zones(offers: Offers, spec: ClusterSpec, zones: list[str], *, tpu: bool = True, vm: bool = True,
               keep_image: str | None = None, log: Callable[[str], None] = lambda _m: None) -> dict[str, ZoneFit]:
    """Each zone's image and host machine type; zones that cannot host the cluster are left out
    (logged), and when none is left, one line says why (a UsageError: nothing was created)."""
    checked: list[ZoneFit] = []
    for zone in zones:
        try:
            checked.append(fit(offers, spec, zone, tpu=tpu, vm=vm, keep_image=keep_image))
        except CloudError as exc:
            if failure(exc.kind, exc.message).scope not in (Scope.ZONE, Scope.REGION):
                raise
            checked.append(ZoneFit(zone, why=f"{zone}: {exc.message}", about="zone"))
    fits = {f.zone: f for f in checked if f.ok}
    refused = [f for f in checked if not f.ok]
    if not fits:
        usage = [f for f in refused if f.usage]
        why = "; ".join(f.why for f in (usage or refused))
        about = {f.about for f in (usage or refused)}
        if "image" in about:
            hint = ("pass one of them with --runtime-version, or drop it and let tpuctl choose" if usage
                    else "name an image with --runtime-version, or try another --zone")
        elif "machine type" in about:
            hint = ("pass one of them with --machine-type, or drop it and let tpuctl choose" if usage
                    else "name a machine type with --machine-type, or try another --zone")
        else:
            hint = "try another --zone"
        raise UsageError(why, hint=hint)
    for f in refused:
        log(f"zone {f.zone} is left out: {f.why.split(': ', 1)[-1]}")
    return fits
