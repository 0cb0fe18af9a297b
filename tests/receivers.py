"""Real receivers for notifications, on loopback: an HTTP server (a webhook or Slack's incoming
webhook) and an SMTP server with STARTTLS and a login (aiosmtpd), each recording what arrived.

The HTTP receiver can be told to fail its next requests (HTTP 503), as a receiver that is down
for a while; the SMTP server has a self-signed certificate (made with cryptography), which the
sender trusts through ``SSL_CERT_FILE`` exactly as it would trust a real server's CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """Records every POST; answers 503 to the next ``fail_next`` of them."""

    server: ThreadingHTTPServer
    received: list[Request] = field(default_factory=list)
    refused: list[Request] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def http_receiver() -> HttpReceiver:
    box: dict[str, HttpReceiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            req = Request(self.path, {k: v for k, v in self.headers.items()}, self.rfile.read(length))
            rec = box["r"]
            with rec.lock:
                fail = rec.fail_next > 0
                if fail:
                    rec.fail_next -= 1
                    rec.refused.append(req)
                else:
                    rec.received.append(req)
            self.send_response(503 if fail else 200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box["r"] = HttpReceiver(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return box["r"]


def self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A certificate for ``host`` and its key, as PEM files (the certificate is its own CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class SmtpServer:
    controller: Any
    cert: Path
    messages: list[Message] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)
    tls_before_login: list[bool] = field(default_factory=list)

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.controller.port}"

    def close(self) -> None:
        self.controller.stop()


def smtp_server(directory: Path, user: str, password: str) -> SmtpServer:
    """An SMTP server on loopback that requires STARTTLS before anything, and this login."""
    import ssl

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    cert, key = self_signed(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    box: dict[str, SmtpServer] = {}

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            box["s"].messages.append(message_from_bytes(envelope.content))
            return "250 OK"

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login.decode(), auth_data.password.decode()) == \
            (user, password)
        box["s"].logins.append((auth_data.login.decode(), "ok" if ok else "refused"))
        box["s"].tls_before_login.append(session.ssl is not None)
        return AuthResult(success=ok)

    with socket.socket() as probe:        # aiosmtpd's Controller connects to its port to start: no port 0
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True,
                            authenticator=authenticate, auth_required=True, auth_require_tls=True)
    controller.start()
    box["s"] = SmtpServer(controller, cert)
    return box["s"]
