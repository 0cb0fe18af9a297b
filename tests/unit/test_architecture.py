"""The layout's rules (docs/architecture.md), checked on every test run: the import-linter
contracts in pyproject.toml, no import cycles between modules (imports inside functions count),
and no module reaching into another module's ``_private`` names."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("provision", "jobs")


def test_the_import_linter_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def test_no_import_cycles(graph):
    """A cycle means two modules own one responsibility; a function-level import does not hide it."""
    cycles = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.startswith(importer + ".") or importer.startswith(imported + "."):
                continue   # a package and its own submodules (the package re-exports them)
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                cycles.add(" -> ".join((importer, *back)))
    assert not cycles, "\n".join(sorted(cycles))


def _module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _private_reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {alias.name} from "
                                 f"{'.' * node.level}{node.module or ''}")
                if (node.level or (node.module or "").split(".")[0] in PACKAGES):
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f"{path.relative_to(REPO)}:{node.lineno} reads {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    found = [hit for pkg in PACKAGES for path in sorted((REPO / pkg).rglob("*.py")) for hit in _private_reaches(path)]
    assert not found, "\n".join(found)


def test_no_module_imports_a_private_module_of_another_package():
    """``commands/_common.py`` was imported by the reaper; shared code has a public home now."""
    private = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("_*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    assert not private, private
