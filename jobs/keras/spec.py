"""``job: keras``'s keys: your module, its ``params`` and the batch sizes of its splits
(docs/own-code.md). The run keys it shares with every job are
:class:`jobs.spec.base.RunSpec`'s. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigError
from ..spec.base import RunSpec, SpecError, opt, positive, required, show

# What the runner adds to a ``job: keras`` spec's params before it calls the user's functions.
RUNNER_PARAMS = ("batch_size", "global_batch_size", "seed", "split", "start_step",
                 "learning_rate", "num_train_steps", "num_warmup_steps")


@dataclass
class KerasSpec(RunSpec):
    """``keras``: your own Keras model on the runner (docs/own-code.md): a module of yours
    defines ``model(params)``, ``dataset(params, split, context)`` and ``loss(labels,
    outputs)``; ``params`` is passed to them."""

    module: str = required("your Python file (model.py) or module (mypkg.model) that defines "
                            "model(params), dataset(params, split, context) and loss(labels, "
                            "outputs): found in the workdir (tpuctl train --workdir DIR), or "
                            "beside the spec, in the current directory or on PYTHONPATH")
    params: dict[str, Any] = opt(  # noqa: RUF009 - opt returns a dataclasses.field
        {}, "your settings, passed to your functions with batch_size, seed, split ... added "
            "by the runner; --set params.NAME=VALUE changes one")
    learning_rate: float = opt(1e-3, "peak learning rate of AdamW (unless your module defines "
                                      "optimizer(params))")
    num_train_steps: int = opt(1000, "total optimizer steps; the run ends here")
    eval_batch_size: int = opt(32, "global batch size of the eval split (padded to whole "
                                    "per-replica batches of the slice)")
    predict_batch_size: int = opt(32, "global batch size of the predict split")

    REPORTED_METRICS: ClassVar[tuple[str, ...]] = ("eval_loss",)

    def __post_init__(self) -> None:
        self._metrics: tuple[str, ...] = ()   # what the module's metrics() returns, once checked

    def reported_metrics(self) -> tuple[str, ...]:
        """``eval_loss`` and ``eval_<name>`` for each name the module's ``metrics`` returns
        (known once :meth:`check_code` has read it)."""
        return self.REPORTED_METRICS + tuple(f"eval_{name}" for name in self._metrics)

    def hparam_names(self) -> list[str]:
        return super().hparam_names() + [f"params.{key}" for key in self.params]

    def hparam_value(self, key: str) -> Any:
        if key.startswith("params."):
            return self.params[key[len("params."):]]
        return super().hparam_value(key)

    def check_code(self, search: Sequence[str]) -> str:
        """Find the module in ``search`` and read it without running it (:mod:`jobs.usercode`):
        its path, or a SpecError naming file, line and fix."""
        from .. import usercode

        try:
            code = usercode.check(self.module, search)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        self._metrics = code.metrics
        return code.path

    def _check(self) -> None:
        super()._check()
        positive(self, "eval_batch_size", "predict_batch_size")
        from ..usercode import module_problem

        problem = module_problem(self.module)
        if problem:
            raise SpecError(problem)
        for key in self.params:
            if not isinstance(key, str) or not key or "." in key:
                raise SpecError(f"params key {show(key)} is not a name; use names without dots "
                                "(they are what --set params.NAME=VALUE sets)")
            if key in RUNNER_PARAMS:
                raise SpecError(f"params.{key} is what the runner sets (with "
                                f"{', '.join(RUNNER_PARAMS)}); rename it, or use the spec's own "
                                "keys (train_batch_size, seed, learning_rate, ...)")
