"""Where a channel's secret lives, and reading it: the least exposure we could find.

- ``local:NAME``: a file ``$TPUCTL_HOME/notify/secrets/NAME``, mode 0600 in a 0700 directory,
  written by ``tpuctl notify add`` from stdin or a hidden prompt (never an argument, which ``ps``
  and shell histories show). On the local provider the "host" that supervises a detached run is
  this machine, so it reads the same file.
- ``sm://projects/P/secrets/S[/versions/V]``: a Secret Manager secret (``latest`` by default),
  read over REST (``secretmanager.googleapis.com``, ``TPUCTL_SECRETMANAGER_API_ENDPOINT``
  replaces it) with the supervisor's credentials: the host VM's service account when the laptop
  is closed, which needs ``roles/secretmanager.secretAccessor`` on that secret alone.

Not the bucket (every bucket reader would read it) nor instance metadata (every project viewer
reads it with ``compute.instances.get``, and every process on the VM from the metadata server).
Every secret read is registered with the scrubber (provision.basics.redact), so it never reaches
an output, an event or an error line.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..basics import private
from ..basics.config import home
from ..basics.errors import TpuctlError, UsageError
from ..basics.redact import remember_secret
from .settings import LOCAL_REF, SM_REF, Channel

ENDPOINT_ENV = "TPUCTL_SECRETMANAGER_API_ENDPOINT"
ENDPOINT = "https://secretmanager.googleapis.com"
MAX_SECRET_BYTES = 16 << 10


class SecretUnavailable(TpuctlError):
    """A channel's secret cannot be read here (missing, not allowed, malformed)."""


@dataclass(frozen=True)
class Secret:
    """What a channel needs to deliver: the URL (webhook, Slack), signing key, SMTP password."""

    url: str | None = None
    signing_key: str | None = None
    password: str | None = None


def secrets_dir() -> Path:
    return home() / "notify" / "secrets"


def channels_file() -> Path:
    """The channels ``tpuctl notify add`` saved (references and addresses, no secret)."""
    return home() / "notify" / "channels.json"


def store_local(name: str, value: str) -> str:
    """Keep ``value`` as channel ``name``'s secret in a private file; returns its reference."""
    directory = private.make_dirs(secrets_dir())
    os.chmod(directory, private.DIR_MODE)
    path = directory / name
    tmp = directory / f".{name}.tmp"
    with open(tmp, "w", encoding="utf-8", opener=private.opener) as fh:
        fh.write(value)
    os.replace(tmp, path)
    return f"local:{name}"


def remove_local(name: str) -> None:
    (secrets_dir() / name).unlink(missing_ok=True)


def check_url(url: str, channel: str) -> str:
    """An https URL (plain http only to this machine, as a local receiver listens)."""
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if (parts.scheme == "https" or (parts.scheme == "http" and loopback)) and parts.hostname:
        return url
    raise UsageError(f"channel {channel}: the URL must be https:// (http:// only to this machine)",
                     hint="paste the webhook URL as the service gives it, such as https://hooks.slack.com/services/...")


def _read_local(name: str) -> str:
    path = secrets_dir() / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise SecretUnavailable(f"secret local:{name} is not on this machine",
                                hint=f"add it here with tpuctl notify add {name}, or keep it in Secret Manager "
                                     "(sm://projects/P/secrets/S) for a host to read") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise SecretUnavailable(f"secret file {path} is not a private file of this user (mode 0600)",
                                hint=f"chmod 600 {path}, or add the channel again with tpuctl notify add")
    return path.read_text(encoding="utf-8")[:MAX_SECRET_BYTES]


def _read_secret_manager(ref: str) -> str:
    m = SM_REF.fullmatch(ref)
    assert m is not None
    project, secret, version = m.group(1), m.group(2), m.group(3) or "latest"
    base = (os.environ.get(ENDPOINT_ENV) or ENDPOINT).rstrip("/")
    url = f"{base}/v1/projects/{project}/secrets/{secret}/versions/{version}:access"
    session = _session()
    try:
        resp = session.get(url, timeout=(10, 30))
    except Exception as exc:  # noqa: BLE001 - any transport failure: one line, no URL body
        raise SecretUnavailable(f"cannot reach Secret Manager for {ref}: {type(exc).__name__}",
                                hint="check the network and retry") from None
    if resp.status_code != 200:
        status = _error_status(resp)
        hint = {403: "grant the supervisor's account (the host VM's service account) roles/secretmanager."
                     f"secretAccessor on secret {secret}, and enable secretmanager.googleapis.com",
                404: f"create it: printf %s VALUE | gcloud secrets create {secret} --data-file=- "
                     f"--project {project}"}.get(resp.status_code, "retry later")
        raise SecretUnavailable(f"Secret Manager answered HTTP {resp.status_code} {status} for {ref}", hint=hint)
    try:
        payload = resp.json()["payload"]
        data = base64.b64decode(payload["data"], validate=True)
    except (ValueError, KeyError, TypeError):
        raise SecretUnavailable(f"Secret Manager's answer for {ref} has no payload",
                                hint="check the secret's latest version") from None
    crc = payload.get("dataCrc32c")
    if crc is not None:
        import google_crc32c

        if str(google_crc32c.value(data)) != str(crc):
            raise SecretUnavailable(f"the payload of {ref} does not match its CRC32C", hint="retry")
    return data[:MAX_SECRET_BYTES].decode("utf-8", errors="replace")


def _error_status(resp: Any) -> str:
    try:
        status = resp.json()["error"]["status"]
        return str(status) if isinstance(status, str) and status.isupper() and len(status) < 40 else ""
    except (ValueError, KeyError, TypeError):
        return ""


def _session() -> Any:
    from google.auth.transport.requests import AuthorizedSession

    if os.environ.get("TPUCTL_CREDENTIALS", "").lower() == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        return AuthorizedSession(AnonymousCredentials())
    import google.auth

    from ..cloud.gcp_rest import SCOPES

    try:
        creds, _ = google.auth.default(scopes=list(SCOPES))
    except Exception as exc:  # noqa: BLE001 - no credentials here: the channel cannot deliver
        raise SecretUnavailable(f"no Google credentials to read Secret Manager ({type(exc).__name__})",
                                hint="run gcloud auth application-default login, or use a local: secret") from None
    return AuthorizedSession(creds)


def read(channel: Channel) -> Secret:
    """The channel's secret, read now and registered with the scrubber."""
    m = LOCAL_REF.fullmatch(channel.secret)
    raw = _read_local(m.group(1)) if m else _read_secret_manager(channel.secret)
    secret = parse(channel, raw)
    for value in (secret.url, secret.signing_key, secret.password):
        remember(value)
    return secret


def remember(value: str | None) -> None:
    """Scrub ``value`` from every output; a URL's path and query too (transport errors quote
    them without the host)."""
    if not value:
        return
    remember_secret(value)
    parts = urlsplit(value)
    if parts.scheme and parts.netloc:
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        if len(tail) >= 12:
            remember_secret(tail)
        if parts.password:
            remember_secret(parts.password)


def parse(channel: Channel, raw: str) -> Secret:
    """The stored value as the channel's kind reads it: a URL or ``{"url", "signing_key"}`` for a
    webhook, a URL for Slack, a password or ``{"password"}`` for e-mail."""
    text = raw.strip()
    data: Any = None
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise SecretUnavailable(f"the secret of channel {channel.name} is not valid JSON",
                                    hint="store the URL alone, or {\"url\": ..., \"signing_key\": ...}") from None
        if not isinstance(data, dict):
            data = None
    if channel.kind == "email":
        password = data.get("password") if data else text
        return Secret(password=password if isinstance(password, str) and password else None)
    url = data.get("url") if data else text
    key = data.get("signing_key") if data else None
    if not isinstance(url, str):
        raise SecretUnavailable(f"the secret of channel {channel.name} has no URL",
                                hint="store the webhook URL, or {\"url\": ..., \"signing_key\": ...}")
    try:
        check_url(url, channel.name)
    except UsageError as exc:
        raise SecretUnavailable(exc.message, hint=exc.hint) from None
    return Secret(url=url, signing_key=key if isinstance(key, str) and key else None)
