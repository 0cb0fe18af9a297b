"""`tpuctl --help` stays instant: the stage command loads no cloud or checksum library."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_help_and_stage_help_do_not_import_storage_libraries():
    code = ("import sys; from provision.cli import main; main(['stage', '--help']); "
            "heavy = [m for m in ('google.cloud.storage', 'google_crc32c', 'requests', 'provision.cloud.storage') "
            "if m in sys.modules]; print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout
    assert "--create-bucket" in out.stdout and "--part-size" in out.stdout
