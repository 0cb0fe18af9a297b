"""Google's own client libraries, pointed at a ``FakeGCP`` the way tpuctl points them at it.

This is also the executable record of how each library composes its endpoint:
- tpu_v2 (REST): ``api_endpoint`` is the base URL; its paths start with /v2/.
- compute_v1 (REST): ``api_endpoint`` is the same base URL; its paths start with /compute/v1/.
- tpu_v1: gRPC only; an insecure channel to ``grpc_target``.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.api_core.future.polling import DEFAULT_POLLING
from google.auth.credentials import AnonymousCredentials

from .fixture import FakeGCP

# api_core polls operations from 1 s up to 20 s apart; against the fake that only wastes time.
FAST_POLLING = DEFAULT_POLLING.with_delay(initial=0.05, maximum=0.25, multiplier=1.5)


def tpu_v2(fake: FakeGCP) -> Any:
    from google.cloud import tpu_v2 as v2
    return v2.TpuClient(client_options={"api_endpoint": fake.env()["TPUCTL_TPU_API_ENDPOINT"]},
                        transport="rest", credentials=AnonymousCredentials())


def tpu_v1(fake: FakeGCP) -> Any:
    from google.cloud import tpu_v1 as v1
    from google.cloud.tpu_v1.services.tpu.transports import TpuGrpcTransport
    channel = grpc.insecure_channel(fake.env()["TPUCTL_TPU_GRPC_ENDPOINT"])
    return v1.TpuClient(transport=TpuGrpcTransport(channel=channel))


def compute(client_cls: Any, fake: FakeGCP) -> Any:
    return client_cls(client_options={"api_endpoint": fake.env()["TPUCTL_COMPUTE_API_ENDPOINT"]},
                      credentials=AnonymousCredentials())
