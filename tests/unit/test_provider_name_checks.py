"""What differs between clouds belongs in the provider protocol (docs/architecture.md), so every
test of a provider's *name* outside ``provision/cloud/`` (``provider == "local"``,
``target.provider != "gcp"``, ``prov.name == "local"``) is listed here by module with its count:
a new one fails this test until it is added knowingly, and one removed fails it until the count
(and the doc's total) is lowered, so docs/architecture.md's number stays the code's."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROVIDER_NAMES = frozenset({"local", "gcp"})
_LITERAL = re.compile(r"""["'](?:local|gcp)["']""")
# module -> comparisons of a provider's name with "local" or "gcp"; most decide what the local
# provider stands in for (a bucket that is a directory, a host that is this machine, free ports)
ALLOWED = {
    "provision/basics/config.py": 4,          # the defaults each provider needs (zone, project)
    "provision/billing/costs.py": 2,
    "provision/billing/reaper.py": 1,
    "provision/cluster/least_privilege.py": 2,
    "provision/cluster/resources.py": 1,
    "provision/commands/data_on_host.py": 4,
    "provision/commands/logs.py": 1,
    "provision/commands/status.py": 1,
    "provision/commands/sweep.py": 5,
    "provision/commands/train.py": 3,
    "provision/commands/up.py": 4,
    "provision/host/agent.py": 2,
    "provision/host/autodown.py": 1,
    "provision/notify/runtime.py": 1,
    "provision/runs/launch.py": 4,
    "provision/runs/pinning.py": 1,
    "provision/runs/requirements.py": 3,
    "provision/runs/store.py": 1,
    "provision/runs/training.py": 10,
    "provision/runs/wheelhouse.py": 1,
    "provision/sweeps/controller.py": 1,
    "provision/ui/records.py": 2,
}


def _names_a_provider(node: ast.expr) -> bool:
    """A provider's name as a literal: "local", or a tuple/list/set of such names."""
    if isinstance(node, ast.Constant):
        return node.value in PROVIDER_NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and bool(node.elts) and all(
        isinstance(e, ast.Constant) and e.value in PROVIDER_NAMES for e in node.elts)


def provider_name_checks(root: Path = REPO) -> dict[str, list[str]]:
    """Every ``==``/``!=``/``in`` comparison of a provider's name outside provision/cloud/: the
    other side is an expression that names the provider (``provider``, ``target.provider``,
    ``prov.name``, ``entry.get("provider")``), the literal side a provider's name."""
    found: dict[str, list[str]] = {}
    for path in sorted((root / "provision").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("provision/cloud/"):
            continue
        source = path.read_text(encoding="utf-8")
        if not _LITERAL.search(source):       # parsed only where a provider's name is written
            continue
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Compare) and len(node.ops) == 1
                    and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn))):
                continue
            left, right = node.left, node.comparators[0]
            other = right if _names_a_provider(left) else left if _names_a_provider(right) else None
            if other is not None and re.search(r"prov", ast.get_source_segment(source, other) or ""):
                found.setdefault(rel, []).append(f"{rel}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_each_provider_name_check_outside_the_cloud_package_is_counted():
    found = provider_name_checks()
    counts = Counter({rel: len(lines) for rel, lines in found.items()})
    more = {rel: found[rel] for rel in counts if counts[rel] > ALLOWED.get(rel, 0)}
    fewer = {rel: (n, counts.get(rel, 0)) for rel, n in ALLOWED.items() if counts.get(rel, 0) < n}
    assert not more, ("new tests of a provider's name outside provision/cloud/ (put the difference in the "
                      "provider protocol, provision/cloud/base.py, or raise ALLOWED here and the total in "
                      "docs/architecture.md):\n" + "\n".join(line for lines in more.values() for line in lines))
    assert not fewer, ("fewer tests of a provider's name than ALLOWED says (allowed, found): lower ALLOWED here "
                       f"and the total in docs/architecture.md: {fewer}")


def test_docs_architecture_states_the_count():
    text = " ".join((REPO / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    total, modules = sum(ALLOWED.values()), len(ALLOWED)
    assert f"{total} comparisons in {modules} modules outside `provision/cloud/`" in text, (
        f"docs/architecture.md must say {total} comparisons in {modules} modules outside `provision/cloud/`")


def test_the_forms_the_code_writes_are_counted(tmp_path):
    module = tmp_path / "provision" / "commands" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text('if provider == "local": pass\nif target.provider != "gcp": pass\n'
                      'if prov.name == "local": pass\nif entry.get("provider") in ("local", "gcp"): pass\n'
                      'if runner != "local": pass\nif kind == "local": pass\n')
    (tmp_path / "provision" / "cloud").mkdir()
    (tmp_path / "provision" / "cloud" / "local.py").write_text('if provider == "local": pass\n')
    assert [line.split(": ", 1)[0] for line in provider_name_checks(tmp_path)["provision/commands/x.py"]] == [
        f"provision/commands/x.py:{n}" for n in (1, 2, 3, 4)]
    assert "provision/cloud/local.py" not in provider_name_checks(tmp_path)
