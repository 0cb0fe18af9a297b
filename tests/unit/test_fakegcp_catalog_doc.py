"""docs/fakegcp.md's table of what the fake sells where, per API, is `tests/fakegcp/catalog.py`'s.

A reader picks zones from that table to rehearse `up --api auto|tpu|compute` against the fake;
a row that drifted from the catalog would send them to a zone that refuses the type.
"""

from __future__ import annotations

from pathlib import Path

from provision.catalog import compute_tpus
from tests.fakegcp import catalog

DOC = Path(__file__).resolve().parents[2] / "docs" / "fakegcp.md"


def _doc_rows() -> dict[str, tuple[str, str]]:
    text = DOC.read_text()
    start = text.index("| generation | Cloud TPU API (`acceleratorTypes`) | Compute Engine (`machineTypes`) |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        gen, tpu, compute = (c.strip() for c in line.strip("|").split("|"))
        rows[gen] = (tpu, compute.split(": ", 1)[-1])
    return rows


def test_the_per_api_table_is_the_catalog():
    expected = {}
    for gen in ("v2", "v3", "v4", "v5litepod", "v5p", "v6e", "tpu7x"):
        tpu = catalog.GENERATIONS[gen][4] if gen in catalog.GENERATIONS else ()
        types = tuple(compute_tpus.MACHINE_TYPES.get(gen, {}).values())
        # every zone that lists the generation's machine types, in the catalog's order of them
        compute = list(catalog._TPU_MACHINE_ZONES[types[0].split("-")[0]]) if types else []
        assert all(set(types) <= set(catalog.machine_types_in(z)) for z in compute)
        assert not [z for z in catalog.ZONES if set(types) & set(catalog.machine_types_in(z)) and z not in compute]
        expected[gen] = (", ".join(tpu) or "-", ", ".join(compute) or "-")
    assert _doc_rows() == expected
