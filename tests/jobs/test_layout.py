"""The job side's module graph: no import cycles (imports inside functions count) and no
``_private`` name imported from another module. The runner does not know the BERT jobs and the
jobs do not know the runner: :mod:`jobs.runner.registry`, above both, pairs them."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in JOBS.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The jobs modules ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif target in known:
                    found.add(target)
    found.discard(name)
    return found


def test_no_import_cycles_in_jobs():
    mods = modules()
    graph = {name: imports(name, path, set(mods)) for name, path in mods.items()}

    def related(a: str, b: str) -> bool:  # a package and its own submodules
        return a.startswith(b + ".") or b.startswith(a + ".")

    def reaches(start: str, goal: str) -> list[str] | None:
        stack, seen = [(start, [start])], {start}
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == goal:
                    return [*trail, nxt]
                if nxt not in seen and not related(node, nxt):
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
        return None

    cycles = []
    for importer, targets in graph.items():
        for imported in targets:
            if related(importer, imported):
                continue
            back = reaches(imported, importer)
            if back:
                cycles.append(" -> ".join([importer, *back]))
    assert cycles == []
    # The pairing lives above both sides: only the entry point imports it.
    assert {m for m, targets in graph.items() if "jobs.runner.registry" in targets} == {"jobs.__main__"}
    for job in ("jobs.bert.pretrain", "jobs.bert.classifier"):
        assert job not in graph["jobs.runner.runner"] and "jobs.runner.runner" not in graph[job]


def test_no_private_names_across_modules():
    hits = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                hits += [f"{name}: {a.name} from {'.' * node.level}{node.module or ''}"
                         for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert hits == []
