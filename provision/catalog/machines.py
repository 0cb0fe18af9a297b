"""Which machine type the cluster's host VM gets: a pure choice among the types a zone offers.

The host VM only runs the supervisor, the sweep controller and the idle agent: two vCPUs are
plenty, and it runs for as long as the cluster exists, so the cheapest general-purpose type
wins. Zones differ in what they offer: n1 is absent from us-east5 and us-south1, where v5p and
v6e live, and us-central2 (TPU v4) shows neither e2 nor n1 in public catalogues; so ``up`` asks
the zone (``machineTypes.list`` filtered to these names) and takes the first it offers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Smallest and cheapest first. e2-standard-2 ($0.067/h in us-central1, skypilot-catalog vms.csv,
# read 2026-11-24) is offered in every TPU region but us-central2. n2-standard-2 ($0.097/h) comes
# before n1-standard-2 ($0.095/h): two cents a day more buys a newer CPU in every zone that has n2,
# which includes us-east5 and us-south1 where n1 is absent; n1 stays for zones that only have n1.
# The 4- and 8-vCPU shapes come last, for zones (us-central2) where public examples show only
# larger types (tensorflow/tpu's v4 terraform examples: n2-standard-8).
PREFERENCE: tuple[str, ...] = (
    "e2-standard-2", "n2-standard-2", "n1-standard-2",
    "e2-standard-4", "n2-standard-4", "n1-standard-4",
    "e2-standard-8", "n2-standard-8", "n1-standard-8",
)

AUTO = "auto"     # --machine-type's default: the first of PREFERENCE the zone offers


@dataclass(frozen=True)
class Pick:
    machine_type: str | None
    why: str = ""
    usage: bool = False        # the refusal is about what the user asked for (exit 2)

    @property
    def ok(self) -> bool:
        return self.machine_type is not None


def asked_about(requested: str | None) -> tuple[str, ...]:
    """The names to ask a zone about: the preference list, and the user's type if any."""
    if requested and requested != AUTO and requested not in PREFERENCE:
        return (*PREFERENCE, requested)
    return PREFERENCE


def pick(offered: Iterable[str], requested: str | None = None) -> Pick:
    names = set(offered)
    if requested and requested != AUTO:
        if requested in names:
            return Pick(requested)
        return Pick(None, f"machine type {requested} is not offered there; it offers {_listing(names)}", usage=True)
    for name in PREFERENCE:
        if name in names:
            return Pick(name)
    return Pick(None, f"none of {', '.join(PREFERENCE[:3])} ... is offered there for the host VM",
                usage=False)


def _listing(names: set[str]) -> str:
    ordered = [n for n in PREFERENCE if n in names]
    return ", ".join(ordered[:5]) if ordered else "none of " + ", ".join(PREFERENCE[:3])
