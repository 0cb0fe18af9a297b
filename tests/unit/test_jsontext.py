"""provision/basics/jsontext.py: ``--json`` documents written faster, byte for byte as
``json.dumps(indent=2, sort_keys=True)`` writes them (what users' scripts and golden files see)."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from provision.basics.jsontext import dumps_indented

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**80, max_value=2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
                    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_every_json_value_is_written_as_json_dumps_writes_it(value):
    assert dumps_indented(value) == json.dumps(value, indent=2, sort_keys=True)


def test_the_corner_cases_of_json_dumps_are_kept():
    doc = {"b": [], "a": {}, "é": "ünï\u2028\x00\"\\", "nan": math.nan, "inf": [math.inf, -math.inf],
           "n": [0, -0.0, 1e16, 1.5e-7, 2**70, True, False, None], "nested": [[{"z": [{}]}]]}
    assert dumps_indented(doc) == json.dumps(doc, indent=2, sort_keys=True)


def test_what_json_loads_never_returns_is_left_to_json_dumps():
    # a tuple, a non-string key: written (or refused) exactly as json.dumps does
    doc = {"t": (1, 2), "k": {1: "one"}}
    assert dumps_indented(doc) == json.dumps(doc, indent=2, sort_keys=True)
