"""Pack the running tpuctl into a wheel, so a host runs exactly the code that started the run.

The wheel is built from the files this process imports (works for editable checkouts and
installed copies alike, no build tools needed) and is named by its content, e.g.
``tpuctl-0.1.0+g1a2b3c4d-py3-none-any.whl``: a changed checkout never reuses a stale wheel.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import zipfile
from pathlib import Path

from ..basics import private
from ..basics.templates import templates_dir

PACKAGES = ("provision", "jobs")
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo")
# a fixed timestamp: the same files make the same wheel, byte for byte
_EPOCH = (2020, 1, 1, 0, 0, 0)


def _files() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for pkg in PACKAGES:
        mod = __import__(pkg)
        root = Path(mod.__file__).resolve().parent
        for path in sorted(root.rglob("*")):
            if path.is_file() and not SKIP_DIRS & set(path.parts) and not path.name.endswith(SKIP_SUFFIXES):
                out.append((f"{pkg}/{path.relative_to(root).as_posix()}", path))
    tdir = templates_dir()
    if tdir.is_dir() and tdir.parent.name != "provision":
        for path in sorted(tdir.rglob("*")):
            if path.is_file():
                out.append((f"provision/templates/{path.relative_to(tdir).as_posix()}", path))
    return out


def _metadata(version: str) -> str:
    from importlib import metadata

    try:
        text = metadata.distribution("tpuctl").read_text("METADATA") or ""
    except metadata.PackageNotFoundError:
        text = ""
    if not text:
        text = "Metadata-Version: 2.1\nName: tpuctl\nVersion: 0\n"
    return re.sub(r"(?m)^Version: .*$", f"Version: {version}", text, count=1)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(out_dir: Path) -> Path:
    import provision

    files = _files()
    h = hashlib.sha256()
    contents = []
    for name, path in files:
        data = path.read_bytes()
        contents.append((name, data))
        h.update(name.encode() + b"\0" + data + b"\0")
    version = f"{provision.__version__}+g{h.hexdigest()[:8]}"
    out_dir = private.make_dirs(out_dir)
    wheel = out_dir / f"tpuctl-{version}-py3-none-any.whl"
    if wheel.exists():
        return wheel
    info = f"tpuctl-{version}.dist-info"
    extra = [
        (f"{info}/METADATA", _metadata(version).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tpuctl\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{info}/entry_points.txt", b"[console_scripts]\ntpuctl = provision.cli:main\n"),
    ]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        record = []
        for name, data in contents + extra:
            zi = zipfile.ZipInfo(name, _EPOCH)
            zi.external_attr = (0o755 if name.endswith(".sh") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
            record.append(_record_line(name, data))
        record.append(f"{info}/RECORD,,")
        zi = zipfile.ZipInfo(f"{info}/RECORD", _EPOCH)
        zf.writestr(zi, "\n".join(record) + "\n")
    tmp = wheel.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb", opener=private.opener) as fh:
        fh.write(buf.getvalue())
    os.replace(tmp, wheel)
    return wheel
