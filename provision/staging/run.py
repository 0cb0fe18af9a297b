"""One ``tpuctl stage``: check both sides, list, compare, plan, then transfer, delete, summarize.

Everything that can be wrong with the request (a bad path, a missing bucket, two sides that
overlap, object names that cannot be files) is found before the first byte moves.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..basics.errors import CloudError, UsageError
from ..cloud.storage import PARTS_PREFIX, BucketNotFound, LocalBucket, ObjectInfo, crc
from . import plan as planning
from .endpoints import Endpoint, meant_bucket
from .executor import Executor, Outcome
from .ignore import IGNORE_FILE, Excluder, parse_ignore_file
from .options import StageOptions
from .progress import Progress

if TYPE_CHECKING:
    from ..basics.config import Target

Say = Callable[[str], None]


@dataclass
class Report:
    """What a stage did; ``to_dict`` is the ``--json`` document."""

    source: str
    destination: str
    direction: str  # upload, download or copy
    dry_run: bool
    plan: planning.Plan
    bucket_created: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    deletions: list[Outcome] = field(default_factory=list)
    deletes_skipped: bool = False
    cleaned: int = 0
    seconds: float = 0.0
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes + self.deletions if not o.ok]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        sent = [o for o in self.outcomes if o.ok]
        bytes_moved = sum(o.sent for o in self.outcomes)
        counts = {"uploaded": 0, "downloaded": 0, "copied": 0}
        size_of = {s.path: s.size for s in self.plan.sends}
        key = {"upload": "uploaded", "download": "downloaded", "copy": "copied"}[self.direction]
        counts[key] = len(sent)
        doc: dict[str, Any] = {
            "ok": self.ok,
            **self.context,
            "source": self.source,
            "destination": self.destination,
            "direction": self.direction,
            "dry_run": self.dry_run,
            "files": len(self.plan.sends) + len(self.plan.skips),
            **counts,
            "skipped": len(self.plan.skips),
            "deleted": sum(1 for o in self.deletions if o.ok),
            "verified": len(sent) + len(self.plan.skips),
            "failed": len(self.failures),
            "excluded": self.plan.excluded,
            "bytes_total": sum(s.size for s in self.plan.steps if s.op != planning.DELETE),
            "bytes_sent": bytes_moved,
            f"bytes_{key}": sum(size_of.get(o.label, 0) for o in sent),
            "bytes_skipped": self.plan.bytes(planning.SKIP),
            "bytes_resumed": sum(o.reused for o in self.outcomes),
            "retries": sum(o.retries for o in self.outcomes),
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(bytes_moved / 1e6 / self.seconds, 2) if self.seconds > 0 and bytes_moved else 0.0,
            "bucket_created": self.bucket_created,
            "stale_parts_removed": self.cleaned,
        }
        for other in ("uploaded", "downloaded", "copied"):
            doc.setdefault(f"bytes_{other}", 0)
        if self.deletes_skipped:
            doc["deletes_skipped"] = "transfers failed; nothing was deleted"
        if self.failures:
            doc["failures"] = [{"path": o.label, "error": o.error} for o in self.failures]
        if self.dry_run:
            doc["plan"] = [{"action": s.op, "path": s.path, "bytes": s.size, "reason": s.reason}
                           for s in self.plan.steps if s.op != planning.SKIP]
        return doc


def direction(src: Endpoint, dest: Endpoint) -> str:
    if dest.is_bucket:
        return "upload"
    if src.is_bucket:
        return "download"
    return "copy"


def check_sides(src: Endpoint, dest: Endpoint, opts: StageOptions) -> None:
    """Refuse what cannot work, before listing anything."""
    if not src.local and not dest.local:
        raise UsageError("copying from one gs:// location to another is not supported",
                         hint="stage through a local directory")
    if opts.delete and src.single is not None:
        raise UsageError("--delete needs a directory SRC", hint="drop --delete, or stage the directory")
    s_root, d_root = src.root_dir(), dest.root_dir()
    if s_root is not None and d_root is not None:
        a, b = s_root.resolve(), d_root.resolve()
        if src.single is None and (a == b or a in b.parents or b in a.parents):
            raise UsageError(f"SRC {src.text} and DEST {dest.text} overlap",
                             hint="stage into a directory outside SRC")
        if src.single is not None and (a / src.single).resolve() == (b / src.single).resolve():
            raise UsageError(f"SRC {src.text} and DEST {dest.text} are the same file", hint="pick another DEST")
    if not src.is_bucket and src.single is None and not Path(os.path.expanduser(src.text)).is_dir():
        raise UsageError(f"SRC {src.text} does not exist", hint="check the path")
    meant = None if src.is_bucket or dest.is_bucket else meant_bucket(dest.text)
    if meant:
        first = dest.text.split("/", 1)[0]
        raise UsageError(f"DEST {dest.text} is a local path, and ./{first} does not exist",
                         hint=f"did you mean {meant}? (write ./{dest.text} to copy into a new local directory)")
    if not dest.is_bucket and d_root is not None and d_root.exists() and not d_root.is_dir():
        raise UsageError(f"DEST {dest.text} is a file", hint="name a directory to stage into")


def ensure_buckets(src: Endpoint, dest: Endpoint, opts: StageOptions, say: Say) -> bool:
    """Both buckets exist (creating DEST's with --create-bucket); True if one was created."""
    if src.is_bucket and not src.bucket.exists():
        raise BucketNotFound(f"bucket {src.bucket.url} does not exist", hint="check the bucket name in SRC")
    if not dest.is_bucket:
        return False
    if dest.bucket.exists():
        if opts.create_bucket:
            say(f"bucket {dest.bucket.url} already exists; --create-bucket has nothing to do")
        return False
    if not opts.create_bucket:
        raise BucketNotFound(f"bucket {dest.bucket.url} does not exist",
                             hint="pass --create-bucket (and --location, e.g. us-central1) to create it, "
                                  "or check the name")
    if opts.dry_run:
        say(f"would create bucket {dest.bucket.url} in {opts.location} with uniform bucket-level access")
        return False
    dest.bucket.create(opts.location)
    say(f"created bucket {dest.bucket.url} in {opts.location} with uniform bucket-level access")
    return True


def read_ignore_file(src: Endpoint, listing: dict[str, ObjectInfo]) -> list[str]:
    if src.single is not None or IGNORE_FILE not in listing:
        return []
    data = src.bucket.read_bytes(src.name(IGNORE_FILE))
    return parse_ignore_file(data.decode("utf-8", errors="replace"))


def fill_checksums(side: Endpoint, entries: dict[str, planning.Entry], paths: list[str]) -> None:
    """Read the CRC32C of the local files that :func:`plan.needs_checksum` named. An object
    without a stored CRC32C (never seen on Cloud Storage) gets one that matches nothing: resent."""
    for rel in paths:
        e = entries[rel]
        value = crc.of_file(side.path(rel)) if side.local else -1
        entries[rel] = planning.Entry(rel, e.size, value)


def stage(src: Endpoint, dest: Endpoint, opts: StageOptions, *, say: Say, show_progress: bool = False,
          executor: Executor | None = None) -> Report:
    started = time.monotonic()
    check_sides(src, dest, opts)
    created = ensure_buckets(src, dest, opts, say)
    # Past ensure_buckets, DEST is missing only in a dry run that would create its bucket.
    dest_missing = opts.dry_run and dest.is_bucket and opts.create_bucket and not created and not dest.bucket.exists()

    src_listing = src.listing()
    if not src_listing and src.is_bucket:
        single = src.as_single()
        if single is not None:
            src, src_listing = single, single.listing()
    if not src_listing:
        raise UsageError(f"nothing to stage: SRC {src.text} has no files",
                         hint="check the path (an empty SRC is refused so that --delete cannot empty DEST)")
    if dest_missing:
        dest_listing = {}
    elif src.single is not None:
        info = dest.bucket.stat(dest.name(src.single)) if dest.bucket.exists() else None
        dest_listing = {} if info is None else {src.single: info}
    else:
        dest_listing = dest.listing()

    excluder = Excluder(list(opts.excludes) + read_ignore_file(src, src_listing))
    src_kept, excluded = planning.apply_excludes(_entries(src_listing), excluder)
    dest_kept, _ = planning.apply_excludes(_entries(dest_listing), excluder)
    if dest.local:
        problems = planning.local_name_problems(e.path for e in src_kept)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise UsageError(f"cannot write into {dest.text}: {'; '.join(problems[:3])}{more}",
                             hint="leave those objects out with --exclude")
    src_entries, dest_entries = planning.index(src_kept), planning.index(dest_kept)
    wanted = planning.needs_checksum(src_entries, dest_entries)
    fill_checksums(src, src_entries, [p for side, p in wanted if side == "src"])
    fill_checksums(dest, dest_entries, [p for side, p in wanted if side == "dest"])
    the_plan = planning.make_plan(src_entries, dest_entries, delete=opts.delete, excluded=excluded)

    report = Report(src.text, dest.text, direction(src, dest), opts.dry_run, the_plan,
                    bucket_created=created, context=_directories(src, dest))
    if opts.dry_run:
        report.seconds = time.monotonic() - started
        return report

    sends = planning.order_for_transfer(the_plan.sends)
    if not dest.is_bucket and sends:
        root = dest.root_dir()
        assert root is not None
        root.mkdir(parents=True, exist_ok=True)
    executor = executor or Executor(opts.jobs)
    with Progress(sum(s.size for s in sends), enabled=show_progress and bool(sends)) as progress:
        report.outcomes = executor.run([(s.path, _job_factory(src, dest, s, src_listing, opts, progress.add))
                                        for s in sends])
    if the_plan.deletes:
        if report.failures:
            report.deletes_skipped = True
        else:
            report.deletions = executor.run_tasks(
                [(s.path, _deleter(dest, s.path)) for s in the_plan.deletes])
    if not report.failures and src.single is None:
        try:
            report.cleaned = dest.bucket.clean_internal(dest.prefix)
        except CloudError as exc:  # every file arrived and is verified; leftovers wait for the next run
            say(f"left parts of earlier runs under {PARTS_PREFIX} for the next stage to remove ({exc.one_line()})")
    report.seconds = time.monotonic() - started
    return report


def _directories(src: Endpoint, dest: Endpoint) -> dict[str, str]:
    """For the local provider, the directories its gs:// URLs stand for."""
    out = {}
    for key, ep in (("source_directory", src), ("destination_directory", dest)):
        root = ep.root_dir()
        if ep.is_bucket and root is not None:
            out[key] = str(root)
    return out


def _entries(listing: dict[str, ObjectInfo]) -> list[planning.Entry]:
    return [planning.Entry(rel, o.size, o.crc32c) for rel, o in listing.items()]


def _job_factory(src: Endpoint, dest: Endpoint, step: planning.Step, listing: dict[str, ObjectInfo],
                 opts: StageOptions, progress: Callable[[int], None]):
    if isinstance(src.bucket, LocalBucket):
        path, name = src.path(step.path), dest.name(step.path)
        return lambda: dest.bucket.upload_job(path, name, part_size=opts.part_size, progress=progress)
    info, path = listing[step.path], dest.path(step.path)
    return lambda: src.bucket.download_job(info, path, part_size=opts.part_size, progress=progress)


def _deleter(dest: Endpoint, rel: str):
    return lambda: dest.bucket.delete(dest.name(rel))


def stage_paths(src: str, dest: str, target: Target | None, *, say: Say = lambda _: None,
                show_progress: bool = False, **options: Any) -> Report:
    """The stage ``tpuctl stage SRC DEST`` runs, for callers inside tpuctl (``tpuctl train``).

    ``options`` are :class:`StageOptions` fields (``delete``, ``excludes``, ``jobs``, ...);
    ``target`` is needed when either side is gs://. Raises a UsageError for bad input before
    anything moves; a Report with ``ok`` False lists files that failed verification.
    """
    from .endpoints import open_endpoint

    opts = StageOptions(**options)
    pool = opts.jobs + 4
    return stage(open_endpoint(src, target, pool_size=pool), open_endpoint(dest, target, pool_size=pool), opts,
                 say=say, show_progress=show_progress)
