"""URL routing shared by the TPU, Compute and admin handlers.

Each route names the API method it implements (``tpu.v2.nodes.create``), the IAM permission the
call needs and the service it belongs to, so the server can log calls by method and inject
permission and service-disabled errors before a handler runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    params: dict[str, str] = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def flag(self, name: str) -> bool:
        return (self.arg(name) or "").lower() in ("1", "true", "yes")

    def json(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}


Handler = Callable[[Request], Any]


@dataclass
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    call: str                  # logged API method name
    permission: str | None     # IAM permission the call needs (for injected denials)
    service: str               # "tpu.googleapis.com", "compute.googleapis.com" or "admin"
    style: str                 # error body style: "tpu" or "compute"
    op_poll: bool = False      # an operation read: subject to the op_poll delay


def compile_path(template: str) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(template)
    rx = ""
    for i, part in enumerate(parts):
        rx += f"(?P<{part}>[^/:]+)" if i % 2 else re.escape(part)
    return re.compile(f"^{rx}$")


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, template: str, call: str, *, permission: str | None = None,
            service: str, style: str, op_poll: bool = False) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            self.routes.append(Route(method, compile_path(template), handler, call, permission,
                                     service, style, op_poll))
            return handler
        return register

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str]]:
        for route in self.routes:
            if route.method != method:
                continue
            m = route.pattern.match(path)
            if m:
                return route, m.groupdict()
        return None, {}
