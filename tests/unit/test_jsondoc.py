"""``--json`` documents are written by provision.basics.jsondoc: the same bytes as
``json.dumps(data, indent=2, sort_keys=True)`` (what every command printed before, and what scripts
and the fleet's golden files read), for every shape a command's document can take."""

from __future__ import annotations

import json
import math
import random

from provision.basics import jsondoc


def _value(rng: random.Random, depth: int):
    kinds = ["str", "int", "float", "none", "bool"] + (["dict", "list"] * 2 if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return "".join(rng.choice(["a", "Z", " ", '"', "\\", "\n", "\t", "\x00", "é", "日", "\U0001f600", "/"])
                       for _ in range(rng.randrange(6)))
    if kind == "int":
        return rng.choice([0, -1, 7, 2**70, -(2**63)])
    if kind == "float":
        return rng.choice([0.0, -0.0, 1.5, 1e-7, 1e22, 123456789.123, math.inf, -math.inf, math.nan, 0.1 + 0.2])
    if kind == "none":
        return None
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "dict":
        return {rng.choice(["b", "a", "", "é", "key 1", "Z", "_x"]) + str(i):
                _value(rng, depth + 1) for i in range(rng.randrange(5))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def test_the_document_is_byte_for_byte_what_json_dumps_with_indent_writes():
    rng = random.Random(7)
    for _ in range(3000):
        doc = _value(rng, 0)
        assert jsondoc.dumps(doc) == json.dumps(doc, indent=2, sort_keys=True), doc


def test_values_json_loads_never_returns_are_left_to_the_standard_library():
    for doc in ({"a": (1, 2)}, {3: "x", 1: {"k": None}}):   # a tuple, int keys: json.dumps writes them its way
        assert jsondoc.dumps(doc) == json.dumps(doc, indent=2, sort_keys=True)
    assert jsondoc.dumps({"n": 1, "z": [True]}) == '{\n  "n": 1,\n  "z": [\n    true\n  ]\n}'
