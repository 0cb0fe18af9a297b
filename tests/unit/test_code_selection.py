"""provision/staging/selection.py ignored_by: git's precedence and matching, without a filesystem."""

from __future__ import annotations

import pytest

from provision.staging.ignore import parse_rule
from provision.staging.selection import Level, ignored_by


def level(base: str, source: str, *patterns: str) -> Level:
    return Level(base, tuple((parse_rule(p), source) for p in patterns))


ROOT = level("", ".gitignore", "*.log", "!keep.log", "/top.txt", "docs/*.md", "cache/", "**/gen/*.py", "out/**")


@pytest.mark.parametrize("path, is_dir, expected", [
    ("a.log", False, ".gitignore"),
    ("deep/er/a.log", False, ".gitignore"),            # no slash: any depth
    ("keep.log", False, None),                           # re-included by a later line
    ("top.txt", False, ".gitignore"),
    ("sub/top.txt", False, None),                        # a leading slash anchors at the file's directory
    ("docs/a.md", False, ".gitignore"),
    ("docs/sub/a.md", False, None),                      # * stays within one segment
    ("cache", True, ".gitignore"),
    ("cache", False, None),                              # a trailing slash: directories only
    ("x/gen/a.py", False, ".gitignore"),
    ("gen/a.py", False, ".gitignore"),                   # **/ also matches no directory
    ("out/a/b", False, ".gitignore"),
    ("out", True, None),                                 # out/** is what is inside, not out itself
])
def test_patterns_of_one_file(path, is_dir, expected):
    assert ignored_by([ROOT], path, is_dir) == expected


def test_a_deeper_file_overrides_a_shallower_one_and_applies_only_below_it():
    levels = [ROOT, level("pkg", "pkg/.gitignore", "!*.log", "/local.py")]
    assert ignored_by(levels, "pkg/a.log", False) is None
    assert ignored_by(levels, "pkg/local.py", False) == "pkg/.gitignore"
    assert ignored_by(levels[:1], "local.py", False) is None


def test_tpuctlignore_after_gitignore_has_the_last_word():
    levels = [Level("", ROOT.rules + level("", ".tpuctlignore", "!a.log", "*.csv").rules)]
    assert ignored_by(levels, "a.log", False) is None
    assert ignored_by(levels, "b.csv", False) == ".tpuctlignore"


SECRETS = ["credentials.json", "application_default_credentials.json", "client_secret_123.apps.json",
           "my-service-account.json", "id_rsa", "keys/id_ed25519", "server.PEM", "tls/site.key", "bundle.p12",
           "infra/terraform.tfstate", "infra/terraform.tfstate.backup", "kubeconfig", "npmrc"]


def test_files_named_like_credentials_stay_out_unless_the_tpuctlignore_names_them(tmp_path):
    """A key or a state file in a code directory is a mistake far more often than code: it stays out
    of the bucket with what it is and how to ship it; a literal ``!NAME`` in ``.tpuctlignore`` ships
    that file, a wildcard does not."""
    from provision.staging.selection import select

    for rel in [*SECRETS, "main.py", "ca.pem", "deploy/client.key", "id_rsa.pub", "config.json", "keys.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x\n")
    (tmp_path / ".tpuctlignore").write_text("!ca.pem\n!deploy/client.key\n!*.json\n")
    sel = select(tmp_path)
    assert sel.files == ("ca.pem", "config.json", "deploy/client.key", "id_rsa.pub", "keys.py", "main.py")
    left = {s.path: s.why for s in sel.skipped}
    assert sorted(p for p in left if not p.startswith(".")) == sorted(SECRETS)
    assert left["id_rsa"] == "an SSH private key: a line !id_rsa in .tpuctlignore ships it"
    assert left["infra/terraform.tfstate"].startswith("Terraform state")
