"""The pure choices of a TPU VM image and a host machine type, and the per-command zone cache."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from provision.catalog import accelerators, images, machines
from provision.cloud.base import ClusterSpec
from provision.cluster.offers import Offers, fit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# What a zone's runtimeVersions.list can look like: names seen in public use (tests/fakegcp/catalog.py
# says where each was seen). A zone lists every generation's images together.
ZONE = [
    "tpu-ubuntu2204-base", "v2-alpha-tpuv6e", "tpu-vm-tf-2.15.0-pjrt", "tpu-vm-tf-2.15.1-se",
    "tpu-vm-tf-2.16.1-pjrt", "tpu-vm-tf-2.16.1-se", "tpu-vm-tf-2.16.1-pod-pjrt", "tpu-vm-tf-2.17.0-pjrt",
    "tpu-vm-tf-2.17.0-pod-pjrt", "tpu-vm-tf-2.17.1-pjrt", "tpu-vm-tf-2.18.0-pjrt-v5p-and-below",
    "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6",
]


def test_supported_tensorflow_is_the_train_extra_of_pyproject():
    data = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (spec,) = [d for d in data["project"]["optional-dependencies"]["train"] if d.startswith("tensorflow")]
    lo = re.search(r">=(\d+)\.(\d+)", spec)
    hi = re.search(r"<(\d+)\.(\d+)", spec)
    assert lo and hi, spec
    assert images.SUPPORTED_TF == ((int(lo[1]), int(lo[2])), (int(hi[1]), int(hi[2])))


@pytest.mark.parametrize(("generation", "multi_host", "want"), [
    ("v2", False, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"),
    ("v3", False, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"),
    ("v4", False, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"),
    ("v5p", False, "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"),
    ("v5litepod", False, "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"),
    ("v6e", False, "tpu-vm-tf-2.18.0-pjrt-v5e-and-v6"),
    ("v6e", True, "tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6"),
    ("v4", True, "tpu-vm-tf-2.17.0-pod-pjrt"),          # no v5p-and-below pod image listed: the newest generic one
])
def test_the_newest_supported_image_of_the_generation_and_flavour(generation, multi_host, want):
    assert images.pick(ZONE, generation, multi_host).image == want


def test_nothing_suitable_is_a_reason_not_a_guess():
    got = images.pick(["tpu-vm-tf-2.15.0-pjrt", "tpu-vm-tf-2.16.1-se", "v2-alpha-tpuv6e"], "v6e", False)
    assert not got.ok and not got.usage
    assert "no single-host PJRT TensorFlow image for v6e with TensorFlow >=2.16,<2.22" in got.why
    # the stream executor is never picked by default (v5e/v5p/v6e run TF only with PJRT)
    assert images.pick(["tpu-vm-tf-2.16.1-se"], "v2", False).image is None
    # TensorFlow beyond what the job side supports is not picked either
    assert images.pick(["tpu-vm-tf-2.22.0-pjrt", "tpu-vm-tf-2.16.1-pjrt"], "v2", False).image == "tpu-vm-tf-2.16.1-pjrt"


def test_a_requested_image_must_be_offered_and_built_for_the_generation():
    assert images.pick(ZONE, "v2", False, requested="tpu-vm-tf-2.16.1-se").image == "tpu-vm-tf-2.16.1-se"
    missing = images.pick(ZONE, "v6e", False, requested="tpu-vm-tf-2.18.0-pjrt")
    assert missing.usage and "tpu-vm-tf-2.18.0-pjrt is not offered there" in missing.why
    # the list puts the flavour the slice needs first
    assert "for v6e: tpu-vm-tf-2.18.0-pjrt-v5e-and-v6, tpu-vm-tf-2.17.1-pjrt" in missing.why
    wrong = images.pick(ZONE, "v5p", False, requested="tpu-vm-tf-2.18.0-pjrt-v5e-and-v6")
    assert wrong.usage and "built for v5e-and-v6, not v5p" in wrong.why


def test_tf_version_and_kept_image():
    assert images.pick(ZONE, "v3", False, tf_version="2.17").image == "tpu-vm-tf-2.17.1-pjrt"
    assert images.pick(ZONE, "v3", False, tf_version="2.17.0").image == "tpu-vm-tf-2.17.0-pjrt"
    none = images.pick(ZONE, "v3", False, tf_version="2.19")
    assert none.usage and "no single-host TensorFlow 2.19 image for v3" in none.why
    assert images.pick(ZONE, "v3", False, keep="tpu-vm-tf-2.16.1-pjrt").image == "tpu-vm-tf-2.16.1-pjrt"
    # a kept image the zone no longer lists gives way to the zone's best
    assert images.pick(ZONE, "v3", False, keep="tpu-vm-tf-2.14.0").image == "tpu-vm-tf-2.18.0-pjrt-v5p-and-below"


def test_image_names_parse_by_google_naming():
    i = images.parse("tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6")
    assert i and i.version == (2, 18, 0) and i.pod and i.device_api == "pjrt" and i.family == "v5e-and-v6"
    assert i.serves("v6e") and not i.serves("v5p")
    assert images.parse("v2-alpha-tpuv6e") is None and images.parse("tpu-vm-tf-2.18.0-pjrt-v9") is None


def test_machine_type_preference_and_refusals():
    assert machines.pick(["n2-standard-2", "e2-standard-2"]).machine_type == "e2-standard-2"
    assert machines.pick(["n2-standard-8"]).machine_type == "n2-standard-8"
    assert machines.pick(["e2-standard-2"], "e2-standard-2").machine_type == "e2-standard-2"
    bad = machines.pick(["e2-standard-2", "n2-standard-2"], "n1-standard-2")
    assert bad.usage and bad.why == "machine type n1-standard-2 is not offered there; it offers e2-standard-2, n2-standard-2"
    assert not machines.pick([]).ok
    assert machines.asked_about("c3-standard-4")[-1] == "c3-standard-4"
    assert machines.asked_about(machines.AUTO) == machines.PREFERENCE


def test_v4_and_v5p_slices_that_are_not_powers_of_two():
    v4 = accelerators.parse("v4-384")
    assert (v4.chips, v4.hosts, v4.multi_host) == (192, 48, True)
    v5p = accelerators.parse("v5p-640")
    assert (v5p.chips, v5p.hosts) == (320, 80)
    assert accelerators.parse("v5p-17920").chips == 8960      # a full v5p pod, 16x20x28
    for name in ("v4-96", "v5p-96", "v5p-8320000"):
        with pytest.raises(accelerators.UsageError):
            accelerators.parse(name)


class _Listing:
    """A provider that only lists (counts how often it is asked)."""

    name = "stub"
    project = "p"
    offers_compute_tpus = False       # the Cloud TPU API's images only

    def __init__(self, runtimes: dict[str, list[str]], machine: dict[str, list[str]]):
        self.runtimes, self.machine, self.asked = runtimes, machine, []

    def offered(self, zone, accelerator_type):
        return True

    def runtime_versions(self, zone):
        self.asked.append(("runtime", zone))
        return self.runtimes.get(zone, [])

    def machine_types(self, zone, names):
        self.asked.append(("machine", zone))
        return [n for n in self.machine.get(zone, []) if n in names]


def test_each_zone_is_asked_once_and_checked_on_its_own():
    stub = _Listing({"us-east5-b": ZONE, "us-east1-d": ["tpu-vm-tf-2.16.1-pjrt"]},
                    {"us-east5-b": ["e2-standard-2"], "us-east1-d": ["n1-standard-2", "n2-standard-2"]})
    offers = Offers(stub)  # type: ignore[arg-type]
    spec = ClusterSpec(name="c", accelerator_type="v6e-8", zones=("us-east5-b", "us-east1-d"), provider="gcp")
    a = fit(offers, spec, "us-east5-b")
    b = fit(offers, spec, "us-east1-d")
    assert (a.runtime_version, a.machine_type) == ("tpu-vm-tf-2.18.0-pjrt-v5e-and-v6", "e2-standard-2")
    assert (b.runtime_version, b.machine_type) == ("tpu-vm-tf-2.16.1-pjrt", "n2-standard-2")
    for _ in range(3):
        fit(offers, spec, "us-east5-b")
        fit(offers, spec, "us-east1-d", keep_image="tpu-vm-tf-2.16.1-pjrt")
    assert sorted(stub.asked) == [("machine", "us-east1-d"), ("machine", "us-east5-b"),
                                  ("runtime", "us-east1-d"), ("runtime", "us-east5-b")]
    pinned = ClusterSpec(name="c", accelerator_type="v6e-8", zones=("us-east1-d",), provider="gcp",
                         machine_type="e2-standard-2")
    refused = fit(offers, pinned, "us-east1-d")
    assert not refused.ok and refused.usage and refused.about == "machine type"
    assert refused.apply(pinned) is pinned and a.apply(spec).runtime_version == a.runtime_version


def test_failover_leaves_out_zones_without_the_image_and_says_why_when_none_is_left():
    from provision.basics.errors import UsageError
    from provision.cluster.offers import plan_zones

    stub = _Listing({"us-east5-b": ZONE, "us-east1-d": ["tpu-vm-tf-2.16.1-pjrt"]},
                    {"us-east5-b": ["e2-standard-2"], "us-east1-d": ["e2-standard-2"]})
    pinned = ClusterSpec(name="c", accelerator_type="v6e-8", zones=("us-east1-d", "us-east5-b"), provider="gcp",
                         runtime_version="tpu-vm-tf-2.18.0-pjrt-v5e-and-v6")
    lines: list[str] = []
    fits = plan_zones(Offers(stub), pinned, ["us-east1-d", "us-east5-b"], log=lines.append)  # type: ignore[arg-type]
    assert list(fits) == ["us-east5-b"]
    assert lines == [("zone us-east1-d is left out: runtime version tpu-vm-tf-2.18.0-pjrt-v5e-and-v6 is not offered "
                     "there; its TensorFlow images for v6e: tpu-vm-tf-2.16.1-pjrt")]
    with pytest.raises(UsageError) as info:
        plan_zones(Offers(stub), pinned, ["us-east1-d"])   # type: ignore[arg-type]
    assert "\n" not in info.value.one_line() and "--runtime-version" in info.value.one_line()
