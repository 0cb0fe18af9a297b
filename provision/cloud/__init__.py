"""Providers: one module per cloud behind the protocol in :mod:`provision.cloud.base`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..basics.config import Target
    from .base import Provider


def get_provider(target: Target) -> Provider:
    """Instantiate the provider a resolved target names; imports only that provider's libraries."""
    if target.provider == "local":
        from ..basics.config import home
        from .local import LocalProvider

        return LocalProvider(home(), settings=target.settings)
    if target.provider == "gcp":
        from .gcp import GcpProvider

        return GcpProvider(target.project, settings=target.settings)
    raise ValueError(target.provider)
