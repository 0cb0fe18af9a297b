"""Sending one notice on one channel: an HTTP POST (webhook, Slack) or an e-mail over SMTP.

Each failure is a :class:`DeliveryError` whose reason tpuctl wrote itself (``HTTP 503``,
``connection refused``, ``the server offers no STARTTLS``): never a transport exception's text,
which quotes the URL, and the URL is the secret. HTTP goes through the standard library (no
session to keep, nothing to import at start-up). E-mail is sent only over TLS: STARTTLS on any
port but 465, where the connection is TLS from the start; the server's certificate is checked
against the system's trust store (``SSL_CERT_FILE`` names another).
"""

from __future__ import annotations

import smtplib
import socket
import ssl
import time
import urllib.error
import urllib.request

from . import formats
from .messages import Notice
from .policy import retriable_status
from .secrets import Secret
from .settings import Channel

TIMEOUT_S = 10.0
USER_AGENT = "tpuctl-notify/1"


class DeliveryError(Exception):
    def __init__(self, reason: str, retriable: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.retriable = retriable


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not an instruction: the body is never re-sent elsewhere."""

    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def send(channel: Channel, secret: Secret, notice: Notice, *, timeout: float = TIMEOUT_S) -> None:
    """Deliver ``notice`` once; raises :class:`DeliveryError`."""
    if channel.kind == "email":
        _send_email(channel, secret, notice, timeout)
        return
    if not secret.url:
        raise DeliveryError("no URL in the channel's secret", retriable=False)
    if channel.kind == "slack":
        body = formats.slack_body(notice)
        headers = {}
    else:
        body = formats.webhook_body(notice)
        headers = {"X-Tpuctl-Event": notice.kind}
        if secret.signing_key:
            stamp = int(time.time())
            headers[formats.TIMESTAMP_HEADER] = str(stamp)
            headers[formats.SIGNATURE_HEADER] = formats.signature(secret.signing_key, stamp, body)
    _post(secret.url, body, headers, timeout)


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
    try:
        with _opener.open(req, timeout=timeout) as resp:
            resp.read(4096)
    except urllib.error.HTTPError as exc:
        status = exc.code
        raise DeliveryError(f"HTTP {status}", retriable=retriable_status(status)) from None
    except urllib.error.URLError as exc:
        raise DeliveryError(_why(exc.reason)) from None
    except (OSError, ValueError) as exc:
        raise DeliveryError(_why(exc)) from None


def _why(exc: object) -> str:
    """A transport failure in words of tpuctl's own (no text of the exception: it may quote the URL)."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return "host not found"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "TLS certificate not trusted"
    if isinstance(exc, ssl.SSLError):
        return "TLS error"
    return f"{type(exc).__name__}"


def _send_email(channel: Channel, secret: Secret, notice: Notice, timeout: float) -> None:
    assert channel.smtp and channel.sender
    host, _, port_text = channel.smtp.rpartition(":")
    host, port = host.strip("[]"), int(port_text)
    msg = formats.email(notice, channel.sender, list(channel.to))
    context = ssl.create_default_context()
    try:
        if port == 465:
            server: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        else:
            server = smtplib.SMTP(host, port, timeout=timeout)
        with server:
            server.ehlo()
            if port != 465:
                if not server.has_extn("starttls"):
                    raise DeliveryError("the SMTP server offers no STARTTLS: not sending in clear", retriable=False)
                server.starttls(context=context)
                server.ehlo()
            if channel.user:
                server.login(channel.user, secret.password or "")
            server.send_message(msg)
    except DeliveryError:
        raise
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryError(f"SMTP login refused ({exc.smtp_code})", retriable=False) from None
    except smtplib.SMTPRecipientsRefused:
        raise DeliveryError("SMTP server refused the recipients", retriable=False) from None
    except smtplib.SMTPResponseException as exc:
        raise DeliveryError(f"SMTP {exc.smtp_code}", retriable=exc.smtp_code < 500) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(_why(exc)) from None
