"""A notice as each channel takes it: the webhook's JSON (signed), Slack's message, an e-mail.

The webhook's body is tpuctl's own, documented in docs/notify.md (``schema``:
``tpuctl.notification/v1``); it is signed with HMAC-SHA256 over ``<timestamp>.<body>`` with the
channel's signing secret, in the header ``X-Tpuctl-Signature: v1=<hex>`` beside
``X-Tpuctl-Timestamp`` (the scheme Slack and Stripe use, so a receiver can refuse old replays).
Slack's incoming webhooks take ``text`` (the fallback shown in notifications) and ``blocks``
(Block Kit: a header and a section of mrkdwn). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from email.message import EmailMessage
from typing import Any

from .messages import Notice

SCHEMA = "tpuctl.notification/v1"
SIGNATURE_HEADER = "X-Tpuctl-Signature"
TIMESTAMP_HEADER = "X-Tpuctl-Timestamp"
_EMOJI = {"info": ":information_source:", "warning": ":warning:", "error": ":x:", "success": ":white_check_mark:"}


def webhook_body(notice: Notice) -> bytes:
    """The JSON document a generic webhook receives."""
    doc = {"schema": SCHEMA, **notice.to_dict()}
    return json.dumps(doc, sort_keys=True, default=str).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=<hex>``: HMAC-SHA256 of ``<timestamp>.<body>`` with the signing secret."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """What a receiver checks (the tests, and docs/notify.md's example)."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    return hmac.compare_digest(signature(secret, ts, body), header)


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn gives &, < and > meaning (links, mentions): escaped as its docs say
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(notice: Notice) -> bytes:
    """An incoming-webhook message: ``text`` and two Block Kit blocks."""
    text = _slack_escape(notice.text)
    held = f" ({notice.held} more like it held back)" if notice.held else ""
    doc: dict[str, Any] = {
        "text": f"{_EMOJI.get(notice.severity, '')} {text}{held}".strip(),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": notice.title[:150], "emoji": True}},
            {"type": "section", "text": {"type": "mrkdwn", "text": (text + held)[:3000]}},
        ],
    }
    return json.dumps(doc).encode()


def email(notice: Notice, sender: str, recipients: list[str]) -> EmailMessage:
    """A plain-text e-mail: the title as subject, the text and the fields as body."""
    msg = EmailMessage()
    msg["Subject"] = f"[tpuctl] {notice.title}"[:200]
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    lines = [notice.text, ""]
    if notice.held:
        lines += [f"({notice.held} more notices like it were held back by the rate limit)", ""]
    lines += [f"{k}: {v}" for k, v in sorted(notice.fields.items())]
    msg.set_content("\n".join(lines) + "\n")
    return msg
