"""``tpuctl data --on CLUSTER``: pretraining data made on a cluster's host VM (pure: no I/O).

The laptop stages the corpus and vocab to the bucket, then writes one request,
``tpuctl/clusters/<cluster>/data/<id>.json``; the host VM's agent (:mod:`provision.host.agent`,
``watch_data``) runs ``tpuctl data`` on the staged inputs, uploads its log to
``tpuctl/data/<id>/log.txt`` and records ``status.json`` when it ends. A request comes from the
bucket, so it is parsed, not trusted: gs:// locations and a fixed set of options with plain
values only, turned into an argv here, never a shell line.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

DATA_PREFIX = "tpuctl/data"
# the options `tpuctl data` passes on (flag -> value pattern; None: a flag without a value)
OPTIONS: dict[str, str | None] = {
    "--workers": r"[0-9]{1,4}", "--parts": r"[0-9]{1,6}", "--num-shards": r"[0-9]{1,6}",
    "--max-seq-length": r"[0-9]{1,5}", "--max-predictions-per-seq": r"[0-9]{1,5}",
    "--masked-lm-prob": r"[0-9.eE-]{1,24}", "--dupe-factor": r"[0-9]{1,4}",
    "--short-seq-prob": r"[0-9.eE-]{1,24}", "--seed": r"-?[0-9]{1,20}", "--runner": r"local|beam",
    "--exact": None, "--do-whole-word-mask": None, "--no-do-whole-word-mask": None,
    "--do-lower-case": None, "--no-do-lower-case": None,
}
_URL = re.compile(r"^gs://[a-z0-9][-_.a-z0-9]{1,221}[a-z0-9](/[^\x00-\x1f]*)?$")
_ID = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class DataRequest:
    request_id: str
    corpus: tuple[str, ...]             # gs:// objects, in order (the parts depend on it)
    bert_dir: str                       # gs:// prefix holding vocab.txt
    out: str                            # gs://BUCKET/PREFIX
    options: tuple[str, ...] = ()       # flags and values, each checked against OPTIONS


def request_id(out: str, options: tuple[str, ...], inputs: list[tuple[str, int, int]]) -> str:
    """Stable for the same destination, options and input files (name, size, mtime): a re-run
    stages nothing new and names the same request."""
    key = json.dumps([out.rstrip("/"), list(options), inputs])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def digest(req: DataRequest) -> str:
    """sha256 of a request as its JSON says it (what the host VM's pin holds: provision.runs.pins)."""
    return hashlib.sha256(json.dumps(to_json(req), sort_keys=True).encode()).hexdigest()


def requests_prefix(cluster: str) -> str:
    return f"tpuctl/clusters/{cluster}/data/"


def request_name(cluster: str, rid: str) -> str:
    return f"{requests_prefix(cluster)}{rid}.json"


def request_prefix(rid: str) -> str:
    """The request's directory in the bucket: its inputs, log, status and the wheel it staged."""
    return f"{DATA_PREFIX}/{rid}"


def inputs_prefix(rid: str) -> str:
    return f"{request_prefix(rid)}/inputs"


def log_name(rid: str) -> str:
    return f"{request_prefix(rid)}/log.txt"


def status_name(rid: str) -> str:
    return f"{request_prefix(rid)}/status.json"


def to_json(req: DataRequest) -> dict:
    return {"id": req.request_id, "corpus": list(req.corpus), "bert_dir": req.bert_dir, "out": req.out,
            "options": list(req.options)}


def from_json(data: object) -> DataRequest | None:
    """The request, or None if it is not one this agent will run."""
    if not isinstance(data, dict):
        return None
    rid, corpus, bert_dir, out, options = (data.get(k) for k in ("id", "corpus", "bert_dir", "out", "options"))
    if not (isinstance(rid, str) and _ID.match(rid)):
        return None
    if not (isinstance(corpus, list) and corpus and all(isinstance(c, str) and _URL.match(c) for c in corpus)):
        return None
    if not all(isinstance(u, str) and _URL.match(u) for u in (bert_dir, out)):
        return None
    if not isinstance(options, list) or not _options_ok(options):
        return None
    return DataRequest(rid, tuple(corpus), bert_dir, out, tuple(options))


def _options_ok(options: list) -> bool:
    i = 0
    while i < len(options):
        flag = options[i]
        if not isinstance(flag, str) or flag not in OPTIONS:
            return False
        pattern = OPTIONS[flag]
        if pattern is not None:
            if i + 1 >= len(options) or not isinstance(options[i + 1], str) \
                    or not re.fullmatch(pattern, options[i + 1]):
                return False
            i += 1
        i += 1
    return True


def data_argv(req: DataRequest) -> list[str]:
    """``tpuctl data`` arguments that make the request's shards (after the program name)."""
    return ["data", *req.corpus, "--bert-dir", req.bert_dir, "--out", req.out, *req.options]
