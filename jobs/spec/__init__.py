"""Job specs: a YAML file plus ``--set key=value`` overrides, checked before TensorFlow starts.

The package imports only the standard library and PyYAML, because the control plane
(``tpuctl job run``, the supervisor, ``tpuctl status``) reads specs on machines without
TensorFlow. Every problem is a :class:`SpecError` whose message is one line naming the fix, so a
typo costs a second on the laptop instead of a TPU start-up.

A spec is flat (``key: value``): the keys are those of the original google-research/bert flags
(``train_batch_size``, ``num_train_steps``, ``save_checkpoints_steps`` ...), so people who know
``run_pretraining.py`` and ``run_classifier.py`` recognise them. ``job`` picks the dataclass, and
each job kind's keys live with the kind:

- ``bert-pretrain``, ``bert-finetune``, ``bert-squad``: :mod:`jobs.bert.spec`
  (:class:`PretrainSpec`, :class:`FinetuneSpec`, :class:`SquadSpec`, on :class:`BertSpec`: an
  original BERT directory);
- ``keras``: the user's own Keras model (:mod:`jobs.keras.spec`), whose ``params:`` mapping is
  the one key that nests (``--set params.NAME=VALUE`` sets an entry);
- ``command``: any program of the user's (:mod:`jobs.command.spec`): its argv, where it runs, its
  requirements; none of the runner's keys.

The run keys every job has are :class:`RunSpec`'s (:mod:`jobs.spec.base`); reading YAML and
``--set`` is :mod:`jobs.spec.loading`; which name picks which class, :mod:`jobs.spec.registry`.
Relative local paths are taken relative to the current directory, like the original flags.

``jobs.spec.NAME`` stays the one public path for all of these names (user code, the control
plane and the docs use it). They resolve on first use, so that a kind's spec module can import
:mod:`jobs.spec.base` without this package importing every kind first (which would be a cycle).
"""

from __future__ import annotations

from typing import Any

NAMES = {
    "base": ("SpecError", "RunSpec", "PRECISIONS", "LOSS_NORMALIZATIONS", "MAX_INT", "CODE_KEYS", "parse_deadline"),
    "loading": ("parse_yaml", "read_yaml", "load", "from_dict", "describe", "MAX_SPEC_BYTES"),
    "registry": ("JOBS", "reported_metrics"),
    "bert": ("BertSpec", "PretrainSpec", "TaskSpec", "FinetuneSpec", "SquadSpec"),
    "keras": ("KerasSpec", "RUNNER_PARAMS"),
    "command": ("CommandSpec",),
}
HOME = {name: module for module, names in NAMES.items() for name in names}
__all__ = [  # noqa: RUF022 - in the order of NAMES
    "SpecError", "RunSpec", "PRECISIONS", "LOSS_NORMALIZATIONS", "MAX_INT", "CODE_KEYS", "parse_deadline",
    "parse_yaml", "read_yaml", "load", "from_dict", "describe", "MAX_SPEC_BYTES",
    "JOBS", "reported_metrics",
    "BertSpec", "PretrainSpec", "TaskSpec", "FinetuneSpec", "SquadSpec",
    "KerasSpec", "RUNNER_PARAMS",
    "CommandSpec",
]


def __getattr__(name: str) -> Any:
    """``jobs.spec.NAME``: the name from the module that defines it (PEP 562)."""
    if name not in HOME:
        raise AttributeError(f"module 'jobs.spec' has no attribute {name!r}")
    from ..bert import spec as bert
    from ..command import spec as command
    from ..keras import spec as keras
    from . import base, loading, registry

    modules = {"base": base, "loading": loading, "registry": registry, "bert": bert, "keras": keras,
               "command": command}
    value = getattr(modules[HOME[name]], name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(HOME))
