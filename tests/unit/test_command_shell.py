"""`command:` as a shell string (run by `bash -c`) beside the argv list (exec'd as it is): what the
spec check accepts, what it runs, and the program file it finds to check before anything is paid."""

from __future__ import annotations

import subprocess

import pytest

from jobs.command import command_problem, program_file, substitute
from jobs.spec import SpecError, from_dict


def test_a_string_runs_under_bash_with_the_environment_expanded_and_params_quoted_as_one_word():
    argv = substitute('python train.py --out-dir "$TPUCTL_CHECKPOINT_DIR" --name {params.name}',
                      {"name": "a b; rm -rf /"})
    assert argv[:2] == ["bash", "-c"]
    out = subprocess.run([*argv[:2], argv[2].replace("python train.py", "printf '%s|'"), "x"], text=True,
                         capture_output=True, env={"TPUCTL_CHECKPOINT_DIR": "/ckpt dir", "PATH": "/usr/bin:/bin"},
                         check=True).stdout
    assert out == "--out-dir|/ckpt dir|--name|a b; rm -rf /|"


def test_a_list_is_still_exec_d_as_it_is():
    assert substitute(["python", "train.py", "--lr", "{params.lr}", "$HOME"], {"lr": 0.1}) == \
        ["python", "train.py", "--lr", "0.1", "$HOME"]


@pytest.mark.parametrize("command, expected", [
    ("python train.py --out $TPUCTL_MODEL_DIR", "train.py"),
    ("exec python -u train.py", "train.py"),
    ("OMP_NUM_THREADS=1 python train.py && echo done", "train.py"),
    ("bash run.sh", "run.sh"),
    ("./run.sh --x", "./run.sh"),
    ("torchrun --nproc_per_node 8 train.py", None),
    ("python -m pkg.train", None),
    ("python $SCRIPT", None),
    ("python 'unterminated", None),
    (["python", "train.py"], "train.py"),
])
def test_the_program_file_a_command_names_is_found_in_a_string_too(command, expected):
    assert program_file(command) == expected


@pytest.mark.parametrize("command", ["", "   ", "a\0b", "x" * 20000])
def test_an_empty_or_unsafe_string_is_one_line_naming_both_forms(command):
    problem = command_problem(command)
    assert problem is not None and "\n" not in problem and "command: python train.py" in problem


def test_the_spec_takes_a_string_and_checks_its_program_in_the_workdir(tmp_path):
    spec = from_dict({"job": "command", "model_dir": str(tmp_path / "m"),
                      "command": 'python train.py --out "$TPUCTL_CHECKPOINT_DIR"'})
    assert spec.argv() == ["bash", "-c", 'python train.py --out "$TPUCTL_CHECKPOINT_DIR"']
    with pytest.raises(SpecError, match="command runs train.py, which is not in the workdir"):
        spec.check_code([str(tmp_path)])
    (tmp_path / "train.py").write_text("")
    assert spec.check_code([str(tmp_path)]) == str(tmp_path / "train.py")
