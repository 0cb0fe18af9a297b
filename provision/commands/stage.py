"""``tpuctl stage SRC DEST``: copy BERT checkpoints and data into a bucket (or back), rsync-style."""

from __future__ import annotations

import click

from .common import dry_run_option, json_option, provider_options


@click.command("stage", short_help="Copy to or from a bucket, sending only what changed")
@click.argument("src")
@click.argument("dest")
@click.option("--delete", is_flag=True, help="Remove from DEST what is no longer in SRC.")
@click.option("--exclude", multiple=True, metavar="PATTERN",
              help="Skip paths matching PATTERN (repeatable; gitignore-like, also read from SRC/.tpuctlignore).")
@click.option("--create-bucket", is_flag=True, help="Create the destination bucket if it is missing.")
@click.option("--location", default=None, metavar="LOCATION",
              help="Location of a bucket made by --create-bucket (default: the region of the zone, else US).")
@click.option("--jobs", "jobs", type=int, default=8, show_default=True, metavar="N",
              help="Transfers in flight at once (files and parts of large files).")
@click.option("--part-size", default="16M", show_default=True, metavar="SIZE",
              help="Files of at least twice this size go in parallel parts of this size.")
@provider_options
@dry_run_option
@json_option
def command(src: str, dest: str, delete: bool, exclude: tuple[str, ...], create_bucket: bool,
            location: str | None, jobs: int, part_size: str, provider: str | None, project: str | None,
            dry_run: bool, as_json: bool) -> None:
    """Copy SRC to DEST (a local path or gs://BUCKET/PREFIX), sending only what changed.

    A file is skipped when DEST already has it with the same size and CRC32C. Every file sent
    is verified by CRC32C; an interrupted run, re-run, sends only what is missing.

    \b
      tpuctl stage ./uncased_L-12_H-768_A-12 gs://my-bucket/bert/base --create-bucket
      tpuctl stage gs://my-bucket/bert/base ./bert-base --exclude '*.tmp'

    The example stages the tiny BERT that python -m jobs.bert.tiny .demo/tiny makes (the README tour).

    \b
    Example:
      tpuctl stage .demo/tiny gs://my-bucket/bert/tiny --create-bucket
    """
    from ..basics.errors import EXIT_FAILURE, TpuctlError
    from ..staging import options
    from ..staging.endpoints import is_bucket_url, open_endpoint
    from ..staging.ignore import Excluder
    from ..staging.progress import human_bytes
    from ..staging.run import stage
    from . import common as _common
    from .common import acting_on, emit_json, resolve_target, say

    # Everything the user typed is checked before anything is looked up or sent.
    if is_bucket_url(src) or is_bucket_url(dest):
        from ..basics import validate

        for url in (src, dest):
            if is_bucket_url(url):
                validate.bucket_url(url)
    n_jobs = options.jobs(jobs)
    opts = options.StageOptions(delete=delete, excludes=tuple(exclude), dry_run=dry_run,
                                create_bucket=create_bucket, location="US", jobs=n_jobs,
                                part_size=options.part_size(part_size))
    Excluder(opts.excludes)  # bad patterns fail here

    target = None
    if is_bucket_url(src) or is_bucket_url(dest):
        target = resolve_target(provider, project)
        acting_on(target, "stage")
        opts = options.StageOptions(**{**opts.__dict__, "location": options.location(location, target.zone)})
    elif location:
        options.location(location, None)
    src_ep = open_endpoint(src, target, pool_size=n_jobs + 4)
    dest_ep = open_endpoint(dest, target, pool_size=n_jobs + 4)
    if target is None:
        say("tpuctl stage: local paths only (no provider involved)")
    for ep in (src_ep, dest_ep):
        if ep.is_bucket and ep.local:
            say(f"tpuctl stage: {ep.bucket.url} is the local provider's directory {ep.bucket.root}")

    report = stage(src_ep, dest_ep, opts, say=say,
                   show_progress=_common.is_tty() and not as_json)
    doc = report.to_dict()
    if target is not None:
        doc = {"provider": target.provider, "project": target.project, **doc}

    if as_json:
        if not report.ok:
            doc["error"] = _failure_line(report)
            doc["exit_code"] = EXIT_FAILURE
        emit_json(doc)
    else:
        if dry_run:
            for step in doc.get("plan", []):
                verb = "delete" if step["action"] == "delete" else f"would {_verb(report.direction)}"
                if step["action"] == "delete":
                    verb = "would delete"
                click.echo(f"{verb}  {step['path']}  ({human_bytes(step['bytes'])}, {step['reason']})")
        click.echo(_summary_line(doc, report))
        for failure in doc.get("failures", []):
            click.echo(f"  failed: {failure['path']}: {failure['error']}")
    if not report.ok:
        # The summary above is this command's one JSON document; report_error adds only the
        # stderr line (exit code 1).
        raise TpuctlError(_failure_line(report))


def _verb(direction: str) -> str:
    return {"upload": "upload", "download": "download", "copy": "copy"}[direction]


def _summary_line(doc: dict, report) -> str:
    from ..staging.progress import human_bytes

    moved = {"upload": "uploaded", "download": "downloaded", "copy": "copied"}[report.direction]
    if report.dry_run:
        return (f"dry run {doc['source']} -> {doc['destination']}: would {_verb(report.direction)} "
                f"{len(report.plan.sends)} ({human_bytes(report.plan.bytes('send'))}), skip {doc['skipped']}, "
                f"delete {len(report.plan.deletes)}; nothing was changed")
    line = (f"staged {doc['source']} -> {doc['destination']}: {doc[moved]} {moved} "
            f"({human_bytes(doc['bytes_' + moved])}), {doc['skipped']} unchanged, {doc['deleted']} deleted, "
            f"{doc['verified']} verified by CRC32C")
    if doc["bytes_resumed"]:
        line += f", {human_bytes(doc['bytes_resumed'])} resumed from an interrupted run"
    if doc["excluded"]:
        line += f", {doc['excluded']} excluded"
    line += f"; {doc['seconds']:.1f} s"
    if doc["mb_per_s"]:
        line += f", {doc['mb_per_s']:.1f} MB/s"
    return line


def _failure_line(report) -> str:
    failures = report.failures
    names = ", ".join(o.label for o in failures[:3]) + (f" and {len(failures) - 3} more" if len(failures) > 3 else "")
    text = f"{len(failures)} file(s) failed: {names} ({failures[0].error})"
    if report.deletes_skipped:
        text += "; nothing was deleted"
    return text + "; re-run to send only what is missing"
