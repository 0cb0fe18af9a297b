"""``TPUCTL_CHECKPOINT_DIR``: a local directory on every host that tpuctl keeps in the run's bucket.

Most training programs write files: ``torch.save(ckpt, os.path.join(out_dir, "ckpt.pt"))``, a
Flax or Orbax directory, a ``checkpoint`` pointer beside its data. On Google Cloud the model
directory is a ``gs://`` URL such a program cannot write, and a preemption deletes the VM with
its disk. So every host gets a local, writable directory that this module keeps in the bucket,
the way SkyPilot's storage modes give a program a path and own the bucket behind it:

- **Where.** ``<model_dir>/checkpoint-dir/worker-<i>/``: each worker its own part, restored to the
  worker of the same index (a slice's worker 3 finds what worker 3 wrote). A program whose worker
  0 alone saves (PyTorch DDP, most JAX loops) finds its files on worker 0.
- **Restored before the program starts**, every attempt and every worker: the local directory is
  made equal to the bucket's copy through the staging engine (CRC32C-verified downloads, written
  beside and renamed into place; files the bucket lacks removed), so a job error on a VM that
  survived resumes from what a new VM would see, and a recreated VM finds the files again.
- **A file is taken once it is closed and unchanged**: no process of the program's group holds it
  open for writing (``/proc/PID/fdinfo``, looked at every :data:`SCAN_S`), and it does not change
  while it is copied aside; where there is no ``/proc`` (a laptop's local provider), it must also
  be as it was at the previous scan. At the end of the attempt (the program and its group gone,
  after the notice's final save too) every file is taken.
- **Never a torn file as the newest.** A taken file is copied aside first and the copy is sent,
  so an in-place rewrite during the upload (``torch.save`` to the same name every eval) cannot
  tear what the bucket gets; a file that changed while it was copied waits for the next scan.
  Uploads go oldest first, so a pointer written after its data goes up after it, through the
  staging engine: verified against CRC32C, large files in parts that an interrupted upload
  resumes from, each object published atomically (an upload cut halfway leaves the old copy).
- **A failed upload stops the scan**: the files after it (a pointer after its data) wait for the
  next scan, which starts again from the one that failed, so the bucket never holds a newer file
  without an older one it was written after.
- **Deletions follow**: a file the program removed (an old checkpoint rotated out) is removed
  from the bucket only by a scan whose uploads all succeeded and that left nothing of the
  directory unsent (a file still open, or not yet settled where there is no ``/proc``): never
  before the newer file is there. A file the program keeps open for writing the whole run (a
  log beside the checkpoints) thus holds removals back until the end of the attempt.

What a program may not rely on: files completed in the last seconds before a hard kill (a
preemption without notice, ``simulate preempt --no-notice``), whose upload had not finished.
Disk: a taken file needs room for its copy while it is sent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..basics.procs import group_members
from ..cloud.storage import Bucket, LocalBucket, ObjectInfo
from ..staging.executor import Executor

FOLDER = "checkpoint-dir"      # under the model directory, beside what the program writes there itself
SCAN_S = 2.0                   # between looks at the directory: a file is taken after one unchanged look
JOBS = 8                       # transfers (and parts of a large file) in flight
_WRITING = os.O_WRONLY | os.O_RDWR
SEES_OPEN_FILES = os.path.isdir("/proc/self/fdinfo")     # Linux: which files a process holds open

Say = Callable[[str], None]
_State = tuple[int, int, int]      # size, mtime_ns, inode


def part_name(model_dir: str, worker: str) -> str:
    """Where worker ``worker``'s part is kept: ``<model_dir>/checkpoint-dir/worker-<i>``."""
    return f"{model_dir.rstrip('/')}/{FOLDER}/worker-{worker}"


@dataclass
class Synced:
    """One scan's work, for the attempt's log."""

    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    bytes: int = 0         # the uploaded files' size
    sent: int = 0          # bytes sent over the wire for them ...
    reused: int = 0        # ... and parts an interrupted upload had stored, verified and kept


class CheckpointDir:
    """One worker's checkpoint directory and its part of the bucket (``bucket``, ``prefix``)."""

    def __init__(self, path: Path, bucket: Bucket, prefix: str, say: Say, *, spool: Path):
        self.path = path
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.say = say
        self.spool = spool
        self.sent: dict[str, _State] = {}       # rel -> the state of the file the bucket holds
        self.seen: dict[str, _State] = {}       # rel -> its state at the previous scan
        self._executor = Executor(JOBS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, model_dir: str, worker: str, work: Path, say: Say, *, provider: str,
             project: str) -> CheckpointDir:
        """The checkpoint directory of ``worker`` under ``work`` (the attempt's private directory
        on this host), kept under the run's model directory: a bucket URL, or on the local
        provider a directory standing in for one."""
        from ..basics.private import private_dir

        name = part_name(model_dir, worker)
        if name.startswith("gs://"):
            from ..basics.config import Target
            from ..basics.validate import bucket_url
            from ..cloud.storage import open_bucket

            url = bucket_url(name)
            bucket: Bucket = open_bucket(url, Target(provider=provider, project=project, zone=None))
            prefix = url.prefix
        else:
            bucket, prefix = LocalBucket(Path(name), private=True), ""
        return cls(private_dir(work, FOLDER), bucket, prefix, say, spool=private_dir(work, f"{FOLDER}-spool"))

    def _name(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _listing(self) -> dict[str, ObjectInfo]:
        if isinstance(self.bucket, LocalBucket) and not self.bucket.exists():
            return {}
        base = f"{self.prefix}/" if self.prefix else ""
        return {o.name[len(base):]: o for o in self.bucket.list(base)}

    # ---- before the program starts ----------------------------------------------------------
    def restore(self) -> tuple[int, int]:
        """Make the local directory the bucket's copy; (files, bytes) it holds then. Raises the
        storage error when the bucket cannot be read: a program must not start on an empty
        directory that the bucket would have filled (it would train from step 0 and, once
        uploaded, replace the checkpoint it should have resumed from)."""
        from ..cloud.storage import crc

        listing = self._listing()
        local = self._local_files()
        for rel in sorted(set(local) - set(listing)):
            with contextlib.suppress(FileNotFoundError):
                (self.path / rel).unlink()
        wanted = []
        for rel, info in sorted(listing.items()):
            have = local.get(rel)
            if have is not None and have[0] == info.size and info.crc32c is not None and \
                    crc.of_file(self.path / rel) == info.crc32c:
                continue
            wanted.append((rel, info))
        outcomes = self._executor.run([(rel, _download(self.bucket, info, self.path / rel)) for rel, info in wanted])
        failed = [o for o in outcomes if not o.ok]
        if failed:
            raise OSError(f"{len(failed)} file(s) of {self.describe()} could not be restored: "
                          f"{failed[0].label}: {failed[0].error}")
        self._prune_empty_dirs()
        self.sent = self._local_files()          # what the bucket holds, as this host's files
        self.seen = dict(self.sent)
        return len(listing), sum(info.size for info in listing.values())

    def describe(self) -> str:
        """Where the part is kept, as the user can look at it."""
        if isinstance(self.bucket, LocalBucket):
            return str(self.bucket.root.joinpath(*self.prefix.split("/")) if self.prefix else self.bucket.root)
        return f"{self.bucket.url.rstrip('/')}/{self.prefix}"

    # ---- while it runs, and after -----------------------------------------------------------
    def start(self, pgid: int) -> None:
        """Scan every :data:`SCAN_S` in a thread of its own (an upload of gigabytes must not hold
        up the heartbeat) until :meth:`finish`."""
        def loop() -> None:
            while not self._stop.wait(SCAN_S):
                try:
                    self._report(self.sync(pgid))
                except Exception as exc:  # noqa: BLE001 - the bucket is away: the next scan tries again
                    self.say(f"checkpoint dir: scan failed ({_one_line(exc)}); trying again")

        self._thread = threading.Thread(target=loop, name="tpuctl-checkpoint-dir", daemon=True)
        self._thread.start()

    def finish(self) -> Synced:
        """The last scan, once the program's group is gone: every file is taken."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        done = self.sync(None, final=True)
        self._report(done, final=True)
        return done

    def sync(self, pgid: int | None, *, final: bool = False) -> Synced:
        """Upload what is taken (see the module's rules) and delete what the program removed."""
        with self._lock:
            return self._sync(pgid, final)

    def _sync(self, pgid: int | None, final: bool) -> Synced:
        out = Synced()
        now = self._local_files()
        writing = set() if final or pgid is None else open_for_writing(pgid, self.path)
        # closed is enough where /proc shows what is open; elsewhere a file must also sit still a scan
        settled = SEES_OPEN_FILES or final
        taken = [rel for rel, st in now.items()
                 if self.sent.get(rel) != st and (final or (rel not in writing and
                                                             (settled or self.seen.get(rel) == st)))]
        self.seen = now
        for rel in sorted(taken, key=lambda r: (now[r][1], r)):      # oldest first
            state = now[rel]
            copy = self._snapshot(rel, state)
            if copy is None:
                break                  # changed while copied: it, and what came after it, next scan
            try:
                outcome = self._executor.run([(rel, _upload(self.bucket, copy, self._name(rel)))])[0]
            finally:
                with contextlib.suppress(FileNotFoundError):
                    copy.unlink()
            if not outcome.ok:
                # a later file (a pointer) must not go up without the earlier one (its data): the
                # rest of the scan waits for the next one, which starts again from this file
                out.failed.append(f"{rel}: {outcome.error}")
                break
            self.sent[rel] = state
            out.uploaded.append(rel)
            out.bytes += state[0]
            out.sent += outcome.sent
            out.reused += outcome.reused
        # a removed file (an old checkpoint rotated out) goes from the bucket only once every file
        # the program has now is there: never before the newer checkpoint that replaced it
        pending = [rel for rel, st in now.items() if self.sent.get(rel) != st]
        if out.failed or pending:
            return out
        for rel in sorted(set(self.sent) - set(now)):
            with contextlib.suppress(FileNotFoundError):
                self.bucket.delete(self._name(rel))
            self.sent.pop(rel, None)
            out.deleted.append(rel)
        return out

    def _snapshot(self, rel: str, state: _State) -> Path | None:
        src = self.path / rel
        dest = self.spool / f"{state[2]}-{state[1]}"
        try:
            shutil.copyfile(src, dest)
            st = os.stat(src)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                dest.unlink()
            return None
        if (st.st_size, st.st_mtime_ns, st.st_ino) != state:
            dest.unlink()
            return None
        return dest

    def _report(self, done: Synced, *, final: bool = False) -> None:
        if done.uploaded:
            shown = ", ".join(done.uploaded[:4]) + (f" and {len(done.uploaded) - 4} more" if len(done.uploaded) > 4
                                                     else "")
            reused = f", {_size(done.reused)} of it from an interrupted upload" if done.reused else ""
            self.say(f"checkpoint dir: kept {shown} ({_size(done.bytes)}{reused}) in {self.describe()}"
                     + (" (final upload)" if final else ""))
        if done.deleted:
            self.say(f"checkpoint dir: removed {', '.join(done.deleted[:4])} from the bucket, as the program did")
        for failure in done.failed[:4]:
            self.say(f"checkpoint dir: could not upload {failure}" + ("" if final else "; trying again"))

    def _local_files(self) -> dict[str, _State]:
        """Regular files below the directory (symlinks not followed, not kept)."""
        out: dict[str, _State] = {}
        for root, dirs, files in os.walk(self.path):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
            for name in files:
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                out[os.path.relpath(full, self.path).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return out

    def _prune_empty_dirs(self) -> None:
        for root, dirs, _files in os.walk(self.path, topdown=False):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, d))


def open_for_writing(pgid: int, under: Path) -> set[str]:
    """The files below ``under`` (relative names) that a process of group ``pgid`` holds open
    for writing now. Linux's ``/proc``; elsewhere nothing is known (an unchanged file is taken)."""
    out: set[str] = set()
    base = str(under.resolve())
    for pid in group_members(pgid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith(base + os.sep):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                    flags = next((int(line.split()[1], 8) for line in fh if line.startswith("flags:")), 0)
            except (OSError, ValueError, StopIteration):
                continue
            if flags & _WRITING:
                out.add(os.path.relpath(target, base).replace(os.sep, "/"))
    return out


def _upload(bucket: Bucket, path: Path, name: str) -> Callable[[], Any]:
    from ..staging.options import DEFAULT_PART_SIZE

    return lambda: bucket.upload_job(path, name, part_size=DEFAULT_PART_SIZE)


def _download(bucket: Bucket, info: ObjectInfo, path: Path) -> Callable[[], Any]:
    from ..staging.options import DEFAULT_PART_SIZE

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return lambda: bucket.download_job(info, path, part_size=DEFAULT_PART_SIZE)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _one_line(exc: BaseException) -> str:
    one = getattr(exc, "one_line", None)
    return one() if callable(one) else " ".join(f"{type(exc).__name__}: {exc}".split())[:300]

