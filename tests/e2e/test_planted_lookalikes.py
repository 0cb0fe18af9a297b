"""A bucket writer who plants look-alikes under the names `tpuctl train` will stage cannot block
the run: the requirement's wheel (its name is its sha256, known from PyPI) with the same size,
and the workdir archive (named by its sha256, computable from the code) with the same size and
CRC32C. train sends the real bytes, and the run finishes with the real code and the real wheel.
Before, train skipped both uploads, and the host refused every attempt."""

from __future__ import annotations

import hashlib
from pathlib import Path

from provision.cloud.storage import local_bucket
from provision.runs import wheelhouse
from provision.staging import workdir
from provision.staging.selection import select
from tests.conftest import run_tpuctl_process
from tests.lookalikes import look_alike, tiny_wheel


def test_look_alikes_planted_where_train_will_stage_do_not_stop_the_run(tmp_path):
    index = tmp_path / "index"
    real = tiny_wheel(index, "from the wheelhouse")
    evil = tiny_wheel(tmp_path / "evil", "from the attacker!!")
    work = tmp_path / "prog"
    work.mkdir()
    (work / "requirements.txt").write_text("tinydep==1.0\n")
    (work / "use.py").write_text("import os, tinydep\nopen(os.path.join(os.environ['TPUCTL_MODEL_DIR'], 'v'), 'w')"
                                 ".write(tinydep.VALUE)\n")
    (work / "spec.yaml").write_text("job: command\ncommand: [python, use.py]\nrequirements: requirements.txt\n")
    assert run_tpuctl_process("up", "lab").code == 0
    bucket = local_bucket("tpuctl-local")
    sha = hashlib.sha256(real.read_bytes()).hexdigest()
    assert evil.stat().st_size == real.stat().st_size
    bucket.write_bytes(wheelhouse.wheel_name(sha, real.name), evil.read_bytes())
    packed = workdir.pack(select(work))
    bucket.write_bytes(packed.object_name, look_alike(packed.data))

    r = run_tpuctl_process("train", "lab", "--job", str(work / "spec.yaml"), "--poll", "1", "--json",
                           env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(index)}, timeout=180)
    assert r.code == 0, r.err[-3000:]
    assert (Path(r.json()["run"]["model_dir"]) / "v").read_text() == "from the wheelhouse"
    assert f"staged the workdir {work}" in r.err and "already staged" not in r.err
