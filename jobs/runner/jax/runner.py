"""The runner on Keras 3's JAX backend: the same schedule, exit codes, progress, evaluations and
checkpoints as :class:`jobs.runner.runner.Runner`, with the step compiled by ``jax.jit``.

What differs from TensorFlow, and why:

- **One jit over the global batch.** The train step is one function of (trained values, other
  model state, optimizer slots, step, global batch), compiled once with ``jax.jit``; the batch is
  split along the mesh's ``batch`` axis and the variables are replicated (data parallelism, as
  ``keras.distribution.DataParallel`` lays it out), and XLA inserts the all-reduce of the
  gradient. The job's ``loss_counts`` and ``loss`` see the global batch, so the loss is the mean
  over the global batch without any collective in the job (``loss_normalization: replica``
  cannot be expressed and is refused).
- **Stateless.** The job's ``loss`` calls the model as usual; the runner traces it inside a
  ``keras.StatelessScope`` that maps every model variable to the traced values, so the gradient
  is taken with respect to the values, and the optimizer (:class:`jobs.job.StatelessOptimizer`)
  returns new values and slots. Nothing is assigned inside the step.
- **The input on the host CPU.** The job's ``dataset`` is still tf.data, given a per-host
  :class:`tf.distribute.InputContext` (each host reads its share of every global batch, the rows
  of its devices), and the position in the epoch stream is a function of the step, as on
  TensorFlow.
- **The same checkpoint.** The values are copied into host ``tf.Variable``\\ s under the same
  names and saved with ``tf.train.Checkpoint``: one format for both backends (a checkpoint of
  either continues on the other), for original BERT checkpoints, and for
  :mod:`jobs.runner.checkpointing`'s fall-back to older checkpoints.
- **Dropout keys** come from :func:`jobs.backend_ops.jax.step_seed` (threefry, folded with the
  step): the masks of a step are the same on any number of devices and after any interruption,
  so a resumed run ends with the weights of an uninterrupted one (bitwise on a CPU). They are
  not TensorFlow's Philox masks: a checkpoint continued on the other backend resumes from the
  same state but trains with other masks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import keras
import numpy as np
import tensorflow as tf

from ...backend_ops import jax as jax_ops
from ...errors import ConfigError
from .. import checkpointing
from ..runner import Runner
from . import devices


class JaxRunner(Runner):
    backend = "jax"

    def __init__(self, spec, job, verbose: bool = False):
        super().__init__(spec, job, verbose)
        # On a TPU VM slice every worker runs this program, told its place by the host
        # (TPUCTL_WORKER_INDEX of TPUCTL_NUM_WORKERS) rather than by TF_CONFIG
        hosts, host = devices.workers(self.hosts, self.host)
        if (hosts, host) != (self.hosts, self.host):
            self.hosts, self.host = hosts, host
            self.chief = host == 0
            self.out_dir = self.model_dir if self.chief else f"{self.model_dir}/workers/{host}"
            self.progress.enabled = self.chief

    # ---------------------------------------------------------------------------------------
    # Devices, model and checkpoints

    def connect(self) -> None:
        if self.spec.loss_normalization == "replica":
            raise ConfigError("loss_normalization replica (each core's own mean) has no meaning on "
                              "the JAX backend, whose step is one function of the global batch; "
                              "use --set loss_normalization=global or --set backend=tensorflow")
        devices.connect(self.hosts, self.host)
        self.mesh, self.device = devices.select(self.spec.precision, self.hosts, self.host)
        self.strategy = None
        self.replicas = self.device.count
        if self.device.count % self.hosts:
            raise ConfigError(f"{self.device.count} devices do not split evenly over {self.hosts} "
                              "hosts; give every host the same number")

    def input_context(self) -> tf.distribute.InputContext:
        # one input pipeline per host, each reading its share of the global batch: the rows of
        # its own devices in the mesh (devices.global_batch)
        return tf.distribute.InputContext(self.hosts, self.host, self.hosts)

    def build(self) -> None:
        ctx = self.context
        self.model = ctx.model = self.job.build_model()
        self.variables = ctx.variables = self.job.named_variables(self.model)
        self.optimizer = ctx.optimizer = self.job.build_optimizer(ctx)
        ctx.current_step = self.current_step
        self.train_names = list(self.optimizer.names)
        self.train_vars = [self.variables[n] for n in self.train_names]
        trained = {id(v) for v in self.train_vars}
        # everything else the model holds (frozen weights, statistics, seed state): traced as
        # inputs too, and carried from step to step
        self.other_vars = [v for v in self.model.variables if id(v) not in trained]
        self.train_values = [devices.replicated(self.mesh, v.numpy()) for v in self.train_vars]
        self.other_values = [devices.replicated(self.mesh, v.numpy()) for v in self.other_vars]
        self.slots = {k: devices.replicated(self.mesh, np.asarray(v))
                      for k, v in self.optimizer.slot_values().items()}
        self.step = 0
        self.position = 0

    def current_step(self) -> int:
        return self.step

    def input_position(self) -> int:
        return self.position

    def set_input_position(self, examples: int) -> None:
        self.position = int(examples)

    def open_checkpoints(self) -> checkpointing.Restored:
        # host copies under the names the TensorFlow runner checkpoints: one format for both
        self.shadow_model = {n: tf.Variable(self.variables[n].numpy(), trainable=False)
                             for n in self.variables}
        self.shadow_slots = {k: tf.Variable(devices.host_value(v), trainable=False)
                             for k, v in self.slots.items()}
        self.shadow_step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.shadow_position = tf.Variable(0, dtype=tf.int64, trainable=False)
        restored = self.restore_into(self.shadow_model, self.shadow_slots, self.shadow_step,
                                     self.shadow_position)
        if restored.path:
            for name, shadow in self.shadow_model.items():
                self.variables[name].assign(shadow.numpy())
            self.model_initialized()
            self.slots = {k: devices.replicated(self.mesh, self.shadow_slots[k].numpy())
                          for k in self.slots}
            self.step = int(self.shadow_step.numpy())
            self.position = int(self.shadow_position.numpy())
        return restored

    def save_checkpoint(self, step: int) -> None:
        values = {id(v): x for v, x in zip(self.train_vars + self.other_vars,
                                            self.train_values + self.other_values)}
        for name, shadow in self.shadow_model.items():
            shadow.assign(devices.host_value(values[id(self.variables[name])]))
        for key, shadow in self.shadow_slots.items():
            shadow.assign(devices.host_value(self.slots[key]))
        self.shadow_step.assign(self.step)
        self.shadow_position.assign(self.position)
        super().save_checkpoint(step)

    def model_initialized(self) -> None:
        """The step traces with values, not the variables: take the ones the job's
        ``initialize`` assigned (an ``init_checkpoint``, a predict-only run's model)."""
        self.train_values = [devices.replicated(self.mesh, v.numpy()) for v in self.train_vars]
        self.other_values = [devices.replicated(self.mesh, v.numpy()) for v in self.other_vars]

    def sync_model(self) -> None:
        """The Keras variables take the trained values (for the job's hooks: evaluation in
        Python, export, predictions)."""
        for var, value in zip(self.train_vars, self.train_values):
            var.assign(value)
        for var, value in zip(self.other_vars, self.other_values):
            var.assign(value)

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate(max(self.step, 0)))

    # ---------------------------------------------------------------------------------------
    # Training

    def stateless(self, fn: Callable, train_values, other_values, *args):
        """``fn(*args)`` with the model's variables read from the given values; also returns
        the values of the other variables after it (a layer may update its statistics)."""
        mapping = list(zip(self.train_vars, train_values)) + list(zip(self.other_vars, other_values))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            out = fn(*args)
        updated = []
        for var, value in zip(self.other_vars, other_values):
            new = scope.get_current_value(var)
            updated.append(value if new is None else new)
        return out, updated

    def make_train_step(self):
        """The compiled step: (trained values, other values, slots, step, global batch) ->
        (new values, new other values, new slots, loss, metrics)."""
        job, model, optimizer = self.job, self.model, self.optimizer
        names = list(job.metric_names)
        seed = self.spec.seed

        def step_fn(train_values, other_values, slots, step, batch):
            key = jax_ops.step_seed(seed, step)

            def loss_fn(values):
                def call():
                    totals = job.loss_counts(batch)  # the global batch's: a global mean
                    loss, metrics = job.loss(model, batch, training=True, seed=key, totals=totals)
                    return loss, [metrics[k] for k in names]

                (loss, metrics), other = self.stateless(call, values, other_values)
                return loss, (metrics, other)

            (loss, (metrics, other)), grads = jax.value_and_grad(loss_fn, has_aux=True)(train_values)
            grads = [g.astype(jnp.float32) for g in grads]
            values, slots = optimizer.stateless_apply(train_values, slots, grads, step)
            return list(values), other, slots, loss, metrics

        return jax.jit(step_fn, donate_argnums=(0, 1, 2))

    def start_training(self, step: int) -> Callable[[int, int], tuple[float, list[float], int]]:
        dataset = self.job.dataset(self.input_context(), self.position)
        iterator = iter(dataset)
        compiled = self.make_train_step()
        global_batch = self.spec.train_batch_size
        self.progress.live_step = lambda: self.step

        def run_loop(step: int, n: int) -> tuple[float, list[float], int]:
            losses, metrics = [], []
            for _ in range(n):
                if devices.any_process(self.stop.requested.is_set(), self.hosts):
                    break
                local = jax.tree.map(lambda t: t.numpy(), next(iterator))
                batch = devices.global_batch(self.mesh, local)
                (self.train_values, self.other_values, self.slots, loss,
                 values) = compiled(self.train_values, self.other_values, self.slots,
                                    np.int32(self.step), batch)
                losses.append(loss)
                metrics.append(values)
                self.step += 1
                self.position += global_batch
            # one wait at the end of the loop: the steps were dispatched without waiting
            loss_sum = float(sum(float(devices.host_value(x)) for x in losses))
            sums = [float(sum(float(devices.host_value(m[i])) for m in metrics))
                    for i in range(len(self.job.metric_names))]
            return loss_sum, sums, len(losses)

        return run_loop

    # ---------------------------------------------------------------------------------------
    # Evaluation and prediction for jobs

    def _compiled(self, key, make: Callable):
        if key not in self.eval_loops:
            self.eval_loops[key] = make()
        return self.eval_loops[key]

    def _batches(self, dataset_fn: Callable, num_batches: int):
        dataset = dataset_fn(self.input_context())
        for element in dataset.take(num_batches):
            yield devices.global_batch(self.mesh, jax.tree.map(lambda t: t.numpy(), element))

    def evaluate_sums(self, dataset_fn: Callable, sums_fn: Callable, keys: Sequence[str],
                      num_batches: int) -> dict[str, float]:
        keys = list(keys)

        def make():
            def sums(train_values, other_values, batch):
                out, _ = self.stateless(lambda: sums_fn(self.model, batch), train_values,
                                        other_values)
                return {k: jnp.asarray(out[k], jnp.float32) for k in keys}
            return jax.jit(sums)

        compiled = self._compiled((sums_fn, tuple(keys), num_batches), make)
        totals = {k: jnp.zeros((), jnp.float32) for k in keys}
        for batch in self._batches(dataset_fn, num_batches):
            out = compiled(self.train_values, self.other_values, batch)
            totals = {k: totals[k] + out[k] for k in keys}
        return {k: float(devices.host_value(v)) for k, v in totals.items()}

    def predict_rows(self, dataset_fn: Callable, outputs_fn: Callable, dtypes: Sequence,
                     num_batches: int) -> list:
        def make():
            def outputs(train_values, other_values, batch):
                out, _ = self.stateless(lambda: tuple(outputs_fn(self.model, batch)),
                                        train_values, other_values)
                return out
            return jax.jit(outputs)

        compiled = self._compiled(("predict", outputs_fn, num_batches), make)
        rows: list[list[np.ndarray]] = []
        for batch in self._batches(dataset_fn, num_batches):
            out = compiled(self.train_values, self.other_values, batch)
            rows.append([devices.gathered(v) for v in out])
        if not rows:
            return [np.zeros((0,), tf.as_dtype(d).as_numpy_dtype) for d in dtypes]
        return [np.concatenate([r[i] for r in rows]).astype(tf.as_dtype(d).as_numpy_dtype)
                for i, d in enumerate(dtypes)]
