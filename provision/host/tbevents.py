"""TensorBoard event files read without TensorFlow: a ``job: command`` program's scalars as progress.

Many programs log their loss only as TensorBoard summaries (``tf.summary.scalar``, Keras' callback,
``torch.utils.tensorboard``, Flax's ``metric_writers``). Worker 0's agent reads the event files the
program writes under the checkpoint directory and a local model directory, and turns each event's
scalars into a progress object (:func:`provision.runs.reports.fold_items`): its ``step``; the value
of a tag whose last path component is ``loss`` (``loss``, ``train/loss``) as ``loss``; every other
scalar as a metric of its tag. Evaluations are told apart by name: a file in a directory whose name
starts with ``eval``, ``val`` or ``test`` (Keras' ``logs/validation``) has its tags prefixed with
that name (``validation/epoch_loss``), and a name with such a part is never the training loss.

``provision`` never imports TensorFlow, and TensorBoard is not a dependency, so the format is read
here (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto, tensor.proto):
TFRecord framing (a little-endian uint64 length, the masked CRC-32C of those 8 bytes, the data,
the masked CRC-32C of the data), each record an ``Event`` (1 wall_time double, 2 step int64,
5 summary) whose ``Summary`` holds ``Value``\\ s (1 tag, 2 simple_value float, 9 metadata with its
plugin name, 8 tensor: 1 dtype, 2 shape, 4 tensor_content, 5 float_val, 6 double_val, 7 int_val,
10 int64_val, 13 half_val). TF2 writes scalars as one-element tensors of the ``scalars`` plugin;
TF1, tensorboardX and PyTorch as ``simple_value``.

Bounded: files are read incrementally from where the last read stopped (a record cut off at the
end is read whole next time), at most :data:`READ_BUDGET` bytes and :data:`MAX_FILES` files a
read; a record over :data:`MAX_RECORD` bytes (images, graphs) is skipped unread; a record whose
data fails its checksum is skipped, and a file whose framing is broken is read no further.

A ``gs://`` model directory (every GCP host's ``TPUCTL_MODEL_DIR``, where TensorFlow's
``tf.summary``, Keras' callback, Flax's metric writers and ``SummaryWriter`` through ``tf.io.gfile``
write) is read the same way through the run's bucket client (:class:`BucketEventFiles`): one
listing of its ``*tfevents*`` objects a read, then a ranged read of each object from where the last
one stopped. A writer on Cloud Storage flushes by rewriting the whole object, so a newer object
begins with the bytes already read and only its tail is fetched. The agent reads at its heartbeat
(every 5 s, :data:`provision.runs.store.ALIVE_EVERY_S`), not at each half-second look: a listing is
a request (about 17,000 a day, a few cents). Ranged reads carry no object checksum; every record's
own CRC-32C checks its bytes.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import google_crc32c

MAX_RECORD = 1 << 20
READ_BUDGET = 8 << 20
MAX_FILES = 64
MAX_DEPTH = 3
MAX_ENTRIES = 20_000
MAX_TAG = 100
EVAL_PREFIXES = ("eval", "val", "test")
# DataType values (tensorflow/core/framework/types.proto)
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h ``Mask``)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(data: bytes) -> tuple[list[bytes], int, str | None]:
    """The whole records at the start of ``data``, how many bytes they take, and why the framing
    cannot be trusted after them (a length whose checksum fails), or None; a record cut off at the
    end is left for the next read. A record longer than :data:`MAX_RECORD` or whose data fails its
    checksum is passed over."""
    out, pos = [], 0
    while len(data) - pos >= 12:
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if masked_crc(data[pos:pos + 8]) != length_crc:
            return out, pos, f"a record length at byte {pos} fails its checksum"
        end = pos + 12 + length + 4
        if end > len(data):
            break
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if length <= MAX_RECORD and masked_crc(body) == body_crc:
            out.append(body)
        pos = end
    return out, pos, None


# ---- protocol buffers, the few wire types an Event uses ------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("a truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a message: an int (varint), bytes (length-delimited,
    fixed64 or fixed32 as their 8 or 4 bytes). ValueError for what is not a message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} is not one an Event uses")
        if pos > len(buf):
            raise ValueError("a truncated field")
        yield number, wire, value


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _half(bits: int) -> float:
    return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]


def _bfloat16(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def _packed(wire: int, value: Any, kind: str) -> list[float]:
    """A repeated numeric field's values, packed (wire type 2) or one at a time."""
    if kind in ("f", "d"):
        size = 4 if kind == "f" else 8
        raw = value if isinstance(value, bytes) else b""
        return list(struct.unpack(f"<{len(raw) // size}{kind}", raw[:len(raw) // size * size]))
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def tensor_scalar(buf: bytes) -> float | None:
    """The value of a one-element numeric TensorProto, or None (a histogram, text, an image)."""
    dtype, dims, content, values = 0, [], b"", []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 2 and wire == 2:
            for n, w, v in fields(value):
                if n == 2 and w == 2:
                    dims.append(next((s for dn, dw, s in fields(v) if dn == 1 and dw == 0), 0))
        elif number == 4 and wire == 2:
            content = value
        elif number == 5:
            values += _packed(wire, value, "f")
        elif number == 6:
            values += _packed(wire, value, "d")
        elif number in (7, 10) and wire in (0, 2):
            values += [_signed64(v) for v in _packed(wire, value, "i")]
        elif number == 13 and wire in (0, 2):
            values += [(_bfloat16 if dtype == DT_BFLOAT16 else _half)(v) for v in _packed(wire, value, "i")]
    if any(d != 1 for d in dims):
        return None
    if content:
        layout = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}.get(dtype)
        if dtype == DT_BFLOAT16 and len(content) == 2:
            return _bfloat16(struct.unpack("<H", content)[0])
        if layout is None or struct.calcsize(layout) != len(content):
            return None
        return float(struct.unpack(layout, content)[0])
    if dtype not in (DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF, DT_BFLOAT16) or len(values) != 1:
        return None
    return float(values[0])


def scalars(event: bytes) -> tuple[int | None, float | None, dict[str, float]]:
    """An Event's ``(step, wall_time, {tag: value})``, its scalar summaries only."""
    step, wall, out = None, None, {}
    for number, wire, value in fields(event):
        if number == 1 and wire == 1:
            wall = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            step = _signed64(value)
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    tag, number_value = _value(v)
                    if tag and number_value is not None and math.isfinite(number_value):
                        out[tag] = number_value
    return step, wall, out


def _value(buf: bytes) -> tuple[str | None, float | None]:
    tag, simple, tensor, plugin = None, None, None, ""
    for number, wire, value in fields(buf):
        if number == 1 and wire == 2:
            tag = value.decode("utf-8", "replace")[:MAX_TAG]
        elif number == 2 and wire == 5:
            simple = struct.unpack("<f", value)[0]
        elif number == 8 and wire == 2:
            tensor = value
        elif number == 9 and wire == 2:
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    plugin = next((p.decode("utf-8", "replace") for pn, pw, p in fields(v) if pn == 1 and pw == 2),
                                  "")
    if simple is not None:
        return tag, simple
    if tensor is not None and plugin in ("", "scalars"):
        return tag, tensor_scalar(tensor)
    return tag, None


def item(step: int, values: dict[str, float], prefix: str = "") -> dict[str, Any] | None:
    """The progress object of one event's scalars (see the module's words on ``loss``)."""
    if step < 0 or not values:
        return None
    out: dict[str, Any] = {"step": step}
    metrics = {}
    for tag, value in values.items():
        name = f"{prefix}/{tag}" if prefix else tag
        parts = [p for p in name.split("/") if p]
        training = not any(p.lower().startswith(EVAL_PREFIXES) for p in parts)
        if parts and parts[-1] == "loss" and training:
            out["loss"] = value
        else:
            metrics[name] = value
    if metrics:
        out["metrics"] = metrics
    return out


@dataclass
class EventFiles:
    """The event files under ``roots``, read incrementally (one instance per attempt)."""

    roots: list[Path]
    offsets: dict[Path, int] = field(default_factory=dict)
    broken: set[Path] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def skip_existing(self) -> None:
        """Start after what is there now: an earlier attempt's events were reported by it."""
        for path in self._files():
            try:
                self.offsets[path] = path.stat().st_size
            except OSError:
                continue

    def read(self) -> list[dict[str, Any]]:
        """The progress objects of the events written since the last read, in step order."""
        budget = READ_BUDGET
        found: list[tuple[int, float, dict[str, Any]]] = []
        for path in self._files():
            if budget <= 0:
                break
            if path in self.broken:
                continue
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(start)
                    data = fh.read(budget)
            except OSError:
                continue
            budget -= len(data)
            used, broken = _decode(data, self._prefix(path), found)
            if broken:
                self.broken.add(path)
                self.problems.append(f"{path.name}: {broken}; not read further")
            self.offsets[path] = start + used
        return _in_order(found)

    def _prefix(self, path: Path) -> str:
        """An evaluation's directory (Keras' ``logs/validation``, ``eval``): its name prefixes the
        tags, so its ``loss`` is a metric, not the training loss; no prefix elsewhere."""
        inside = any(path.parent != root and root in path.parents for root in self.roots)
        return eval_prefix(path.parent.name) if inside else ""

    def _files(self) -> list[Path]:
        """The newest :data:`MAX_FILES` event files under the roots (a bounded walk)."""
        seen: list[tuple[float, Path]] = []
        entries = 0
        for root in self.roots:
            for here, dirs, names in os.walk(root):
                depth = len(Path(here).relative_to(root).parts)
                entries += len(dirs) + len(names)
                if depth >= MAX_DEPTH or entries > MAX_ENTRIES:
                    dirs[:] = []
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for name in names:
                    if "tfevents" in name and not name.startswith("."):
                        path = Path(here) / name
                        try:
                            seen.append((path.stat().st_mtime, path))
                        except OSError:
                            continue
                if entries > MAX_ENTRIES:
                    break
        seen.sort()
        return [p for _t, p in seen[-MAX_FILES:]]


def _skip_long(data: bytes) -> int:
    """A first record too long for one read (over the budget): passed over by its length, unread,
    once its length checks out (0 when it does not: the next read's :func:`records` says so)."""
    (length,) = struct.unpack_from("<Q", data, 0)
    if length > MAX_RECORD and masked_crc(data[:8]) == struct.unpack_from("<I", data, 8)[0]:
        return 12 + length + 4
    return 0


def eval_prefix(directory: str) -> str:
    """The name of an evaluation's directory (``validation``, ``eval``), which prefixes its tags; ""."""
    return directory if directory.lower().startswith(EVAL_PREFIXES) else ""


def _decode(data: bytes, prefix: str, found: list[tuple[int, float, dict[str, Any]]]) -> tuple[int, str | None]:
    """The progress objects of the whole records at the start of ``data`` (appended to ``found``
    with their step and wall time), how many bytes the next read skips, and why the framing cannot
    be trusted after them (None: it can)."""
    bodies, used, broken = records(data)
    if not broken and used == 0 and len(data) >= 12 and not bodies:
        used = _skip_long(data)
    for body in bodies:
        try:
            step, wall, values = scalars(body)
        except (ValueError, struct.error):
            continue
        got = item(step, values, prefix) if step is not None else None
        if got is not None:
            if wall:
                got["_t"] = wall     # when the program logged it: its step's date (reports.fold_items)
            found.append((step, wall or 0.0, got))
    return used, broken


def _in_order(found: list[tuple[int, float, dict[str, Any]]]) -> list[dict[str, Any]]:
    found.sort(key=lambda f: (f[0], f[1]))
    return [f[2] for f in found]


@dataclass
class BucketEventFiles:
    """The event files under a ``gs://BUCKET/PREFIX`` model directory, read as they grow (one
    instance per attempt): ``bucket`` opens the run's bucket (the agent's client, opened once, at
    the first read). A listing or a read that fails (the bucket away for a moment) is tried again
    at the next read, from the same offsets."""

    url: str
    bucket: Callable[[], Any]
    offsets: dict[str, int] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    skipped: bool = False          # the events already there when the attempt began are passed over
    _store: Any = None

    @property
    def prefix(self) -> str:
        from ..basics.validate import bucket_url

        p = bucket_url(self.url).prefix.strip("/")
        return f"{p}/" if p else ""

    def skip_existing(self) -> None:
        """Start after what is there now: an earlier attempt's events were reported by it. If the
        bucket cannot be listed now, the first read that can list it skips them instead."""
        listed = self._list()
        if listed is not None:
            self.offsets.update({name: size for name, size, _gen in listed})
            self.skipped = True

    def read(self) -> list[dict[str, Any]]:
        """The progress objects of the events written since the last read, in step order."""
        listed = self._list()
        if listed is None:
            return []
        if not self.skipped:
            self.offsets.update({name: size for name, size, _gen in listed})
            self.skipped = True
            return []
        budget = READ_BUDGET
        found: list[tuple[int, float, dict[str, Any]]] = []
        for name, size, _gen in listed:
            if budget <= 0:
                break
            start = self.offsets.get(name, 0)
            if name in self.broken or size <= start:
                continue
            length = min(size - start, budget)
            try:
                data = self._store.read_range(name, start, length)
            except Exception as exc:  # noqa: BLE001 - read again from the same offset next time
                self._note(f"{name}: could not read: {' '.join(str(exc).split())[:200]}")
                continue
            budget -= len(data)
            rel = PurePosixPath(name[len(self.prefix):])
            used, broken = _decode(data, eval_prefix(rel.parent.name) if len(rel.parts) > 1 else "", found)
            if broken:
                self.broken.add(name)
                self._note(f"{rel}: {broken}; not read further")
            self.offsets[name] = start + used
        return _in_order(found)

    def _list(self) -> list[tuple[str, int, int]] | None:
        """The newest :data:`MAX_FILES` event objects (by generation, the time of their last write)
        as ``(name, size, generation)``; None when the bucket cannot be listed now."""
        try:
            if self._store is None:
                self._store = self.bucket()
            seen = []
            for n, info in enumerate(self._store.list(self.prefix, glob=f"{self.prefix}**tfevents*")):
                if n >= MAX_ENTRIES:
                    break
                rel = PurePosixPath(info.name[len(self.prefix):])
                if "tfevents" in rel.name and not any(p.startswith(".") for p in rel.parts) \
                        and len(rel.parts) - 1 <= MAX_DEPTH:
                    seen.append((info.name, info.size, info.generation or 0))
        except Exception as exc:  # noqa: BLE001 - the bucket away for a moment: list again next time
            self._note(f"could not list {self.url}: {' '.join(str(exc).split())[:200]}")
            return None
        seen.sort(key=lambda s: s[2])
        return seen[-MAX_FILES:]

    def _note(self, problem: str) -> None:
        if problem not in self.problems[-5:]:
            self.problems = [*self.problems, problem][-20:]
