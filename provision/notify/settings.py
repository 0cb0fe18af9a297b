"""Which channels hear about a run, a sweep or a cluster, and how: read from the config file, the
channels ``tpuctl notify add`` saved, and ``--notify``; written beside the run as references only.

A channel is a name, a kind (``webhook``, ``slack``, ``email``), a reference to its secret, and
for e-mail the server and addresses. The secret itself (a webhook URL, a signing key, an SMTP
password) is never here: ``local:NAME`` is a mode-0600 file under ``$TPUCTL_HOME/notify/secrets``
(this machine, or the local provider's "host", which is this machine), and
``sm://projects/P/secrets/S[/versions/V]`` is a Secret Manager secret that the supervisor reads
with its credentials (the host VM's service account with the laptop closed). What a run uses is
written to its directory as ``notify.json``, and its sha256 is pinned with the run in the hosts'
metadata (provision.runs.pins), so a bucket writer cannot point a host at other channels.

Config file (TOML)::

    [notify]
    default = ["team"]             # every run and sweep (and the reaper's deletions) unless --notify says
    events = ["preempted", "failed", "finished"]   # default: every kind (messages.KINDS)
    stall_after = "30m"            # a run with no new step this long while its TPU bills: "stalled"
    rate_limit = "10m"             # per run and kind, one message in this window; the rest summed up

    [notify.channels.team]
    kind = "slack"
    secret = "sm://projects/my-project/secrets/tpuctl-slack"

    [notify.clusters.bert-lab]
    channels = ["team", "oncall"]  # this cluster's runs
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..basics.errors import UsageError
from .messages import KINDS
from .policy import Retry

CHANNEL_KINDS = ("webhook", "slack", "email")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
LOCAL_REF = re.compile(r"local:([a-z0-9][a-z0-9_-]{0,62})")
SM_REF = re.compile(r"sm://projects/([a-z0-9][a-z0-9-]{4,29}|\d{1,20})/secrets/([A-Za-z0-9_-]{1,255})"
                    r"(?:/versions/(latest|\d{1,12}))?")
ADDRESS_RE = re.compile(r"[^@\s<>,;\"']{1,64}@[A-Za-z0-9.-]{1,253}")
HOSTPORT_RE = re.compile(r"([A-Za-z0-9.-]{1,253}|\[[0-9a-fA-F:]+\]):(\d{1,5})")
DEFAULT_STALL_S = 1800.0
DEFAULT_RATE_S = 600.0


@dataclass(frozen=True)
class Channel:
    name: str
    kind: str
    secret: str                        # a reference: local:NAME or sm://projects/P/secrets/S[/versions/V]
    smtp: str | None = None            # email: HOST:PORT (STARTTLS; port 465 is TLS from the start)
    sender: str | None = None
    to: tuple[str, ...] = ()
    user: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["to"] = list(self.to)
        return {k: v for k, v in d.items() if v not in (None, [])}

    @property
    def on_this_machine(self) -> bool:
        return self.secret.startswith("local:")


@dataclass(frozen=True)
class Settings:
    channels: tuple[Channel, ...] = ()
    events: tuple[str, ...] | None = None          # None: every kind
    stall_after_s: float = DEFAULT_STALL_S
    rate_limit_s: float = DEFAULT_RATE_S
    retry: Retry = field(default_factory=Retry)

    def wants(self, kind: str) -> bool:
        return self.events is None or kind in self.events

    def to_dict(self) -> dict[str, Any]:
        return {"channels": [c.to_dict() for c in self.channels], "events": list(self.events) if self.events else None,
                "stall_after_s": self.stall_after_s, "rate_limit_s": self.rate_limit_s,
                "retry": {"attempts": self.retry.attempts, "base": self.retry.base, "cap": self.retry.cap}}


def check_name(name: Any, what: str = "channel") -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise UsageError(f"invalid {what} name {str(name)[:40]!r}",
                         hint="use lowercase letters, digits, - and _ (at most 63), such as team-slack")
    return name


def _not_an_address(name: Any) -> None:
    """A webhook URL or an e-mail address where a channel name goes (``--notify https://...``): say
    how to save it as a channel, without repeating it (a webhook URL is a secret)."""
    if not isinstance(name, str) or not ("://" in name or "@" in name):
        return
    if "://" not in name:
        kind, flag = "an e-mail address", "--email"
    else:
        kind, flag = "a webhook URL", "--slack" if "hooks.slack.com" in name else "--webhook"
    how = "--email --smtp HOST:PORT --from ADDRESS --to ADDRESS" if flag == "--email" else \
        f"{flag} (it reads the URL from stdin)"
    raise UsageError(f"--notify takes channel names, not {kind}",
                     hint=f"save it once as a channel: tpuctl notify add NAME {how}, then --notify NAME")


def check_ref(ref: Any, channel: str) -> str:
    if isinstance(ref, str) and (LOCAL_REF.fullmatch(ref) or SM_REF.fullmatch(ref)):
        return ref
    raise UsageError(f"channel {channel}: secret must be a reference, not {'a URL' if '://' in str(ref) and not str(ref).startswith('sm://') else 'this value'}",
                     hint="use secret = \"sm://projects/PROJECT/secrets/NAME\" (Secret Manager) or add the "
                          f"channel with tpuctl notify add {channel} (a private file here)")


def channel_from(name: str, raw: Mapping[str, Any]) -> Channel:
    """One channel as the config file or the saved channels describe it; a one-line error if odd."""
    check_name(name)
    if not isinstance(raw, Mapping):
        raise UsageError(f"channel {name} is not a table", hint=f"write [notify.channels.{name}] with kind and secret")
    unknown = sorted(set(raw) - {"kind", "secret", "smtp", "sender", "from", "to", "user"})
    if unknown:
        raise UsageError(f"channel {name}: unknown key {unknown[0]!r}",
                         hint="use kind, secret and, for e-mail, smtp, from, to and user")
    kind = raw.get("kind")
    if kind not in CHANNEL_KINDS:
        raise UsageError(f"channel {name}: kind must be one of {', '.join(CHANNEL_KINDS)}",
                         hint=f"set kind = \"slack\" (or webhook, email) under [notify.channels.{name}]")
    ref = check_ref(raw.get("secret"), name)
    if kind != "email":
        return Channel(name=name, kind=kind, secret=ref)
    smtp = raw.get("smtp")
    sender = raw.get("sender", raw.get("from"))
    to = raw.get("to")
    to = (to,) if isinstance(to, str) else tuple(to) if isinstance(to, (list, tuple)) else ()
    if not isinstance(smtp, str) or not HOSTPORT_RE.fullmatch(smtp) or not 0 < int(smtp.rsplit(":", 1)[1]) < 65536:
        raise UsageError(f"channel {name}: smtp must be HOST:PORT", hint="such as smtp = \"smtp.example.com:587\"")
    for addr in (sender, *to):
        if not isinstance(addr, str) or not ADDRESS_RE.fullmatch(addr):
            raise UsageError(f"channel {name}: {str(addr)[:60]!r} is not an e-mail address",
                             hint="set from = \"tpuctl@example.com\" and to = [\"you@example.com\"]")
    if not to:
        raise UsageError(f"channel {name}: no recipient", hint="set to = [\"you@example.com\"]")
    user = raw.get("user")
    if user is not None and (not isinstance(user, str) or not 0 < len(user) <= 256 or any(c.isspace() for c in user)):
        raise UsageError(f"channel {name}: invalid user", hint="set user to the SMTP login, or leave it out")
    return Channel(name=name, kind=kind, secret=ref, smtp=smtp, sender=sender, to=to, user=user)


def _duration(raw: Any, key: str, default: float) -> float:
    from ..basics.validate import duration

    if raw is None:
        return default
    try:
        return duration(raw)
    except UsageError as exc:
        raise UsageError(f"[notify] {key}: {exc.message}", hint=exc.hint) from None


def select(names: Sequence[str] | None, cluster: str | None, config: Mapping[str, Any],
           saved: Mapping[str, Mapping[str, Any]]) -> Settings:
    """The settings of a run, sweep or cluster: ``names`` (``--notify``; ``none`` for none), else
    the cluster's channels in the config file, else ``[notify] default``. ``config`` is the
    config file's ``notify`` table; ``saved`` the channels ``tpuctl notify add`` saved."""
    table = config if isinstance(config, Mapping) else {}
    defined: dict[str, Any] = dict(saved)
    if isinstance(table.get("channels"), Mapping):         # [notify.channels.NAME] tables
        defined.update(table["channels"])
    by_cluster = table.get("clusters") if isinstance(table.get("clusters"), Mapping) else {}
    chosen: Sequence[str] | None = names
    if chosen is None and cluster and isinstance(by_cluster.get(cluster), Mapping):
        chosen = by_cluster[cluster].get("channels")
    if chosen is None:
        chosen = table.get("default")
    if isinstance(chosen, str):
        chosen = [chosen]
    if chosen is None or list(chosen) == ["none"]:
        chosen = []
    if not isinstance(chosen, (list, tuple)):
        raise UsageError("[notify] default must be a list of channel names", hint="such as default = [\"team\"]")
    channels = []
    for name in dict.fromkeys(chosen):
        _not_an_address(name)
        check_name(name)
        if name not in defined:
            raise UsageError(f"no notification channel named {name}",
                             hint="add it with tpuctl notify add NAME, or define [notify.channels."
                                  f"{name}] in the config file; tpuctl notify list shows them")
        channels.append(channel_from(name, defined[name]))
    events = table.get("events")
    if events is not None:
        if isinstance(events, str):
            events = [events]
        bad = [e for e in events if e not in KINDS] if isinstance(events, (list, tuple)) else ["?"]
        if bad:
            raise UsageError(f"[notify] events: unknown kind {str(bad[0])[:40]!r}",
                             hint=f"use some of {', '.join(KINDS)}")
        events = tuple(events)
    retries = table.get("retries", 5)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 1 <= retries <= 20:
        raise UsageError("[notify] retries must be a number of tries from 1 to 20", hint="such as retries = 5")
    retry = Retry(attempts=retries, base=_duration(table.get("retry_after"), "retry_after", 2.0))
    return Settings(channels=tuple(channels), events=events,
                    stall_after_s=_duration(table.get("stall_after"), "stall_after", DEFAULT_STALL_S),
                    rate_limit_s=_duration(table.get("rate_limit"), "rate_limit", DEFAULT_RATE_S), retry=retry)


def parse_names(values: Sequence[str]) -> list[str] | None:
    """``--notify a,b --notify c`` -> ``[a, b, c]``; nothing given -> None (the config decides)."""
    if not values:
        return None
    for value in values:
        _not_an_address(value)
    out = [v.strip() for value in values for v in value.split(",") if v.strip()]
    for name in out:
        if name != "none":
            check_name(name)
    return out


def from_dict(data: Any) -> Settings | None:
    """The settings a run's ``notify.json`` holds (from a bucket: anything odd -> None)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("channels"), list):
        return None
    try:
        channels = tuple(channel_from(str(c.get("name")), {k: v for k, v in c.items() if k != "name"})
                         for c in data["channels"][:16] if isinstance(c, Mapping))
        retry_raw = data.get("retry") if isinstance(data.get("retry"), Mapping) else {}
        retry = Retry(attempts=max(1, min(20, int(retry_raw.get("attempts", 5)))),
                      base=max(0.0, min(600.0, float(retry_raw.get("base", 2.0)))),
                      cap=max(0.0, min(3600.0, float(retry_raw.get("cap", 60.0)))))
        events = data.get("events")
        events = tuple(e for e in events if e in KINDS) if isinstance(events, list) else None
        return Settings(channels=channels, events=events,
                        stall_after_s=max(0.0, float(data.get("stall_after_s", DEFAULT_STALL_S))),
                        rate_limit_s=max(0.0, float(data.get("rate_limit_s", DEFAULT_RATE_S))), retry=retry)
    except (UsageError, TypeError, ValueError):
        return None
