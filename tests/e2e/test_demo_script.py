"""``make demo`` (templates/demo.sh) without its minutes of training: a re-run deletes only what
the demo made, never the README tour's ``.demo/tiny``, and the lines it ends with show its
clusters, which live in a TPUCTL_HOME of the demo's own. The script's parts are functions, so
each runs here as the demo runs it (``source`` defines them and runs nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

DEMO_SH = REPO / "templates" / "demo.sh"


def _demo(script: str, demo: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` after sourcing demo.sh, with the demo's directory at ``demo``."""
    env = {**os.environ, "DEMO_DIR": str(demo), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", f'source "{DEMO_SH}"\n{script}'], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_rerun_deletes_what_the_demo_made_and_keeps_the_tours_files(tmp_path):
    demo = tmp_path / ".demo"
    tours = [demo / "tiny" / "vocab.txt", demo / "runs" / "finetune" / "progress.json"]   # README, docs/jobs.md
    demos = [demo / "home" / "clusters" / "bert-lab.json", demo / "tiny-bert" / "vocab.txt", demo / "sweep.yaml"]
    for path in tours + demos:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    r = _demo("demo_env; demo_reset", demo, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [p for p in tours if not p.exists()] == []
    assert [p for p in demos if p.exists()] == []


def test_the_demo_ends_with_the_commands_that_show_its_clusters(tmp_path):
    demo = tmp_path / "my demo"        # a space: the printed export line must still paste as one
    r = _demo("demo_env; demo_reset\n"
              "tpuctl up bert-lab --zone us-central1-b --accelerator-type v2-8 --preemptible >/dev/null 2>&1\n"
              "demo_epilogue 1", demo, tmp_path)       # as if it stopped before its final `down`
    assert r.returncode == 0, r.stderr
    shown = [line.strip() for line in r.stdout.splitlines() if line.startswith("  ")]
    export = next(line for line in shown if line.startswith("export TPUCTL_HOME="))
    assert "tpuctl status" in shown and "tpuctl down bert-lab" in shown, r.stdout

    def pasted(command: str) -> subprocess.CompletedProcess:  # in the user's shell: their own TPUCTL_HOME
        return subprocess.run(["bash", "-c", f"{export}\n{command}"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False,
                              env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})

    r = pasted("tpuctl status --json")
    assert r.returncode == 0, r.stderr
    assert '"name": "bert-lab"' in r.stdout
    r = subprocess.run([str(Path(sys.executable).with_name("tpuctl")), "status", "--provider", "local", "--json"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert '"clusters": []' in r.stdout          # the user's own home has none: the demo's is apart
    assert pasted("tpuctl down bert-lab").returncode == 0
