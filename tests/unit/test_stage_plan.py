"""The pure planning core of tpuctl stage: listings in, plan out; no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provision.staging.ignore import Excluder
from provision.staging.plan import (
    DELETE,
    SEND,
    SKIP,
    Entry,
    Step,
    apply_excludes,
    index,
    local_name_problems,
    make_plan,
    needs_checksum,
    order_for_transfer,
)


def E(path, size, crc=None):
    return Entry(path, size, crc)


def ops(plan):
    return {(s.op, s.path, s.reason) for s in plan.steps}


def test_new_files_are_sent():
    plan = make_plan(index([E("a", 1, 5), E("b/c", 2, 6)]), {})
    assert ops(plan) == {(SEND, "a", "new"), (SEND, "b/c", "new")}
    assert plan.bytes(SEND) == 3


def test_same_size_and_crc_is_skipped():
    plan = make_plan(index([E("a", 10, 7)]), index([E("a", 10, 7)]))
    assert ops(plan) == {(SKIP, "a", "unchanged")}


def test_size_difference_is_sent_without_reading_checksums():
    plan = make_plan(index([E("a", 10)]), index([E("a", 11, 7)]))
    assert ops(plan) == {(SEND, "a", "size differs")}


def test_checksum_difference_is_sent():
    plan = make_plan(index([E("a", 10, 1)]), index([E("a", 10, 2)]))
    assert ops(plan) == {(SEND, "a", "checksum differs")}


def test_same_size_with_unknown_checksum_is_refused():
    with pytest.raises(ValueError, match="needs_checksum"):
        make_plan(index([E("a", 10)]), index([E("a", 10, 2)]))


def test_needs_checksum_names_only_same_size_pairs_and_the_unknown_side():
    src = index([E("same", 5), E("diff", 5), E("new", 5), E("known", 3, 9)])
    dest = index([E("same", 5, 1), E("diff", 6, 1), E("known", 3)])
    assert needs_checksum(src, dest) == [("src", "same"), ("dest", "known")]


def test_delete_only_with_flag_and_only_what_src_lacks():
    src, dest = index([E("keep", 1, 1)]), index([E("keep", 1, 1), E("old", 4, 2), E("x/y", 5, 3)])
    assert make_plan(src, dest).deletes == []
    plan = make_plan(src, dest, delete=True)
    assert [(s.path, s.size) for s in plan.deletes] == [("old", 4), ("x/y", 5)]
    assert plan.skips == [Step(SKIP, "keep", 1, "unchanged")]


def test_excludes_apply_to_both_sides_so_delete_spares_excluded_dest_files():
    ex = Excluder(["*.tmp"])
    src, n_src = apply_excludes([E("a", 1, 1), E("b.tmp", 1, 1)], ex)
    dest, _ = apply_excludes([E("a", 1, 1), E("c.tmp", 1, 1)], ex)
    plan = make_plan(index(src), index(dest), delete=True, excluded=n_src)
    assert plan.deletes == [] and plan.excluded == 1 and [s.path for s in plan.skips] == ["a"]


def test_local_name_problems():
    assert local_name_problems(["a/b", "c"]) == []
    probs = local_name_problems(["../x", "a//b", "./c", "/abs", "ok"])
    assert len(probs) == 4
    assert local_name_problems(["a", "a/b"]) == ["'a' is both a file and a folder (of 'a/b')"]


def test_transfer_order_is_largest_first():
    steps = [Step(SEND, "s", 1, "new"), Step(SEND, "big", 100, "new"), Step(SEND, "m", 10, "new")]
    assert [s.path for s in order_for_transfer(steps)] == ["big", "m", "s"]


listing = st.dictionaries(st.sampled_from(["a", "b", "c/d", "c/e", "f"]),
                          st.tuples(st.integers(0, 3), st.integers(0, 2)), max_size=5)


@given(listing, listing, st.booleans())
def test_applying_the_plan_makes_dest_match_src(src_raw, dest_raw, delete):
    src = {p: E(p, s, c) for p, (s, c) in src_raw.items()}
    dest = {p: E(p, s, c) for p, (s, c) in dest_raw.items()}
    plan = make_plan(src, dest, delete=delete)
    result = dict(dest)
    for step in plan.steps:
        if step.op == SEND:
            result[step.path] = src[step.path]
        elif step.op == DELETE:
            del result[step.path]
    for p, entry in src.items():
        assert result[p] == entry
    if delete:
        assert set(result) == set(src)
    else:
        assert set(result) == set(src) | set(dest)
    # nothing identical is ever sent; nothing different is ever skipped
    for step in plan.steps:
        if step.op == SEND:
            assert step.path not in dest or dest[step.path] != src[step.path]
        if step.op == SKIP:
            assert dest[step.path] == src[step.path]
