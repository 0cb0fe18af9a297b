"""What a zone offers a cluster: its runtime image and host machine type, asked once per zone.

``up`` calls :func:`fit` for every candidate zone before it creates anything (and a caller that
tries several accelerator types can call it per (zone, type)): a zone that offers no suitable
image or machine type is left out with its reason, and when no zone is left the reason is one
line (exit 2 when it is about what the user asked for). What a zone lists is cached for the
life of the :class:`Offers` (one command invocation): one runtime-versions call and one
machine-types call per zone, however many checks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..basics.errors import CloudError, UsageError
from ..catalog import images, machines
from ..cloud.base import Arch, ClusterSpec, Provider
from ..cloud.failures import Scope, failure


class Offers:
    """The zone catalogues one command has asked for (thread-safe, asked at most once each)."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._runtimes: dict[str, list[str]] = {}
        self._machines: dict[tuple[str, tuple[str, ...]], list[str]] = {}

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


@dataclass(frozen=True)
class ZoneFit:
    """One zone's answer for one cluster spec: the image and machine type it would get, or why not."""

    zone: str
    runtime_version: str | None = None
    machine_type: str | None = None
    why: str = ""              # empty when the zone fits
    usage: bool = False        # the refusal is about what the user asked for
    about: str = ""            # what was refused: "image", "machine type" or "zone"

    @property
    def ok(self) -> bool:
        return not self.why

    def apply(self, spec: ClusterSpec) -> ClusterSpec:
        """``spec`` as it is created in this zone (the chosen image and host machine type)."""
        import dataclasses

        changes = {}
        if self.runtime_version:
            changes["runtime_version"] = self.runtime_version
        if self.machine_type:
            changes["machine_type"] = self.machine_type
        return dataclasses.replace(spec, **changes) if changes else spec


def fit(offers: Offers, spec: ClusterSpec, zone: str, *, tpu: bool = True, vm: bool = True,
        keep_image: str | None = None) -> ZoneFit:
    """Whether ``zone`` can host ``spec``: its TPU VM's image (``tpu``) and its host VM (``vm``)."""
    acc = spec.accelerator
    image = None
    if tpu and spec.arch == Arch.VM:
        got = images.pick(offers.runtime_versions(zone), acc.generation.name, acc.multi_host,
                          requested=spec.runtime_version, tf_version=spec.tensorflow_version, keep=keep_image)
        if not got.ok:
            return ZoneFit(zone, why=f"{zone}: {got.why}", usage=got.usage, about="image")
        image = got.image
    machine = None
    if vm and spec.machine_type:
        offered = offers.machine_types(zone, machines.asked_about(spec.machine_type))
        got_m = machines.pick(offered, spec.machine_type)
        if not got_m.ok:
            return ZoneFit(zone, why=f"{zone}: {got_m.why}", usage=got_m.usage, about="machine type")
        machine = got_m.machine_type
    return ZoneFit(zone, image, machine)


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
