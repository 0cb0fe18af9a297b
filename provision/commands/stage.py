"""``tpuctl stage SRC DEST``: copy BERT checkpoints and data into a bucket (or back), rsync-style."""

from __future__ import annotations

import click

from ._common import dry_run_option, json_option, not_yet, provider_options


@click.command("stage")
@click.argument("src")
@click.argument("dest")
@click.option("--delete", is_flag=True, help="Remove from DEST what is no longer in SRC.")
@click.option("--exclude", multiple=True, metavar="PATTERN", help="Skip paths matching PATTERN (repeatable).")
@click.option("--create-bucket", is_flag=True, help="Create the destination bucket if it is missing.")
@click.option("--location", default="US", show_default=True, help="Location of a bucket made by --create-bucket.")
@provider_options
@dry_run_option
@json_option
def command(src: str, dest: str, delete: bool, exclude: tuple[str, ...], create_bucket: bool,
            location: str, provider: str | None, project: str | None, dry_run: bool, as_json: bool) -> None:
    """Copy SRC to DEST (a local path or gs://BUCKET/PREFIX), sending only what changed."""
    from .. import validate

    for url in (src, dest):
        if url.startswith("gs://"):
            validate.bucket_url(url)
    not_yet("tpuctl stage")
