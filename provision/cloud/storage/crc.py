"""CRC32C: the checksum Cloud Storage stores for every object, computed here in bounded memory.

Objects carry their CRC32C as base64 of the big-endian 32-bit value; tpuctl works with ints and
converts at the edge. :func:`combine` joins the CRCs of consecutive byte ranges without reading
the bytes again, so a file sent or received in parallel parts is verified as a whole.
"""

from __future__ import annotations

import base64
import os
import struct

import google_crc32c

BLOCK = 1 << 20  # bytes read at a time: memory stays bounded whatever the file size
_POLY = 0x82F63B78  # Castagnoli polynomial, bit-reversed


def value(data: bytes) -> int:
    return google_crc32c.value(bytes(data))


def extend(crc: int, data: bytes) -> int:
    return google_crc32c.extend(crc, bytes(data))


def to_b64(crc: int) -> str:
    return base64.b64encode(struct.pack(">I", crc & 0xFFFFFFFF)).decode("ascii")


def from_b64(text: str | None) -> int | None:
    if not text:
        return None
    raw = base64.b64decode(text)
    if len(raw) != 4:
        raise ValueError(f"not a base64 CRC32C: {text!r}")
    return struct.unpack(">I", raw)[0]


def of_file(path: str | os.PathLike, offset: int = 0, length: int | None = None, progress=None) -> int:
    """CRC32C of ``length`` bytes of a file from ``offset`` (to the end if None), read in blocks."""
    crc = 0
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        pos, end = offset, None if length is None else offset + length
        while end is None or pos < end:
            want = BLOCK if end is None else min(BLOCK, end - pos)
            block = os.pread(fd, want, pos)
            if not block:
                if end is not None:
                    raise OSError(f"{os.fspath(path)} is shorter than expected (changed while being read?)")
                break
            crc = google_crc32c.extend(crc, block)
            pos += len(block)
            if progress is not None:
                progress(len(block))
    return crc


# combine(): appending len2 zero bytes to a message is a linear map on the CRC register over
# GF(2); precompute that map for 2**k bytes once and apply the ones set in len2.

def _apply(matrix: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= matrix[i]
        vec >>= 1
        i += 1
    return out


def _square(matrix: list[int]) -> list[int]:
    return [_apply(matrix, matrix[n]) for n in range(32)]


_ZERO_BYTE_POWERS: list[list[int]] = []


def _zeros_operator(k: int) -> list[int]:
    """Operator that appends 2**k zero bytes to the CRC register."""
    if not _ZERO_BYTE_POWERS:
        one_bit = [_POLY] + [1 << n for n in range(31)]
        op = one_bit
        for _ in range(3):  # 1 bit -> 2 -> 4 -> 8 bits = one byte
            op = _square(op)
        _ZERO_BYTE_POWERS.append(op)
    while len(_ZERO_BYTE_POWERS) <= k:
        _ZERO_BYTE_POWERS.append(_square(_ZERO_BYTE_POWERS[-1]))
    return _ZERO_BYTE_POWERS[k]


def combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of ``A + B`` from ``crc(A)``, ``crc(B)`` and ``len(B)``."""
    if len2 <= 0:
        return crc1
    k = 0
    while len2:
        if len2 & 1:
            crc1 = _apply(_zeros_operator(k), crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2


def combine_all(parts: list[tuple[int, int]]) -> int:
    """CRC32C of consecutive ranges given as ``(crc, length)`` pairs in order."""
    total = 0
    for crc, length in parts:
        total = combine(total, crc, length)
    return total
