"""``tpuctl data CORPUS... --bert-dir DIR --out DEST``: pretraining shards made here, before any
TPU bills, then staged to DEST.

The work is the job side's (``python -m jobs.pretraining``, run as a subprocess: this
process never loads TensorFlow); this command picks the options, keeps a local work directory
per destination (so an interrupted run resumes per part), and uploads through tpuctl's staging
(which a gs:// of the fake GCS, the local provider's buckets and Cloud Storage all go through).
The manifest goes up last: a destination holding a complete manifest holds every shard.
"""

from __future__ import annotations

# json and hashlib load inside the functions that use them: `tpuctl --help` imports this module
import os
import sys

import click

from .common import dry_run_option, json_option, provider_options, resolve_target

MANIFEST = "manifest.json"  # written by jobs.pretraining.parallel


@click.command("data", short_help="Make BERT pretraining shards, then stage them")
@click.argument("corpus", nargs=-1, required=True)
@click.option("--bert-dir", required=True, metavar="DIR",
              help="The model directory (local or gs://) whose vocab.txt tokenizes the corpus.")
@click.option("--out", "out", required=True, metavar="DEST",
              help="Where the shards go: gs://BUCKET/PREFIX or a local directory.")
@click.option("--workers", type=int, default=None, metavar="N",
              help="Processes (default: every core); the output does not depend on it.")
@click.option("--parts", type=int, default=0, metavar="N",
              help="Parts the corpus is cut into (default: max(8, corpus MB / 64)); the output depends on it.")
@click.option("--exact", is_flag=True,
              help="One stream in memory, byte for byte create_pretraining_data.py's output (small corpora).")
@click.option("--num-shards", type=int, default=1, show_default=True, help="Shards written by --exact.")
@click.option("--max-seq-length", type=int, default=128, show_default=True)
@click.option("--max-predictions-per-seq", type=int, default=20, show_default=True)
@click.option("--masked-lm-prob", type=float, default=0.15, show_default=True)
@click.option("--dupe-factor", type=int, default=10, show_default=True)
@click.option("--short-seq-prob", type=float, default=0.1, show_default=True)
@click.option("--do-whole-word-mask/--no-do-whole-word-mask", default=False, show_default=True)
@click.option("--do-lower-case/--no-do-lower-case", default=True, show_default=True)
@click.option("--seed", type=int, default=12345, show_default=True)
@click.option("--work-dir", default=None, metavar="DIR",
              help="Local directory the shards are made in before upload, kept afterwards "
                   "(default: one per DEST and options under TPUCTL_HOME, removed once uploaded).")
@click.option("--runner", type=click.Choice(["local", "beam", "dataflow"]), default="local", show_default=True,
              help="local: worker processes here; beam: the same parts as an Apache Beam pipeline on every "
                   "core here; dataflow: that pipeline on Google Cloud Dataflow (gs:// corpus and DEST). "
                   "beam and dataflow need the beam extra (pip install 'tpuctl[beam]', without TensorFlow).")
@click.option("--region", default=None, metavar="REGION", help="--runner dataflow: the Dataflow region.")
@click.option("--temp-location", default=None, metavar="GS_URL",
              help="--runner dataflow: gs://BUCKET/PATH where Dataflow stages its files.")
@click.option("--job-name", default=None, metavar="NAME", help="--runner dataflow: the Dataflow job's name.")
@click.option("--on", "on", default=None, metavar="CLUSTER",
              help="Make the shards on CLUSTER's host VM (not a TPU worker), so no TPU bills and this machine "
                   "need not stay up: local corpus files and vocab.txt are staged to DEST's bucket first.")
@click.option("--create-bucket", is_flag=True, help="Create DEST's bucket if it is missing.")
@click.option("--location", default="US", show_default=True, metavar="LOCATION",
              help="Location of a bucket made by --create-bucket.")
@provider_options
@dry_run_option
@json_option
def command(corpus: tuple[str, ...], bert_dir: str, out: str, workers: int | None, parts: int,
            exact: bool, num_shards: int, max_seq_length: int, max_predictions_per_seq: int,
            masked_lm_prob: float, dupe_factor: int, short_seq_prob: float, do_whole_word_mask: bool,
            do_lower_case: bool, seed: int, work_dir: str | None, runner: str, region: str | None,
            temp_location: str | None, job_name: str | None, on: str | None, create_bucket: bool,
            location: str, provider: str | None,
            project: str | None, dry_run: bool, as_json: bool) -> None:
    """Make BERT pretraining shards from a text corpus here, then stage them to DEST.

    The corpus has one sentence per line and a blank line between documents (local files, or
    gs:// objects fetched first). A re-run with the same inputs does nothing; an interrupted one
    resumes the parts not yet made. Prints the input_files glob to give `tpuctl train`
    (--set input_files=...). --on CLUSTER makes them on that cluster's host VM instead;
    --runner dataflow on Google Cloud Dataflow.

    \b
      tpuctl data wiki-*.txt --bert-dir ./uncased_L-12_H-768_A-12 --out gs://my-bucket/data/wiki
      tpuctl data wiki-*.txt --bert-dir ./uncased_L-12_H-768_A-12 --out gs://my-bucket/data/wiki --on lab

    The example plans the shards of the corpus of the tiny BERT that python -m jobs.bert.tiny .demo/tiny makes (the README tour).

    \b
    Example:
      tpuctl data .demo/tiny/corpus.txt --bert-dir .demo/tiny --out gs://my-bucket/data/tiny --dry-run
    """
    from ..basics.errors import UsageError
    from ..staging.endpoints import is_bucket_url
    from .common import acting_on, emit_json, resolve_target, say

    _check_options(max_seq_length, max_predictions_per_seq, masked_lm_prob, dupe_factor)
    if on:
        fwd = ["--max-seq-length", str(max_seq_length), "--max-predictions-per-seq", str(max_predictions_per_seq),
               "--masked-lm-prob", str(masked_lm_prob), "--dupe-factor", str(dupe_factor),
               "--short-seq-prob", str(short_seq_prob), "--seed", str(seed),
               "--do-whole-word-mask" if do_whole_word_mask else "--no-do-whole-word-mask",
               "--do-lower-case" if do_lower_case else "--no-do-lower-case"]
        fwd += ["--workers", str(workers)] if workers else []
        fwd += ["--parts", str(parts)] if parts else []
        fwd += ["--exact", "--num-shards", str(num_shards)] if exact else []
        fwd += ["--runner", runner] if runner != "local" else []
        from .data_on_host import make_on_host

        return make_on_host(on, corpus, bert_dir, out, tuple(fwd), runner=runner, provider=provider,
                            project=project, create_bucket=create_bucket, location=location, dry_run=dry_run,
                            as_json=as_json)
    if runner == "dataflow":
        return _dataflow(corpus, bert_dir, out, workers, parts, exact, seed, do_lower_case, region,
                         temp_location, job_name, provider, project, dry_run, as_json, _job_options(
                             max_seq_length, max_predictions_per_seq, masked_lm_prob, dupe_factor,
                             short_seq_prob, do_whole_word_mask))
    if any(is_bucket_url(p) for p in (*corpus, bert_dir)):
        # the host VM's side of --on (or a corpus kept in a bucket): fetched here first
        corpus, bert_dir = _fetch_inputs(corpus, bert_dir, resolve_target(provider, project))
    for path in corpus:
        if not os.path.isfile(path):
            raise UsageError(f"corpus file {path} is not a local file",
                             hint="give local text files or gs:// objects")
    vocab = _local_vocab(bert_dir)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}", hint="give at least 1")
    target, local = None, out
    if is_bucket_url(out):
        from ..basics import validate

        validate.bucket_url(out)
        target = resolve_target(provider, project)
        acting_on(target, "data")
    glob = f"{out.rstrip('/')}/{'pretraining' if exact else 'part'}-*.tfrecord"
    argv = [sys.executable, "-m", "jobs.pretraining", "--input_file", ",".join(corpus),
            "--output_dir", local, "--vocab_file", vocab,
            "--do_lower_case" if do_lower_case else "--no-do_lower_case",
            "--max_seq_length", str(max_seq_length), "--max_predictions_per_seq", str(max_predictions_per_seq),
            "--masked_lm_prob", str(masked_lm_prob), "--dupe_factor", str(dupe_factor),
            "--short_seq_prob", str(short_seq_prob),
            "--do_whole_word_mask" if do_whole_word_mask else "--no-do_whole_word_mask",
            "--random_seed", str(seed)]
    argv += ["--exact", "--num_shards", str(num_shards)] if exact else ["--parts", str(parts)]
    if target is not None:
        # one work directory per (DEST, options): other options never meet these parts
        local = work_dir or str(_work_dir(out, argv))
        argv[argv.index("--output_dir") + 1] = local
    if not exact:
        argv += ["--workers", str(workers or os.cpu_count() or 1)]
    if runner == "beam":
        if exact:
            raise UsageError("--exact is one stream in one process", hint="drop --runner beam, or drop --exact")
        argv += ["--runner", "beam"]
    if dry_run:
        doc = {"out": out, "work_dir": local, "command": argv[1:], "input_files": glob}
        if as_json:
            emit_json({**doc, "dry_run": True})
        else:
            click.echo(f"would run: python {' '.join(argv[1:])}")
            if target is not None:
                click.echo(f"would stage {local} -> {out} (manifest last)")
            click.echo(f"input_files: {glob}")
        return
    bucket = None
    if target is not None:
        from ..staging.endpoints import open_endpoint

        dest = open_endpoint(out, target)
        bucket, prefix = dest.bucket, dest.prefix
        if not create_bucket and not bucket.exists():
            raise UsageError(f"bucket gs://{out[5:].split('/')[0]} does not exist",
                             hint="pass --create-bucket (and --location), or check the name")
        if not work_dir:
            from ..basics import private

            private.make_dirs(local)      # in TPUCTL_HOME: the owner's alone, as the rest of it
        _seed_manifest(bucket, prefix, local, out)
    result = _make(argv, local, out)
    if target is not None and (result["made_parts"] or not _dest_complete(bucket, prefix)):
        from ..staging.run import stage_paths

        say(f"tpuctl data: staging {local} -> {out}")
        report = stage_paths(local, out, target, say=say, excludes=(MANIFEST, "*.partial", "*.tmp"),
                             create_bucket=create_bucket, location=location)
        if not report.ok:
            from ..basics.errors import TpuctlError

            raise TpuctlError(f"{len(report.failures)} shard(s) failed to upload to {out}",
                              hint="re-run the same command: only what is missing is sent")
        with open(os.path.join(local, MANIFEST), "rb") as f:
            bucket.write_bytes(_name(prefix, MANIFEST), f.read())
    if target is not None and not work_dir:
        import shutil

        shutil.rmtree(local, ignore_errors=True)  # DEST holds it all now (and its manifest says so)
    doc = {"out": out, "instances": result["instances"], "shards": result["shards"],
           "made_parts": result["made_parts"], "input_files": glob, "manifest": f"{out.rstrip('/')}/{MANIFEST}"}
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['instances']} instances in {doc['shards']} shard(s) at {out}"
                   + ("" if result["made_parts"] else " (already complete: nothing was made)"))
        click.echo(f"input_files: {glob}")


def _local_vocab(bert_dir: str) -> str:
    """``bert_dir``'s vocab.txt, a local file no larger than a vocabulary: checked by its size
    before anything reads it (a file of 133 MB took the tokenizer 29 s to run out of memory)."""
    from ..basics.errors import UsageError
    from ..staging.endpoints import is_bucket_url

    vocab = os.path.join(bert_dir, "vocab.txt")
    if is_bucket_url(bert_dir) or not os.path.isfile(vocab):
        raise UsageError(f"{vocab} does not exist", hint="give --bert-dir a local model directory holding vocab.txt")
    _check_vocab_size(vocab, os.path.getsize(vocab))
    return vocab


def _check_vocab_size(vocab: str, size: int) -> None:
    from jobs.bert.vocab import too_large

    from ..basics.errors import UsageError

    why = too_large(size)
    if why:
        raise UsageError(f"{vocab} {why}", hint="give --bert-dir the model directory whose vocab.txt tokenizes "
                                                "the corpus")


def _fetch_inputs(corpus: tuple[str, ...], bert_dir: str, target) -> tuple[tuple[str, ...], str]:
    """gs:// corpus files and vocab.txt copied to a local directory (named by their URLs; an
    object already there at its size is not fetched again)."""
    import hashlib
    import json

    from ..basics import private, validate
    from ..basics.config import home
    from ..basics.errors import UsageError
    from ..cloud.storage import open_bucket
    from ..cloud.storage.base import ObjectNotFound
    from ..staging.endpoints import is_bucket_url

    key = hashlib.sha256(json.dumps([list(corpus), bert_dir]).encode()).hexdigest()[:16]
    root = home() / "data" / "inputs" / key

    def fetch(url: str, rel: str, *, vocab: bool = False) -> str:
        u = validate.bucket_url(url)
        bucket = open_bucket(u, target)
        info = bucket.stat(u.prefix)
        if info is None:
            raise UsageError(f"{url} does not exist", hint="check the name (gcloud storage ls)")
        if vocab:
            _check_vocab_size(url, info.size)      # before the download
        path = root / rel
        if not (path.is_file() and path.stat().st_size == info.size):
            private.make_dirs(path.parent)
            try:
                bucket.download_file(u.prefix, path)
            except ObjectNotFound:
                raise UsageError(f"{url} does not exist", hint="check the name (gcloud storage ls)") from None
        return str(path)

    local = tuple(fetch(c, f"corpus/{i:05d}-{c.rsplit('/', 1)[-1]}") if is_bucket_url(c) else c
                  for i, c in enumerate(corpus))
    if is_bucket_url(bert_dir):
        name = bert_dir.rstrip("/").rsplit("/", 1)[-1]  # the directory's name says cased or uncased
        fetch(f"{bert_dir.rstrip('/')}/vocab.txt", f"{name}/vocab.txt", vocab=True)
        bert_dir = str(root / name)
    return local, bert_dir


def _check_options(max_seq_length: int, max_predictions_per_seq: int, masked_lm_prob: float,
                   dupe_factor: int) -> None:
    """The job side's rule for the data options (``jobs.pretraining.data_options``, no TensorFlow), here and
    first, in this command's option names: before a corpus is staged for --on or Dataflow."""
    from jobs.pretraining.data_options import DataOptions

    from ..basics.errors import UsageError

    problem = DataOptions(max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
                          masked_lm_prob=masked_lm_prob, dupe_factor=dupe_factor).problem(
        flag=lambda name: "--" + name.replace("_", "-"))
    if problem:
        raise UsageError(problem[0], hint=problem[1])


def _job_options(max_seq_length: int, max_predictions_per_seq: int, masked_lm_prob: float,
                 dupe_factor: int, short_seq_prob: float, do_whole_word_mask: bool) -> list[str]:
    return ["--max_seq_length", str(max_seq_length), "--max_predictions_per_seq", str(max_predictions_per_seq),
            "--masked_lm_prob", str(masked_lm_prob), "--dupe_factor", str(dupe_factor),
            "--short_seq_prob", str(short_seq_prob),
            "--do_whole_word_mask" if do_whole_word_mask else "--no-do_whole_word_mask"]


def _dataflow(corpus, bert_dir, out, workers, parts, exact, seed, do_lower_case, region, temp_location,
              job_name, provider, project, dry_run, as_json, options: list[str]) -> None:
    """--runner dataflow: the Beam pipeline submitted to Dataflow, which reads the corpus and
    writes DEST in place (nothing is made or staged here). Untested against Dataflow itself."""
    from ..basics.errors import TpuctlError, UsageError
    from .common import emit_json

    if exact:
        raise UsageError("--exact is one stream in one process", hint="drop --runner dataflow, or drop --exact")
    vocab = _local_vocab(bert_dir)
    if not project:
        try:
            project = resolve_target("gcp", None).project
        except TpuctlError:
            project = None
    from ..basics import private
    from ..basics.config import home
    from ..runs.wheel import build_wheel

    # the workers install this code (the wheel of the running tpuctl) and the fast tokenizer
    wheel = build_wheel(home() / "wheels")
    requirements = home() / "data" / "dataflow-requirements.txt"
    private.make_dirs(requirements.parent)
    with open(requirements, "w", opener=private.opener) as fh:
        fh.write("\n".join(_data_requirements()) + "\n")
    argv = [sys.executable, "-m", "jobs.pretraining", "--input_file", ",".join(corpus),
            "--output_dir", out, "--vocab_file", vocab,
            "--do_lower_case" if do_lower_case else "--no-do_lower_case", *options,
            "--random_seed", str(seed), "--parts", str(parts), "--runner", "dataflow",
            "--project", project or "", "--region", region or "", "--temp_location", temp_location or "",
            "--extra_package", str(wheel), "--requirements_file", str(requirements)]
    argv += ["--job_name", job_name] if job_name else []
    argv += ["--max_num_workers", str(workers)] if workers else []
    # the job checks the options and names the pipeline's (one place decides them)
    checked = _make([*argv, "--dry_run"], out, out)
    glob = f"{out.rstrip('/')}/part-*.tfrecord"
    if dry_run:
        doc = {"out": out, "runner": "dataflow", "pipeline_options": checked["pipeline_options"],
               "command": argv[1:], "input_files": glob, "dry_run": True}
        if as_json:
            emit_json(doc)
        else:
            click.echo(f"would run: python {' '.join(argv[1:])}")
            click.echo(f"Beam pipeline options: {' '.join(doc['pipeline_options'])}")
            click.echo(f"input_files: {glob}")
        return
    result = _make(argv, out, out)
    doc = {"out": out, "runner": "dataflow", "instances": result["instances"], "shards": result["shards"],
           "made_parts": result["made_parts"], "input_files": glob, "manifest": f"{out.rstrip('/')}/{MANIFEST}"}
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['instances']} instances in {doc['shards']} shard(s) at {out} (Dataflow)")
        click.echo(f"input_files: {glob}")


def _data_requirements() -> list[str]:
    """The data extra's requirements (pyproject.toml), as installed with tpuctl."""
    from importlib import metadata

    try:
        reqs = metadata.requires("tpuctl") or []
    except metadata.PackageNotFoundError:
        reqs = []
    return [r.split(";")[0].strip() for r in reqs if "extra ==" in r and '"data"' in r.replace("'", '"')]


def _work_dir(out: str, argv: list[str]):
    import hashlib
    import json

    from ..basics.config import home

    key = json.dumps([out.rstrip("/"), argv[argv.index("--input_file"):]])
    return home() / "data" / hashlib.sha256(key.encode()).hexdigest()[:16]


def _name(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


def _seed_manifest(bucket, prefix: str, local: str, out: str) -> None:
    """DEST's manifest, brought here when the work directory has none: a complete one makes the
    run a no-op, one of other options refuses it; shards with no manifest are refused."""
    from ..basics.errors import UsageError

    if os.path.exists(os.path.join(local, MANIFEST)):
        return
    names = [o.name for o in bucket.list(f"{prefix}/" if prefix else "")]
    if _name(prefix, MANIFEST) in names:
        os.makedirs(local, exist_ok=True)
        with open(os.path.join(local, MANIFEST), "wb") as f:
            f.write(bucket.read_bytes(_name(prefix, MANIFEST)))
    elif any(n.endswith(".tfrecord") for n in names):
        raise UsageError(f"{out} already holds TFRecord shards and no {MANIFEST}",
                         hint="give another --out prefix (shards of other options are not mixed)")


def _dest_complete(bucket, prefix: str) -> bool:
    import json

    from ..cloud.storage.base import ObjectNotFound

    try:
        return bool(json.loads(bucket.read_bytes(_name(prefix, MANIFEST))).get("complete"))
    except (ObjectNotFound, ValueError):  # missing or unreadable: not complete
        return False


def _make(argv: list[str], local: str, out: str) -> dict:
    import json
    import subprocess

    from ..basics.errors import TpuctlError, UsageError

    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if proc.returncode == 2:
        line = lines[-1].removeprefix("tpuctl: error: ") if lines else "bad input"
        raise UsageError(line.replace(local, out))
    if proc.returncode != 0:
        raise TpuctlError(f"data creation failed (exit {proc.returncode}): {lines[-1] if lines else ''}",
                          hint=f"re-run the same command to resume; the parts made so far are in {local}")
    for line in lines:
        if line.startswith(("resuming", "creating")) or "nothing to do" in line:
            click.echo(f"tpuctl data: {line.replace(local, out)}", err=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])
