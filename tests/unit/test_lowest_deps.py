"""tests/lowest_deps.py: pyproject's floors as the pip constraints `make test-lowest` installs."""

from __future__ import annotations

import pytest

from tests import lowest_deps


def test_every_direct_dependency_has_a_floor_and_is_pinned_to_it():
    deps = lowest_deps._load()["project"]["dependencies"]
    floors = lowest_deps.floors(deps)
    assert len(floors) == len(deps)
    text = lowest_deps.constraints(deps)
    for name, low, _ in floors:
        assert f"{name}=={low}" in text


def test_markers_and_extras_are_kept_and_a_missing_floor_is_refused():
    text = lowest_deps.constraints(["tomli>=2.0.0; python_version < '3.11'", "google-api-core[grpc]>=2.15.0,<3"])
    assert text == "tomli==2.0.0; python_version < '3.11'\ngoogle-api-core==2.15.0\n"
    for bad in ("click", "click<9", "click>=8,>=8.1", "click>8.1"):
        with pytest.raises(ValueError):
            lowest_deps.floors([bad])
