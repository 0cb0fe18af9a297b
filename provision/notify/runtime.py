"""The settings of a run where its supervisor runs: chosen on the laptop, written beside the run,
pinned with it, and read back by whichever supervisor holds the run.

``tpuctl train --notify`` (or the config file) picks the channels (:func:`chosen`); the run's
``notify.json`` holds their references (no secret) and its sha256 goes into the run's pin
(provision.runs.pins), so a supervisor on the host uses the channels the user chose, never ones
a bucket writer put there (:func:`for_run`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..basics.errors import UsageError
from .notifier import Notifier
from .settings import Settings, from_dict, select

NOTIFY_FILE = "notify.json"


def saved_channels() -> dict[str, Any]:
    from ..basics import statefile
    from .secrets import channels_file

    data = statefile.read_json(channels_file(), {})
    return data if isinstance(data, dict) else {}


def config_table() -> dict[str, Any]:
    from ..basics.config import load_config_file

    table = load_config_file().get("notify")
    if table is not None and not isinstance(table, dict):
        raise UsageError("the config file's notify is not a table", hint="write [notify] with default = [\"NAME\"]")
    return table or {}


def chosen(names: Sequence[str] | None, cluster: str | None, *, provider: str, detached: bool) -> Settings:
    """The settings for a run or sweep of ``cluster``: ``--notify`` names, else the config file.
    A run supervised on a GCP host VM cannot read a secret kept on this machine: refused (exit 2)."""
    settings = select(names, cluster, config_table(), saved_channels())
    if provider != "local" and detached:
        here = [c.name for c in settings.channels if c.on_this_machine]
        if here:
            raise UsageError(f"channel {here[0]}'s secret is kept on this machine, where the host VM that "
                             "supervises a detached run cannot read it",
                             hint=f"keep it in Secret Manager: tpuctl notify add {here[0]} ... --secret "
                                  "sm://projects/PROJECT/secrets/NAME (docs/notify.md)")
    return settings


def secret_manager_secrets(cluster: str) -> list[tuple[str, str]]:
    """(channel, secret) for the Secret Manager secrets (``projects/P/secrets/S``) of the channels
    ``cluster`` would use (the config file's, else the default): what a supervisor on the host
    must be allowed to read. A broken notify configuration gives none: it is ``train``'s error,
    where the channels are used."""
    from ..basics.errors import TpuctlError

    try:
        settings = select(None, cluster, config_table(), saved_channels())
    except TpuctlError:
        return []
    return [(channel.name, str(channel.secret).removeprefix("sm://").split("/versions/")[0])
            for channel in settings.channels if str(channel.secret).startswith("sm://")]


def encode(settings: Settings) -> bytes:
    return (json.dumps(settings.to_dict(), indent=1, sort_keys=True) + "\n").encode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def for_run(store: Any, rec: Any, pin: dict[str, Any] | None, log: Callable[[str], None]) -> Notifier | None:
    """The notifier of the run in ``store`` (a RunStore), or None: no channel, or a notify.json
    that is not the one pinned with the run (then one line says so)."""
    from ..basics.errors import NotFound

    try:
        raw = store.bucket.read_bytes(f"{store.prefix}/{NOTIFY_FILE}")
    except NotFound:
        return None
    except Exception as exc:  # noqa: BLE001 - unreadable now: the run goes on without notices
        log(f"notify: cannot read the run's {NOTIFY_FILE} ({type(exc).__name__}); no notifications")
        return None
    pinned = (pin or {}).get("notify")
    if pinned != digest(raw):
        log(f"notify: the run's {NOTIFY_FILE} is not the one pinned with it; no notifications "
            "(start the run again with tpuctl train --notify)")
        return None
    try:
        settings = from_dict(json.loads(raw))
    except ValueError:
        settings = None
    if settings is None or not settings.channels:
        return None
    return Notifier(settings, record=store.event, log=log)


def run_pin(store: Any) -> dict[str, Any] | None:
    """The pin entry this machine kept for the run (its local index), if it staged it."""
    from ..runs.store import lookup

    try:
        return lookup(store.run_id).get("pin")
    except Exception:  # noqa: BLE001 - not staged here
        return None


def announce_reaped(reports: Sequence[Any], target: Any, log: Callable[[str], None]) -> None:
    """Tell each deleted TPU's channels (``reaped``: what it saves per hour). The channels are the
    config file's for the cluster, else those pinned with the cluster's last run (a host VM's
    autodown has no config file). Bounded: a receiver that is down costs at most a minute."""
    import time

    from .messages import reaped_notice

    for r in reports:
        try:
            settings = _cluster_settings(r, target)
        except Exception as exc:  # noqa: BLE001 - a notice is never worth the deletion's report
            log(f"notify: no channels for cluster {r.cluster}: {type(exc).__name__}")
            continue
        if settings is None or not settings.channels or not settings.wants("reaped"):
            continue
        notifier = Notifier(settings, log=log)
        notifier.notice(reaped_notice(r.cluster, r.node.name, r.node.zone, r.node.accelerator_type, r.hourly,
                                      r.verdict.reason, time.time()))
        notifier.close(timeout=60)


def _cluster_settings(report: Any, target: Any) -> Settings | None:
    settings = select(None, report.cluster, config_table(), saved_channels())
    if settings.channels:
        return settings
    run_id = getattr(report.run, "run_id", None)
    if not run_id or not report.bucket:
        return None
    from ..basics.config import Target
    from ..cloud.storage import open_bucket
    from ..runs.pinning import read_host_pin
    from ..runs.store import RunStore

    store = RunStore(open_bucket(report.bucket, Target(provider=target.provider, project=target.project, zone=None)),
                     run_id)
    pin = run_pin(store) or read_host_pin(target.provider, report.cluster).entry("run", run_id)
    notifier = for_run(store, None, pin, lambda _m: None)
    return notifier.settings if notifier is not None else None
