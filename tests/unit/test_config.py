"""Provider resolution: --provider > TPUCTL_PROVIDER > config file > gcp if a project is configured > local."""

import pytest

from provision.basics import config
from provision.basics.errors import UsageError


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_local_when_nothing_is_configured():
    t = config.resolve()
    assert (t.provider, t.project) == ("local", "local")
    assert t.sources["provider"] == "no GCP project configured"


def test_gcp_when_gcloud_has_a_project(tmp_path, monkeypatch):
    gdir = tmp_path / "gcloud"
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(gdir))
    write(gdir / "active_config", "work\n")
    write(gdir / "configurations" / "config_work", "[core]\nproject = my-proj-1\n[compute]\nzone = europe-west4-a\n")
    t = config.resolve()
    assert (t.provider, t.project, t.zone) == ("gcp", "my-proj-1", "europe-west4-a")
    assert t.sources["project"] == "gcloud config"


def test_precedence(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-proj-1")
    assert config.resolve().provider == "gcp"
    write(config.config_path(), 'provider = "local"\n')
    assert config.resolve().provider == "local"
    monkeypatch.setenv("TPUCTL_PROVIDER", "gcp")
    t = config.resolve()
    assert (t.provider, t.project, t.sources["provider"]) == ("gcp", "env-proj-1", "TPUCTL_PROVIDER")
    assert config.resolve(provider="local").provider == "local"


def test_gcp_without_project_names_the_fix():
    with pytest.raises(UsageError, match="gcp needs a project.*--project"):
        config.resolve(provider="gcp")


def test_unknown_provider_and_bad_config(monkeypatch):
    monkeypatch.setenv("TPUCTL_PROVIDER", "aws")
    with pytest.raises(UsageError, match="unknown provider 'aws' \\(from TPUCTL_PROVIDER\\)"):
        config.resolve()
    monkeypatch.delenv("TPUCTL_PROVIDER")
    write(config.config_path(), "provider = \n")
    with pytest.raises(UsageError, match="cannot read config file"):
        config.resolve()
