"""Where the job specs and startup scripts are: one answer for an installed wheel and a checkout.

The repository keeps them in ``templates/`` at its root, where a reader of the docs sees them;
pyproject.toml maps that folder to the package ``provision.templates``, so a wheel or an sdist
carries them inside ``provision/``. The docs' examples name ``templates/bert-finetune.yaml``: in
a clone that is a file; for a tpuctl installed with pip it is the copy inside the package.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

SPEC_SUFFIXES = (".yaml", ".yml")


def templates_dir() -> Path:
    """Job specs and startup scripts: packaged inside provision when installed, at the repo root in a checkout."""
    from importlib import resources

    packaged = Path(str(resources.files("provision") / "templates"))
    if packaged.is_dir():
        return packaged
    return Path(str(resources.files("provision"))).resolve().parent / "templates"


def spec_path(path: str) -> str:
    """The job or sweep spec file the user named: that file if it exists, else the spec tpuctl
    ships under that name (``templates/NAME.yaml`` or ``NAME.yaml``), else ``path`` unchanged
    so the caller's "not found" error names what was typed."""
    if os.path.isfile(path):
        return path
    parts = PurePath(path).parts
    if len(parts) == 1 or (len(parts) == 2 and parts[0] == "templates"):
        shipped = templates_dir() / parts[-1]
        if shipped.suffix in SPEC_SUFFIXES and shipped.is_file():
            return str(shipped)
    return path
