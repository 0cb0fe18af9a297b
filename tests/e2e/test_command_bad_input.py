"""A `job: command` spec or workdir that cannot run is one `tpuctl: error:` line naming the fix,
exit 2, through the installed tpuctl, before anything is staged or started: no run record, no
workdir archive, no pin."""

from __future__ import annotations

import pytest

from tests.conftest import run_tpuctl_process
from tests.e2e.test_bad_input import one_error, snapshot

CASES = [
    ('command: "python\\0train.py"\n', {}, "command is an empty or over-long string, or holds a NUL character"),
    ('command: [python, train.py, --epochs, 3]\n', {}, "command item 4 is 3, not a string; quote it"),
    ("command: []\n", {}, "command must be a non-empty list of strings"),
    ("command: [python, train.py]\nhosts: some\n", {}, "hosts is 'some'; use hosts: all"),
    ("command: [python, missing.py]\n", {}, "command runs missing.py, which is not in the workdir"),
    ("command: [./run.sh]\n", {}, "command runs ./run.sh, which is not in the workdir"),
    ("command: [python, train.py]\nrequirements: requirements.txt\n", {},
     "requirements file requirements.txt is not in the workdir"),
    ("command: [python, train.py]\nrequirements: [--index-url=http://x]\n", {}, "requirements must be"),
    ("command: [python, train.py, '{params.lr}']\n", {}, "command names {params.lr} but params has no lr"),
    ("command: [python, train.py]\ntensorflow: 2.10\n", {}, "tensorflow is '2.1'; give the release"),
    ("command: [python, train.py]\n", {"--workdir": "nowhere"}, "nowhere is not a directory"),
    ("command: [python, train.py]\n", {"--workdir": "big"}, "holds 2 files of 101.0 MiB to stage, over the limit"),
]


@pytest.mark.parametrize("spec, flags, fragment", CASES, ids=[c[2][:40] for c in CASES])
def test_a_command_spec_that_cannot_run_is_one_line_and_nothing_is_created(tmp_path, spec, flags, fragment):
    assert run_tpuctl_process("up", "lab", "--provider", "local").code == 0
    work = tmp_path / "prog"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    (work / "spec.yaml").write_text("job: command\n" + spec)
    big = tmp_path / "big"
    big.mkdir()
    (big / "train.py").write_text("")
    with open(big / "data.bin", "wb") as fh:       # sparse: the size is what counts
        fh.truncate(101 << 20)
    before = snapshot()
    args = ["train", "lab", "--job", str(work / "spec.yaml"), "--provider", "local"]
    for flag, value in flags.items():
        args += [flag, str(tmp_path / value)]
    one_error(run_tpuctl_process(*args), fragment)
    assert snapshot() == before        # no run, no workdir archive, no pin
