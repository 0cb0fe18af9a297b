"""Look-alikes a bucket writer plants: a same-size wheel, an archive with the same CRC32C.

Shared by tests/unit/test_staged_lookalikes.py and tests/e2e/test_planted_lookalikes.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

from provision.cloud.storage import crc


def forge_crc32c(prefix: bytes, target: int) -> bytes:
    """Four bytes that, appended to ``prefix``, give the CRC32C ``target``: a CRC is affine over
    GF(2) in its input, so 32 unknown bits are one linear system (solved by elimination)."""
    base = crc.value(prefix)
    zero = crc.extend(base, bytes(4))
    rows = [(crc.extend(base, (1 << i).to_bytes(4, "little")) ^ zero, 1 << i) for i in range(32)]
    basis: list[tuple[int, int]] = []
    for bit in range(31, -1, -1):
        pivot = next((r for r in rows if r[0] >> bit & 1), None)
        if pivot is None:
            continue
        rows.remove(pivot)
        rows = [(v ^ pivot[0], m ^ pivot[1]) if v >> bit & 1 else (v, m) for v, m in rows]
        basis = [(v ^ pivot[0], m ^ pivot[1]) if v >> bit & 1 else (v, m) for v, m in basis] + [pivot]
    want, mask = target ^ zero, 0
    for v, m in basis:                       # each has a leading bit no other one has
        if want >> (v.bit_length() - 1) & 1:
            want, mask = want ^ v, mask ^ m
    assert want == 0
    return mask.to_bytes(4, "little")


def look_alike(real: bytes) -> bytes:
    """Other bytes of the same size and the same CRC32C."""
    other = bytes(b ^ 0x5A for b in real[:-4])
    forged = other + forge_crc32c(other, crc.value(real))
    assert len(forged) == len(real) and crc.value(forged) == crc.value(real) and forged != real
    return forged


def tiny_wheel(directory: Path, value: str) -> Path:
    """The one-module package tinydep as a wheel, made by hand; a ``value`` of the same length gives
    a wheel of the same size (the files are stored, not compressed)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tinydep-1.0-py3-none-any.whl"
    files = {"tinydep/__init__.py": f"VALUE = {value!r}\n",
             "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
             "tinydep-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n"}
    files["tinydep-1.0.dist-info/RECORD"] = "".join(f"{n},,\n" for n in files) + "tinydep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


class CountingReads:
    """A bucket that counts the reads staging makes (what re-staging costs)."""

    def __init__(self, bucket):
        self._b, self.downloads = bucket, 0

    def __getattr__(self, name):
        return getattr(self._b, name)

    def download_file(self, *a, **kw):
        self.downloads += 1
        return self._b.download_file(*a, **kw)
