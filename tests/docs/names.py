"""What the docs name, found and resolved: paths, modules, make targets, tpuctl commands and
options, job spec keys and TPUCTL_* variables. Pure reading of the tree (nothing is imported but
click's command tree and the spec dataclasses, neither of which loads TensorFlow)."""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.docs import REPO, Block, blocks, doc_files

TOP = ("provision", "jobs", "templates", "tests", "docs", "examples")
# folders inside provision/ and jobs/ that the docs name relative to their package (`runs/policy.py`)
INNER_FOLDERS = frozenset(p.name for top in ("provision", "jobs") for p in (REPO / top).iterdir() if p.is_dir())
_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_MODULE = re.compile(r"\b((?:provision|jobs)(?:\.[A-Za-z_]\w*)+)")
_MAKE = re.compile(r"\bmake ([a-z][\w-]*)")
_ENV = re.compile(r"\bTPUCTL_[A-Z0-9_]*[A-Z0-9]\b")
# a file name tpuctl's docs cite from other projects (google-research/bert, skypilot, gcloud)
EXTERNAL_FILES = frozenset({
    "run_squad.py", "run_classifier.py", "run_pretraining.py", "create_pretraining_data.py",
    "optimization.py", "modeling.py", "tokenization.py", "extract_features.py", "fetch_gcp.py",
    "evaluate-v1.1.py", "evaluate-v2.0.py", "vms.csv", "bert_config.json", "vocab.txt",
    "progress.json", "manifest.json", "predictions.json", "eval_results.json", "sweep.json",
    "spec.yaml", "job.yaml", "controller.json", "config.toml", "test_results.tsv",
    "predictions.jsonl", "train.tsv", "dev.tsv", "corpus.txt", "train-v1.1.json", "dev-v1.1.json",
})


@dataclass(frozen=True)
class Mention:
    """A name as the docs write it, and where."""

    where: str
    kind: str
    name: str


def _lines(path: Path) -> Iterator[tuple[int, str, Block | None]]:
    """Each line of a doc with its number and the fenced block it is in, if any."""
    text = path.read_text(encoding="utf-8").splitlines()
    inside: dict[int, Block] = {}
    for b in blocks(path):
        for n in range(b.line, b.line + b.text.count("\n") + 2):
            inside[n] = b
    for n, line in enumerate(text, 1):
        yield n, line, inside.get(n)


def mentions(paths: list[Path] | None = None) -> list[Mention]:
    out: list[Mention] = []
    for path in paths or doc_files():
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        for n, line, block in _lines(path):
            where = f"{rel}:{n}"
            spans = [line] if block is not None else _CODE_SPAN.findall(line)
            out += [Mention(where, "env", v) for v in _ENV.findall(line)]
            if block is None or block.is_shell:
                out += [Mention(where, "make", t) for span in spans for t in _MAKE.findall(span)]
            for span in spans:
                out += [Mention(where, "module", m.rstrip(".")) for m in _MODULE.findall(span)]
                if block is None:
                    out += [Mention(where, "path", span.strip())] if _looks_like_path(span.strip()) else []
                command = _tpuctl_command(span)
                if command and block is not None and block.lang == "console" and _shows_error(block, command):
                    command = None
                if command:
                    out.append(Mention(where, "command", command))
            if block is None:
                out += [Mention(where, "link", (path.parent / target).as_posix()) for target in _LINK.findall(line)
                        if not re.match(r"^[a-z]+:", target) and not target.startswith("#")]
            row = re.match(r"^\| `([a-z_][a-z0-9_]*)` \| (string|integer|number|boolean|list) \|", line)
            if row and path.name == "jobs.md":  # the spec key tables
                out.append(Mention(where, "spec-key", row.group(1)))
            if block is not None and block.lang == "yaml" and path.name == "jobs.md":
                m = re.match(r"^([a-z_][a-z0-9_]*):", line)
                if m:
                    out.append(Mention(where, "spec-key", m.group(1)))
    return out


def _shows_error(block: Block, command: str) -> bool:
    """A console transcript that shows a mistyped command on purpose (its output is the error)."""
    from tests.docs import transcript

    return any(c == command and "error:" in out for c, out in transcript(block.text))


def _looks_like_path(span: str) -> bool:
    if " " in span or "://" in span or span.startswith(("$", "<", "~", "-", "/")):
        return False
    first = span.split("/")[0]
    return (first in TOP and "/" in span) or span in ("Makefile", "pyproject.toml") or bool(
        re.fullmatch(r"[\w./-]+\.(py|sh|yaml|md)", span))


def _tpuctl_command(span: str) -> str | None:
    text = span.strip()
    text = text.removeprefix("$ ")
    text = text.split(" # ")[0].split("  #")[0]
    if not re.match(r"^tpuctl [a-z][\w-]*(\s|$)", text):
        return None
    return text


# --- resolution -------------------------------------------------------------------------------

def repo_files() -> list[str]:
    out = []
    for p in REPO.rglob("*"):
        parts = p.relative_to(REPO).parts
        if not {".git", ".venv", "__pycache__", ".demo"} & set(parts):
            out.append("/".join(parts))
    return out


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (lower case, punctuation dropped, spaces to -)."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def link_exists(target: str) -> bool:
    """A relative link of a doc (already joined to its folder): the file, and its #anchor if any."""
    name, _, anchor = target.partition("#")
    path = Path(name)
    if not path.exists():
        return False
    return not anchor or path.suffix != ".md" or anchor in anchors(path)


def path_exists(name: str, files: list[str]) -> bool:
    name, _, test = name.partition("::")        # tests/x.py::test_name: the file, and that test in it
    if test:
        path = REPO / name
        return path.is_file() and re.search(rf"^\s*(?:async )?def {re.escape(test)}\(", path.read_text(encoding="utf-8"),
                                            re.MULTILINE) is not None
    name = name.split("#")[0].rstrip("/")
    name = re.sub(r":\d+$", "", name)
    if "*" in name:
        return bool(list(REPO.glob(name)))
    if (REPO / name).exists():
        return True
    if name.split("/")[0] in TOP or name in ("Makefile", "pyproject.toml"):
        return False
    base = name.split("/")[-1]
    if base in EXTERNAL_FILES:
        return True
    if "/" in name and name.split("/")[0] not in INNER_FOLDERS:
        return True  # another project's path, cited (tensorflow/..., src/xpk/...)
    return any(f == name or f.endswith("/" + name) for f in files)


def module_exists(name: str) -> bool:
    """``provision.x.y`` / ``jobs.x.y``: a module or package, or a name defined in one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if not source.exists():
            continue
        rest = parts[cut:]
        if not rest:
            return True
        text = source.read_text(encoding="utf-8")
        return len(rest) == 1 and bool(re.search(rf"^(?:def |class |)\s*{re.escape(rest[0])}\b", text, re.MULTILINE))
    return False


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:", (REPO / "Makefile").read_text(), re.MULTILINE))


def env_vars_in_code() -> set[str]:
    found: set[str] = set()
    for folder in ("provision", "jobs", "templates", "tests"):
        for p in (REPO / folder).rglob("*"):
            if p.suffix in (".py", ".sh") and p.relative_to(REPO).parts[:2] != ("tests", "docs"):
                found.update(_ENV.findall(p.read_text(encoding="utf-8", errors="replace")))
    return found


def check_command(text: str) -> str | None:
    """Why ``tpuctl ...`` as the docs write it does not exist (a command or an option), or None."""
    import click

    from provision.cli import cli

    try:
        words = shlex.split(text.replace("\\", " "))
    except ValueError:
        words = text.split()
    for i, word in enumerate(words):  # the command ends at a pipe (not a synopsis' `--a | --b`) or a list
        after = words[i + 1] if i + 1 < len(words) else ""
        if word in ("&&", "||", ";", ">", ">>") or (word == "|" and not after.startswith(("-", "["))):
            words = words[:i]
            break
    words = [w.strip("[]|(),") for w in words[1:]]
    cmd: click.Command = cli
    path = ["tpuctl"]
    i = 0
    while isinstance(cmd, click.Group) and i < len(words):
        word = words[i]
        if word.startswith("-") or not word:
            break
        sub = cmd.commands.get(word)
        if sub is None:
            default = getattr(cmd, "default_command", None) or ("start" if "start" in cmd.commands else None)
            if default and not word.isupper() and word not in ("COMMAND", "...") and cmd is not cli:
                sub = cmd.commands[default]
            elif word.isupper() or word in ("...",):
                return None
            else:
                return f"{' '.join(path)} has no command {word!r}"
            i -= 1
        cmd = sub
        path.append(sub.name)
        i += 1
    if isinstance(cmd, click.Group) and "start" in cmd.commands and cmd is not cli:
        cmd, path = cmd.commands["start"], [*path, "start"]
    known = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    for word in words[i:]:
        for option in re.findall(r"^(--?[a-z][\w-]*)", word):
            if option not in known and option.split("=")[0] not in known:
                return f"{' '.join(path)} has no option {option}"
    return None


def spec_keys() -> set[str]:
    from jobs import spec

    keys: set[str] = {"job"}
    for cls in (spec.RunSpec, spec.BertSpec, spec.PretrainSpec, spec.TaskSpec, spec.FinetuneSpec,
                spec.SquadSpec, spec.KerasSpec):
        keys.update(f.name for f in dataclasses.fields(cls))
    return keys


def set_keys(command: str) -> list[str]:
    """The keys of ``--set key=value`` in a command line."""
    return re.findall(r"--set[ =]'?([a-z_]\w*)=", command)
