"""``job: command``'s keys: the program's argv, where it runs, what it installs, its params and
what it reports (docs/own-code.md); none of the runner's keys. The checks are
:mod:`jobs.command`'s. Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError
from ..spec.base import SpecError, opt, required, show


@dataclass
class CommandSpec:
    """``command``: any program of yours (docs/own-code.md), run in its workdir on every worker
    of the slice (``hosts: all``) or on worker 0 (``hosts: first``). Its contract is the
    environment and signals (:mod:`jobs.command`); the runner's keys (batches, learning rate,
    checkpoints) are the program's own business, so this spec has none of them."""

    job: str = required("command")
    model_dir: str = required("the run's directory in the bucket: TPUCTL_MODEL_DIR (gs://bucket/path on GCP, "
                               "a directory locally); a program that writes files uses TPUCTL_CHECKPOINT_DIR")
    command: list[str] | str = required(  # noqa: RUF009 - required returns a dataclasses.field
        'the program and its arguments: a list of strings, run as it is ([python, train.py, --epochs, "3"]), '
        'or a shell command line, run by bash -c (python train.py --out-dir "$TPUCTL_CHECKPOINT_DIR"); '
        "{params.NAME} becomes that param's value (shell-quoted in a string)", raw=True)
    hosts: str = opt("all", "all: the command runs on every worker of a slice, which restart together "
                             "(JAX, PyTorch/XLA); first: on worker 0 only (TensorFlow's one client)")
    requirements: str | list[str] | None = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        None, "a requirements file in the workdir, or a list of requirements: installed into the run's "
              "environment on each host", raw=True)
    tensorflow: str | None = opt(None, "a TensorFlow release to install where the image has another "
                                        "(tensorflow-tpu and libtpu on a TPU VM)", raw=True)
    jax: str | None = opt(None, "a JAX release to install where the image has another (jax[tpu] on a "
                                 "TPU VM)", raw=True)
    params: dict[str, Any] = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        {}, "your settings: TPUCTL_PARAMS (JSON) and {params.NAME} in command; --set params.NAME=VALUE "
            "changes one (a sweep's parameters are these)")
    metrics: list[str] | None = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        None, "the metric names your program reports in its progress lines (comma-separated): what a "
              "sweep's metric may name")
    progress_pattern: str | None = opt(
        None, "a regular expression matched against each line your program prints, for a program that writes "
              "no progress lines: named groups step (required), loss and any metric, e.g. "
              "'iter (?P<step>\\d+): loss (?P<loss>[\\d.]+)'", raw=True)
    num_train_steps: int = opt(0, "the step your program ends at, for status and ETA (0: unknown, "
                                   "unless your program reports num_train_steps)")
    eval_every_steps: int = opt(0, "how often a sweep wants a metrics line (TPUCTL_EVAL_EVERY_STEPS); "
                                    "0: at the end")
    save_checkpoints_steps: int = opt(0, "how often your program checkpoints, for status (0: unknown)")
    stop_grace_seconds: int = opt(30, "after SIGTERM (the preemption notice) your program has this long to "
                                       "save and exit before it is killed")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("loss",)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reported_metrics(self) -> tuple[str, ...]:
        """``loss``, the names ``metrics`` declares and ``progress_pattern``'s metric groups: what the
        program's progress lines carry."""
        from .patterns import metric_groups

        named = [*(self.metrics or ()), *metric_groups(self.progress_pattern)]
        return self.REPORTED_METRICS + tuple(dict.fromkeys(m for m in named if m != "loss"))

    def hparam_names(self) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(self)) + [f"params.{key}" for key in self.params]

    def hparam_value(self, key: str) -> Any:
        if key.startswith("params."):
            return self.params[key[len("params."):]]
        return getattr(self, key)

    def hparam_values(self) -> dict[str, Any]:
        return {}

    def argv(self) -> list[str]:
        """The command with ``{params.NAME}`` replaced (:func:`jobs.command.substitute`)."""
        from . import substitute

        try:
            return substitute(self.command, self.params)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None

    def requirement_file(self) -> str | None:
        return self.requirements if isinstance(self.requirements, str) else None

    def check_code(self, search: Sequence[str]) -> str | None:
        """The program and the requirements file the spec names must be in the workdir
        (``search[0]``): the path of the program file, or None when it runs one from PATH."""
        from . import check_program

        workdir = search[0] if search else None
        req = self.requirement_file()
        if req is not None and (workdir is None or not os.path.isfile(os.path.join(workdir, req))):
            where = f"the workdir {os.path.abspath(workdir)}" if workdir else "the workdir (there is none)"
            raise SpecError(f"requirements file {req} is not in {where}; put it there, list the "
                            "requirements in the spec (requirements: [pkg, ...]), or pass --workdir DIR")
        try:
            return check_program(self.command, workdir)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None

    def _check(self) -> None:
        from . import command_problem, hosts_problem, requirements_problem, version_problem

        for problem in (command_problem(self.command), hosts_problem(self.hosts),
                        requirements_problem(self.requirements), version_problem("tensorflow", self.tensorflow),
                        version_problem("jax", self.jax)):
            if problem:
                raise SpecError(problem)
        for key in ("num_train_steps", "eval_every_steps", "save_checkpoints_steps"):
            if getattr(self, key) < 0:
                raise SpecError(f"{key} is {getattr(self, key)}; use 0 (unknown) or a positive number of steps")
        if not 1 <= self.stop_grace_seconds <= 3600:
            raise SpecError(f"stop_grace_seconds is {self.stop_grace_seconds}; give your program 1 to 3600 seconds "
                            "to save after SIGTERM (--set stop_grace_seconds=30)")
        for key in self.params:
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise SpecError(f"params key {show(key)} is not a name; use letters, digits and _ "
                                "(they are what --set params.NAME=VALUE and {params.NAME} name)")
        if self.progress_pattern is not None:
            from .patterns import problem as pattern_problem

            problem = pattern_problem(self.progress_pattern)
            if problem:
                raise SpecError(problem)
        for name in self.metrics or ():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}", name):
                raise SpecError(f"metrics names {show(name)}; use metric names such as accuracy, eval_loss")
        self.argv()
