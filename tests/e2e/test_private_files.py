"""On a machine others share, what tpuctl keeps in $TPUCTL_HOME (state, the cost ledger, the
local provider's buckets: the user's data, code and checkpoints) is its owner's alone: directories
0700 and files 0600 whatever the umask, as a Cloud Storage bucket is readable only by whom its
policy names. Read from the mode bits of what the installed tpuctl made under a umask of 022."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.conftest import REPO, TPUCTL_BIN


def _tpuctl(*args: str, umask: int) -> subprocess.CompletedProcess:
    return subprocess.run([str(TPUCTL_BIN), *args, "--provider", "local"], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120, check=False, umask=umask)


def _modes(root: Path) -> dict[str, tuple[str, int]]:
    out = {".": ("d", stat.S_IMODE(root.stat().st_mode))}
    for path in root.rglob("*"):
        st = path.lstat()
        out[str(path.relative_to(root))] = ("d" if stat.S_ISDIR(st.st_mode) else "f", stat.S_IMODE(st.st_mode))
    return out


def test_tpuctl_home_and_local_buckets_are_private_whatever_the_umask(tmp_path):
    home = Path(os.environ["TPUCTL_HOME"])
    assert not home.exists()                      # tpuctl makes it
    src = tmp_path / "bert"
    (src / "sub").mkdir(parents=True)
    (src / "vocab.txt").write_text("[PAD]\n")
    (src / "sub" / "bert_config.json").write_text("{}")

    assert _tpuctl("up", "lab", "-a", "v2-8", umask=0o022).returncode == 0
    staged = _tpuctl("stage", str(src), "gs://tpuctl-local/bert", "--create-bucket", "--location", "us-central1",
                     umask=0o022)
    assert staged.returncode == 0, staged.stderr

    modes = _modes(home)
    assert "local/buckets/tpuctl-local/bert/sub/bert_config.json" in modes      # the objects were looked at
    assert "local/tpus/us-central1-b/lab.json" in modes and "ledger/local/local/lab.jsonl" in modes
    shared = {name: oct(mode) for name, (kind, mode) in modes.items()
              if mode != (0o700 if kind == "d" else 0o600)}
    assert not shared, shared
