"""A ``job: command`` spec's program: checked without running it, and the contract it runs under.

The program is any argv (``[python, train.py, --epochs, "3"]``, run as it is) or a shell string
(``python train.py --out-dir "$TPUCTL_CHECKPOINT_DIR"``, run by ``bash -c``): JAX, PyTorch/XLA,
Keras 3, a plain TensorFlow script. It needs nothing of tpuctl. Its contract is the environment
and signals (docs/own-code.md):

- the environment names in :data:`CONTRACT`: the model directory (the bucket URL), the local
  checkpoint directory tpuctl keeps in the bucket, the run, the attempt, its worker index, the
  worker count, worker 0's ``host:port`` and the accelerator type;
- SIGTERM is the preemption notice, sent to the program's whole process group (a shell and the
  program it started both get it): the program saves and exits; whatever it exits with then
  counts as a preemption (the run resumes). Exit 0 is finished, 42 a preemption, 2 a program
  that cannot run (not retried), anything else a job error retried within ``--max-failures``;
- progress is JSON lines the program may append to ``$TPUCTL_PROGRESS_FILE``
  (:mod:`provision.runs.reports` folds them into the run's ``progress.json``).

Standard library only: the control plane checks a spec with it before anything is created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError

HOSTS = ("all", "first")
# What every worker of a job: command attempt finds in its environment.
CONTRACT = ("TPUCTL_MODEL_DIR", "TPUCTL_CHECKPOINT_DIR", "TPUCTL_RUN", "TPUCTL_ATTEMPT", "TPUCTL_WORKER_INDEX",
            "TPUCTL_NUM_WORKERS", "TPUCTL_COORDINATOR", "TPUCTL_ACCELERATOR_TYPE",
            "TPUCTL_PROGRESS_FILE", "TPUCTL_PARAMS", "TPUCTL_EVAL_EVERY_STEPS")
# The port worker 0 is told to listen on for the group's coordinator (jax.distributed,
# torch.distributed): JAX's own on Cloud TPU since 2025-11 (jax-ml/jax
# jax/_src/clusters/cloud_tpu_cluster.py: 8482, 8476 before); any free port would do, as long as
# every worker is told the same.
COORDINATOR_PORT = 8482
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_SHELL_CHARS = 16384
# A shell string runs as ``bash -c STRING``: bash, not sh, because the TPU VM images and every
# tutorial's ``run.sh`` assume it; the string's own ``exec`` replaces bash with the program.
SHELL = ("bash", "-c")
_PARAM = re.compile(r"\{params\.([A-Za-z_][A-Za-z0-9_]*)\}")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def command_problem(command: Any) -> str | None:
    """Why ``command`` is not something tpuctl can run (None if it is): a non-empty list of
    strings (an argv, run as it is) or a non-empty string (a shell command line). No I/O."""
    example = 'command: [python, train.py, --epochs, "3"]'
    if isinstance(command, str):
        if not command.strip() or "\0" in command or len(command) > MAX_SHELL_CHARS:
            return (f"command is an empty or over-long string, or holds a NUL character; give a shell command "
                    f"line of at most {MAX_SHELL_CHARS} characters (command: python train.py --epochs 3) "
                    f"or an argument list ({example})")
        return None
    if not isinstance(command, list) or not command:
        return f"command must be a non-empty list of strings or a shell command line; write {example}"
    if len(command) > MAX_ARGS:
        return f"command has {len(command)} items; at most {MAX_ARGS} (put the rest in a config file)"
    for i, arg in enumerate(command):
        if not isinstance(arg, str):
            shown = "true" if arg is True else "false" if arg is False else repr(arg)[:40]
            return (f"command item {i + 1} is {shown}, not a string; quote it "
                    f'(command: [..., "{shown}"]): every item is passed to the program as text')
        if not arg or "\0" in arg or len(arg) > MAX_ARG_CHARS:
            return (f"command item {i + 1} is empty, too long or holds a NUL character; give each "
                    f"argument as a non-empty string ({example})")
    return None


def words(command: str | Sequence[str]) -> list[str] | None:
    """The words of ``command`` as far as a shell string can be read without running it
    (``shlex``), after leading ``VAR=value`` assignments and an ``exec``: what the spec check
    looks in for the program file. None for a string shlex cannot split."""
    if not isinstance(command, str):
        return list(command)
    import shlex

    try:
        parts = shlex.split(command, comments=True)
    except ValueError:
        return None
    while parts and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", parts[0], re.DOTALL) or parts[0] == "exec"):
        parts = parts[1:]
    return parts or None


def hosts_problem(hosts: Any) -> str | None:
    if hosts in HOSTS:
        return None
    return (f"hosts is {str(hosts)[:40]!r}; use hosts: all (the command runs on every worker of a slice, "
            f"as JAX and PyTorch/XLA expect) or hosts: first (worker 0 only, TensorFlow's one client)")


def program_file(command: str | Sequence[str]) -> str | None:
    """The file of the workdir the command runs, when it names one by a relative path:
    ``./train.sh``, ``bin/run``, or the script of ``python [-u ...] train.py`` (of a shell
    string: its first command, read with :func:`words`). None for a program found on PATH
    (``python -m pkg``, ``torchrun``), an absolute path, or a word the shell would expand."""
    parts = words(command)
    if not parts:
        return None
    if isinstance(command, str):      # the first command of the line only
        parts = parts[:next((i for i, w in enumerate(parts) if w in ("&&", "||", ";", "|", "&")), len(parts))]
    found = _script(parts)
    if found is None or os.path.isabs(found) or any(c in found for c in "$`*?[~(){}<>;|&"):
        return None
    return found


def _script(argv: Sequence[str]) -> str | None:
    first = argv[0] if argv else ""
    if "/" in first:
        return first
    if _PYTHON.fullmatch(first) or first in ("bash", "sh"):
        for arg in argv[1:]:
            if arg in ("-m", "-c"):
                return None
            if arg.startswith("-"):
                continue
            return arg
    return None


def check_program(command: str | Sequence[str], workdir: str | None) -> str | None:
    """The program file in ``workdir`` (None when the command names none); ConfigError when it
    names a relative file the workdir lacks."""
    rel = program_file(command)
    if rel is None:
        return None
    if workdir is None:
        raise ConfigError(f"command runs {rel}, a path relative to the workdir, but there is no workdir; "
                          "pass --workdir DIR (the directory that holds it)")
    path = os.path.join(workdir, rel)
    if not os.path.isfile(path):
        raise ConfigError(f"command runs {rel}, which is not in the workdir {os.path.abspath(workdir)}; "
                          f"put it there, or pass --workdir DIR (the directory that holds {rel})")
    return path


def substitute(command: str | Sequence[str], params: Mapping[str, Any]) -> list[str]:
    """The argv to run: ``command`` with each ``{params.NAME}`` replaced by the value of
    ``params[NAME]`` (how a sweep's or a ``--set params.NAME=V`` value reaches a program's own
    flags), and a shell string as ``bash -c STRING`` with each value shell-quoted, so a value is
    one word whatever it holds. ConfigError for a name ``params`` lacks."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in params:
            known = ", ".join(sorted(params)[:8]) or "none"
            raise ConfigError(f"command names {{params.{name}}} but params has no {name} (its entries: {known}); "
                              f"add it under params:")
        v = params[name]
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    if isinstance(command, str):
        import shlex

        return [*SHELL, _PARAM.sub(lambda m: shlex.quote(value(m)), command)]
    return [_PARAM.sub(value, arg) for arg in command]


def requirements_problem(requirements: Any) -> str | None:
    """Why ``requirements`` is neither a requirements file (a path in the workdir) nor a list of
    requirement strings (None if it is one of them, or absent). No I/O."""
    if requirements is None:
        return None
    if isinstance(requirements, str):
        if not requirements.strip() or os.path.isabs(requirements) or ".." in requirements.split("/"):
            return (f"requirements is {requirements[:60]!r}; name a requirements file inside the workdir "
                    "(requirements: requirements.txt) or list them (requirements: [optax, flax])")
        return None
    if isinstance(requirements, list) and requirements and all(
            isinstance(r, str) and r.strip() and not r.strip().startswith("-") and "\n" not in r
            for r in requirements):
        return None
    return ("requirements must be a requirements file in the workdir (requirements: requirements.txt) or a "
            "list of requirement strings (requirements: [optax==0.2.4, flax]); pip options such as "
            "--index-url belong in a requirements file")


def version_problem(key: str, value: Any) -> str | None:
    """A framework version the spec asks for (``tensorflow: 2.18.0``, ``jax: 0.4.35``): digits and dots."""
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+){1,3}", value):
        return None
    return (f"{key} is {str(value)[:40]!r}; give the release to install, e.g. {key}: "
            f"{'2.18.0' if key == 'tensorflow' else '0.4.35'} (quoted if YAML reads it as a number)")

