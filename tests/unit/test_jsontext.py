"""provision/basics/jsontext.py: ``--json`` documents written in one pass, byte for byte as the
steps it replaces wrote them: ``json.dumps(data, default=...)``, ``json.loads``, redaction of every
string, ``json.dumps(indent=2, sort_keys=True)`` (what users' scripts and golden files see)."""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provision.basics.jsontext import dumps_indented
from provision.basics.redact import redact_data, redactor


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclass
class Thing:
    name: str
    state: Color

    def to_dict(self):
        return {"name": self.name, "state": self.state, "parts": (1, 2.5)}


def default(obj):
    """What a command's --json does with what JSON has no type for (commands/common.py)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "value"):
        return obj.value
    return str(obj)


def old_way(data, strings=None):
    plain = json.loads(json.dumps(data, default=default))
    if strings is not None:
        def walk(v):
            if isinstance(v, str):
                return strings(v)
            if isinstance(v, dict):
                return {strings(k): walk(x) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v
        plain = walk(plain)
    return json.dumps(plain, indent=2, sort_keys=True)


SECRETISH = st.sampled_from(["Authorization: Bearer ya29.a0AfB_xyz-123.abc", "password = hunter2-but-longer",
                             "https://s/o?X-Goog-Signature=deadbeef99", "us-central1-b", "fleet-0001"])
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-2**80, max_value=2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text() | SECRETISH
           | st.just(Color.RED) | st.just(Level.HIGH) | st.builds(Thing, st.text(max_size=5), st.just(Color.RED)))
KEYS = st.text(max_size=4) | SECRETISH | st.integers(-3, 3) | st.booleans() | st.none() | st.floats(-2, 2)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
                    | st.dictionaries(KEYS, inner, max_size=5), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_a_document_is_written_as_the_steps_it_replaces_wrote_it(value):
    assert dumps_indented(value, default=default) == old_way(value)
    assert dumps_indented(value, default=default, strings=redactor()) == old_way(value, redactor())


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_keys_that_become_equal_keep_the_last_value_as_before(value):
    # a strings function that makes distinct keys equal, as a redaction could
    assert dumps_indented(value, default=default, strings=lambda s: s[:1]) == old_way(value, lambda s: s[:1])


def test_the_corner_cases_of_json_dumps_are_kept():
    doc = {"b": [], "a": {}, "é": "ünï\u2028\x00\"\\\ud800", "nan": math.nan, "inf": [math.inf, -math.inf],
           "n": [0, -0.0, 1e16, 1.5e-7, 2**70, True, False, None], "nested": [[{"z": [{}]}]],
           7: "int key", 2.5: "float key", None: "null key", True: "bool key", "t": (1, (2,))}
    assert dumps_indented(doc, default=default) == old_way(doc)


def test_a_secret_anywhere_is_redacted_as_redact_data_redacts_it():
    doc = {"error": "Authorization: Bearer ya29.a0AfB_xyz-123.abc", "ya29.a0AfB_xyz-123.abc": [Thing("x", Color.RED)]}
    text = dumps_indented(doc, default=default, strings=redactor())
    assert "a0AfB_xyz" not in text
    assert json.loads(text) == redact_data(json.loads(json.dumps(doc, default=default)))


def test_what_json_cannot_write_is_refused_as_json_dumps_refuses_it():
    with pytest.raises(TypeError):
        json.dumps({(1, 2): "tuple key"})
    with pytest.raises(TypeError, match="keys must be"):
        dumps_indented({(1, 2): "tuple key"})
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"x": object()})
