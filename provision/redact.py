"""Scrub credentials from anything tpuctl prints or logs.

Cloud errors can echo request headers or URLs; a signed URL carries its signature in the query.
Everything that leaves tpuctl as text (errors, logs, --json) goes through :func:`redact`.
"""

from __future__ import annotations

import re

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # OAuth2 access tokens and refresh tokens issued by Google
    (re.compile(r"ya29\.[0-9A-Za-z_\-.]+"), "ya29.<redacted>"),
    (re.compile(r"1//[0-9A-Za-z_\-]{20,}"), "<redacted-refresh-token>"),
    # Authorization headers of any scheme
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(bearer|basic)\s+[^\s\"',}]+"), r"\1\2 <redacted>"),
    (re.compile(r"(?i)\bbearer\s+[0-9A-Za-z_\-.=]{8,}"), "Bearer <redacted>"),
    # Signed URL query parameters (V2 and V4) and token-like query parameters
    (re.compile(r"(?i)([?&](?:x-goog-signature|x-goog-credential|signature|googleaccessid|access_token|"
                r"refresh_token|id_token|token|key)=)[^&\s\"']+"), r"\1<redacted>"),
    # JSON fields of service-account keys and credential files
    (re.compile(r"(?i)(\"(?:private_key|private_key_id|client_secret|refresh_token|access_token|id_token)\""
                r"\s*:\s*\")[^\"]*(\")"), r"\1<redacted>\2"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL),
     "<redacted-private-key>"),
    # API keys
    (re.compile(r"AIza[0-9A-Za-z_\-]{35}"), "<redacted-api-key>"),
]


def redact(text: str) -> str:
    if not text:
        return text
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text
