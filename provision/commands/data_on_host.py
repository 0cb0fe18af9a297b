"""``tpuctl data ... --on CLUSTER``: the shards made on the cluster's host VM, not here.

Data creation is CPU work for an hour or more at corpus scale: on the host VM (always on, a few
cents an hour) no TPU bills while it runs and this machine may go offline. The host must be
reachable from the corpus, so local corpus files and vocab.txt are staged to DEST's bucket under
``tpuctl/data/<id>/inputs`` first; then the host runs the same ``tpuctl data`` on them
(:mod:`provision.host.data_requests`): on GCP the host VM's agent, told by a request in the
bucket its agent watches; on the local provider (whose "VM" is this machine) a detached process
here, as ``train --detach`` does. Everything is checked before anything is staged.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from ..host import data_requests as dr


def make_on_host(cluster: str, corpus: tuple[str, ...], bert_dir: str, out: str, options: tuple[str, ...], *,
                 runner: str, provider: str | None, project: str | None, create_bucket: bool, location: str,
                 dry_run: bool, as_json: bool) -> None:
    from ..basics import validate
    from ..basics.errors import UsageError
    from ..staging.endpoints import is_bucket_url
    from ..sweeps.handover import check_bucket, check_host
    from .common import acting_on, emit_json, open_provider, resolve_target, say

    if runner == "dataflow":
        raise UsageError("--on runs tpuctl data on a host VM and --runner dataflow on Dataflow",
                         hint="drop one of them")
    if not is_bucket_url(out):
        raise UsageError(f"--on {cluster} writes from the host VM: {out} is not a bucket",
                         hint="give --out gs://BUCKET/PREFIX")
    url = validate.bucket_url(out)
    for path in corpus:
        if not is_bucket_url(path) and not os.path.isfile(path):
            raise UsageError(f"corpus file {path} does not exist", hint="give local text files or gs:// objects")
    vocab = f"{bert_dir.rstrip('/')}/vocab.txt"
    if not is_bucket_url(bert_dir) and not os.path.isfile(vocab):
        raise UsageError(f"{vocab} does not exist", hint="give --bert-dir a model directory holding vocab.txt")
    if not is_bucket_url(bert_dir):
        from jobs.bert.vocab import too_large

        why = too_large(os.path.getsize(vocab))
        if why:   # the host would refuse it: refused here, before anything is staged
            raise UsageError(f"{vocab} {why}", hint="give --bert-dir the model directory whose vocab.txt "
                                                    "tokenizes the corpus")
    local = [p for p in corpus if not is_bucket_url(p)]
    if local:  # what the host would refuse, refused here before anything is staged (pure Python)
        from jobs.errors import ConfigError
        from jobs.pretraining import corpus_inputs

        try:
            corpus_inputs.check_not_empty([corpus_inputs.inspect_input(p) for p in local])
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    target = resolve_target(provider, project)
    acting_on(target, "data")
    prov = open_provider(target)
    host = check_host(prov, cluster, purpose="make the data on", option="--on")
    from ..cloud.storage import open_bucket

    bucket_url = host.bucket or f"gs://{url.bucket}"
    if prov.name != "local":
        check_bucket(host, f"gs://{url.bucket}")  # the request goes where its agent looks
    bucket = open_bucket(validate.bucket_url(bucket_url), target)
    if not bucket.exists() and not create_bucket:
        raise UsageError(f"bucket {bucket_url} does not exist", hint="pass --create-bucket (and --location), or check the name")

    local_files = [p for p in (*corpus, vocab) if not is_bucket_url(p)]
    rid = dr.request_id(out, options, [(os.path.abspath(p), os.path.getsize(p), int(os.path.getmtime(p)))
                                       for p in local_files] + [(p, 0, 0) for p in corpus if is_bucket_url(p)])
    base = f"gs://{url.bucket}/{dr.inputs_prefix(rid)}"
    staged_corpus = tuple(c if is_bucket_url(c) else f"{base}/corpus/{i:05d}-{os.path.basename(c)}"
                          for i, c in enumerate(corpus))
    # the directory's name says cased or uncased (jobs.bert.casing): keep it
    staged_bert = bert_dir if is_bucket_url(bert_dir) else f"{base}/{os.path.basename(os.path.abspath(bert_dir))}"
    req = dr.DataRequest(rid, staged_corpus, staged_bert, out, options)
    local_log = _local_log(rid) if prov.name == "local" else None
    follow = (f"tail -f {local_log}" if local_log else
              f"gcloud storage cat gs://{url.bucket}/{dr.log_name(rid)}  (the host uploads it as it runs)")
    doc = {"on": cluster, "where": "the host VM" if prov.name != "local" else "a detached process on this machine "
           "(the local provider's host VM)", "request": dr.to_json(req), "out": out,
           "manifest": f"{out.rstrip('/')}/manifest.json", "log": str(local_log) if local_log else
           f"gs://{url.bucket}/{dr.log_name(rid)}", "follow": follow,
           "input_files": f"{out.rstrip('/')}/{'pretraining' if '--exact' in options else 'part'}-*.tfrecord"}
    if dry_run:
        if as_json:
            emit_json({**doc, "dry_run": True})
        else:
            for src, dst in zip((*corpus, vocab), (*staged_corpus, f"{staged_bert}/vocab.txt")):
                if src != dst:
                    click.echo(f"would stage {src} -> {dst}")
            click.echo(f"would run on {cluster}'s host VM: tpuctl {' '.join(dr.data_argv(req))}")
        return
    if not bucket.exists():
        bucket.create(location)
    for src, dst in zip((*corpus, vocab), (*staged_corpus, f"{staged_bert}/vocab.txt")):
        if src == dst:
            continue
        name = validate.bucket_url(dst).prefix
        info = bucket.stat(name)
        if info is None or info.size != os.path.getsize(src):
            say(f"tpuctl data: staging {src} -> {dst}")
            bucket.upload_file(src, name)
    if prov.name == "local":
        _start_here(req, target, local_log)
    else:
        from ..sweeps.handover import prepare_host

        prepare_host(prov, bucket, host, log=say, wheel_prefix=dr.request_prefix(rid), kind="data", ident=rid,
                     fields={"request": dr.digest(req)})
        bucket.write_bytes(dr.request_name(cluster, rid),
                           json.dumps({**dr.to_json(req), "time": time.time()}).encode())
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"tpuctl data runs on {cluster}'s host VM ({doc['where']}); it writes {doc['manifest']} last")
        click.echo(f"follow its log: {follow}")
        click.echo(f"input_files: {doc['input_files']}")


def _local_log(rid: str):
    from ..basics.config import home

    return home() / "data" / f"{rid}.log"


def _start_here(req: dr.DataRequest, target, log_path) -> None:
    """The local provider's host VM is this machine: a detached ``tpuctl data`` (as the agent
    of a GCP host VM starts it), which outlives this command."""
    import subprocess

    from ..basics import private

    private.make_dirs(log_path.parent)
    argv = [sys.executable, "-m", "provision", *dr.data_argv(req), "--provider", "local"]
    with open(log_path, "ab", opener=private.opener) as out:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                         env=dict(os.environ))
