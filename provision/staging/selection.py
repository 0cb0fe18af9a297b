"""Which files of a workdir go to the bucket (``tpuctl train --workdir DIR``).

A code directory is usually a git checkout: ``.git/config`` may hold an access token, ``.env``
files hold secrets, and a symlink may point anywhere on the machine (``~/.ssh``). Whatever is
staged is readable by everyone who can read the bucket, so the selection takes only what the
user meant to ship:

- no path with a segment that starts with ``.`` (``.git/``, ``.env``, ``.venv/``, ``.ssh``);
- no symlink, to a file or a directory, wherever it points (it is never followed);
- no file whose name says it holds a credential (:data:`SECRET_NAMES`: ``credentials.json``,
  ``id_rsa``, ``*.pem``, ``terraform.tfstate``, ...), unless the workdir's ``.tpuctlignore`` names
  that file itself (a line ``!PATH`` or ``!NAME`` without wildcards): a secret ships only when the
  user said so, by name, as ``!data/`` brings back what ``.gitignore`` leaves out;
- likewise no JSON file that holds a Google credential whatever its name (:func:`secret_content`:
  a service-account key saved under the name the console gives it, ``PROJECT-1a2b3c4d5e6f.json``);
- nothing a ``.gitignore`` or ``.tpuctlignore`` excludes, with git's semantics: each such file
  applies to its own directory and below, patterns with a ``/`` are anchored there, a deeper
  file's patterns and a later line win, ``!`` re-includes, and nothing under an excluded
  directory comes back (git does not descend into it either); ``.tpuctlignore`` is read after
  ``.gitignore`` in the same directory, so it has the last word (patterns as ``tpuctl stage
  --exclude`` reads them: :mod:`provision.staging.ignore`);
- no ``__pycache__`` (bytecode of another interpreter) and nothing but regular files.

:func:`select` walks the directory (``tpuctl train --dry-run`` lists its result, staging packs
exactly that: :mod:`provision.staging.workdir`); :func:`ignored_by` is the pure decision for one path.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..basics.errors import UsageError
from .ignore import Rule, parse_rule

IGNORE_FILES = (".gitignore", ".tpuctlignore")     # in this order: the later file's rules win
MAX_IGNORE_BYTES = 1 << 20

# Names of files that hold credentials far more often than code (matched case-insensitively), and
# what each is. A workdir is readable by everyone who reads the bucket, and a host's jobs and their
# dependencies; a stray key there outlives the run. (Dot paths never go at all: ``.env``,
# ``.netrc``, ``.npmrc``, ``.pypirc``, ``.git/``, ``.ssh/``, ``.aws/``, ``.kube/``, ``.docker/``.)
SECRET_NAMES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("credentials.json", "*credentials*.json", "client_secret*.json", "*service?account*.json"),
     "a credentials file (a service-account key, an OAuth client secret)"),
    (("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk", "*.ppk"), "an SSH private key"),
    (("*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore"), "a private key or a certificate bundle"),
    (("*.tfstate", "*.tfstate.backup"), "Terraform state (it holds resources' secrets in plain text)"),
    (("kubeconfig", "*.kubeconfig"), "a kubeconfig (a cluster's credentials)"),
    (("_netrc", "netrc", "npmrc", "pypirc", "htpasswd"), "a password or registry-token file"),
)
_WILDCARDS = frozenset("*?[\\")

# What a Google credential file holds, whatever it is called: a key's "type" (a service-account
# key, gcloud's user credentials, workload identity federation's configuration) or a private key.
# Looked for in the first CREDENTIAL_SCAN bytes of each ``*.json`` (a key file is ~2.3 KB, its
# "type" first).
_CREDENTIAL_JSON = re.compile(rb'"type"\s*:\s*"(?:service_account|authorized_user|external_account|'
                              rb'impersonated_service_account)"|"private_key"\s*:')
CREDENTIAL_SCAN = 1 << 20


@dataclass(frozen=True)
class Level:
    """The rules of the ignore files of one directory (``base``: relative to the code directory)."""

    base: str
    rules: tuple[tuple[Rule, str], ...]            # (rule, the file it came from)


@dataclass(frozen=True)
class Skipped:
    path: str        # relative, ``/``-separated; a directory ends with ``/``
    why: str


@dataclass(frozen=True)
class Selection:
    root: Path
    files: tuple[str, ...]                          # relative, ``/``-separated, sorted
    skipped: tuple[Skipped, ...]


def ignored_by(levels: Sequence[Level], path: str, is_dir: bool) -> str | None:
    """The ignore file whose pattern excludes ``path`` (relative to the code directory, in the
    directory of the last level), or None when it is included. ``levels`` run from the code
    directory down to the path's own; the last matching pattern wins, deeper files after
    shallower ones. Pure."""
    verdict = None
    for level in levels:
        rel = path[len(level.base) + 1:] if level.base else path
        segments = rel.split("/")
        for rule, source in level.rules:
            if _hits(rule, segments, is_dir):
                verdict = None if rule.negate else source
    return verdict


def _hits(rule: Rule, segments: list[str], is_dir: bool) -> bool:
    """Whether ``rule`` matches this path itself (its parents were decided on the way down)."""
    if rule.dir_only and not is_dir:
        return False
    if rule.anchored:
        return rule.regex.fullmatch("/".join(segments)) is not None
    return rule.regex.fullmatch(segments[-1]) is not None


def select(root: str | Path, flag: str = "--workdir") -> Selection:
    """The files of the code directory ``root`` to stage, and what was left out and why; ``flag``
    names where ``root`` came from in the error when it is not a directory."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{flag} {root} is not a directory", hint="pass the directory of your code (--workdir DIR)")
    files: list[str] = []
    skipped: list[Skipped] = []
    _walk(root, "", [], files, skipped)
    return Selection(root, tuple(files), tuple(skipped))


def _walk(directory: Path, base: str, levels: list[Level], files: list[str], skipped: list[Skipped]) -> None:
    levels = levels + [_level(directory, base)]
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = f"{base}/{entry.name}" if base else entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        shown = rel + "/" if is_dir else rel
        if entry.name.startswith("."):
            skipped.append(Skipped(shown, "a dot path"))
        elif entry.is_symlink():
            skipped.append(Skipped(rel, "a symlink"))
        elif is_dir and entry.name == "__pycache__":
            skipped.append(Skipped(shown, "Python bytecode"))
        elif not is_dir and not entry.is_file(follow_symlinks=False):
            skipped.append(Skipped(rel, "not a regular file"))
        elif not is_dir and (what := secret_kind(entry.name) or secret_content(entry.path)) and not named_by(levels, rel):
            skipped.append(Skipped(rel, f"{what}: a line !{rel} in .tpuctlignore ships it"))
        elif (source := ignored_by(levels, rel, is_dir)) is not None:
            skipped.append(Skipped(shown, f"ignored by {source}"))
        elif is_dir:
            _walk(Path(entry.path), rel, levels, files, skipped)
        else:
            files.append(rel)


def secret_kind(name: str) -> str | None:
    """What a file of this name usually is, when that is a credential (:data:`SECRET_NAMES`). Pure."""
    low = name.lower()
    for patterns, what in SECRET_NAMES:
        if any(fnmatch.fnmatchcase(low, p) for p in patterns):
            return what
    return None


def secret_content(path: str) -> str | None:
    """What the file at ``path`` is when it is a JSON file that holds a Google credential (a
    service-account key under any name), else None; a file that cannot be read is none."""
    if not path.lower().endswith(".json"):
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(CREDENTIAL_SCAN)
    except OSError:
        return None
    if _CREDENTIAL_JSON.search(head):
        return "a credentials file by its content (a service-account key, a user's credentials)"
    return None


def named_by(levels: Sequence[Level], path: str) -> bool:
    """Whether a ``.tpuctlignore`` names the file ``path`` itself: a ``!`` line without wildcards
    that matches it (``!id_rsa``, ``!deploy/ca.pem``). A pattern that only happens to match
    (``!*``) is no choice to ship a secret. Pure."""
    for level in levels:
        rel = path[len(level.base) + 1:] if level.base else path
        for rule, source in level.rules:
            if (rule.negate and os.path.basename(source) == ".tpuctlignore"
                    and not _WILDCARDS & set(rule.pattern.lstrip("!"))
                    and _hits(rule, rel.split("/"), False)):
                return True
    return False


def _level(directory: Path, base: str) -> Level:
    rules: list[tuple[Rule, str]] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_symlink() or not path.is_file():
            continue
        source = f"{base}/{name}" if base else name
        with open(path, "rb") as fh:
            text = fh.read(MAX_IGNORE_BYTES).decode("utf-8", "replace")
        for line in text.splitlines():
            try:
                rule = parse_rule(line)
            except UsageError:
                continue          # "/" or "!" alone: a pattern that matches nothing, as in git
            if rule is not None:
                rules.append((rule, source))
    return Level(base, tuple(rules))
