"""``job: keras``: the user's plain functions as a job of the runner, in the style of
run_classifier.py's ``model_fn_builder`` and ``input_fn_builder``.

The user's module (:mod:`jobs.keras.user`) gives ``model(params)``, ``dataset(params, split,
context)``, ``loss(labels, outputs)`` and optionally ``metrics``, ``predict`` and ``optimizer``
(docs/own-code.md). This adapter turns them into the job hooks (:class:`jobs.job.Job`):

- the elements of every split are ``(features, labels)`` or ``(features, labels, weights)``
  (weights per example, 0 for padding), batches of ``params["batch_size"]`` (static shapes);
  an eval or predict dataset batched for ``model.fit`` (a partial last batch, so batches of
  unknown size) is padded here with weight-0 examples, as Keras pads it on a TPU;
- a train dataset that never reads ``params["start_step"]`` (a ``model.fit`` pipeline) is
  resumed by skipping the batches the run read before (:meth:`KerasJob.dataset`), and is
  checked to yield the same first batch when built twice (else a one-line warning: a resume
  cannot be exact);
- the loss is the weighted mean of the per-example losses over the *global* batch (the weights'
  sum all-reduced before the step on TensorFlow; on JAX the step sees the global batch), so a
  spec trains the same model on any slice; a metric
  given as a tensor is a weighted mean the same way, one given as ``(numerator, denominator)``
  a ratio of sums (evaluation only: precision, recall, F1);
- variables are keyed by their Keras paths in the checkpoint; the optimizer is the runner's
  AdamW (:mod:`jobs.optimization`) unless the module defines ``optimizer(params)``;
- both of Keras 3's backends run it (``ctx.backend``): what runs on the device (the loss, the
  metrics, the weights, ``predict``) is written with ``keras.ops``, so it is traced by
  ``tf.function`` on TensorFlow (one replica's batch) and by ``jax.jit`` on JAX (the global
  batch); the input pipelines stay ``tf.data`` on both. On JAX a module whose device code uses
  ``tf.`` ops is refused before it is imported (:mod:`jobs.keras.tfops`), the optimizer is
  stateless (:class:`jobs.job.StatelessOptimizer`), and the check before the first step is a
  trace by ``jax.make_jaxpr`` (:mod:`jobs.keras.on_jax`);
- everything that can be wrong with the user's code is found before the first step (a trace of
  the step's computation on the datasets' element specs) and is one line naming the user's file
  and line (exit 2);
- at the end: evaluation (``eval_loss``, ``eval_<metric>``), ``predictions.jsonl`` for the
  predict split and a SavedModel (``saved_model/``, serving ``predict(model(features))``;
  written by the TensorFlow backend on either, in a process of its own on JAX).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .. import optimization, usercode
from ..errors import ERROR_PREFIX, ConfigError
from ..exitcodes import is_infrastructure_error
from ..job import Job, JobContext, Optimizer, StatelessOptimizer, log, unwrap
from ..optimization import AdamWeightDecay
from . import tfops
from . import user as user_lib
from .spec import KerasSpec

SPLITS = ("train", "eval", "predict")
PREDICTIONS = "predictions.jsonl"
SAVED_MODEL_DIR = "saved_model"
TOO_BIG = "a batch holds more examples than the batch size"  # no quotes: TF escapes them
TAIL = 2000  # characters of the exporting process's output a failed export shows


@dataclass
class Split:
    """One split's data as the job reads it: its global batch, the batch its dataset yields
    (``params["batch_size"]``: one replica's on TensorFlow, one host's on JAX), the batch the
    device code sees (one replica's on TensorFlow, the global batch on JAX), the element
    structure its dataset yields, and (eval, predict) its number of global batches."""

    name: str
    global_batch: int
    per_replica: int
    traced: int = 0                # the batch loss(), metrics() and predict() see
    element_spec: Any = None
    batches: int = 0
    padded: bool = False           # eval/predict: batches of unknown size, padded by the job
    filler: int = 0                # weight-0 batches this pipeline appends to whole global batches
    reads_start_step: bool = True  # train: the dataset reads params["start_step"] (else skipped to it)


class TrackedParams(dict):
    """The params one ``dataset`` call gets, noting whether it read ``start_step``. A dataset
    that never reads it cannot start there (it was written for ``model.fit``), so the job skips
    to the step for it; one that reads it, by any route (``params["start_step"]``, ``get``,
    ``in``, a copy such as ``dict(params)`` or ``{**params}``, ``items()``), is left as it is,
    so it is never skipped twice."""

    read_start_step = False

    def _note(self, key) -> None:
        if key == "start_step":
            self.read_start_step = True

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self._note(key)
        return super().__contains__(key)

    def __iter__(self):
        # defined in Python, so that dict(params) and {**params} read through __getitem__
        return super().__iter__()

    def items(self):
        self.read_start_step = True
        return super().items()

    def values(self):
        self.read_start_step = True
        return super().values()


def unpack(element) -> tuple[Any, Any, Any]:
    """(features, labels, weights or None) of a dataset element."""
    if len(element) == 3:
        return element
    return element[0], element[1], None


class KerasJob(Job):
    def __init__(self, spec: KerasSpec, search: list[str] | None = None):
        super().__init__(spec)
        self.spec: KerasSpec = spec
        self.search = search if search is not None else usercode.search_path()
        self.user: user_lib.UserModule | None = None
        self.splits: dict[str, Split] = {}
        self.ratio_names: tuple[str, ...] = ()     # (numerator, denominator) metrics: eval only
        self.predict_dtypes: tuple[Any, ...] = ()  # tf.DType on TensorFlow, numpy's on JAX
        self.predict_names: tuple[str, ...] = ()
        self.trained: dict[str, Any] = {}         # trainable variables by path
        self.unreached: list[str] = []            # of those, the ones the loss does not reach
        self.backend = "tensorflow"               # Keras' backend of this process (ctx.backend)
        self.per_pipeline = 1                     # batches one input pipeline yields per step

    # -- params -------------------------------------------------------------------------------
    def params(self, split: Split | None = None, start_step: int = 0) -> dict[str, Any]:
        """The spec's params plus the runner's (:data:`jobs.spec.RUNNER_PARAMS`)."""
        s = self.spec
        split = split or self.splits["train"]
        out = {**s.params, "seed": s.seed, "learning_rate": s.learning_rate,
               "num_train_steps": s.num_train_steps, "num_warmup_steps": s.warmup_steps,
               "batch_size": split.per_replica, "global_batch_size": split.global_batch}
        if split.name != "model":
            out.update(split=split.name, start_step=start_step)
        return out

    # -- host: data ---------------------------------------------------------------------------
    def prepare(self, ctx: JobContext) -> None:
        s = self.spec
        self.backend = ctx.backend
        if self.backend == "jax":  # tf. ops in the device code: refused before anything runs
            problem = tfops.refuse_tf_ops(usercode.locate(s.module, self.search))
            if problem:
                raise ConfigError(problem)
        self.user = user_lib.load(s.module, self.search)
        self.replicas, self.hosts, self.strategy = ctx.replicas, ctx.hosts, ctx.strategy
        sizes = {"train": s.train_batch_size, "eval": ctx.fitted_batch(s.eval_batch_size),
                 "predict": ctx.fitted_batch(s.predict_batch_size)}
        # TensorFlow: a pipeline per host yields per-replica batches; JAX: one batch per host
        # and step, which the one jit of the step sees as part of the global batch
        input_ctx = (ctx.input_context() if ctx.input_context is not None
                     else tf.distribute.InputContext(ctx.hosts, ctx.host, ctx.replicas))
        shares = input_ctx.num_replicas_in_sync
        self.per_pipeline = max(1, shares // input_ctx.num_input_pipelines)

        def traced(size: int) -> int:
            return size if self.backend == "jax" else size // shares

        self.model_split = Split("model", s.train_batch_size, traced(s.train_batch_size),
                                 traced(s.train_batch_size))
        for name in SPLITS:
            split = Split(name, sizes[name], sizes[name] // shares, traced(sizes[name]))
            dataset = self.user_dataset(split, input_ctx)
            if dataset is None:
                if name == "train":
                    raise self.user.mistake("dataset", "dataset(params, 'train', context) returned "
                                            "None; return the training batches")
                continue
            split.element_spec = dataset.element_spec
            if name != "train":
                split.batches = self.count(dataset, split)
            elif not split.reads_start_step:
                self.check_repeatable(dataset, split, input_ctx)
            self.splits[name] = split
        log(f"{s.module}: {self.user.path}; splits "
            + ", ".join(f"{n} (batch {sp.global_batch}"
                        + (f", {sp.batches} batches)" if sp.batches else ")")
                        for n, sp in self.splits.items()))

    def user_dataset(self, split: Split, input_ctx: tf.distribute.InputContext,
                     start_step: int = 0) -> tf.data.Dataset | None:
        """The user's dataset of ``split`` for this input pipeline, its structure checked; an
        eval or predict dataset of batches of unknown size (a partial last batch) padded to
        whole batches of weight-0 examples."""
        params = TrackedParams(self.params(split, start_step))
        dataset = self.user.call("dataset", params, split.name, input_ctx)
        split.reads_start_step = params.read_start_step
        if dataset is None:
            return None
        call = f"dataset(params, {split.name!r}, context)"
        if not isinstance(dataset, tf.data.Dataset):
            raise self.user.mistake("dataset", f"{call} returned a {type(dataset).__name__}, not a "
                                    "tf.data.Dataset; return one (docs/own-code.md)")
        spec = dataset.element_spec
        if not isinstance(spec, tuple) or len(spec) not in (2, 3):
            raise self.user.mistake("dataset", f"{call} yields {_describe(spec)}; yield "
                                    "(features, labels) or (features, labels, weights) batches")
        for leaf in tf.nest.flatten(spec):
            if not isinstance(leaf, tf.TensorSpec) or leaf.shape.rank in (None, 0):
                raise self.user.mistake("dataset", f"{call} yields {_describe(leaf)}, not a batch; "
                                        "batch it: .batch(params['batch_size'], "
                                        "drop_remainder=True)")
            size = leaf.shape[0]
            if size is None and split.name != "train":
                split.padded = True  # batched for model.fit, without drop_remainder: padded below
                continue
            if size != split.per_replica:
                got = "batches of unknown size" if size is None else f"batches of {size}"
                raise self.user.mistake("dataset", f"{call} yields {got} but params['batch_size'] "
                                        f"is {split.per_replica}; batch with .batch(params["
                                        "'batch_size'], drop_remainder=True)")
        if len(spec) == 3 and spec[2].shape.rank != 1:
            raise self.user.mistake("dataset", f"{call} yields weights of shape {spec[2].shape}; "
                                    "give one weight per example, shape [batch]")
        if split.padded:
            dataset = pad_batches(dataset, split.per_replica)
            if split.filler:
                fill = dataset.take(1).map(lambda x, y, w: (x, y, tf.zeros_like(w)))
                dataset = dataset.concatenate(fill.repeat(split.filler))
        return dataset

    def check_repeatable(self, dataset: tf.data.Dataset, split: Split,
                         input_ctx: tf.distribute.InputContext) -> None:
        """A train dataset that ignores ``params["start_step"]`` is resumed by skipping what the
        run read before (:meth:`dataset`): exact if the dataset yields the same batches each
        time it is built. Its first batch, built twice, tells; if they differ (a shuffle or a
        random op without ``seed=params["seed"]``, a generator that draws unseeded), a resumed
        run cannot read what the interrupted one would have: one line says so."""
        call = "dataset(params, 'train', context)"
        try:
            first, again = (next(iter(d.take(1))) for d in (dataset, self.user_dataset(split, input_ctx)))
        except ConfigError:
            raise
        except Exception as exc:  # the user's pipeline on the user's data
            if is_infrastructure_error(exc):
                raise
            raise user_lib.failure(exc, self.user.root, f"reading the first batch of {call} "
                                   "raised", self.user.line_of("dataset")) from exc
        same = all(np.array_equal(a, b) for a, b in zip(tf.nest.flatten(first), tf.nest.flatten(again)))
        if same:
            log(f"{call} does not read params['start_step']: a resumed run skips the batches "
                "read before it (exact; costs reading them again)")
        else:
            log(f"warning: {call} does not read params['start_step'] and yields other batches "
                "each time it is built: a resumed run cannot be exact; seed its shuffle and "
                "random ops with params['seed'], or start it at params['start_step']")

    def count(self, dataset: tf.data.Dataset, split: Split) -> int:
        """Global batches of a finite split (this pipeline's batches per replica it feeds)."""
        known = int(dataset.cardinality().numpy())
        call = f"dataset(params, {split.name!r}, context)"
        if known == tf.data.INFINITE_CARDINALITY:
            raise self.user.mistake("dataset", f"{call} never ends; the {split.name} split is read "
                                    "once: do not repeat it")
        n = known if known >= 0 else int(dataset.reduce(np.int64(0), lambda c, _: c + 1).numpy())
        per_pipeline = self.per_pipeline
        if split.padded and n:
            try:  # the first batch, padded: a batch bigger than params['batch_size'] shows here
                next(iter(dataset.take(1)))
            except tf.errors.InvalidArgumentError as exc:
                if TOO_BIG not in str(exc):
                    raise
                raise self.user.mistake("dataset", f"{call} yields batches of more than "
                                        f"params['batch_size'] ({split.per_replica}) examples; "
                                        "batch with .batch(params['batch_size'])") from exc
        if n and n % per_pipeline and split.padded:  # whole global batches: weight-0 batches
            split.filler = per_pipeline - n % per_pipeline
            n += split.filler
        if n == 0 or n % per_pipeline:
            raise self.user.mistake("dataset", f"{call} yields {n} batches on this host; it must "
                                    f"yield whole global batches ({per_pipeline} per global "
                                    "batch): pad the split (jobs.keras.inputs.eval_batches)")
        return n // per_pipeline

    def dataset(self, ctx: tf.distribute.InputContext, position: int) -> tf.data.Dataset:
        """The user's train dataset from ``position``. One that does not read
        ``params["start_step"]`` (written for ``model.fit``) starts at its first batch: it
        skips the batches this pipeline fed before (``replicas / pipelines`` per step), which
        re-reads them but holds no state, so it resumes exactly on any slice."""
        train = self.splits["train"]
        start = position // train.global_batch
        dataset = self.user_dataset(train, ctx, start_step=start)
        if not train.reads_start_step and start:
            skip = start * max(1, ctx.num_replicas_in_sync // ctx.num_input_pipelines)
            log(f"dataset(params, 'train', context) does not read params['start_step']: skipping "
                f"the {skip} batches it yielded before step {start}")
            dataset = dataset.skip(skip)
        return dataset

    # -- host, in the strategy's scope: model and optimizer -------------------------------------
    def build_model(self):
        model = self.make_model()
        self.check(model)
        return model

    def make_model(self):
        """``model(params)``, built (its variables made)."""
        model = self.user.call("model", self.params(self.model_split))
        if not isinstance(model, keras.Model):
            raise self.user.mistake("model", f"model(params) returned a {type(model).__name__}, not "
                                    "a keras.Model; return the model")
        if not model.built:  # a subclassed model makes its variables on its first call
            features = unpack(self.splits["train"].element_spec)[0]
            if self.backend == "jax":  # zeros of the global batch, as the step calls it
                batch = self.splits["train"].traced
                zeros = tf.nest.map_structure(
                    lambda t: np.zeros([batch, *t.shape[1:]], t.dtype.as_numpy_dtype), features)
            else:
                zeros = tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), features)
            try:
                model(zeros, training=False)
            except Exception as exc:  # the user's model on the user's data
                raise user_lib.failure(exc, self.user.root, "model(features) raised",
                                       self.user.line_of("model")) from exc
        return model

    def named_variables(self, model) -> dict[str, tf.Variable]:
        """Every variable of the model by its Keras path (``dense/kernel``): the tf.Variable
        under it on TensorFlow, the Keras variable itself on JAX (whose runner traces the
        step with the Keras variables mapped to values)."""
        out: dict[str, tf.Variable] = {}
        for variable in model.variables:
            path = getattr(variable, "path", None) or variable.name
            if path in out:
                raise self.user.mistake("model", f"the model has two variables named {path}; give "
                                        "its layers distinct names")
            out[path] = variable if self.backend == "jax" else unwrap(variable)
        return out

    def build_optimizer(self, ctx: JobContext) -> Optimizer | StatelessOptimizer:
        trained = {path: v for path, v in self.trained.items() if path not in self.unreached}
        if self.unreached:
            log(f"{len(self.unreached)} variable(s) get no gradient from loss() and are not trained: "
                + ", ".join(self.unreached[:3]) + ("..." if len(self.unreached) > 3 else ""))
        if not trained:
            raise self.user.mistake("loss", "loss(labels, outputs) reaches no trainable variable of "
                                    "the model; compute it from outputs")
        s = self.spec
        if not self.user.has("optimizer"):
            if self.backend == "jax":
                return optimization.StatelessAdamW(
                    trained, init_lr=s.learning_rate, num_train_steps=s.num_train_steps,
                    num_warmup_steps=s.warmup_steps, weight_decay_rate=s.weight_decay_rate)
            return AdamWeightDecay({n: unwrap(v) for n, v in trained.items()},
                                   init_lr=s.learning_rate, num_train_steps=s.num_train_steps,
                                   num_warmup_steps=s.warmup_steps,
                                   weight_decay_rate=s.weight_decay_rate,
                                   jit_compile=ctx.xla and ctx.replicas > 1)
        optimizer = self.user.call("optimizer", self.params(self.model_split))
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise self.user.mistake("optimizer", f"optimizer(params) returned a "
                                    f"{type(optimizer).__name__}, not a keras.optimizers.Optimizer")
        if self.backend == "jax":
            return KerasStatelessOptimizer(optimizer, trained)
        return KerasOptimizer(optimizer, trained)

    def initialize(self, ctx: JobContext) -> None:
        log("no checkpoint to resume: starting from the model as model(params) made it")

    # -- host, before the first step: the check ------------------------------------------------
    def check(self, model) -> None:
        """Trace the model, loss and metrics on each split's element spec (no step runs): a
        wrong shape or an exception in user code is found here, one line, exit 2. The train
        split's trace also finds the trainable variables the loss does not reach (a BERT
        encoder's pooler under a token head): the optimizer leaves them alone, as the
        original's skips variables without a gradient. On TensorFlow the trace is a
        ``tf.function`` of one replica's step; on JAX ``jax.make_jaxpr`` of the global batch's,
        with the model's variables mapped to abstract values (:mod:`jobs.keras.on_jax`)."""
        self.trained = {getattr(v, "path", None) or v.name: v for v in model.trainable_variables}
        if not self.trained:
            raise self.user.mistake("model", "the model has no trainable variables; nothing to train")
        names: dict[str, tuple[str, ...]] = {}
        trace = self._trace_jax if self.backend == "jax" else self._trace
        for name, split in self.splits.items():
            outputs = trace(model, split)
            if name == "predict":
                self.predict_names = tuple(outputs)
                self.predict_dtypes = tuple(outputs[k].dtype for k in self.predict_names)
            else:
                names[name] = tuple(outputs)
        metrics = names.get("train", ())
        self.metric_names = tuple(m for m in metrics if not m.startswith("ratio:"))
        self.ratio_names = tuple(m[len("ratio:"):] for m in metrics if m.startswith("ratio:"))

    def _trace(self, model, split: Split) -> dict[str, tf.TensorSpec]:
        found: dict[str, tf.TensorSpec] = {}

        def step(element):
            features, labels, _ = unpack(element)
            with tf.GradientTape() as tape:
                outputs = self._call_model(model, features, training=split.name == "train")
                if split.name == "predict":
                    for key, value in self.predictions(outputs).items():
                        found[key] = tf.TensorSpec(value.shape, value.dtype)
                    return 0
                losses = self.user.call("loss", labels, outputs)
                self._check_per_example("loss", "loss(labels, outputs)", losses, split)
                total = tf.reduce_sum(per_example(losses))
            if split.name == "train":
                paths = list(self.trained)
                grads = tape.gradient(total, [unwrap(self.trained[p]) for p in paths])
                self.unreached = [p for p, g in zip(paths, grads) if g is None]
            found.update(self._trace_metrics(labels, outputs, split))
            return 0

        def replica_step(element):  # in replica context, as the train step reads the variables
            return self.strategy.run(step, args=(element,))

        tf.function(replica_step, autograph=False).get_concrete_function(split.element_spec)
        return found

    def _trace_jax(self, model, split: Split) -> dict[str, Any]:
        """:meth:`_trace` on JAX: the same checks, on abstract values of the global batch
        (``split.traced`` examples); runs nothing."""
        from . import on_jax

        found: dict[str, Any] = {}
        call = f"dataset(params, {split.name!r}, context)"
        for leaf in tf.nest.flatten(split.element_spec):
            if not (leaf.dtype.is_floating or leaf.dtype.is_integer or leaf.dtype.is_bool):
                raise self.user.mistake("dataset", f"{call} yields {leaf.dtype.name} values, which "
                                        "the jax backend cannot take; turn them into numbers in "
                                        "dataset(), or --set backend=tensorflow")
            if any(d is None for d in leaf.shape[1:]):
                raise self.user.mistake("dataset", f"{call} yields batches of shape {leaf.shape}; "
                                        "the jax backend compiles one shape: pad every axis to a "
                                        "fixed length (padded_batch(..., padded_shapes=...)), or "
                                        "--set backend=tensorflow")
        element = tf.nest.map_structure(
            lambda t: on_jax.abstract([split.traced, *t.shape[1:]], t.dtype.as_numpy_dtype),
            split.element_spec)
        train = split.name == "train"
        trained = list(self.trained.values()) if train else []
        ids = {id(v) for v in trained}
        others = [v for v in model.variables if id(v) not in ids]
        specs = [[on_jax.abstract(v.shape, v.dtype) for v in vs] for vs in (trained, others)]

        def step(train_values, other_values, element):
            mapping = list(zip(trained, train_values)) + list(zip(others, other_values))
            with keras.StatelessScope(state_mapping=mapping):
                features, labels, _ = unpack(element)
                outputs = self._call_model(model, features, training=train)
                if split.name == "predict":
                    for key, value in self.predictions(outputs).items():
                        found[key] = _Spec(tuple(value.shape), value.dtype)
                    return keras.ops.zeros(())
                losses = self.user.call("loss", labels, outputs)
                self._check_per_example("loss", "loss(labels, outputs)", losses, split)
                total = keras.ops.sum(per_example(losses))
                found.update(self._trace_metrics(labels, outputs, split))
                return total

        if train:
            paths = list(self.trained)
            unreached = on_jax.unreached(step, (*specs, element), wrt=0)
            self.unreached = [paths[i] for i in unreached]
        else:
            on_jax.shapes(step, *specs, element)
        return found

    def _trace_metrics(self, labels, outputs, split: Split) -> dict[str, None]:
        """The names of ``metrics(labels, outputs)``, its values checked (``ratio:`` before the
        name of a (numerator, denominator) pair)."""
        found = {}
        for key, value in self.user_metrics(labels, outputs).items():
            values = value if isinstance(value, tuple) else (value,)
            for v in values:
                self._check_per_example("metrics", f"metrics(labels, outputs)[{key!r}]", v, split)
            found[f"ratio:{key}" if isinstance(value, tuple) else key] = None
        return found

    def _call_model(self, model, features, training: bool):
        try:
            return model(features, training=training)
        except Exception as exc:  # the user's model on the user's data
            raise user_lib.failure(exc, self.user.root, "model(features) raised",
                                   self.user.line_of("model")) from exc

    def _check_per_example(self, fn: str, call: str, value, split: Split) -> None:
        if not _is_tensor(value):
            raise self.user.mistake(fn, f"{call} returned a {type(value).__name__}; return a "
                                    "tensor of per-example values, shape [batch]")
        rank = _rank(value)
        if rank == 0:
            raise self.user.mistake(fn, f"{call} returned a scalar; return per-example values, "
                                    "shape [batch] (a Keras loss: reduction=None)")
        if rank is not None and value.shape[0] not in (None, split.traced):
            raise self.user.mistake(fn, f"{call} returned shape {value.shape}, not [batch "
                                    f"{split.traced}, ...]; return one value per example")
        numeric, name = _numeric(value.dtype)
        if not numeric:
            raise self.user.mistake(fn, f"{call} returned {name} values; return numbers")

    def user_metrics(self, labels, outputs) -> dict[str, Any]:
        if not self.user.has("metrics"):
            return {}
        metrics = self.user.call("metrics", labels, outputs)
        if not isinstance(metrics, dict) or not all(isinstance(k, str) for k in metrics):
            raise self.user.mistake("metrics", "metrics(labels, outputs) must return a dict of "
                                    "name: per-example values (or (numerator, denominator))")
        for key, value in metrics.items():
            if isinstance(value, tuple) and len(value) != 2:
                raise self.user.mistake("metrics", f"metrics(labels, outputs)[{key!r}] is a tuple "
                                        f"of {len(value)}; give (numerator, denominator)")
        return metrics

    def predictions(self, outputs) -> dict[str, Any]:
        """``predict(outputs)`` (else the model's outputs) as a dict of tensors with a leading
        batch axis."""
        values = self.user.call("predict", outputs) if self.user.has("predict") else outputs
        if _is_tensor(values):
            values = {"predictions": values}
        if not isinstance(values, dict) or not all(
                _is_tensor(v) and _rank(v) for v in values.values()):
            where = "predict" if self.user.has("predict") else "model"
            raise self.user.mistake(where, "predictions must be a tensor or a dict of tensors with "
                                    "a leading batch axis")
        return values

    # -- device: the loss (keras.ops: traced by tf.function or by jax.jit) ----------------------
    def loss_counts(self, features) -> dict[str, Any]:
        _, _, weights = unpack(features)
        if weights is None:
            first = keras.tree.flatten(features[0])[0]
            return {"weight": keras.ops.cast(keras.ops.shape(first)[0], "float32")}
        return {"weight": keras.ops.sum(keras.ops.cast(weights, "float32"))}

    def loss(self, model, features, training: bool, seed=None, totals=None):
        """The weighted mean of the per-example losses over the global batch (this replica's
        share on TensorFlow; on JAX ``features`` is the global batch), and of the per-example
        metrics."""
        x, labels, weights = unpack(features)
        total = (totals or self.loss_counts(features))["weight"]
        outputs = model(x, training=training)
        w = _weights(weights, labels, x)
        loss = keras.ops.sum(per_example(self.user.functions["loss"](labels, outputs)) * w) / total
        shares = {}
        if self.metric_names:
            metrics = self.user.functions["metrics"](labels, outputs)
            shares = {k: keras.ops.sum(per_example(metrics[k]) * w) / total
                      for k in self.metric_names}
        return loss, shares

    # -- host: evaluation, prediction, export -------------------------------------------------
    def eval_sums(self, model, batch) -> dict[str, Any]:
        x, labels, weights = unpack(batch)
        w = _weights(weights, labels, x)
        outputs = model(x, training=False)
        sums = {"loss": keras.ops.sum(per_example(self.user.functions["loss"](labels, outputs)) * w),
                "weight": keras.ops.sum(w)}
        if self.metric_names or self.ratio_names:
            metrics = self.user.functions["metrics"](labels, outputs)
            for k in self.metric_names:
                sums[f"mean:{k}"] = keras.ops.sum(per_example(metrics[k]) * w)
            for k in self.ratio_names:
                numerator, denominator = metrics[k]
                sums[f"num:{k}"] = keras.ops.sum(totals_of(numerator) * w)
                sums[f"den:{k}"] = keras.ops.sum(totals_of(denominator) * w)
        return sums

    def eval_dataset(self, input_ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return self.user_dataset(self.splits["eval"], input_ctx)

    def evaluate(self, ctx: JobContext) -> dict[str, float]:
        keys = ["loss", "weight", *(f"mean:{k}" for k in self.metric_names),
                *(f"{p}:{k}" for k in self.ratio_names for p in ("num", "den"))]
        sums = ctx.evaluate_sums(self.eval_dataset, self.eval_sums, keys,
                                 self.splits["eval"].batches)
        weight = max(sums["weight"], 1e-12)
        out = {"eval_loss": sums["loss"] / weight}
        out.update({f"eval_{k}": sums[f"mean:{k}"] / weight for k in self.metric_names})
        out.update({f"eval_{k}": sums[f"num:{k}"] / sums[f"den:{k}"] if sums[f"den:{k}"] else 0.0
                    for k in self.ratio_names})
        return out

    def eval_metrics(self, ctx: JobContext) -> dict[str, float]:
        return self.evaluate(ctx) if "eval" in self.splits else {}

    def predict_outputs(self, model, batch):
        x, labels, weights = unpack(batch)
        values = self.predictions(model(x, training=False))
        return (_weights(weights, labels, x), *(values[k] for k in self.predict_names))

    def predict_dataset(self, input_ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return self.user_dataset(self.splits["predict"], input_ctx)

    def write_predictions(self, ctx: JobContext) -> None:
        """``predictions.jsonl``: one JSON object per example of the predict split with weight
        > 0, in order (padding dropped), written whole and renamed into place."""
        rows = ctx.predict_rows(self.predict_dataset, self.predict_outputs,
                                (tf.float32, *self.predict_dtypes), self.splits["predict"].batches)
        keep = rows[0] > 0
        columns = [r[keep] for r in rows[1:]]
        lines = [json.dumps({k: _json(c[i]) for k, c in zip(self.predict_names, columns)}) + "\n"
                 for i in range(int(keep.sum()))]
        path = f"{ctx.out_dir}/{PREDICTIONS}"
        with tf.io.gfile.GFile(path + ".tmp", "w") as f:
            f.write("".join(lines))
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
        self.outputs.append(PREDICTIONS)
        log(f"{len(lines)} predictions: {path}")

    def finish(self, ctx: JobContext) -> dict[str, float]:
        if "predict" in self.splits:
            self.write_predictions(ctx)
        self.export(ctx)
        return self.evaluate(ctx) if "eval" in self.splits else {}

    def export(self, ctx: JobContext) -> None:
        """``saved_model/``: the model rebuilt in float32 outside the strategy, holding the
        trained values, serving ``predict(model(features))`` (signature ``serving_default``).
        On JAX the TensorFlow backend writes it, in a process of its own
        (:mod:`jobs.keras.export`): the same SavedModel as a TensorFlow run's."""
        path = f"{ctx.out_dir}/{SAVED_MODEL_DIR}"
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)  # a resumed run rewrites the whole export
        if self.backend == "jax":
            self.export_in_tensorflow(ctx.model, path)
        else:
            self.write_saved_model([unwrap(v).numpy() for v in ctx.model.variables], path)
        self.outputs.append(f"{SAVED_MODEL_DIR}/")
        log(f"SavedModel for serving: {path}")

    def write_saved_model(self, values: list[np.ndarray] | dict[str, np.ndarray], path: str) -> None:
        """The SavedModel of the model holding ``values`` (in the order of its variables, or by
        their paths), rebuilt in float32. TensorFlow backend."""
        previous = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy("float32")
        try:
            model = self.make_model()
        finally:
            keras.mixed_precision.set_global_policy(previous)
        if isinstance(values, dict):  # by path; in order where the layers' names differ
            paths = [getattr(v, "path", None) or v.name for v in model.variables]
            values = [values[p] for p in paths] if sorted(paths) == sorted(values) else list(
                values.values())
        if len(model.variables) != len(values) or any(
                tuple(v.shape) != np.shape(x) for v, x in zip(model.variables, values)):
            raise self.user.mistake("model", "model(params) made a different model the second time; "
                                    "build it from params alone")
        for target, value in zip(model.variables, values):
            target.assign(np.asarray(value, target.dtype))
        split = self.splits.get("predict") or self.splits.get("eval") or self.splits["train"]
        features = unpack(split.element_spec)[0]
        flat = tf.nest.flatten(features)
        names = _input_names(features)
        signature = [tf.TensorSpec([None, *t.shape[1:]], t.dtype, name=n) for t, n in zip(flat, names)]
        job = self

        class Serving(tf.Module):
            @tf.function(input_signature=signature)
            def serve(self, *inputs):
                return job.predictions(model(tf.nest.pack_sequence_as(features, list(inputs)),
                                             training=False))

        module = Serving()
        # the variables, tracked as such: the Keras model itself would bring Keras' own default
        # signature, traced with inputs it guesses
        module.weights = [unwrap(v) for v in model.variables]
        tf.saved_model.save(module, path, signatures={"serving_default": module.serve})

    def export_in_tensorflow(self, model, path: str) -> None:
        """On JAX: :meth:`write_saved_model` run by the TensorFlow backend in a process of its
        own (Keras' backend is fixed per process), given the trained values by path. Keras'
        ``ExportArchive`` would convert the JAX function with jax2tf instead, into serialized
        StableHLO that the installed TensorFlow must read back: TensorFlow 2.21 reads
        StableHLO up to 1.13.7, jax 0.10 writes 1.15, and even written as 1.13.7 a model with
        an op JAX lowers to a composite (``erf``: BERT's GELU) does not load with a batch of
        any size. A graph of TensorFlow's own serves on any platform, any batch."""
        values = {getattr(v, "path", None) or v.name: _host_value(v) for v in model.variables}
        in_tensorflow(ExportRequest(self.spec, list(self.search), dict(self.splits),
                                    self.model_split, values, path))


class KerasOptimizer:
    """A Keras optimizer of the user's, as the runner's :class:`jobs.job.Optimizer`: Keras 3
    sums the replicas' gradients itself when ``apply_gradients`` runs in replica context (as
    in ``model.fit``), and its state variables go into the checkpoint by their paths."""

    def __init__(self, optimizer, trained: dict[str, Any]):
        self.optimizer = optimizer
        self.names = list(trained)
        self.keras_variables = [trained[n] for n in self.names]
        optimizer.build(self.keras_variables)
        self.step = unwrap(optimizer.iterations)

    def slots(self) -> dict[str, tf.Variable]:
        """The optimizer's variables by name within the optimizer (``hidden_kernel_momentum``):
        its own name (``sgd``, ``sgd_1`` ...) depends on how many came before it."""
        out = {}
        for v in self.optimizer.variables:
            if unwrap(v) is not self.step:
                path = getattr(v, "path", None) or v.name
                out[path.split("/", 1)[-1]] = unwrap(v)
        return out

    def apply_gradients(self, grads):
        return self.optimizer.apply_gradients(zip(grads, self.keras_variables))

    def current_learning_rate(self) -> tf.Tensor:
        return tf.convert_to_tensor(self.optimizer.learning_rate)


def _slot_name(variable) -> str:
    """An optimizer variable's name within the optimizer (``hidden_kernel_momentum``), as
    :meth:`KerasOptimizer.slots` names it in the checkpoint, on either backend."""
    path = getattr(variable, "path", None) or variable.name
    return path.split("/", 1)[-1]


class KerasStatelessOptimizer:
    """A Keras optimizer of the user's on the JAX backend, as the runner's
    :class:`jobs.job.StatelessOptimizer`: Keras' own ``stateless_apply`` traced into the step,
    its state (every optimizer variable but the step counter) by the names
    :meth:`KerasOptimizer.slots` gives it, so a checkpoint continues on either backend. The
    runner counts the steps; the optimizer's ``iterations`` is given the step being taken. Its
    gradient is the global batch's (``clipnorm`` clips the global gradient, not a replica's)."""

    def __init__(self, optimizer, trained: dict[str, Any]):
        self.optimizer = optimizer
        self.names = list(trained)
        optimizer.build([trained[n] for n in self.names])
        self.slot_names = [None if v is optimizer.iterations else _slot_name(v)
                           for v in optimizer.variables]

    def slot_values(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(keras.ops.convert_to_numpy(v.value))
                for name, v in zip(self.slot_names, self.optimizer.variables) if name is not None}

    def stateless_apply(self, values, slots, grads, step):
        iterations = self.optimizer.iterations
        state = [keras.ops.cast(step, iterations.dtype) if name is None else slots[name]
                 for name in self.slot_names]
        new_values, new_state = self.optimizer.stateless_apply(state, list(grads), list(values))
        new_slots = {name: value for name, value in zip(self.slot_names, new_state)
                     if name is not None}
        return list(new_values), new_slots

    def learning_rate(self, step):
        rate = self.optimizer._learning_rate  # a schedule, a variable or a number
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            return rate(step)
        if callable(rate) and not isinstance(rate, keras.Variable):
            return rate()
        return keras.ops.convert_to_numpy(rate.value if isinstance(rate, keras.Variable) else rate)


@dataclass
class ExportRequest:
    """What the exporting process needs: the run's spec and where its module is found, the
    splits' element structures (the serving signature), the batch ``model(params)`` was given,
    the trained values by variable path, and where to write."""

    spec: Any
    search: list[str]
    splits: dict[str, Any]
    model_split: Any
    values: dict[str, Any]
    path: str


def in_tensorflow(request: ExportRequest) -> None:
    """Write the SavedModel of ``request`` with the TensorFlow backend, in a process of its own
    (``python -m jobs.keras.export``); a mistake in the user's code there is a ConfigError (one
    line), any other failure a RuntimeError with that process's last lines."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="-1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="tpuctl-export-") as tmp:
        file = os.path.join(tmp, "request.pickle")
        with open(file, "wb") as f:
            pickle.dump(request, f, protocol=pickle.HIGHEST_PROTOCOL)
        proc = subprocess.run([sys.executable, "-m", "jobs.keras.export", file], env=env,
                              capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return
    errors = [line for line in proc.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    if proc.returncode == 2 and errors:
        raise ConfigError(errors[-1][len(ERROR_PREFIX):])
    raise RuntimeError(f"writing the SavedModel with the TensorFlow backend failed (exit "
                       f"{proc.returncode}): {proc.stderr[-TAIL:]}")


def pad_batches(dataset: tf.data.Dataset, size: int) -> tf.data.Dataset:
    """``(features, labels[, weights])`` batches of at most ``size`` examples as
    ``(features, labels, weights)`` batches of exactly ``size`` (static), a short batch filled
    with copies of its first example of weight 0 (a copy, not zeros: a real example keeps the
    loss finite, and 0 times a NaN would still be NaN). Keras does the same on a TPU."""

    def pad(*element):
        features, labels, weights = unpack(element)
        n = tf.shape(tf.nest.flatten(features)[0])[0]
        too_big = tf.debugging.assert_less_equal(n, size, message=f"{TOO_BIG} {size}")
        with tf.control_dependencies([too_big]):
            missing = size - n
        ids = tf.concat([tf.range(n), tf.zeros([missing], tf.int32)], 0)
        given = tf.ones([n], tf.float32) if weights is None else tf.cast(weights, tf.float32)
        w = tf.ensure_shape(tf.concat([given, tf.zeros([missing], tf.float32)], 0), [size])

        def fill(t):
            return tf.ensure_shape(tf.gather(t, ids), [size, *t.shape[1:]])

        return tf.nest.map_structure(fill, features), tf.nest.map_structure(fill, labels), w

    return dataset.map(pad)


def per_example(values):
    """[batch, ...] values as float32 per-example means."""
    values = keras.ops.cast(values, "float32")
    rank = _rank(values)
    if rank and rank > 1:
        values = keras.ops.mean(values, axis=list(range(1, rank)))
    return values


def totals_of(values):
    """[batch, ...] values as float32 per-example sums (a ratio's numerator or denominator)."""
    values = keras.ops.cast(values, "float32")
    rank = _rank(values)
    if rank and rank > 1:
        values = keras.ops.sum(values, axis=list(range(1, rank)))
    return values


def _weights(weights, labels, features):
    if weights is not None:
        return keras.ops.cast(weights, "float32")
    first = keras.tree.flatten(features)[0]
    return keras.ops.ones([keras.ops.shape(first)[0]], "float32")


def _rank(value) -> int | None:
    """The number of axes of a tensor (None: unknown, in a TensorFlow graph)."""
    shape = value.shape
    if isinstance(shape, tf.TensorShape):
        return shape.rank
    return len(shape)


def _is_tensor(value) -> bool:
    """Whether ``value`` is a tensor of the backend (a numpy array is not)."""
    if keras.backend.backend() == "tensorflow":
        return isinstance(value, tf.Tensor)
    return keras.ops.is_tensor(value) and not isinstance(value, np.ndarray)


def _numeric(dtype) -> tuple[bool, str]:
    """Whether values of ``dtype`` are numbers (or booleans), and the dtype's name."""
    if isinstance(dtype, tf.DType):
        return dtype.is_floating or dtype.is_integer or dtype == tf.bool, dtype.name
    name = keras.backend.standardize_dtype(dtype)
    return name == "bool" or name.startswith(("float", "bfloat", "int", "uint")), name


@dataclass(frozen=True)
class _Spec:
    """A traced value's shape and dtype (JAX)."""

    shape: tuple
    dtype: Any


def _host_value(variable) -> np.ndarray:
    """A Keras variable's value on this host (on JAX a replicated array, which spans every
    process of a slice: its copy here)."""
    value = variable.value
    if getattr(value, "is_fully_addressable", True):
        return np.asarray(value)
    return np.asarray(value.addressable_data(0))


def _input_names(features) -> list[str]:
    if isinstance(features, dict):
        return [str(k) for k in sorted(features)]
    flat = tf.nest.flatten(features)
    return ["features"] if len(flat) == 1 else [f"features_{i}" for i in range(len(flat))]


def _json(value) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_json(v) for v in value] if value.dtype.kind in "SO" else value.tolist()
    return value.item() if hasattr(value, "item") else value


def _describe(spec) -> str:
    if isinstance(spec, tf.TensorSpec):
        return f"a tensor of shape {spec.shape}"
    if isinstance(spec, dict):
        return "a dict"
    return f"a {type(spec).__name__}" + (f" of {len(spec)}" if isinstance(spec, tuple) else "")

