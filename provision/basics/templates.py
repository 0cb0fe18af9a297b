"""Where the job specs and startup scripts are: one answer for an installed wheel and a checkout."""

from __future__ import annotations

from pathlib import Path


def templates_dir() -> Path:
    """Job specs and startup scripts: packaged inside provision when installed, at the repo root in a checkout."""
    import provision

    packaged = Path(provision.__file__).parent / "templates"
    if packaged.is_dir():
        return packaged
    return Path(provision.__file__).resolve().parent.parent / "templates"
