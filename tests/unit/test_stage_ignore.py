"""--exclude and .tpuctlignore pattern semantics (pure)."""

from __future__ import annotations

import pytest

from provision.basics.errors import UsageError
from provision.staging.ignore import Excluder, parse_ignore_file, parse_rule


@pytest.mark.parametrize("patterns,path,excluded", [
    (["*.tmp"], "x.tmp", True),
    (["*.tmp"], "deep/dir/x.tmp", True),
    (["*.tmp"], "x.tmpl", False),
    (["events.out.*"], "train/events.out.tfevents.1", True),
    (["logs/"], "logs/a.txt", True),
    (["logs/"], "a/logs/b", True),
    (["logs/"], "logs", False),  # a file named logs: the pattern names directories only
    (["/eval"], "eval", True),
    (["/eval"], "x/eval", False),
    (["a/b"], "a/b/c", True),
    (["a/b"], "z/a/b", False),
    (["a/*/c"], "a/x/c", True),
    (["a/*/c"], "a/x/y/c", False),
    (["a/**/c"], "a/x/y/c", True),
    (["a/**/c"], "a/c", True),
    (["**/cache"], "q/r/cache/z", True),
    (["model.ckpt-?.index"], "model.ckpt-5.index", True),
    (["model.ckpt-?.index"], "model.ckpt-50.index", False),
    (["[!a]*"], "b", True),
    (["[!a]*"], "a", False),
    (["*.tmp", "!keep.tmp"], "keep.tmp", False),
    (["*.tmp", "!keep.tmp"], "other.tmp", True),
    (["logs/", "!logs/keep.txt"], "logs/keep.txt", False),
    (["!keep.tmp", "*.tmp"], "keep.tmp", True),  # the last match wins
    (["\\#notcomment"], "#notcomment", True),
    ([], "anything", False),
])
def test_patterns(patterns, path, excluded):
    assert Excluder(patterns).excluded(path) is excluded


def test_ignore_file_skips_comments_and_blank_lines():
    text = "# BERT scratch\n\n*.tmp\n  \nevents.out.*\n!keep.tmp\n"
    assert parse_ignore_file(text) == ["*.tmp", "events.out.*", "!keep.tmp"]


def test_blank_and_comment_rules_are_none():
    assert parse_rule("") is None and parse_rule("# c") is None and parse_rule("   ") is None


@pytest.mark.parametrize("bad", ["/", "!", "[z-a]"])
def test_bad_patterns_are_usage_errors(bad):
    with pytest.raises(UsageError, match="invalid exclude pattern"):
        Excluder([bad])
