"""Scrub credentials from anything tpuctl prints or logs.

Cloud errors can echo request headers, request bodies or URLs (a misconfigured proxy, an OAuth
endpoint answering ``invalid_grant`` with the form it received, a signed URL in a message).
Everything that leaves tpuctl as text (errors, progress lines, ``--json``, run events) goes
through :func:`redact`, which removes two kinds of secret:

- anything that *looks* like one: OAuth access and refresh tokens, ``Authorization`` headers,
  signed-URL parameters (``X-Goog-Signature``, ``X-Goog-Credential``, V2 ``Signature``), the
  ``upload_id`` of resumable-upload session URIs (a credential for that upload), token,
  secret and assertion fields in JSON, Python reprs, form bodies and ``name: value`` lines, the
  password of a URL's user information (``https://user:PASSWORD@host``), PEM private keys, API keys,
  Slack and Discord webhook URLs, GitHub and Slack tokens, AWS access key ids and secret keys (each
  format's public source is cited beside its pattern);
- the exact secrets tpuctl itself holds, whatever they look like: the tokens of the credential
  objects the providers built (:func:`remember_credentials`) and the secret fields of the
  credential file in use (``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's application-default file).
"""

from __future__ import annotations

import json
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

# Names of fields and parameters whose value is a secret: distinctive ones anywhere, generic
# ones ("key", "code", ...) only as URL query parameters (tpuctl's own text says "key=value").
_DISTINCT = (r"access_token|refresh_token|id_token|client_secret|private_key_id|private_key|assertion|"
             r"x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|googleaccessid|"
             r"api_key|apikey|password|passwd|upload_id|"
             # AWS: the credentials file's and environment's names, and STS's JSON fields
             # (https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html)
             r"aws_secret_access_key|secret_access_key|secretaccesskey|aws_session_token|sessiontoken")
_GENERIC = r"token|key|code|signature|sig|secret|credential"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # PEM private keys, complete or cut short by a length limit; and bare PKCS#8 bodies
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|[A-Za-z0-9+/=\s\\]*)",
                re.DOTALL), "<redacted-private-key>"),
    (re.compile(r"MII[A-Za-z0-9+/=\\]{60,}"), "<redacted-key>"),
    # JSON Web Tokens (self-signed service-account JWTs are bearer credentials too)
    (re.compile(r"eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*"), "<redacted-jwt>"),
    # OAuth2 access and refresh tokens issued by Google
    (re.compile(r"ya29\.[0-9A-Za-z_\-.~+/]+=*"), "ya29.<redacted>"),
    (re.compile(r"1//[0-9A-Za-z_\-]{20,}"), "<redacted-refresh-token>"),
    # Authorization headers of any scheme, in header, JSON or repr form
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(bearer|basic|token|negotiate)\s+[^\s\"',;}]+"),
     r"\1\2 <redacted>"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!<redacted|bearer\s|basic\s|token\s|negotiate\s)"
                r"[^\s\"',}]{8,}"), r"\1<redacted>"),
    (re.compile(r"(?i)\bbearer\s+(?!<redacted)[0-9A-Za-z_\-.=~+/]{8,}"), "Bearer <redacted>"),
    # Signed URL and token parameters: in a query (also percent-encoded inside another URL) ...
    (re.compile(r"(?i)((?:[?&]|%3F|%26)(?:" + _DISTINCT + "|" + _GENERIC + r")(?:=|%3D))(?!<redacted)[^&\s\"'<>)]+"),
     r"\1<redacted>"),
    # ... and, for the distinctive names, in a form body or a message
    (re.compile(r"(?i)((?:^|[\s\"'(;,])(?:" + _DISTINCT + r")(?:=|%3D))(?!<redacted)[^&\s\"'<>)]+"),
     r"\1<redacted>"),
    # ... and in the colon form of YAML, headers and log lines: ``client_secret: X``, ``password = X``
    (re.compile(r"(?i)((?:^|[\s\"'(;,{\[])(?:" + _DISTINCT + r")[\"']?\s*[:=]\s*)(?![\"'<\s])[^\s\"',;}\]]+"),
     r"\1<redacted>"),
    # The password of a URL's user information: ``https://user:PASSWORD@host/`` (RFC 3986 3.2.1)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/?#\s:@\"'<>]*:)(?!<redacted>@)[^/?#\s@\"'<>]+@"), r"\1<redacted>@"),
    # Header form: ``X-Goog-Signature: ...``
    (re.compile(r"(?i)(\bx-goog-(?:signature|credential)[\"']?\s*:\s*[\"']?)(?!<redacted)[^\s\"',}]+"),
     r"\1<redacted>"),
    # JSON fields and Python dict reprs of credential files and token responses
    (re.compile(r"(?i)([\"'](?:" + _DISTINCT + r"|token|secret|signature)[\"']\s*:\s*[\"'])([^\"']*)([\"'])"),
     r"\1<redacted>\3"),
    # API keys
    (re.compile(r"AIza[0-9A-Za-z_\-]{35}"), "<redacted-api-key>"),
    # Slack incoming-webhook URLs: the path is the credential, https://hooks.slack.com/services/T.../B.../X...
    # (https://api.slack.com/messaging/webhooks); workflow triggers likewise (/triggers/, /workflows/)
    (re.compile(r"(?i)(\bhttps?://hooks\.slack\.com/(?:services|triggers|workflows)/)(?!<redacted)[^\s\"'<>)]+"),
     r"\1<redacted>"),
    # Discord webhook URLs: /api[/vN]/webhooks/{webhook.id}/{webhook.token}, the token a credential
    # (https://discord.com/developers/docs/resources/webhook#execute-webhook), on discord.com and the
    # older discordapp.com, and their ptb./canary. hosts
    (re.compile(r"(?i)(\bhttps?://(?:[a-z]+\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d+/)(?!<redacted)"
                r"[^\s\"'<>/?)]+"), r"\1<redacted>"),
    # GitHub tokens: ghp_ (personal), gho_ (OAuth), ghu_ (app user-to-server), ghs_ (app
    # server-to-server, Actions' GITHUB_TOKEN), ghr_ (refresh), then [A-Za-z0-9_], up to 255 long
    # ("Behind GitHub's new authentication token formats", github.blog, 2021-04-05); github_pat_
    # (fine-grained personal access tokens, "Introducing fine-grained personal access tokens",
    # github.blog, 2022-10-18)
    (re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9_]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
     "<redacted-github-token>"),
    # Slack tokens: xoxb- (bot), xoxp- (user), xoxa- and xoxr- (app access and refresh), xoxs-
    # (session), xoxe- (configuration), xapp- (app-level) (https://api.slack.com/authentication/token-types)
    (re.compile(r"(?<![A-Za-z0-9_])(?:xox[abeprs]|xapp)-[A-Za-z0-9-]{10,}"), "<redacted-slack-token>"),
    # AWS access key ids: AKIA (long-term) or ASIA (temporary, from STS) and 16 more of [A-Z0-9]
    # (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids,
    # https://docs.aws.amazon.com/STS/latest/APIReference/API_GetAccessKeyInfo.html); the secret key
    # beside one goes by its name (aws_secret_access_key, in _DISTINCT)
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), "<redacted-aws-key-id>"),
]


def _scoped(pattern: re.Pattern[str]) -> str:
    """``pattern`` as one alternative of a larger pattern: its flags scoped to it (``(?i:...)``)."""
    body = pattern.pattern.removeprefix("(?i)")
    flags = ("i" if pattern.flags & re.IGNORECASE else "") + ("s" if pattern.flags & re.DOTALL else "")
    return f"(?{flags}:{body})" if flags else f"(?:{body})"


# Whether any pattern matches a text: one search instead of every substitution, for the texts that
# hold no secret (nearly all). A text it finds nothing in is one that no pattern would change.
_ANY_PATTERN = re.compile("|".join(_scoped(p) for p, _ in _PATTERNS))

_MIN_SECRET = 8  # shorter "secrets" would scrub ordinary words

_lock = threading.Lock()
_credentials: list[weakref.ref] = []
_literals: set[str] = set()
_file_seen: dict[str, float] = {}


def remember_credentials(creds: Any) -> None:
    """Scrub this credential object's secrets (its current token, refresh token, client secret)
    from every later :func:`redact`, whatever their format; the token is read at redaction time,
    so a refreshed token is covered too."""
    if creds is None:
        return
    try:
        ref = weakref.ref(creds)
    except TypeError:
        return
    with _lock:
        _credentials[:] = [r for r in _credentials if r() is not None]
        if all(r() is not creds for r in _credentials):
            _credentials.append(ref)


def remember_secret(value: str | None) -> None:
    if isinstance(value, str) and len(value) >= _MIN_SECRET:
        with _lock:
            _literals.add(value)


def _credential_files() -> Iterable[str]:
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        yield path
    root = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    yield os.path.join(root, "application_default_credentials.json")


_last_check: dict[tuple[str, ...], float] = {}


def _load_file_secrets() -> None:
    """The secret fields of the credential files in use (read once per file version; the files
    are looked at no more than once a second)."""
    import time

    paths = tuple(_credential_files())
    now = time.monotonic()
    if now - _last_check.get(paths, -10.0) < 1.0:
        return
    _last_check.clear()
    _last_check[paths] = now
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        if _file_seen.get(path) == st.st_mtime or st.st_size > 256 * 1024:
            continue
        _file_seen[path] = st.st_mtime
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except (OSError, ValueError):
            continue
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in ("private_key", "refresh_token", "client_secret", "access_token", "private_key_id"):
                remember_secret(data.get(key) if isinstance(data.get(key), str) else None)
            key = data.get("private_key")
            if isinstance(key, str):
                # the key's body lines, in case a message quotes only part of it
                for line in key.splitlines():
                    if len(line) >= 40 and "PRIVATE KEY" not in line:
                        remember_secret(line)
        else:
            # not JSON (a malformed file): any long line of it may be a secret
            for line in text.splitlines():
                line = line.strip().strip("\",'")
                if len(line) >= 24 and " " not in line:
                    remember_secret(line)


def _live_secrets() -> list[str]:
    out: list[str] = []
    with _lock:
        refs = list(_credentials)
        literals = list(_literals)
    for ref in refs:
        creds = ref()
        if creds is None:
            continue
        for attr in ("token", "refresh_token", "_refresh_token", "client_secret", "_client_secret", "id_token"):
            try:
                value = getattr(creds, attr, None)
            except Exception:  # noqa: BLE001, S112 - a property that fails is no secret we can see
                continue
            if isinstance(value, str) and len(value) >= _MIN_SECRET:
                out.append(value)
    out.extend(literals)
    return sorted(set(out), key=len, reverse=True)


def redact(text: str) -> str:
    if not text:
        return text
    if not isinstance(text, str):
        text = str(text)
    return _redact_with(text, _current_secrets())


def _current_secrets() -> list[str]:
    """The exact secrets to scrub now: those of the credential files in use and of the
    credential objects remembered (longest first, so a secret containing another goes whole)."""
    try:
        _load_file_secrets()
    except Exception:  # noqa: BLE001, S110 - scrubbing must never be the thing that fails
        pass
    return _live_secrets()


def _redact_with(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "<redacted>")
    if not _ANY_PATTERN.search(text):
        return text
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redactor() -> Callable[[str], str]:
    """:func:`redact` for the many strings of one document: the secrets gathered once, not per
    string (a fleet's ``status --json`` holds tens of thousands), and a string seen before
    answered from memory."""
    secrets = _current_secrets()
    memo: dict[str, str] = {}

    def one(text: str) -> str:
        if len(text) < _MIN_SECRET or not text:
            return text
        out = memo.get(text)
        if out is None:
            out = memo[text] = _redact_with(text, secrets)
        return out

    return one


def redact_data(data: Any) -> Any:
    """``redact`` every string in a JSON-like structure (keys included), each string on its own as
    :func:`redact` would (:func:`redactor`)."""
    one = redactor()

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return one(value)
        if isinstance(value, dict):
            return {one(k) if isinstance(k, str) else k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    return walk(data)


# templates/host-startup.sh scrubs the lines it sends to the bucket and the serial console with
# these same patterns (it runs on the host, without tpuctl installed yet): the block between these
# markers is written from _PATTERNS by ``python -m provision.basics.redact``, and a test fails when
# the two differ, so the host never lags behind what tpuctl scrubs.
HOST_BEGIN = "# BEGIN SECRETS: written from provision/basics/redact.py by python -m provision.basics.redact"
HOST_END = "# END SECRETS"


def _literal(text: str) -> str:
    """``text`` as a Python literal: a raw string where one spells it (as the patterns are written)."""
    import ast

    raw = f'r"{text}"'
    try:
        if ast.literal_eval(raw) == text:
            return raw
    except (SyntaxError, ValueError):
        pass
    return repr(text)


def host_patterns() -> str:
    """The host scrubber's ``SECRETS`` list, as the Python source between HOST_BEGIN and HOST_END."""
    lines = [HOST_BEGIN, "SECRETS = ["]
    for pattern, repl in _PATTERNS:
        flags = ", re.S" if pattern.flags & re.DOTALL else ""
        lines.append(f"    (re.compile({_literal(pattern.pattern)}{flags}), {_literal(repl)}),")
    lines += ["]", HOST_END]
    return "\n".join(lines) + "\n"


def with_host_patterns(script: str) -> str:
    """``script`` with its block between the markers replaced by :func:`host_patterns`."""
    start = script.index(HOST_BEGIN)
    end = script.index(HOST_END, start) + len(HOST_END) + 1
    return script[:start] + host_patterns() + script[end:]


if __name__ == "__main__":
    from .templates import templates_dir

    _script = templates_dir() / "host-startup.sh"
    _script.write_text(with_host_patterns(_script.read_text()))
    print(f"wrote the scrubber's patterns into {_script}")
