"""Compute Engine TPU shapes: the names users know mapped onto machine types, VMs and topologies.

Expected rows: Google's launcher AI-Hypercomputer/xpk ``src/xpk/core/system_characteristics.py``
(``v5p-32`` is 2x2x4 on 4 ``ct5p-hightpu-4t`` VMs, ``tpu7x-8`` 2x2x1 on one ``tpu7x-standard-4t``,
``tpu7x-2`` 1x1x1 on ``tpu7x-standard-1t``, v6e 2D shapes) and the machine types
``gcloud compute machine-types list`` shows (``ct6e-standard-8t``: 8 chips, one host, as the
Cloud TPU API's ``v6e-8`` is one host).
"""

from __future__ import annotations

import pytest

from provision.basics.errors import UsageError
from provision.catalog import accelerators, compute_tpus


@pytest.mark.parametrize(("name", "machine_type", "vms", "topology"), [
    ("v6e-1", "ct6e-standard-1t", 1, "1x1"), ("v6e-4", "ct6e-standard-4t", 1, "2x2"),
    ("v6e-8", "ct6e-standard-8t", 1, "2x4"), ("v6e-16", "ct6e-standard-4t", 4, "4x4"),
    ("v5p-8", "ct5p-hightpu-4t", 1, "2x2x1"), ("v5p-32", "ct5p-hightpu-4t", 4, "2x2x4"),
    ("tpu7x-2", "tpu7x-standard-1t", 1, "1x1x1"), ("tpu7x-8", "tpu7x-standard-4t", 1, "2x2x1"),
    ("tpu7x-32", "tpu7x-standard-4t", 4, "2x2x4"),
])
def test_each_slice_has_one_machine_type_vm_count_and_topology(name, machine_type, vms, topology):
    acc = accelerators.parse(name)
    got = compute_tpus.shape(acc)
    assert (got.machine_type, got.vms, got.topology) == (machine_type, vms, topology)
    assert got.vms == acc.hosts and got.chips_per_vm * got.vms == acc.chips
    # read back from the cloud: the machine type and the number of VMs name the slice again
    assert compute_tpus.accelerator_of(machine_type, vms) == name


def test_generations_compute_engine_does_not_sell_have_no_shape():
    for name in ("v2-8", "v3-8", "v4-8", "v5litepod-8"):
        assert compute_tpus.shape(accelerators.parse(name)) is None
    assert compute_tpus.accelerator_of("e2-standard-2") is None


def test_tpu7x_is_named_by_tensorcores_and_served_only_by_compute_engine():
    acc = accelerators.parse("tpu7x-8")
    assert (acc.cores, acc.chips, acc.hosts) == (8, 4, 1)
    assert acc.served_by("compute") and not acc.served_by("tpu")
    assert accelerators.parse("v6e-8").served_by("tpu") and accelerators.parse("v6e-8").served_by("compute")
    assert not accelerators.parse("v5litepod-8").served_by("compute")
    with pytest.raises(UsageError, match="not a tpu7x slice size"):
        accelerators.parse("tpu7x-4")


def test_each_generation_names_its_image_family():
    assert compute_tpus.shape(accelerators.parse("tpu7x-8")).image_family == "ubuntu-accel-2404-amd64-tpu-tpu7x"
    assert compute_tpus.shape(accelerators.parse("v6e-8")).image_family == \
        compute_tpus.shape(accelerators.parse("v5p-8")).image_family == "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e"
