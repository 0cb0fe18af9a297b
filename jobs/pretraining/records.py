"""TFRecord files of ``tf.train.Example`` protos, written without TensorFlow.

The parallel data workers write their shards with this module so that a worker costs a few
megabytes instead of TensorFlow's half a gigabyte. The bytes are the protobuf wire format of
``tensorflow/core/example/{example,feature}.proto`` (packed int64/float lists, one map entry per
feature, keys sorted) framed as TFRecord (length, masked CRC-32C of the length, data, masked
CRC-32C of the data), which ``tf.data.TFRecordDataset`` reads and checks.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import BinaryIO


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("negative int64 values are not written by this encoder")
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(n) for n in range(1 << 17)]  # token ids and positions: a lookup, not a loop


def _varints(values: Sequence[int]) -> bytes:
    small = _SMALL
    if values and min(values) < 0:
        raise ValueError("negative int64 values are not written by this encoder")
    try:
        return b"".join([small[v] for v in values])
    except IndexError:  # a value past the table
        return b"".join([small[v] if v < len(small) else _varint(v) for v in values])


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: Mapping[str, Sequence]) -> bytes:
    """A serialized ``tf.train.Example``: float lists for lists of floats, int64 otherwise."""
    entries = []
    for key in sorted(features):
        values = features[key]
        if values and isinstance(values[0], float):
            kind = _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))
        else:
            kind = _field(3, _field(1, _varints(values)))
        entries.append(_field(1, _field(1, key.encode()) + _field(2, kind)))
    return _field(1, b"".join(entries))


def frame(record: bytes) -> bytes:
    """One TFRecord: the record with its length and checksums."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc(length)) + record + struct.pack("<I", masked_crc(record))


def count_records(f: BinaryIO) -> int:
    """How many whole TFRecords a readable, seekable file holds (headers read, data skipped):
    a shard a previous run finished is counted without decoding it."""
    count = 0
    while header := f.read(12):
        if len(header) < 12:
            break
        (length,) = struct.unpack("<Q", header[:8])
        f.seek(length + 4, 1)
        count += 1
    return count
