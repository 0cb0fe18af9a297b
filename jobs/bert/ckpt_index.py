"""Read a TensorFlow checkpoint's ``.index`` without TensorFlow: variable names and shapes.

The spec checker (``jobs.spec``, no TensorFlow) uses it to refuse a BERT directory whose
``bert_config.json`` does not describe its checkpoint, or whose ``.data-*`` shards are missing,
in a second on the laptop instead of after TensorFlow and a TPU have started.

An index is a LevelDB-format table (TensorFlow's ``tensor_bundle``, written uncompressed):
data blocks of prefix-compressed ``key -> value`` entries, an index block pointing at them, and
a 48-byte footer ending in a magic number. The empty key holds a ``BundleHeaderProto``
(``num_shards``); every other key is a tensor name whose value is a ``BundleEntryProto``
(``dtype = 1``, ``shape = 2``, ``shard_id = 3``, ...). Anything unexpected (a compressed block,
a newer format) returns ``None``: the job itself checks again with TensorFlow.

The file may be anyone's (a BERT directory downloaded from elsewhere, a bucket others can write),
so what it can make this reader allocate and compute is bounded by its size:

- the index block must point at data blocks in the order TensorFlow writes them, each after the
  last one's end: a block is read once, not once more for every index entry an attacker points at
  it (a 36 kB file of those took 18.6 s);
- an entry costs the bytes of its name even when prefix compression stores none of them (empty
  names, or a long name repeated with an empty suffix): the names may add up to at most
  :data:`NAMES_PER_BYTE` times the file's size, and :data:`MAX_KEYS_BYTES` in all;
- so the reader touches at most :data:`WORK_PER_BYTE` bytes per byte of the file (:class:`Work`
  counts them), and an entry takes at least three bytes of its own.

A header naming more data shards than their file names' five digits hold, a tensor name longer
than :data:`MAX_KEY_BYTES`, or a file beyond those bounds is not a checkpoint index (a one-line
reason); the shards' files are looked for one at a time (:func:`data_files`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

MAGIC = 0xDB4775248B80FB57
FOOTER = 48
# BERT-large with Adam's slots has an index of about 100 kB: 8 MiB is 80 times that, and keeps a
# crafted index's worst case (linear, about 2 us a byte on a loaded 2-core machine) near 15 s
MAX_INDEX_BYTES = 8 << 20
# TensorFlow names shard files ``data-%05d-of-%05d``; its checkpoints have one to a few hundred
MAX_SHARDS = 99_999
# the longest object-graph names (slot variables of nested Keras layers) are a few hundred bytes
MAX_KEY_BYTES = 16 << 10
# all the names of an index: BERT-large with Adam's slots has about 1,200 of them, ~100 kB
MAX_KEYS_BYTES = 32 << 20
# TensorFlow's tables spell a name out in full at least every 16th entry (their restart interval),
# so its names add up to at most 16 bytes per byte of the file: 1.3 in BERT's and the runner's
# checkpoints, 14 for 300 names of 2,000 bytes that differ in their last five
NAMES_PER_BYTE = 32
# what one read touches per byte of the file: the index block, the data blocks (which do not
# overlap), the entries' own bytes in each, and the names
WORK_PER_BYTE = 4 + NAMES_PER_BYTE
# a block's trailer: its compression type and CRC
TRAILER = 5


class IndexError_(ValueError):
    """Not a readable checkpoint index. ``corrupt``: not an index at all (a truncated or wrong
    file); otherwise a format this reader does not understand (the job checks it instead)."""

    def __init__(self, message: str, corrupt: bool = False):
        super().__init__(message)
        self.corrupt = corrupt


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise IndexError_("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


class Work:
    """What one read of an index has cost so far, counted as it goes, so that it can stop in time.

    ``touched``: the bytes gone through (blocks cut out of the file, entries walked, names spelled
    out), never more than :data:`WORK_PER_BYTE` times ``size``; ``names_left``: the name bytes the
    reader may still spell out. A test reads ``touched`` to see that no crafted file makes the work
    grow faster than the file.
    """

    def __init__(self, size: int):
        self.size = size
        self.touched = 0
        self.names_left = min(MAX_KEYS_BYTES, NAMES_PER_BYTE * size)

    def name(self, length: int) -> None:
        """Charge a name of ``length`` bytes before it is spelled out."""
        self.names_left -= length
        if self.names_left < 0:
            if NAMES_PER_BYTE * self.size > MAX_KEYS_BYTES:
                raise IndexError_(f"tensor names of more than {MAX_KEYS_BYTES >> 20} MiB in all", corrupt=True)
            raise IndexError_(f"tensor names adding up to more than {NAMES_PER_BYTE} times the file's size",
                              corrupt=True)
        self.touched += length


def _block(data: bytes, offset: int, size: int, work: Work) -> bytes:
    if offset < 0 or size < 0 or offset + size + TRAILER > len(data):
        raise IndexError_("block outside the file")
    if data[offset + size] != 0:  # the trailer's compression type: 0 = none
        raise IndexError_("compressed block")
    work.touched += size
    return data[offset:offset + size]


def _entries(block: bytes, work: Work):
    """``(key, value)`` of a block, each charged to ``work`` before it is built."""
    if len(block) < 4:
        raise IndexError_("short block")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise IndexError_("bad restart array")
    pos, key = 0, b""
    while pos < end:
        start = pos
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + vlen > end:
            raise IndexError_("bad entry")
        if shared + unshared > MAX_KEY_BYTES:
            raise IndexError_(f"a tensor name of more than {MAX_KEY_BYTES} bytes", corrupt=True)
        work.name(shared + unshared)
        work.touched += pos + unshared + vlen - start
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def _fields(msg: bytes):
    """(field number, wire type, value) of a protobuf message; varints and length-delimited only."""
    pos = 0
    while pos < len(msg):
        tag, pos = _varint(msg, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(msg, pos)
        elif wire == 2:
            length, pos = _varint(msg, pos)
            value, pos = msg[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = msg[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = msg[pos:pos + 8], pos + 8
        else:
            raise IndexError_("unsupported wire type")
        yield number, wire, value


def _shape(entry: bytes) -> tuple[int, ...]:
    dims: list[int] = []
    for number, wire, value in _fields(entry):
        if number == 2 and wire == 2:              # TensorShapeProto
            for n2, w2, dim in _fields(value):
                if n2 == 2 and w2 == 2:            # Dim
                    size = 0
                    for n3, w3, v3 in _fields(dim):
                        if n3 == 1 and w3 == 0:
                            size = v3 if v3 < (1 << 63) else v3 - (1 << 64)
                    dims.append(size)
    return tuple(dims)


def read_index(prefix: str) -> tuple[dict[str, tuple[int, ...]], int]:
    """``({variable name: shape}, number of data shards)`` of the checkpoint at ``prefix``.

    Raises :class:`IndexError_` if the file is not an index this reader understands; a corrupt
    one's message says why in a few words.
    """
    path = prefix + ".index"
    size = os.path.getsize(path)
    if size < FOOTER or size > MAX_INDEX_BYTES:
        raise IndexError_(f"{size} bytes", corrupt=True)
    with open(path, "rb") as fh:
        data = fh.read()
    return parse_index(data)


def parse_index(data: bytes, work: Work | None = None) -> tuple[dict[str, tuple[int, ...]], int]:
    """:func:`read_index` of an index's bytes; ``work`` (one per read) counts what it costs."""
    if len(data) < FOOTER:
        raise IndexError_(f"{len(data)} bytes", corrupt=True)
    work = Work(len(data)) if work is None else work
    footer = data[-FOOTER:]
    (magic,) = struct.unpack_from("<Q", footer, 40)
    if magic != MAGIC:
        raise IndexError_("no checkpoint index magic number at its end", corrupt=True)
    pos = 0
    _meta_off, pos = _varint(footer, pos)
    _meta_size, pos = _varint(footer, pos)
    index_off, pos = _varint(footer, pos)
    index_size, pos = _varint(footer, pos)
    shapes: dict[str, tuple[int, ...]] = {}
    shards = 1
    after = 0  # where the last data block's trailer ends: the next block starts there or later
    for _last_key, handle in _entries(_block(data, index_off, index_size, work), work):
        off, p = _varint(handle, 0)
        length, _ = _varint(handle, p)
        if off < after:
            raise IndexError_("its index points at a data block twice or out of order", corrupt=True)
        after = off + length + TRAILER
        for key, value in _entries(_block(data, off, length, work), work):
            if key == b"":
                for number, wire, v in _fields(value):
                    if number == 1 and wire == 0:
                        if v > MAX_SHARDS:
                            raise IndexError_(f"it names {v} data shards", corrupt=True)
                        shards = max(1, v)
            else:
                shapes[key.decode("utf-8", "replace")] = _shape(value)
    return shapes, shards


def data_files(prefix: str, shards: int) -> Iterator[str]:
    """The data shards' file names, one at a time (a caller stops at the first one missing)."""
    return (f"{prefix}.data-{i:05d}-of-{shards:05d}" for i in range(shards))
