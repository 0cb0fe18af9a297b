"""Where tpuctl keeps its files, and which provider, project and zone a command acts on.

Resolution order (DESIGN.md): ``--provider`` > ``TPUCTL_PROVIDER`` > the config file > ``gcp``
if a GCP project is configured (flag, environment, gcloud's active configuration) > ``local``.
gcloud's configuration is read from its files, never by running gcloud, which takes a second.
"""

from __future__ import annotations

import configparser
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

PROVIDERS = ("local", "gcp")


def home() -> Path:
    """Root of tpuctl's own files: ``$TPUCTL_HOME`` or the user data dir."""
    env = os.environ.get("TPUCTL_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("tpuctl", appauthor=False))


def config_path() -> Path:
    env = os.environ.get("TPUCTL_CONFIG")
    if env:
        return Path(env).expanduser()
    if os.environ.get("TPUCTL_HOME"):
        return home() / "config.toml"
    from platformdirs import user_config_dir

    return Path(user_config_dir("tpuctl", appauthor=False)) / "config.toml"


def load_config_file() -> dict[str, Any]:
    path = config_path()
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 hosts (TPU VM images)
        import tomli as tomllib
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}",
                         hint="fix its TOML syntax or point TPUCTL_CONFIG elsewhere") from None
    if not isinstance(data, dict):
        return {}
    return data


def gcloud_properties() -> dict[str, str]:
    """``core/project`` and ``compute/zone`` of gcloud's active configuration, if any."""
    root = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    active = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME")
    if not active:
        try:
            active = (root / "active_config").read_text().strip() or "default"
        except OSError:
            active = "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(root / "configurations" / f"config_{active}")
    except configparser.Error:
        return {}
    out: dict[str, str] = {}
    if parser.has_option("core", "project"):
        out["project"] = parser.get("core", "project").strip()
    if parser.has_option("compute", "zone"):
        out["zone"] = parser.get("compute", "zone").strip()
    return out


@dataclass
class Target:
    """What a command acts on, and where each value came from (shown to the user)."""

    provider: str
    project: str | None
    zone: str | None
    sources: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        project = self.project or "-"
        zone = self.zone or "-"
        return f"provider={self.provider} project={project} zone={zone}"


def resolve(provider: str | None = None, project: str | None = None,
            zone: str | None = None) -> Target:
    env = os.environ
    cfg = load_config_file()
    gcloud: dict[str, str] | None = None

    def from_gcloud(key: str) -> str | None:
        nonlocal gcloud
        if gcloud is None:
            gcloud = gcloud_properties()
        return gcloud.get(key) or None

    sources: dict[str, str] = {}

    proj, src = project, "--project"
    for value, name in ((env.get("TPUCTL_PROJECT"), "TPUCTL_PROJECT"),
                        (cfg.get("project"), "config file"),
                        (env.get("CLOUDSDK_CORE_PROJECT"), "CLOUDSDK_CORE_PROJECT"),
                        (env.get("GOOGLE_CLOUD_PROJECT"), "GOOGLE_CLOUD_PROJECT")):
        if proj:
            break
        proj, src = value, name
    if not proj:
        proj, src = from_gcloud("project"), "gcloud config"
    if proj:
        sources["project"] = src

    prov, src = provider, "--provider"
    for value, name in ((env.get("TPUCTL_PROVIDER"), "TPUCTL_PROVIDER"),
                        (cfg.get("provider"), "config file")):
        if prov:
            break
        prov, src = value, name
    if not prov:
        prov, src = ("gcp", "a GCP project is configured") if proj else ("local", "no GCP project configured")
    if prov not in PROVIDERS:
        raise UsageError(f"unknown provider {prov!r} (from {src})", hint="use --provider local or --provider gcp")
    sources["provider"] = src

    z, src = zone, "--zone"
    for value, name in ((env.get("TPUCTL_ZONE"), "TPUCTL_ZONE"),
                        (cfg.get("zone"), "config file"),
                        (env.get("CLOUDSDK_COMPUTE_ZONE"), "CLOUDSDK_COMPUTE_ZONE")):
        if z:
            break
        z, src = value, name
    if not z and prov == "gcp":
        z, src = from_gcloud("zone"), "gcloud config"
    if z:
        sources["zone"] = src

    if prov == "gcp" and not proj:
        raise UsageError("provider gcp needs a project",
                         hint="pass --project, set TPUCTL_PROJECT, or run gcloud config set project ID")
    if prov == "gcp":
        from .validate import PROJECT_RE, show

        if not isinstance(proj, str) or not PROJECT_RE.match(proj):
            raise UsageError(f"invalid project id {show(proj)} (from {sources['project']})",
                             hint="use the project ID (6-30 lowercase letters, digits, '-'), not its name or number")
    if z:
        from .validate import ZONE_RE, show

        if not isinstance(z, str) or not ZONE_RE.match(z):
            raise UsageError(f"invalid zone {show(z)} (from {sources['zone']})",
                             hint="use a Google Cloud zone such as us-central1-b or europe-west4-a")
    if prov == "local":
        proj = "local"  # the local provider has no projects; everything lives under TPUCTL_HOME
        sources["project"] = "local provider"
    settings = dict(cfg.get(prov, {})) if isinstance(cfg.get(prov), dict) else {}
    if cfg.get("tpu_cidr_pool") and "tpu_cidr_pool" not in settings:
        settings["tpu_cidr_pool"] = cfg["tpu_cidr_pool"]
    return Target(provider=prov, project=proj, zone=z, sources=sources, settings=settings)
