"""The fake cloud's front door: one dispatcher behind an HTTP server and a gRPC server.

Every API call, REST or gRPC, goes through :meth:`FakeCloud.dispatch`: log the call by API method,
apply the configured request delay, then the injected faults in the order Google's front end
would (service disabled, throttling/unavailability bursts, IAM), then the handler, under the
store's lock. gRPC calls are transcoded to their REST paths first (as Google's HTTP annotations
map them), so both transports share one implementation and one store.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from . import (
    admin,
    billing,
    compute,
    compute_groups,
    compute_net,
    compute_tpu,
    errors,
    fields,
    firewalls,
    guest,
    iam,
    metadata,
    metadata_server,
    monitoring,
    routers,
    tpu_rest,
)
from .errors import ApiError
from .routing import Request, Route, Router
from .store import Call, Latencies, Store

SERVICE_TITLES = {"tpu.googleapis.com": "Cloud TPU API", "compute.googleapis.com": "Compute Engine API",
                  billing.SERVICE: "Cloud Billing API", iam.SERVICE: "Identity and Access Management (IAM) API",
                  monitoring.SERVICE: "Cloud Monitoring API"}


@dataclass
class Outcome:
    status: int
    body: Any
    error: ApiError | None = None
    call: Call | None = None      # the logged call: the HTTP front end records the bytes it sent


class FakeCloud:
    """The state holder and dispatcher shared by the HTTP and gRPC front ends."""

    def __init__(self, latencies: Latencies, project: str = "tpuctl-test") -> None:
        self.initial_latencies = latencies
        self.default_project = project
        self.base_url = ""
        self.grpc_target = ""
        self._local = threading.local()
        self.store = self._new_store()
        self.api = Router()
        tpu_rest.register(self.api, self.current)
        compute.register(self.api, self.current)
        compute_tpu.register(self.api, self.current)
        compute_groups.register(self.api, self.current)
        compute_net.register(self.api, self.current)
        firewalls.register(self.api, self.current)
        routers.register(self.api, self.current)
        iam.register(self.api, self.current)
        metadata.register(self.api, self.current)
        billing.register(self.api)
        monitoring.register(self.api, self.current)
        self.admin = Router()
        admin.register(self.admin, self)
        tpu_rest.register_admin(self.admin, self)
        compute_tpu.register_admin(self.admin, self)
        routers.register_admin(self.admin, self)
        iam.register_admin(self.admin, self)
        monitoring.register_admin(self.admin, self)

    def _new_store(self) -> Store:
        lat = Latencies(**vars(self.initial_latencies))
        return Store(lat, base_url=self.base_url)

    def current(self) -> Store:
        """The store of the call being handled (a reset swaps ``self.store`` between calls)."""
        return getattr(self._local, "store", None) or self.store

    def reset(self) -> Store:
        old = self.store
        self.store = self._new_store()
        old.close()
        return self.store

    def set_base_url(self, url: str) -> None:
        self.base_url = url
        self.store.base_url = url

    # -- dispatch --------------------------------------------------------------------------------
    def dispatch(self, method: str, path: str, query: dict[str, list[str]], body: Any,
                 transport: str = "rest", grpc_method: str | None = None,
                 headers: dict[str, str] | None = None) -> Outcome:
        if path.startswith("/_admin/"):
            return self._dispatch_admin(method, path, query, body)
        store = self.store
        route, params = self.api.match(method, path)
        auth = (headers or {}).get("authorization", "")
        with store.lock:
            store.advance()
            call = store.record(transport, "GRPC" if grpc_method else method, grpc_method or path,
                                route.call if route else "unknown",
                                "" if grpc_method else urlencode(query, doseq=True), auth=auth)
        if route is None:
            err = ApiError(5, f"The requested URL {path} was not found on this server.", http=404)
            call.status = 404
            return Outcome(404, err.rest_body(), err, call)
        delay = store.latencies.of("request") + (store.latencies.of("op_poll") if route.op_poll else 0.0)
        if delay:
            time.sleep(delay)
        req = Request(method, path, query, body, params)
        self._local.store = store
        try:
            with store.lock:
                store.advance()
                try:
                    self._inject(store, route, req, grpc_method, auth)
                    result = route.handler(req)
                    if not grpc_method and store.honour_fields:
                        result = fields.apply(route.call, query, result)
                finally:
                    store.pending_op_fault = None
            outcome = Outcome(200, result)
        except ApiError as err:
            outcome = Outcome(err.http_status, err.compute_body() if route.style == "compute" else err.rest_body(), err)
        finally:
            self._local.store = None
        with store.lock:
            call.status = outcome.status
        outcome.call = call
        return outcome

    def _inject(self, store: Store, route: Route, req: Request, grpc_method: str | None, auth: str = "") -> None:
        faults = store.faults
        token = auth.split(" ", 1)[-1] if auth.lower().startswith("bearer ") else ""
        scopes = store.token_scopes.get(token)
        if scopes is not None and not errors.scope_allows(route.service, req.method, scopes):
            raise errors.scope_insufficient(route.service, route.call)
        echo = faults.take_echo("GRPC" if grpc_method else req.method, grpc_method or req.path)
        if echo:
            raise errors.echo_credentials(echo.status, auth, req.path, self.base_url)
        # POST /_admin/fault: gRPC calls match on the REST method and path they are transcoded to
        rule = faults.find_fault(api_of(route), req.method, req.path)
        if rule is not None:
            if rule.where == "call":
                faults.spend(rule)
                raise errors.from_fault_body(rule.body, rule.status)
            store.pending_op_fault = rule      # the create handler ends its operation with it
        if route.service in faults.disabled:
            from .catalog import project_number
            raise errors.service_disabled(route.service, SERVICE_TITLES.get(route.service, route.service),
                                          project_number(req.params.get("project", self.default_project)))
        burst = faults.take_burst("GRPC" if grpc_method else req.method, grpc_method or req.path)
        if burst:
            from .catalog import project_number
            raise errors.burst(burst.status, burst.message, route.service,
                               project_number(req.params.get("project", self.default_project)), req.method)
        if route.permission and faults.take_denial(route.permission):
            resource = req.path.split("/projects/", 1)[-1].split(":", 1)[0]
            raise errors.permission_denied(route.permission, f"projects/{resource}", route.service)

    def _dispatch_admin(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Outcome:
        route, params = self.admin.match(method, path)
        if route is None:
            err = ApiError(5, f"No admin endpoint {method} {path}; see docs/fakegcp.md", http=404)
            return Outcome(404, err.rest_body(), err)
        store = self.store
        try:
            with store.lock:
                store.advance()
                result = route.handler(Request(method, path, query, body, params))
            return Outcome(200, result)
        except ApiError as err:
            return Outcome(err.http_status, err.rest_body(), err)
        except (KeyError, ValueError, TypeError) as exc:
            err = ApiError(3, f"Bad admin request: {exc!r}")
            return Outcome(400, err.rest_body(), err)


def _jwt_scopes(assertion: str) -> set[str] | None:
    """The ``scope`` claim of a service account's JWT-bearer grant (RFC 7523; google-auth puts the
    requested scopes there, space-separated), or None when there is none to read."""
    import base64

    parts = assertion.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    scope = claims.get("scope") if isinstance(claims, dict) else None
    return set(str(scope).split()) if scope else None


def api_of(route: Route) -> str:
    """The API a route belongs to, as ``POST /_admin/fault`` names it: tpu.v2, tpu.v1, compute.v1,
    monitoring.v3."""
    if route.call.startswith("tpu.v1."):
        return "tpu.v1"
    if route.call.startswith("tpu.v2."):
        return "tpu.v2"
    if route.call.startswith("compute."):
        return "compute.v1"
    if route.call.startswith("monitoring."):
        return "monitoring.v3"
    return route.service


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakegcp"
    cloud: FakeCloud  # set on the subclass made by serve_http

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.command == "POST" and parts.path == "/token":
            self._token(raw)
            return
        if self.command == "GET" and parts.path.startswith(metadata_server.PREFIX):
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, ctype = metadata_server.answer(self.cloud.store, parts.path,
                                                            parse_qs(parts.query, keep_blank_values=True), headers)
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", ctype)
            if status == 200 and parts.path.endswith(metadata_server.PREEMPTED):
                self.send_header("ETag", metadata_server.etag(payload.decode()))
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            self._send(Outcome(400, ApiError(3, "Invalid JSON payload received.").rest_body()))
            return
        query = parse_qs(parts.query, keep_blank_values=True)
        headers = {k.lower(): v for k, v in self.headers.items()}
        if parts.path.startswith(guest.PREFIX):
            status, text = guest.answer(self.cloud, parts.path, query, headers)
            self._send_text(status, text)
            return
        outcome = self.cloud.dispatch(self.command, parts.path, query, body, headers=headers)
        self._send(outcome)

    def _send_text(self, status: int, text: str) -> None:
        payload = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/text")
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _token(self, raw: bytes) -> None:
        """The OAuth 2.0 token endpoint (a credential file's ``token_uri``): a refresh-token grant
        (authorized_user) or a JWT-bearer grant (service_account) gets ``store.access_token``."""
        form = {k: v[0] for k, v in parse_qs(raw.decode(errors="replace"), keep_blank_values=True).items()}
        store = self.cloud.store
        scopes = _jwt_scopes(form.get("assertion", ""))
        with store.lock:
            store.token_requests.append(form)
            fail = store.faults.token_failures is not None and store.faults.token_failures.take()
            token = store.access_token
            if scopes is not None:
                # a token is as good as the scopes it was granted for: each set gets its own token,
                # and the API surfaces refuse one that lacks their scope (errors.scope_allows)
                if not errors.scope_allows("*", "POST", scopes):
                    token = f"{token}.{abs(hash(tuple(sorted(scopes)))) % 10**8}"
                store.token_scopes[token] = frozenset(scopes)
        if fail:
            # as a careless proxy or endpoint might: the error quotes the form it was sent
            body: Any = {"error": "invalid_grant",
                         "error_description": f"Bad Request: could not use grant {sorted(form.items())}"}
            self._send(Outcome(400, body))
            return
        if form.get("grant_type") not in ("refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer"):
            self._send(Outcome(400, {"error": "unsupported_grant_type"}))
            return
        self._send(Outcome(200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}))

    def _send(self, outcome: Outcome) -> None:
        payload = json.dumps(outcome.body).encode()
        if outcome.call is not None:
            outcome.call.bytes = len(payload)
        self.send_response(outcome.status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def serve_http(cloud: FakeCloud, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"cloud": cloud})
    httpd = _Server((host, port), handler)
    cloud.set_base_url(f"http://{host}:{httpd.server_address[1]}")
    threading.Thread(target=httpd.serve_forever, name="fakegcp-http", daemon=True).start()
    return httpd
