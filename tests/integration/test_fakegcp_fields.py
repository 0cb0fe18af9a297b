"""The fake cloud's partial responses: Google's ``fields`` system parameter on every REST answer.

The grammar and its meaning are Google's
(https://cloud.google.com/compute/docs/api/how-tos/performance#partial-response): comma lists,
``a/b`` paths, ``a(b,c)`` sub-selections, ``*`` over a map's keys. A name the response schema
lacks is refused with 400 "Invalid field selection NAME", the message Google's APIs send
(googleapis/google-api-dotnet-client#1444, google/googleapis.dart#23); the Compute-style
``errors[].reason`` (``invalidParameter``) is not shown by those sources: unverified.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.fakegcp import fields
from tests.fakegcp.errors import ApiError
from tests.integration.fleet_build import build_fleet

PROJECT = "tpuctl-test"


def _get(fake, path: str) -> tuple[int, dict, int]:
    try:
        with urllib.request.urlopen(f"{fake.url}{path}", timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw), len(raw)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw), len(raw)


def test_the_grammar():
    tree = fields.parse("items/*/instances(name,networkInterfaces(networkIP,accessConfigs/natIP)),nextPageToken")
    body = {"kind": "compute#instanceAggregatedList", "nextPageToken": "t",
            "items": {"zones/a": {"instances": [{"name": "x", "status": "RUNNING",
                                                 "networkInterfaces": [{"networkIP": "10.0.0.2", "network": "n",
                                                                        "accessConfigs": [{"natIP": "1.2.3.4",
                                                                                           "name": "nat"}]}]}]},
                      "zones/b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}}}
    assert fields.select(body, tree) == {
        "nextPageToken": "t",
        "items": {"zones/a": {"instances": [{"name": "x", "networkInterfaces": [
            {"networkIP": "10.0.0.2", "accessConfigs": [{"natIP": "1.2.3.4"}]}]}]}, "zones/b": {}}}
    # a path and a sub-selection of the same field merge
    assert fields.parse("a/b,a(c)") == {"a": {"b": None, "c": None}}
    for bad in ("a(b", "a,,b", "a/", "(a)"):
        try:
            fields.parse(bad)
        except ApiError as exc:
            assert exc.message.startswith("Invalid field selection")
        else:
            raise AssertionError(bad)


def test_fields_trim_the_answers_over_the_wire(fakegcp_env):
    fakegcp = fakegcp_env
    fakegcp.set_latencies(scale=0)
    build_fleet(PROJECT, 2)
    agg = f"/compute/v1/projects/{PROJECT}/aggregated/instances"
    _, whole, whole_size = _get(fakegcp, agg)
    status, trimmed, size = _get(fakegcp, agg + "?fields=items/*/instances(name,labels),nextPageToken")
    assert status == 200
    listed = [i for scope in trimmed["items"].values() for i in scope.get("instances", [])]
    assert len(listed) == 2 and all(set(i) == {"name", "labels"} for i in listed)
    assert "startup-script" in json.dumps(whole) and "startup-script" not in json.dumps(trimmed)
    assert size * 10 < whole_size                     # names and labels only, of whole VM bodies
    nodes = f"/v2/projects/{PROJECT}/locations/-/nodes"
    status, doc, _ = _get(fakegcp, nodes + "?fields=nodes(name,state),nextPageToken,unreachable")
    assert status == 200 and [set(n) for n in doc["nodes"]] == [{"name", "state"}] * 2
    # the call log says how big each answer was
    sizes = [c["bytes"] for c in fakegcp.calls() if c["call"] == "compute.instances.aggregatedList"]
    assert sizes == [whole_size, size]
    # the switch: every answer whole, whatever was asked (a baseline to compare tpuctl's reads with)
    fakegcp.honour_fields(False)
    assert _get(fakegcp, agg + "?fields=items/*/instances(name)")[1] == whole


def test_a_name_the_schema_lacks_is_refused(fakegcp):
    status, body, _ = _get(fakegcp, f"/v2/projects/{PROJECT}/locations/-/nodes?fields=nodes(name,bogus)")
    assert status == 400
    assert body == {"error": {"code": 400, "message": "Invalid field selection bogus", "status": "INVALID_ARGUMENT"}}
    status, body, _ = _get(fakegcp, f"/compute/v1/projects/{PROJECT}/aggregated/instances?fields=items/*/instances(nom)")
    assert status == 400 and body["error"]["message"] == "Invalid field selection nom"
    assert body["error"]["errors"][0]["reason"] == "invalidParameter"
    # a field the schema has but an answer lacks selects nothing: no error
    status, body, _ = _get(fakegcp, f"/v2/projects/{PROJECT}/locations/-/nodes?fields=nodes(name),unreachable")
    assert status == 200 and body == {}
