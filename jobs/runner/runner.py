"""The runner: what TPUEstimator did for TF1 jobs, in TensorFlow 2, on a TPU, GPUs or a CPU.

A job says *what* to train (:class:`jobs.job.Job`: a model builder, a per-replica input
function, a loss with its metrics -- the model_fn / input_fn split); the runner does the rest,
the same way on every machine:

1. picks the strategy from the environment (:mod:`jobs.runner.distribute`) and checks that the global
   batch splits evenly over the replicas, before any step;
2. has the job build its model and optimizer inside ``strategy.scope()`` (a BERT job: its
   encoder and AdamW; ``job: keras``: the user's model and AdamW or the user's optimizer);
3. resumes from the newest checkpoint in ``model_dir`` that restores cleanly (falling back to
   older ones), or else lets the job initialize (a BERT job loads ``init_checkpoint``);
4. trains in host loops of up to ``steps_per_execution`` steps inside one ``tf.function``
   (TPUEstimator's ``iterations_per_loop``), per-replica batches from
   ``distribute_datasets_from_function`` with ``drop_remainder`` (static shapes for XLA);
5. after each loop writes TensorBoard scalars and ``progress.json``; every
   ``save_checkpoints_steps`` and at the end saves a checkpoint (keeping
   ``keep_checkpoint_max``);
6. ends with the job's ``finish`` (evaluation, export) and exit code 0.

Exact resumption: a checkpoint holds the weights, the optimizer's moments and step, and the
input position (examples of the epoch stream consumed, :mod:`jobs.data`); dropout is keyed
statelessly by (seed, step, replica). Nothing else is random, so a run killed or stopped and
resumed any number of times ends with the weights of an uninterrupted one (bitwise on a CPU).

Exit codes: SIGTERM -> checkpoint at the current step, exit 42; a lost TPU or connection
(:func:`jobs.exitcodes.is_infrastructure_error`) -> exit 42; a bad spec or input -> 2 with one
line; a TPU that cannot be resolved or initialised, or a bug -> 1. ``progress.json`` says which
(``status``).

Checkpoints key the model's variables by the names the job gives them
(:meth:`jobs.job.Job.named_variables`: a BERT job's are the original BERT names, so they load on
any Keras version and straight into ``init_checkpoint`` of another job). Jobs see the run only
through :class:`jobs.job.JobContext`, never the runner itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence

import keras
import tensorflow as tf

from .. import exitcodes
from ..errors import ConfigError, report
from ..job import Job, JobContext, log
from ..spec.base import RunSpec
from . import checkpointing, distribute, epochs, hparams, summaries
from . import progress as progress_lib
from .heartbeat import ProgressWriter
from .preemption import StopSignal
from .summaries import ScalarWriter

__all__ = ["Job", "Runner", "dropout_seed", "log", "loss_totals"]

INPUT_POSITION = "input_position"  # the checkpoint key of the examples consumed


def dropout_seed(seed: int, step, first_example) -> tf.Tensor:
    """The stateless seed of the dropout masks of ``step`` for a replica whose batch starts at
    ``first_example`` of the global batch: ``[key0, key1, first_example]`` (int64; see
    :func:`jobs.backend_ops.tensorflow.uniform_like`). The key depends on (seed, step) only, so the
    masks do not depend on how the global batch is split."""
    key = tf.constant([seed, 0], tf.int64)
    key = tf.cast(tf.random.experimental.stateless_fold_in(key, tf.cast(step, tf.int64)), tf.int64)
    return tf.concat([key, tf.reshape(tf.cast(first_example, tf.int64), [1])], 0)


def loss_totals(ctx, counts: dict, normalization: str = "global") -> dict:
    """The denominators of the loss's means, from this replica's ``counts`` (sums over its own
    examples: examples, weights of masked-LM predictions ...). ``global``: their sums over the
    global batch (one small all-reduce), so the loss is a mean over the global batch and its
    gradient the same function of the global batch on any number of replicas. ``replica``: the
    original per-core normalisation (each replica's mean, averaged over replicas): the replica's
    own counts times the replica count."""
    replicas = ctx.num_replicas_in_sync
    if replicas == 1:
        return dict(counts)
    if normalization == "replica":
        return {k: v * float(replicas) for k, v in counts.items()}
    names = sorted(counts)
    summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [counts[k] for k in names])
    return dict(zip(names, summed))


class Runner:
    def __init__(self, spec: RunSpec, job: Job, verbose: bool = False):
        self.spec = spec
        self.job = job
        self.verbose = verbose  # a ConfigError's cause (a user's traceback) is printed too
        self.model_dir = spec.model_dir.rstrip("/")
        # Multi-worker (TF_CONFIG): worker 0 is the chief and writes model_dir; the others run the
        # same program (every collective needs them) and write their copies to a scratch dir.
        self.hosts, self.host = distribute.workers()
        self.chief = self.host == 0
        self.out_dir = self.model_dir if self.chief else f"{self.model_dir}/workers/{self.host}"
        self.stop = StopSignal()
        self.progress = ProgressWriter(self.model_dir, spec.num_train_steps, enabled=self.chief)
        self.strategy: tf.distribute.Strategy | None = None
        self.device: distribute.Device | None = None
        self.eval_writer: ScalarWriter | None = None  # <model_dir>/eval, opened at the first eval
        self.eval_loops: dict = {}  # compiled evaluation loops, by the job's sums function
        self.context: JobContext | None = None  # what the job's hooks see, once the strategy exists

    # ---------------------------------------------------------------------------------------
    # Entry point and exit codes

    def run(self) -> int:
        def exiting() -> None:
            log(f"{self.stop.name} before training: nothing new to save; exit 42")
            self.progress.update(status=progress_lib.PREEMPTED, message=self.stop.name)

        self.stop.on_immediate_exit = exiting
        self.stop.install()
        self.progress.start()
        try:
            return self._run()
        except ConfigError as exc:
            if self.verbose and exc.__cause__ is not None:
                traceback.print_exception(exc.__cause__)
            report(exc)
            self.progress.update(status=progress_lib.FAILED, message=str(exc))
            return exitcodes.BAD_SPEC
        except distribute.TPUResolutionError as exc:
            report(exc)
            self.progress.update(status=progress_lib.FAILED, message=str(exc)[:500])
            return exitcodes.JOB_ERROR
        except KeyboardInterrupt:
            self.progress.update(status=progress_lib.PREEMPTED, message="interrupted")
            return exitcodes.RETRY
        except Exception as exc:  # noqa: BLE001 - the exit code classifies every failure
            if self.stop.requested.is_set() or exitcodes.is_infrastructure_error(exc):
                reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                log(f"lost the accelerator or its connection ({reason}); exit 42, resume from "
                    "the last checkpoint")
                self.progress.update(status=progress_lib.PREEMPTED, message=reason)
                return exitcodes.RETRY
            traceback.print_exc()
            self.progress.update(status=progress_lib.FAILED, message=f"{type(exc).__name__}: {exc}"[:500])
            return exitcodes.JOB_ERROR
        finally:
            self.progress.stop()
            self.stop.uninstall()

    # ---------------------------------------------------------------------------------------
    # The run

    def _run(self) -> int:
        spec, job = self.spec, self.job
        tf.io.gfile.makedirs(self.out_dir)
        self.connect()
        replicas = self.replicas
        log(f"{spec.job} on {self.device.name}: {replicas} replica(s), {self.device.precision}"
            + (", XLA" if self.device.xla else "") + f", {self.backend}")
        self.progress.update(device={"type": self.device.type, "count": self.device.count,
                                     "name": self.device.name,
                                     "precision": self.device.precision})
        self._check_batch_sizes(replicas)
        distribute.set_policy(self.device.precision)
        # Python, NumPy, TensorFlow and Keras seeds: variables that no checkpoint fills (a new
        # classifier head) start the same in every run of the spec.
        keras.utils.set_random_seed(spec.seed)
        ctx = self.make_context()
        job.prepare(ctx)
        if self.stop.requested.is_set():  # preempted while preparing data: nothing to save
            self.progress.update(status=progress_lib.PREEMPTED, message=self.stop.name)
            return exitcodes.RETRY
        warning = epochs.overuse_warning(job.train_examples() or 0, spec.num_train_steps, spec.train_batch_size)
        if warning:
            log(warning)

        self.build()
        restored = self.open_checkpoints()
        step = self.current_step()
        if restored.legacy:  # written before the position was checkpointed: step x batch
            self.set_input_position(step * spec.train_batch_size)
            log(f"{restored.path} has no input position; assuming {step} x train_batch_size")
        if restored.path:
            log(f"resumed from {restored.path} (step {step}); input stream at example "
                f"{self.input_position()}")
            resumed_from: int | None = step
            checkpoint_step: int | None = step
        else:
            resumed_from, checkpoint_step = None, None
            job.initialize(ctx)
            self.model_initialized()
        self.progress.update(step=step, resumed_from_step=resumed_from,
                             checkpoint_step=checkpoint_step, status=progress_lib.RUNNING)

        if step < spec.num_train_steps and not self._train(step):
            return exitcodes.RETRY
        self.sync_model()
        metrics = job.finish(ctx)
        final = {k: v for k, v in metrics.items() if k in spec.reported_metrics()}
        if final:  # the final evaluation ends the evals curve
            self.record_eval(self.current_step(), final)
        self.progress.update(status=progress_lib.FINISHED, metrics={**self.progress.record.metrics,
                                                                    **metrics},
                             outputs=list(job.outputs))
        log(f"finished at step {self.current_step()}"
            + "".join(f", {k} {v:.4f}" for k, v in metrics.items()))
        return exitcodes.OK

    # ---------------------------------------------------------------------------------------
    # What a backend decides (jobs/runner/jax/runner.py overrides these for JAX)

    backend = "tensorflow"

    def connect(self) -> None:
        """The devices of this run: ``self.device``, ``self.replicas`` (and the strategy)."""
        self.strategy, self.device = distribute.select(self.spec.precision)
        self.stop.reclaim()  # a multi-worker strategy installs TF's SIGTERM handler over ours
        self.replicas = self.strategy.num_replicas_in_sync

    def input_context(self) -> tf.distribute.InputContext:
        """What ``Job.dataset`` is given: this host's input pipeline, split per replica."""
        return tf.distribute.InputContext(self.hosts, self.host, self.replicas)

    def open_checkpoints(self) -> checkpointing.Restored:
        """The checkpoint of the model's variables, the optimizer's state, the step and the
        input position; restores the newest one in model_dir that restores cleanly."""
        return self.restore_into(dict(self.variables), self.optimizer.slots(), self.optimizer.step,
                                 self.position)

    def restore_into(self, model: dict, slots: dict, step: tf.Variable,
                     position: tf.Variable) -> checkpointing.Restored:
        """``self.checkpoint`` and ``self.manager`` over these variables, under the keys every
        backend's checkpoints use (``model/<name>``, ``optimizer/<slot>``, ``global_step``,
        ``input_position``), with the newest good checkpoint restored into them."""
        parts = {"model": model, "optimizer": slots, "global_step": step}
        self.checkpoint = tf.train.Checkpoint(**parts, **{INPUT_POSITION: position})
        self.manager, restored = checkpointing.open_manager(
            self.checkpoint, self.model_dir, self.spec.keep_checkpoint_max, log,
            legacy=tf.train.Checkpoint(**parts))
        if not self.chief:  # restored from the chief's checkpoints; saves go to scratch
            self.manager = tf.train.CheckpointManager(self.checkpoint, self.out_dir, max_to_keep=1,
                                                      checkpoint_name=checkpointing.CHECKPOINT_NAME)
        return restored

    def current_step(self) -> int:
        return int(self.optimizer.step.numpy())

    def model_initialized(self) -> None:
        """The job's ``initialize`` assigned the model's variables (an ``init_checkpoint``):
        nothing to do here, the step reads the variables."""

    def sync_model(self) -> None:
        """Make the model's variables what training made them, before the job's hooks read
        them (evaluations, ``finish``): nothing to do here, the step assigns them."""

    def input_position(self) -> int:
        """Examples of the epoch stream consumed so far."""
        return int(self.position.numpy())

    def set_input_position(self, examples: int) -> None:
        self.position.assign(examples)

    def make_context(self) -> JobContext:
        """What the job's hooks see of this run (:class:`jobs.job.JobContext`), once the
        devices are chosen."""
        self.context = JobContext(
            spec=self.spec, model_dir=self.model_dir, out_dir=self.out_dir, chief=self.chief,
            hosts=self.hosts, host=self.host, strategy=self.strategy,
            replicas=self.replicas, xla=self.device.xla,
            fitted_batch=self.fitted_batch, evaluate_sums=self.evaluate_sums,
            predict_rows=self.predict_rows, making_data=self.making_data,
            backend=self.backend, input_context=self.input_context)
        return self.context

    def build(self) -> None:
        """The job's model and optimizer, inside the strategy's scope; the input position (a
        host variable, like the loop's counters) outside it."""
        ctx = self.context
        with self.strategy.scope():
            self.model = ctx.model = self.job.build_model()
            self.variables = ctx.variables = self.job.named_variables(self.model)
            self.optimizer = ctx.optimizer = self.job.build_optimizer(ctx)
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False, name=INPUT_POSITION)

    @contextlib.contextmanager
    def making_data(self) -> Iterator[None]:
        """Time spent creating data on the billed accelerator host, in progress.json's
        ``data_creation`` (``tpuctl cost`` counts it apart from training)."""
        spans = [*self.progress.record.data_creation, [time.time(), None]]
        self.progress.update(data_creation=spans)
        try:
            yield
        finally:
            spans[-1] = [spans[-1][0], time.time()]
            self.progress.update(data_creation=list(spans))

    def fitted_batch(self, size: int) -> int:
        """The global batch to evaluate or predict ``size`` examples at a time: ``size`` rounded
        up to a whole number of per-replica batches (of the emulated slice's cores too, so a
        laptop pads as the TPU would). Jobs pad their data with weight-0 examples to whole fitted
        batches, so an eval or predict batch size never has to divide over a slice."""
        cores = os.environ.get("TPUCTL_SLICE_CORES", "").strip()
        multiple = math.lcm(self.replicas,
                            int(cores) if cores.isdigit() and int(cores) > 0 else 1)
        return -(-size // multiple) * multiple

    def _check_batch_sizes(self, replicas: int) -> None:
        slice_cores = os.environ.get("TPUCTL_SLICE_CORES", "").strip()
        slice_type = os.environ.get("TPUCTL_ACCELERATOR_TYPE", "").strip() or "slice"
        for key, size in self.job.batch_sizes().items():
            if slice_cores.isdigit() and size % int(slice_cores):
                # an emulated slice has fewer replicas than the TPU it stands for: check the TPU's
                cores = int(slice_cores)
                raise ConfigError(f"{key} {size} does not divide over the {cores} cores of the "
                                  f"{slice_type}; use a multiple of {cores}, e.g. --set "
                                  f"{key}={(size // cores + 1) * cores}")
            if size % replicas:
                fits = ((size // replicas) + 1) * replicas
                raise ConfigError(f"{key} {size} does not divide over the {replicas} replicas of "
                                  f"this {self.device.name}; use a multiple of {replicas}, e.g. "
                                  f"--set {key}={fits}")

    # ---------------------------------------------------------------------------------------
    # Training

    def _train(self, step: int) -> bool:
        """Train to num_train_steps; False if stopped by a signal (checkpoint saved)."""
        spec = self.spec
        global_batch = spec.train_batch_size
        run_loop = self.start_training(step)
        self.stop.graceful = True  # from here a signal stops the loop and checkpoints
        writer = ScalarWriter(f"{self.out_dir}/{summaries.SUBDIR}/train")
        names = self.job.metric_names
        if spec.hparams:
            hparams.write(f"{self.out_dir}/{summaries.SUBDIR}", spec.hparam_values())
        # evaluations past the checkpoint resumed from are redone (replaced) as training goes
        self.progress.update(evals=[e for e in self.progress.record.evals if e["step"] <= step])
        self._evaluate_if_due(step)  # resumed on an eval boundary: maybe stopped before evaluating

        while step < spec.num_train_steps:
            if self.stop.requested.is_set() and self.hosts == 1:
                break  # several workers agree on the step to stop at inside the loop instead
            next_save = (step // spec.save_checkpoints_steps + 1) * spec.save_checkpoints_steps
            n = min(spec.steps_per_execution, next_save - step, spec.num_train_steps - step,
                    spec.eval_every_steps - step % spec.eval_every_steps if spec.eval_every_steps
                    else spec.num_train_steps)
            started = time.perf_counter()
            loss_sum, metric_sums, done = run_loop(step, n)
            elapsed = time.perf_counter() - started
            step = self.current_step()
            if done == 0:
                break
            loss = loss_sum / done
            metrics = {k: v / done for k, v in zip(names, metric_sums)}
            rate = done * global_batch / elapsed
            lr = self.learning_rate()
            writer.write(step, {"loss": loss, "learning_rate": lr, "examples_per_sec": rate,
                                **metrics})
            log(f"step {step}/{spec.num_train_steps} loss {loss:.4f} "
                f"{rate:.1f} examples/s" + "".join(f" {k} {v:.4f}" for k, v in metrics.items()))
            self.progress.update(step=step, loss=loss, examples_per_sec=rate,
                                 steps_per_sec=done / elapsed, metrics=metrics)
            if step % spec.save_checkpoints_steps == 0 or step >= spec.num_train_steps:
                self.save_checkpoint(step)
            if done == n:  # a loop cut short by a stop ends off the boundary: the resume evaluates
                self._evaluate_if_due(step)

        self.progress.live_step = None
        if step < spec.num_train_steps:  # stopped by SIGTERM / Ctrl-C
            if self.progress.record.checkpoint_step != step:
                self.save_checkpoint(step)
            log(f"{self.stop.name}: checkpoint at step {step} saved; exit 42 (resume by running "
                "again)")
            self.progress.update(status=progress_lib.PREEMPTED, message=self.stop.name)
            return False
        self.stop.graceful = False  # evaluation and export are redone by a restart
        return True

    def start_training(self, step: int) -> Callable[[int, int], tuple[float, list[float], int]]:
        """``run_loop(step, n)``: up to n more steps from ``step`` (fewer when a stop is
        requested) as one host call; (sum of losses, sums of metrics, steps done). Sets the
        live step the heartbeat reads while a loop runs."""
        position = self.input_position()  # where the uninterrupted run would read next
        dataset = self.strategy.distribute_datasets_from_function(
            lambda ctx: self.job.dataset(ctx, position))
        iterator = iter(dataset)
        # Host-side variables, outside the strategy: a stop request the loop checks before each
        # step, and a step counter the heartbeat reads while a long host loop runs.
        stop_flag = tf.Variable(False, trainable=False, name="stop_requested")
        self.stop.on_request(lambda: stop_flag.assign(True))
        loop_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="loop_steps")
        loop_start = [step]
        self.progress.live_step = lambda: loop_start[0] + int(loop_steps.numpy())
        train_loop = self.make_train_loop(stop_flag, loop_steps)

        def run_loop(step: int, n: int) -> tuple[float, list[float], int]:
            loop_steps.assign(0)  # reset before moving the base: the live step never overshoots
            loop_start[0] = step
            loss_sum, metric_sums, done = train_loop(iterator, tf.constant(n, tf.int32))
            done = int(done.numpy())
            loop_steps.assign(0)
            loop_start[0] = self.current_step()
            return float(loss_sum.numpy()), [float(v.numpy()) for v in metric_sums], done

        return run_loop

    def learning_rate(self) -> float:
        """The learning rate of the next step (for the summaries)."""
        return float(self.optimizer.current_learning_rate().numpy())

    def save_checkpoint(self, step: int) -> None:
        path = self.manager.save(checkpoint_number=step)
        self.progress.update(checkpoint_step=step)
        log(f"saved {path}")

    def _evaluate_if_due(self, step: int) -> None:
        """The job's evaluation every ``eval_every_steps`` (not at step 0, nor at the end, where
        ``finish`` evaluates), for a sweep's pruner. It reads its own data, so the training input
        stream and the stateless dropout keys are untouched: exact resumption holds."""
        every = self.spec.eval_every_steps
        if not every or step % every or not 0 < step < self.spec.num_train_steps:
            return
        started = time.perf_counter()
        self.sync_model()
        metrics = self.job.eval_metrics(self.context)
        if metrics:
            self.record_eval(step, metrics)
            log(f"evaluated at step {step} in {time.perf_counter() - started:.1f} s:"
                + "".join(f" {k} {v:.4f}" for k, v in metrics.items()))

    def record_eval(self, step: int, metrics: dict[str, float]) -> None:
        """One evaluation's metrics: TensorBoard scalars in ``<model_dir>/eval`` and an entry of
        progress.json's ``evals`` (replacing one of the same step)."""
        if self.eval_writer is None:
            self.eval_writer = ScalarWriter(f"{self.out_dir}/{summaries.SUBDIR}/eval")
        self.eval_writer.write(step, metrics)
        self.progress.add_eval(step, metrics)

    def make_train_loop(self, stop_flag: tf.Variable, loop_steps: tf.Variable):
        """``train_loop(iterator, n)``: up to n steps in one ``tf.function`` call (one host
        call); returns (sum of losses, sums of metrics, steps done). The benchmark times it.

        With XLA (GPUs): one replica compiles the whole step, forward, backward and AdamW
        with its assignments; several replicas compile forward/backward and AdamW's arithmetic,
        with the all-reduce and the assignment between them (a merge call cannot be compiled).
        """
        strategy, job, model = self.strategy, self.job, self.model
        optimizer = self.optimizer
        train_vars = [self.variables[n] for n in optimizer.names]
        num_metrics = len(job.metric_names)
        seed = self.spec.seed
        global_batch = self.spec.train_batch_size
        per_replica = global_batch // strategy.num_replicas_in_sync
        position = self.position
        xla = self.device.xla
        whole_step = xla and strategy.num_replicas_in_sync == 1
        agree = self.device.hosts > 1 and self.device.type != "tpu"
        normalization = self.spec.loss_normalization

        def stop_requested():
            """Whether to stop before the next step. Workers that each run this loop must stop at
            the same step (a worker leaving early would leave the others waiting in an
            all-reduce): with several, any worker's request stops all, through a collective."""
            if not agree:
                return stop_flag.read_value()
            votes = strategy.run(lambda: tf.cast(stop_flag.read_value(), tf.int32))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None) > 0

        def forward_backward(features, key, totals):
            with tf.GradientTape() as tape:
                loss, metrics = job.loss(model, features, training=True, seed=key, totals=totals)
            # Dense gradients (embedding lookups give IndexedSlices): the update touches every
            # row anyway (weight decay), and XLA wants plain tensors out of a compiled function.
            grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, train_vars)]
            return loss, [metrics[k] for k in job.metric_names], grads

        if xla and not whole_step:
            forward_backward = tf.function(forward_backward, jit_compile=True)

        def step_fn(features):
            ctx = tf.distribute.get_replica_context()
            # replica r holds examples [r * b, (r + 1) * b) of the global batch (jobs.data)
            key = dropout_seed(seed, optimizer.step.read_value(),
                               ctx.replica_id_in_sync_group * per_replica)
            # the denominators of the global means (outside XLA: a collective cannot be compiled)
            totals = loss_totals(ctx, job.loss_counts(features), normalization)
            loss, metrics, grads = forward_backward(features, key, totals)
            optimizer.apply_gradients(grads)  # sums the replicas' shares: the global gradient
            return loss, metrics

        if whole_step:
            step_fn = tf.function(step_fn, jit_compile=True)

        def total(value):  # the replicas' shares of a global mean add up to it
            return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

        @tf.function
        def train_loop(iterator, steps):
            loss_sum = tf.constant(0.0)
            metric_sums = [tf.constant(0.0) for _ in range(num_metrics)]
            done = tf.constant(0)
            for _ in tf.range(steps):
                if stop_requested():
                    break
                loss, metrics = strategy.run(step_fn, args=(next(iterator),))
                loss_sum += total(loss)
                metric_sums = [s + total(m) for s, m in zip(metric_sums, metrics)]
                done += 1
                position.assign_add(global_batch)
                loop_steps.assign_add(1)
            return loss_sum, metric_sums, done

        return train_loop

    # ---------------------------------------------------------------------------------------
    # Evaluation helper for jobs

    def evaluate_sums(self, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
                      sums_fn: Callable[[object, dict], dict[str, tf.Tensor]],
                      keys: Sequence[str], num_batches: int) -> dict[str, float]:
        """Sum ``sums_fn(model, batch)`` (scalars named ``keys``) over ``num_batches`` global
        batches, across replicas, in one device loop: one host call for the whole evaluation,
        no host sync per batch. Jobs pad their eval set to whole batches with weight-0 examples
        so that shapes stay static on TPUs and no example is dropped. The compiled loop is kept
        per ``sums_fn`` (pass a bound method, not a new closure, to evaluate every
        ``eval_every_steps`` without tracing and compiling again)."""
        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
        key = (sums_fn, tuple(keys), num_batches)
        if key not in self.eval_loops:
            self.eval_loops[key] = self.make_eval_loop(sums_fn, keys, num_batches)
        return {k: float(v.numpy()) for k, v in self.eval_loops[key](iter(dataset)).items()}

    def predict_rows(self, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
                     outputs_fn: Callable[[object, dict], Sequence[tf.Tensor]],
                     dtypes: Sequence[tf.DType], num_batches: int) -> list:
        """The per-example outputs of ``outputs_fn(model, batch)`` (tensors of ``dtypes`` with a
        leading batch axis) over ``num_batches`` global batches, gathered across replicas and hosts in global
        batch order, in one device loop; numpy arrays, one per output. Jobs pad their input to
        whole batches and return an example index (-1 for padding) among the outputs, so every
        example comes back exactly once however the batch splits over the slice."""
        key = ("predict", outputs_fn, num_batches)
        if key not in self.eval_loops:
            model, strategy = self.model, self.strategy

            def replica_step(batch):
                return tuple(outputs_fn(model, batch))

            if self.device.xla:
                replica_step = tf.function(replica_step, jit_compile=True)

            @tf.function
            def predict_loop(iterator):
                arrays = [tf.TensorArray(dtype, size=num_batches) for dtype in dtypes]
                for i in tf.range(num_batches):
                    outputs = strategy.run(replica_step, args=(next(iterator),))
                    arrays = [ta.write(i, strategy.gather(v, axis=0))
                              for ta, v in zip(arrays, outputs)]
                return [ta.concat() for ta in arrays]

            self.eval_loops[key] = predict_loop
        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)
        return [t.numpy() for t in self.eval_loops[key](iter(dataset))]

    def make_eval_loop(self, sums_fn: Callable[[object, dict], dict[str, tf.Tensor]],
                       keys: Sequence[str], num_batches: int):
        """``eval_loop(iterator)``: the sums of :meth:`evaluate_sums` in one ``tf.function``."""
        model, strategy = self.model, self.strategy
        keys = list(keys)

        def replica_sums(batch):
            return sums_fn(model, batch)

        if self.device.xla:
            replica_sums = tf.function(replica_sums, jit_compile=True)

        @tf.function
        def eval_loop(iterator):
            totals = {k: tf.constant(0.0) for k in keys}
            for _ in tf.range(num_batches):
                per_replica = strategy.run(replica_sums, args=(next(iterator),))
                totals = {k: totals[k] + strategy.reduce(tf.distribute.ReduceOp.SUM,
                                                         per_replica[k], axis=None)
                          for k in keys}
            return totals

        return eval_loop
