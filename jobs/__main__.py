"""``python -m jobs run SPEC [--set key=value ...]``: run a job spec in this process.

Exit codes: 0 finished; 42 preempted or lost infrastructure (safe to retry from the last
checkpoint); 2 a spec that cannot run (one line naming the fix, before TensorFlow loads);
anything else a job error. ``tpuctl job run`` validates the spec the same way and then
``exec``s this module, so the control plane never imports TensorFlow.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import exitcodes
from .errors import ArgumentParser


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m jobs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job spec here, on this machine's TPU, GPUs or CPU")
    run.add_argument("spec", help="job spec YAML (see templates/bert-*.yaml)")
    run.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                     help="override a spec value (repeatable)")
    run.add_argument("--verbose", action="store_true", help="show TensorFlow's C++ start-up logs, and the traceback of an error in your code")
    args = parser.parse_args(argv)

    from .errors import report
    from .spec.base import SpecError
    from .spec.loading import load
    from .usercode import search_path

    # a job: keras module is looked up beside the spec, here, then on PYTHONPATH (the code
    # directory a run stages), and read before TensorFlow loads (jobs.usercode)
    search = search_path(args.spec)
    try:
        spec = load(args.spec, args.sets)
        spec.check_code(search)
    except SpecError as exc:
        report(exc)
        return exitcodes.BAD_SPEC

    if getattr(spec, "job", None) == "command":      # any program of the user's: no TensorFlow here
        return run_command(spec, args.spec)
    # Keras 3 reads its backend once, when it is first imported: decide it before anything imports it
    try:
        backend = choose_backend(spec.backend)
    except SpecError as exc:
        report(exc)
        return exitcodes.BAD_SPEC
    print(f"jobs: backend {backend.name} ({backend.reason})", flush=True)
    if backend.name == "jax" and getattr(spec, "job", None) == "keras":
        # a module written with tf.* ops: one line naming its first tf. call, before TF and JAX load
        from .keras.tfops import refuse_tf_ops
        from .usercode import locate

        problem = refuse_tf_ops(locate(spec.module, search))
        if problem:
            report(problem)
            return exitcodes.BAD_SPEC
    # TensorFlow's C++ start-up chatter hides the lines that matter; keep warnings and errors.
    from .quiet import quiet_tensorflow

    quiet_tensorflow(args.verbose, keep_warnings=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from .runner.registry import run_spec

    return run_spec(spec, verbose=args.verbose, search=search, backend=backend.name)


def choose_backend(requested: str) -> Any:
    """The spec's backend here (:func:`jobs.spec.backends.for_job`: the spec, ``TPUCTL_BACKEND``,
    the TPU), set as ``KERAS_BACKEND``; on JAX, ``TPUCTL_CPU_REPLICAS`` virtual CPU devices in
    ``XLA_FLAGS``, as the TensorFlow runner splits the CPU. Raises SpecError."""
    from .spec.backends import for_job, xla_flags
    from .spec.base import SpecError

    choice = for_job(requested, os.environ)
    loaded = sys.modules.get("keras")
    if loaded is not None and loaded.backend.backend() != choice.name:   # a caller's own process
        raise SpecError(f"Keras is already loaded on {loaded.backend.backend()} in this process and "
                        f"picks its backend once; run the {choice.name} job in a new process "
                        f"(python -m jobs run)")
    if choice.name == "jax":
        flags = xla_flags(os.environ.get("XLA_FLAGS"), os.environ.get("TPUCTL_CPU_REPLICAS"))
        if flags is not None:
            os.environ["XLA_FLAGS"] = flags
    os.environ["KERAS_BACKEND"] = choice.name
    return choice


def run_command(spec: Any, spec_path: str) -> int:
    """``tpuctl job run`` / ``python -m jobs run`` of a ``job: command`` spec: its program, in the
    spec's directory, as the one worker of a first attempt (the contract's environment, no
    progress file), with SIGTERM passed on by the terminal's process group; its exit code."""
    import json
    import subprocess

    from .command import COORDINATOR_PORT

    env = dict(os.environ)
    model_dir = spec.model_dir if "://" in spec.model_dir else os.path.abspath(spec.model_dir)  # the program runs elsewhere
    if "://" in model_dir:       # nothing here keeps a local directory in a bucket: a private one, said
        import tempfile

        checkpoint_dir = tempfile.mkdtemp(prefix="tpuctl-checkpoint-dir-")
        print(f"tpuctl job run: TPUCTL_CHECKPOINT_DIR is {checkpoint_dir}, kept on this machine only "
              f"(tpuctl train keeps it in the run's bucket)", file=sys.stderr)
    else:                        # where tpuctl train keeps worker 0's part (provision/host/checkpoint_dir.py)
        checkpoint_dir = os.path.join(model_dir, "checkpoint-dir", "worker-0")
        os.makedirs(checkpoint_dir, mode=0o700, exist_ok=True)
    python_dir = os.path.dirname(sys.executable)   # `python` in a shell string: this Python, as on a host
    env["PATH"] = os.pathsep.join(p for p in (python_dir, env.get("PATH", "")) if p)
    env.update({"TPUCTL_MODEL_DIR": model_dir, "TPUCTL_CHECKPOINT_DIR": checkpoint_dir,
                "TPUCTL_RUN": env.get("TPUCTL_RUN", "here"),
                "TPUCTL_ATTEMPT": "0", "TPUCTL_WORKER_INDEX": "0", "TPUCTL_NUM_WORKERS": "1",
                "TPUCTL_COORDINATOR": env.get("TPUCTL_COORDINATOR", f"127.0.0.1:{COORDINATOR_PORT}"),
                "TPUCTL_PARAMS": json.dumps(spec.params, sort_keys=True),
                "TPUCTL_EVAL_EVERY_STEPS": str(spec.eval_every_steps)})
    argv = spec.argv()
    cwd = os.path.dirname(os.path.abspath(spec_path))
    if argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]       # the Python that runs this, as on a host
    try:
        return subprocess.call(argv, cwd=cwd, env=env)
    except OSError as exc:
        from .errors import report

        report(f"cannot start {argv[0]}: {exc.strerror or exc}; the command's program must be in {cwd} or on PATH")
        return 2


if __name__ == "__main__":
    sys.exit(main())
