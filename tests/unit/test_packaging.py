"""pyproject.toml lists every package by hand (setuptools maps templates/ to provision.templates
only for listed packages), so a new package folder that is not listed would be left out of every
wheel and sdist: this check fails first, in make test, and names the line to add.
``make test-package`` builds and installs the real thing (tests/package)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _setuptools() -> dict:
    try:
        import tomllib
    except ImportError:                 # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed_in_pyproject():
    on_disk = {".".join(init.parent.relative_to(REPO).parts)
               for top in ("provision", "jobs") for init in (REPO / top).rglob("__init__.py")}
    listed = set(_setuptools()["packages"])
    missing = sorted(on_disk - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml, or the wheel lacks them"
    mapped = set(_setuptools().get("package-dir", {}))
    data_only = {p for p in _setuptools().get("package-data", {})
                 if (REPO / p.replace(".", "/")).is_dir() and not (REPO / p.replace(".", "/") / "__init__.py").exists()}
    stale = sorted(listed - on_disk - mapped - data_only)
    assert not stale, f"pyproject.toml lists packages that have no folder: {stale}"


def test_the_templates_folder_is_what_the_package_ships():
    """provision.templates is the repository's templates/ folder, the specs and scripts in it."""
    tools = _setuptools()
    assert tools["package-dir"]["provision.templates"] == "templates"
    patterns = tools["package-data"]["provision.templates"]
    shipped = {p.name for pattern in patterns for p in (REPO / "templates").glob(pattern)}
    assert shipped == {p.name for p in (REPO / "templates").iterdir() if p.is_file()}


def test_the_ui_static_folder_is_a_listed_data_package():
    """A build prints nothing a user must read past: provision/ui/static (the page's script and
    style) was package data of provision.ui without being listed, and every build printed
    setuptools' 40-line warning that it is "absent from the `packages` configuration". Listed,
    with its files as its data, the wheel carries it and the build is quiet (tests/package builds
    the real wheel)."""
    tools = _setuptools()
    assert "provision.ui.static" in tools["packages"]
    patterns = tools["package-data"]["provision.ui.static"]
    static = REPO / "provision" / "ui" / "static"
    shipped = {p.name for pattern in patterns for p in static.glob(pattern)}
    assert shipped == {p.name for p in static.iterdir() if p.is_file()}
    assert not any(p.startswith("static") for v in tools["package-data"].values() for p in v)
