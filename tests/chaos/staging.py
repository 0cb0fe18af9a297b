"""Staging under network faults: `tpuctl stage` through :mod:`tests.faultproxy` to fake-gcs-server.

One seed runs four scenarios in turn — upload, no-op re-stage, download, ``--delete`` — each
through the installed ``tpuctl`` with a share of its requests faulted, and checks after each
(a flaky network must never leave a bucket that looks staged but is not):

- nothing visible in the bucket or the local tree is wrong or partial (every object or file
  is absent or byte-identical to a version that was staged; no partial file is visible);
- exit 0 means every file is there, byte for byte; at these fault rates every run should exit 0
  (an exit 1 is counted as a violation, and must still be one error line, no traceback, naming
  every file that did not arrive);
- no run hangs (each has a time limit), and no resumable-session URI appears in any output;
- a re-run without faults exits 0, and one more is a no-op.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.faultproxy import FaultProxy

TPUCTL = Path(sys.executable).with_name("tpuctl")
TIME_LIMIT = 300.0
# The requests of a resumable session (a few per seed, where a lost answer leaves the session
# finished behind the client's back) are faulted at this rate, the rest at the seed's rate.
HOT_RATE = 0.5
RESUMABLE_SIZE = 9 << 20  # above google-cloud-storage's 8 MiB multipart limit, below two 5M parts


def session_request(method: str, path: str) -> bool:
    return method == "PUT" and "upload_id=" in path


@dataclass
class Size:
    """How big a seed's trees are: ``small`` for ``make test``, ``full`` for the campaign."""

    small_files: int = 12
    large: int = 1_100_000  # sent in parts (at least twice ``part``)
    resumable: int = 0  # files above the 8 MiB multipart limit and below two parts: resumable uploads
    part: str = "256K"


SMALL = Size()
FULL = Size(small_files=60, large=11_000_000, resumable=2, part="5M")


@dataclass
class Result:
    seed: int
    rate: float
    scenarios: int = 0
    runs: int = 0
    failed_runs: int = 0  # tpuctl exited 1 under faults (allowed when it says what did not arrive)
    requests: int = 0
    exposed: int = 0  # requests while faults were on
    faults: Counter = field(default_factory=Counter)
    session_faults: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def make_tree(root: Path, rng: random.Random, size: Size) -> dict[str, bytes]:
    files: dict[str, bytes] = {
        "model/bert_model.ckpt.data-00000-of-00001": rng.randbytes(size.large),
        "model/vocab.txt": b"[PAD]\n[UNK]\n",
        "données/é ü ñ 日本語.txt": b"unicode name\n",
        "with space/a file name.txt": b"spaces\n" * 3,
        "empty.txt": b"",
    }
    for i in range(size.small_files):
        files[f"small/f {i:03d}.txt"] = rng.randbytes(rng.randint(1, 4000))
    for i in range(size.resumable):
        files[f"model/big single {i}.bin"] = rng.randbytes(RESUMABLE_SIZE)
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def bucket_tree(client, bucket: str, prefix: str) -> dict[str, bytes]:
    """What a reader sees under ``prefix`` (straight to the server, never through the proxy)."""
    return {b.name[len(prefix):]: b.download_as_bytes() for b in client.list_blobs(bucket, prefix=prefix)}


def _run(args: list[str], env: dict[str, str]) -> tuple[int | None, str, str]:
    try:
        proc = subprocess.run([str(TPUCTL), *args], capture_output=True, text=True, env=env, timeout=TIME_LIMIT,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        return None, str(exc.stdout or ""), str(exc.stderr or "")
    return proc.returncode, proc.stdout, proc.stderr


class Campaign:
    def __init__(self, fake, workdir: Path, size: Size = SMALL):
        self.fake, self.workdir, self.size = fake, workdir, size
        self.client = fake.client()

    def run_seed(self, seed: int, rate: float) -> Result:
        rng = random.Random(seed)
        res = Result(seed, rate)
        home = self.workdir / f"seed-{seed}"
        shutil.rmtree(home, ignore_errors=True)
        src, back = home / "src", home / "back"
        files = make_tree(src, rng, self.size)
        bucket = self.fake.create_bucket()
        prefix = "data/"
        url = f"gs://{bucket}/{prefix}"
        with FaultProxy(self.fake.url, seed=seed, rate=rate, hot=session_request, hot_rate=HOT_RATE) as proxy:
            env = {**os.environ, **self.fake.env(), "STORAGE_EMULATOR_HOST": proxy.url}
            env.pop("TPUCTL_CONFIG", None)

            def bucket_view() -> dict[str, bytes]:
                return bucket_tree(self.client, bucket, prefix)

            # 1. upload
            self._scenario(res, proxy, env, "upload", [str(src), url], files, bucket_view, {})
            # 2. no-op re-stage under faults: nothing may change or be lost
            self._scenario(res, proxy, env, "re-stage", [str(src), url], files, bucket_view, files)
            # 3. download
            self._scenario(res, proxy, env, "download", [url, str(back)], files, lambda: read_tree(back), {})
            # 4. --delete: one file changed, one added, two removed from SRC; extras in DEST go
            old = dict(files)
            changed = dict(files)
            gone = sorted(k for k in changed if k.startswith("small/"))[:2]
            for rel in gone:
                del changed[rel]
                (src / rel).unlink()
            changed["model/vocab.txt"] = b"[PAD]\n[UNK]\n[CLS]\n"
            changed["added/new ñ.txt"] = b"new\n"
            for rel in ("model/vocab.txt", "added/new ñ.txt"):
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_bytes(changed[rel])
            self._scenario(res, proxy, env, "--delete", [str(src), url, "--delete"], changed, bucket_view, old)
            res.requests, res.exposed = proxy.requests, proxy.exposed
            res.faults, res.session_faults = proxy.faults, proxy.hot_faults
        shutil.rmtree(home, ignore_errors=True)
        return res

    def _scenario(self, res: Result, proxy: FaultProxy, env: dict, name: str, args: list[str],
                  want: dict[str, bytes], view, before: dict[str, bytes]) -> None:
        """One scenario under faults, then re-runs without faults until it converges."""
        res.scenarios += 1
        tag = f"seed {res.seed} {name}"
        argv = ["stage", *args, "--part-size", self.size.part, "--json"]
        proxy.enabled = True
        code, out, err = _run(argv, env)
        res.runs += 1
        self._check_output(res, tag, code, out, err)
        seen = view()
        for rel, data in seen.items():
            if data != want.get(rel) and data != before.get(rel):
                res.violations.append(f"{tag}: {rel} is wrong or partial ({len(data)} bytes)")
            if ".tpuctl-partial." in rel:
                res.violations.append(f"{tag}: partial file {rel} is visible")
        missing = sorted(rel for rel in want if seen.get(rel) != want[rel])
        if code == 0 and missing:
            res.violations.append(f"{tag}: exit 0 but {missing[:3]} did not arrive")
        if code == 1:  # allowed only as one line naming what did not arrive, and still counted:
            res.failed_runs += 1  # at these fault rates a stage is expected to end with exit 0
            res.violations.append(f"{tag}: exit 1 under faults: {_error_line(err)[:300]}")
            named = self._named(out)
            unnamed = [rel for rel in missing if rel not in named]
            if named is not None and unnamed:
                res.violations.append(f"{tag}: failed without naming {unnamed[:3]}")
        # converge without faults: exit 0, everything there, then a no-op
        proxy.enabled = False
        code, out, err = _run(argv, env)
        res.runs += 1
        self._check_output(res, tag + " (re-run)", code, out, err)
        if code != 0 or view() != want:
            res.violations.append(f"{tag}: a re-run without faults did not converge (exit {code}): {err.strip()[-200:]}")
        code, out, err = _run(argv, env)
        res.runs += 1
        doc = _json(out)
        if code != 0 or doc.get("bytes_sent") != 0:
            res.violations.append(f"{tag}: a second re-run was not a no-op (exit {code}, "
                                  f"{doc.get('bytes_sent')} bytes sent)")

    @staticmethod
    def _named(out: str) -> set[str] | None:
        doc = _json(out)
        if "failures" not in doc:
            return None  # failed before any transfer (listing): the line names the bucket
        return {f["path"] for f in doc["failures"]}

    @staticmethod
    def _check_output(res: Result, tag: str, code: int | None, out: str, err: str) -> None:
        if code is None:
            res.violations.append(f"{tag}: hung (killed after {TIME_LIMIT:.0f}s)")
            return
        if code not in (0, 1):
            res.violations.append(f"{tag}: exit {code}: {err.strip()[-300:]}")
        if "Traceback" in err or "internal error" in err:
            res.violations.append(f"{tag}: traceback or internal error: {err.strip()[-300:]}")
        if "upload_id" in out + err or "uploadType=resumable" in out + err:
            res.violations.append(f"{tag}: a resumable session URI was printed")
        errors = [line for line in err.splitlines() if line.startswith("tpuctl: error:")]
        if code == 1 and len(errors) != 1:
            res.violations.append(f"{tag}: exit 1 with {len(errors)} error lines")
        if code == 1 and not _json(out):
            res.violations.append(f"{tag}: --json printed no document")


def _error_line(err: str) -> str:
    return next((line for line in err.splitlines() if line.startswith("tpuctl: error:")), err.strip()[-300:])


def _json(out: str) -> dict:
    try:
        doc = json.loads(out)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def summarize(results: list[Result]) -> dict:
    faults: Counter = Counter()
    session: Counter = Counter()
    for r in results:
        faults.update(r.faults)
        session.update(r.session_faults)
    return {"seeds": len(results), "scenarios": sum(r.scenarios for r in results),
            "tpuctl_runs": sum(r.runs for r in results),
            "runs_exit_1_under_faults": sum(r.failed_runs for r in results),
            "requests": sum(r.requests for r in results),
            "requests_under_faults": sum(r.exposed for r in results), "faults": dict(sorted(faults.items())),
            "faults_total": sum(faults.values()),
            "of_which_on_resumable_session_requests": dict(sorted(session.items())),
            "violations": [v for r in results for v in r.violations]}
