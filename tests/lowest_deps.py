"""The lowest versions pyproject.toml allows for tpuctl's direct dependencies, as pip constraints.

pip has no "lowest" resolution, so ``make test-lowest`` pins every direct dependency to its
floor with a constraints file made from ``[project].dependencies`` (``pkg>=X`` becomes
``pkg==X``, environment markers kept) and lets pip resolve everything else. A direct dependency
without a ``>=`` floor is an error: a floor nobody tests is a guess.

    python tests/lowest_deps.py              # the constraints, on stdout
    python tests/lowest_deps.py --check      # this interpreter has exactly those versions installed

No third-party imports: it runs with any Python 3.10+ before a virtual environment exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
FLOOR = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*"
                   r"(?:;\s*(?P<marker>.+?))?\s*$")


def _load() -> dict:
    try:
        import tomllib
    except ImportError:                 # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(PYPROJECT.read_text())


def floors(dependencies: list[str]) -> list[tuple[str, str, str | None]]:
    """(name, lowest version, marker) for each requirement; ValueError if one has no floor."""
    out = []
    for req in dependencies:
        m = FLOOR.match(req)
        if not m:
            raise ValueError(f"cannot read the requirement {req!r}")
        lows = [c.strip()[2:].strip() for c in m["spec"].split(",") if c.strip().startswith(">=")]
        if len(lows) != 1 or not re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", lows[0]):
            raise ValueError(f"{req!r} has no single >= floor; give every direct dependency one")
        out.append((m["name"], lows[0], m["marker"]))
    return out


def constraints(dependencies: list[str]) -> str:
    return "".join(f"{name}=={low}" + (f"; {marker}" if marker else "") + "\n"
                   for name, low, marker in floors(dependencies))


def _marker_applies(marker: str | None) -> bool:
    if not marker:
        return True
    m = re.fullmatch(r"python_version\s*(<|<=|>|>=|==|!=)\s*['\"]([0-9.]+)['\"]", marker.strip())
    if not m:
        return True
    here = sys.version_info[:2]
    want = tuple(int(p) for p in m[2].split("."))
    return {"<": here < want, "<=": here <= want, ">": here > want, ">=": here >= want,
            "==": here == want, "!=": here != want}[m[1]]


def check(dependencies: list[str]) -> list[str]:
    """Mismatches between the floors and what this interpreter has installed."""
    from importlib import metadata

    bad = []
    for name, low, marker in floors(dependencies):
        if not _marker_applies(marker):
            continue
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            bad.append(f"{name}: not installed (floor {low})")
            continue
        if have != low:
            bad.append(f"{name}: {have} installed, floor {low}")
    return bad


def main(argv: list[str]) -> int:
    deps = _load()["project"]["dependencies"]
    try:
        if argv[1:] == ["--check"]:
            bad = check(deps)
            for line in bad:
                print(f"lowest_deps: {line}", file=sys.stderr)
            if not bad:
                here = [f"{n}=={v}" for n, v, m in floors(deps) if _marker_applies(m)]
                print(f"lowest_deps: {len(here)} direct dependencies at their floors: {' '.join(here)}")
            return 1 if bad else 0
        if argv[1:]:
            print(__doc__, file=sys.stderr)
            return 2
        sys.stdout.write(constraints(deps))
    except ValueError as exc:
        print(f"lowest_deps: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
