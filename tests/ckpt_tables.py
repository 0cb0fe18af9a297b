"""Checkpoint index tables built byte by byte, for tests of jobs/bert/ckpt_index.py that feed it
files TensorFlow would never write.

The format is LevelDB's table, which TensorFlow's tensor_bundle writes: data blocks of
prefix-compressed ``(shared, unshared, value length, key bytes, value)`` entries ending in a restart
array, each block followed by a 5-byte trailer (compression type, CRC), an index block whose
values are ``(offset, size)`` handles of the data blocks, and a 48-byte footer ending in the magic
number. Nothing here checks what it is given: crafted files are the point."""

from __future__ import annotations

import struct
from collections.abc import Sequence

MAGIC = 0xDB4775248B80FB57
TRAILER = b"\0" * 5          # no compression; the CRC, which the reader does not check
ALL = -1                     # an entry's ``shared``: all of the previous key


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def block(entries: Sequence[tuple[int, bytes, bytes]], restarts: int = 1) -> bytes:
    """(bytes shared with the previous key or :data:`ALL`, the key's other bytes, value) entries,
    and a restart array of ``restarts`` offsets (zeros: the reader only skips it)."""
    body, last = bytearray(), 0
    for shared, rest, value in entries:
        shared = last if shared == ALL else shared
        body += varint(shared) + varint(len(rest)) + varint(len(value)) + rest + value
        last = shared + len(rest)
    return bytes(body + b"\0\0\0\0" * restarts + struct.pack("<I", restarts))


def table(blocks: Sequence[bytes], handles: Sequence[int | tuple[int, int]] | None = None,
          index_handle: tuple[int, int] | None = None) -> bytes:
    """The data ``blocks`` one after another, then an index block of ``handles``: a data block's
    number (its real handle) or any ``(offset, size)``; by default each block once, in order.
    ``index_handle`` replaces the footer's handle of the index block."""
    out, real = bytearray(), []
    for data in blocks:
        real.append((len(out), len(data)))
        out += data + TRAILER
    meta_at = len(out)
    out += struct.pack("<I", 0) + TRAILER
    chosen = [real[h] if isinstance(h, int) else h for h in (range(len(blocks)) if handles is None else handles)]
    index = block([(0, b"", varint(off) + varint(size)) for off, size in chosen])
    index_at = len(out)
    out += index + TRAILER
    index_at, index_size = index_handle or (index_at, len(index))
    footer = varint(meta_at) + varint(4) + varint(index_at) + varint(index_size)
    return bytes(out + footer + b"\0" * (40 - len(footer)) + struct.pack("<Q", MAGIC))


def header(shards: int = 1) -> tuple[int, bytes, bytes]:
    """The entry of the empty key: a ``BundleHeaderProto`` naming ``shards`` data shards."""
    return (0, b"", b"\x08" + varint(shards))


def repeated_block(size: int) -> bytes:
    """An index of about ``size`` bytes, half a data block of empty entries (3 bytes each), half
    an index block pointing at that block again and again. Read once per pointer, as the reader
    did before it refused this, 36 kB of it took 18.6 s."""
    data = block([header()] + [(0, b"", b"")] * (size // 6))
    pointer = 3 + len(varint(0) + varint(len(data)))
    return table([data], [0] * ((size - len(data)) // pointer))
