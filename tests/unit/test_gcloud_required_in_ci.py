"""tests/integration/test_fakegcp_gcloud.py is the proof that the fake speaks Google's wire
protocol to Google's own CLI; without gcloud it skips on a developer's machine, but where CI is
set (.ci/run sets it) it fails, so a CI machine that lost gcloud cannot pass without the proof."""

from __future__ import annotations

import pytest

from tests.integration import test_fakegcp_gcloud as gcloud_tests


def test_a_missing_gcloud_fails_in_ci_and_skips_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))           # no gcloud on it
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"^gcloud is not on PATH, and CI must run these tests"):
        gcloud_tests.require_gcloud()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=r"gcloud \(google-cloud-cli\) is not installed"):
        gcloud_tests.require_gcloud()


def test_every_gcloud_test_requires_it():
    """The check is an autouse fixture of that module, so no test there can run without it."""
    marker = getattr(gcloud_tests.gcloud_installed, "_fixture_function_marker", None) or getattr(
        gcloud_tests.gcloud_installed, "_pytestfixturefunction", None)
    assert marker is not None and marker.autouse
