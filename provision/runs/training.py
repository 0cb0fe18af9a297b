"""Starting a run: resolve the job spec, stage what the hosts need, hand it to a supervisor.

``tpuctl train`` does, in order and before anything is billed beyond the cluster that exists:
check the cluster and the spec (one-line errors, exit 2), give the run a stable id, stage the
resolved spec, the user's code and the exact tpuctl (a wheel) into the run directory, write the
run record, then supervise in the foreground or hand the run to the host (``--detach``).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..basics import private
from ..basics.config import Target, home
from ..basics.digest import sha256_file
from ..basics.errors import NotFound, UsageError
from ..cloud.base import DEFAULT_MACHINE_TYPE, Arch, ClusterSpec, Provider, TpuNode
from ..staging.selection import Selection
from ..staging.selection import select as select_code
from . import requirements
from . import store as runs
from .store import RunRecord, RunStore

PATH_KEYS_HINT = "stage it with tpuctl stage PATH gs://BUCKET/PATH and pass the gs:// path"


@dataclass
class Prepared:
    record: RunRecord
    spec_yaml: bytes
    cluster: ClusterSpec
    code: Selection | None = None          # --workdir: the files staged (provision.staging.selection)
    # the workdir archive's sha256 when it is already in the bucket (a sweep's trials share one)
    workdir_digest: str | None = None
    needs: Any = None                      # what the run's environment installs (runs.requirements)
    backend: Any = None                    # the built-in job's Keras backend (jobs.spec.backends.Choice)
    notify: bytes | None = None            # notify.json: the channels' references (provision.notify)


def local_path_for(url: str) -> str:
    """A gs:// URL as the local provider stores it: a bucket directory under TPUCTL_HOME."""
    from ..basics.validate import bucket_url
    from ..cloud.storage import local_buckets_dir

    u = bucket_url(url)
    return str(local_buckets_dir() / u.bucket / u.prefix) if u.prefix else str(local_buckets_dir() / u.bucket)


def as_typed(text: str) -> str:
    """``text`` with the local provider's bucket directories written back as the gs:// URLs the user
    typed (``.../local/buckets/my-bucket/bert`` -> ``gs://my-bucket/bert``), for messages."""
    from ..cloud.storage import local_buckets_dir

    return text.replace(f"{local_buckets_dir()}/", "gs://")


def _local_path_value(value: str) -> bool:
    """A string that names files on this machine (an existing path, or a glob that matches)."""
    if "\n" in value or not ("/" in value or "." in value):
        return False
    if any(ch in value for ch in "*?["):
        return bool(glob.glob(value))
    return os.path.exists(value)


def localize_spec(data: dict[str, Any], provider: str, allow_local: bool = False) -> dict[str, Any]:
    """Make every path in a spec valid where the job will run.

    Local provider: gs:// paths become bucket directories, relative paths become absolute (the
    job runs in another directory). GCP: a path that exists only on this machine is an error.
    """
    from jobs.spec import CODE_KEYS

    out = dict(data)
    for key, value in data.items():
        if not isinstance(value, str) or not value or key in CODE_KEYS or "." in str(key):
            continue  # user code is found in the workdir; params.NAME is the user's value
        if value.startswith("gs://"):
            if provider == "local":
                out[key] = local_path_for(value)
            continue
        if not _local_path_value(value):
            continue
        if provider != "local":
            if allow_local:      # a filesystem the hosts mount at the same path (NFS, Filestore)
                out[key] = os.path.abspath(value)
                continue
            raise UsageError(f"{key} is a path on this machine ({value}); the TPU host cannot read it",
                             hint=PATH_KEYS_HINT + " (or pass --allow-local-paths if the hosts mount it too)")
        out[key] = os.path.join(os.path.abspath(os.path.dirname(value) or "."), os.path.basename(value))
    return out


def default_workdir(job_spec: str, workdir: str | None) -> str | None:
    """The workdir of a run: ``--workdir DIR``, else the spec's directory for a ``job: command``
    spec (its program is there); the other jobs have none unless one is given."""
    if workdir is not None:
        return workdir
    try:
        from jobs import spec as jobspec

        job = jobspec.read_yaml(job_spec).get("job")
    except Exception:  # noqa: BLE001 - the spec's own problem is reported when it is loaded
        return None
    return os.path.dirname(os.path.abspath(job_spec)) if job == "command" else None


LEFT_OUT_SHOWN = 5      # the workdir's left-out files train names, before "and N more"
LEFT_OUT_KEPT = 50      # ... and keeps in the run record, to name one that a failure mentions


def left_out_lines(skipped: Any) -> list[str]:
    """What the workdir's rules left out, the first few by name, and how to bring a file back: a
    program that fails for a data file its own ``.gitignore`` excludes is the usual first run."""
    if not skipped:
        return []
    shown = ", ".join(f"{s.path} ({s.why})" for s in skipped[:LEFT_OUT_SHOWN])
    more = f" and {len(skipped) - LEFT_OUT_SHOWN} more (train --dry-run lists them)" if \
        len(skipped) > LEFT_OUT_SHOWN else ""
    lines = [f"left out of the workdir: {shown}{more}"]
    if any(s.why.startswith("ignored by") for s in skipped):
        lines.append("  to ship an ignored file, add a line !PATH to the workdir's .tpuctlignore (it is read after "
                     ".gitignore; its rules win)")
    return lines


def resolve_spec(job_spec: str, sets: list[tuple[str, str]], model_dir_default: str, provider: str,
                 allow_local: bool = False, code: str | None = None, check_code: bool = True) -> dict[str, Any]:
    """Load and check the job spec and the user code it names (jobs.spec and jobs.usercode need
    no TensorFlow); returns the resolved mapping. ``check_code`` false: the code is a workdir
    already staged and checked (a sweep's trials)."""
    try:
        from jobs import spec as jobspec
    except ImportError as exc:  # pragma: no cover - jobs ships in the same distribution
        raise UsageError(f"the job side is not installed ({exc})", hint="pip install 'tpuctl[train]'") from None
    try:
        raw = jobspec.read_yaml(job_spec)     # bounded in size, depth and aliases
    except jobspec.SpecError as exc:
        raise UsageError(str(exc)) from None
    overrides = list(sets)
    if not raw.get("model_dir") and not any(k == "model_dir" for k, _ in overrides):
        overrides.append(("model_dir", model_dir_default))
    # the spec loader checks local files exist: give it the paths as the job will see them
    localized_raw = localize_spec(raw, provider, allow_local)
    localized_sets = [(k, localize_spec({k: v}, provider, allow_local)[k]) for k, v in overrides]
    try:
        spec = jobspec.from_dict(localized_raw, localized_sets, source=job_spec)
        if check_code:
            check_user_code(spec, job_spec, provider, code)
    except jobspec.SpecError as exc:
        raise UsageError(as_typed(str(exc))) from None
    return spec.to_dict()


def check_user_code(spec: Any, job_spec: str, provider: str, code: str | None) -> None:
    """Read the user code a spec names without running it: ``job: command``'s program and
    requirements file in the workdir; ``job: keras``'s module in the workdir (``--workdir DIR``:
    staged with the run, first on the job's PYTHONPATH), or without one, on the local provider,
    beside the spec or in the current directory (a file, which the job on this machine then reads
    by its absolute path). Raises jobs.spec.SpecError."""
    from jobs.usercode import is_file

    if getattr(spec, "job", None) == "command":
        spec.check_code([code] if code else [])
        return
    module = getattr(spec, "module", None)
    search = [code] if code else []
    if not code and provider == "local" and module and is_file(module):
        search = [os.path.dirname(os.path.abspath(job_spec)), os.getcwd()]
    path = spec.check_code(search)
    if path and not code and is_file(module):
        spec.module = os.path.abspath(path)


def prepare(provider: Provider, target: Target, cluster: ClusterSpec, tpu: TpuNode, *, job_spec: str,
            sets: list[tuple[str, str]], bucket: str, code: str | None, max_preemptions: int | None,
            max_failures: int, allow_local: bool = False, workdir_digest: str | None = None,
            budget_usd: float | None = None, deadline: str | None = None) -> Prepared:
    """Check everything and make the run's record and resolved spec; nothing is staged yet.
    ``code``: the workdir (``--workdir DIR``; :func:`default_workdir` applies), packed when
    staged; ``workdir_digest``: instead, an archive already in the bucket (a sweep's)."""
    import yaml

    run_id = runs.new_run_id(cluster.name)
    model_default = f"{bucket.rstrip('/')}/{runs.RUNS_PREFIX}/{run_id}/model"
    if target.provider == "local":
        model_default = local_path_for(model_default)
    if workdir_digest is None:
        code = default_workdir(job_spec, code)
    if code and not os.path.isdir(code):
        raise UsageError(f"--workdir {code} is not a directory", hint="pass the directory of your code")
    resolved = resolve_spec(job_spec, sets, model_default, target.provider, allow_local, code,
                            check_code=workdir_digest is None)
    from .launch import check_batches

    # before anything is staged or started: the TPU's type, and every type a recreate may land on
    for name in dict.fromkeys([tpu.accelerator_type, *cluster.accelerator_types]):
        try:
            check_batches(resolved, name)
        except UsageError as exc:
            if name != tpu.accelerator_type:
                exc.message += f" (cluster {cluster.name} may be recreated as a {name}: its --accelerator-type " \
                               f"lists {','.join(cluster.accelerator_types)})"
            raise
    if target.provider == "local":
        # an emulated slice runs only in a network of its own, or where the user accepted the exposure
        from .executors import private_slice_network

        for name in dict.fromkeys([tpu.accelerator_type, *cluster.accelerator_types]):
            private_slice_network(name)
    selection = select_code(code) if code and workdir_digest is None else None
    if selection is not None:
        from ..staging.workdir import check_size

        check_size(selection)
    rec = RunRecord(run_id=run_id, cluster=cluster.name, provider=target.provider, project=target.project or "",
                    zone=tpu.zone, bucket=bucket, model_dir=str(resolved["model_dir"]),
                    num_train_steps=int(resolved["num_train_steps"]),
                    save_checkpoints_steps=int(resolved["save_checkpoints_steps"]), job=str(resolved["job"]),
                    max_preemptions=max_preemptions, max_failures=max_failures,
                    code=selection is not None or workdir_digest is not None,
                    hosts=str(resolved["hosts"]) if resolved.get("job") == "command" else None)
    backend = None if resolved.get("job") == "command" else \
        choose_backend(resolved, target.provider, cluster, tpu)
    rec.backend = backend.name if backend is not None else None
    if backend is not None and backend.name == "jax" and resolved.get("job") == "keras" and workdir_digest is None:
        refuse_tf_ops(str(resolved["module"]), code)
    # its caps (checked), price, work per step and estimate (provision.runs.forecast)
    from .forecast import attach

    attach(rec, resolved, target, tpu, provider.price_book(), budget_usd=budget_usd, deadline=deadline,
           now=rec.created_at)
    spec_yaml = yaml.safe_dump(resolved, sort_keys=True).encode()
    host = requirements.host_target(tpu.api, tpu.accelerator_type)
    if resolved.get("job") == "command":
        needs = program_needs(resolved, code, target.provider, tpu.version, host)
    elif backend is not None and backend.name == "jax":
        needs = requirements.jax_backend(target.provider, host)
    else:
        needs = None              # TensorFlow: the image's
    return Prepared(record=rec, spec_yaml=spec_yaml, cluster=cluster, code=selection, workdir_digest=workdir_digest,
                    needs=needs, backend=backend)


def refuse_tf_ops(module: str, code: str | None) -> None:
    """A ``job: keras`` module on the JAX backend: refused (one line, exit 2, before anything is
    staged or rented) where the code the device runs calls TensorFlow (:mod:`jobs.keras.tfops`,
    which reads the file without importing it)."""
    from jobs.errors import ConfigError
    from jobs.keras.tfops import refuse_tf_ops as problem_of
    from jobs.usercode import is_file, locate

    try:
        path = module if is_file(module) and os.path.isabs(module) else locate(module, [code] if code else [])
    except (ConfigError, OSError):
        return                      # where the module is was checked with the spec: nothing to add here
    problem = problem_of(path)
    if problem:
        raise UsageError(problem)   # the line names the fix: the keras.ops call, or backend tensorflow


def choose_backend(resolved: dict[str, Any], provider: str, cluster: ClusterSpec, tpu: TpuNode) -> Any:
    """The Keras backend of a built-in job on this cluster (:func:`jobs.spec.backends.resolve`): for
    its TPU, and for every type a recreate may land on (one backend for the run: jax where any of them
    has no TensorFlow TPU runtime); on the local provider, for this machine (no TPU). UsageError (exit 2,
    before anything is staged) for a backend that cannot run there, or that this machine cannot run."""
    import importlib.util

    from jobs.spec import SpecError
    from jobs.spec.backends import resolve

    requested = resolved.get("backend")
    try:
        if provider == "local":
            choice = resolve(requested, None)
            if choice.name == "jax":
                missing = [m for m in ("jax", "keras") if importlib.util.find_spec(m) is None]
                if missing:
                    raise UsageError(f"backend jax runs the job with this machine's packages, and "
                                     f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed",
                                     hint="pip install 'tpuctl[jax]' (or --set backend=tensorflow)")
            return choice
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    types = list(dict.fromkeys([tpu.accelerator_type, *cluster.accelerator_types]))
    choices = []
    for name in types:
        try:
            choices.append(resolve(requested, name))
        except SpecError as exc:
            recreate = "" if name == tpu.accelerator_type else \
                f" (cluster {cluster.name} may be recreated as a {name}: its --accelerator-type lists " \
                f"{','.join(cluster.accelerator_types)})"
            raise UsageError(str(exc) + recreate) from None
    choice = choices[0]
    jax_types = [t for t, c in zip(types, choices) if c.name == "jax"]
    if choice.name == "tensorflow" and jax_types:      # auto, and a recreate may land where TensorFlow cannot run
        from jobs.spec.backends import Choice

        choice = Choice("jax", f"auto: cluster {cluster.name} may be recreated as a {jax_types[0]}, "
                               f"whose images have no TensorFlow TPU runtime")
    if choice.name == "jax":
        if tpu.arch == Arch.NODE:
            raise UsageError("backend jax cannot run on a TPU Node (JAX drives the chips of a TPU VM only)",
                             hint="use --set backend=tensorflow, or a TPU VM cluster (tpuctl up without --arch node)")
        for name in types:
            problem = requirements.jax_backend_problem(requirements.host_target(tpu.api, name), f"a {name} host")
            if problem:
                raise UsageError(problem, hint="use --set backend=tensorflow (the image's TensorFlow), or a TPU7x "
                                               "slice on Compute Engine (Ubuntu 24.04, Python 3.12)")
    return choice


def requirement_lines(requirements: Any, workdir: str | None) -> list[str]:
    """A job: command spec's ``requirements``: its list, or the lines of its file in the workdir."""
    if isinstance(requirements, list):
        return [str(r) for r in requirements]
    if isinstance(requirements, str) and workdir:
        try:
            with open(os.path.join(workdir, requirements), encoding="utf-8") as fh:
                return fh.read(1 << 20).splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the requirements file {requirements} of the workdir ({exc})",
                             hint="make it a readable UTF-8 requirements file") from None
    return []


def program_needs(resolved: dict[str, Any], workdir: str | None, provider: str, runtime: str | None,
                  host: tuple[str, str] | None = None) -> Any:
    """What a job: command run installs on its hosts (``host``: their Python and platform), and what
    train says about its frameworks."""
    from importlib import metadata

    from .requirements import needs

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    local = {"tensorflow": version("tensorflow"), "jax": version("jax")} if provider == "local" else None
    return needs(requirement_lines(resolved.get("requirements"), workdir), tensorflow=resolved.get("tensorflow"),
                 jax=resolved.get("jax"), provider=provider, runtime=runtime, local_versions=local,
                 **({"host": host} if host else {}))


def stage_run(store: RunStore, prep: Prepared, log: Any, provider: Provider) -> dict[str, str | None]:
    """Pin the run on the cluster's hosts, then put the resolved spec, the user's code and the
    exact tpuctl into the run directory; returns the pin entry (provision.runs.pins).

    The pin (the run id and the sha256 of each thing staged) goes into the hosts' metadata first,
    so a host that sees the objects already finds them pinned; a host runs nothing else."""
    import json

    from ..staging import workdir
    from . import pinning, pins, wheelhouse
    from .pins import sha256
    from .wheel import build_wheel

    rec = prep.record
    # the requirements resolve first: pip refusing them is the user's mistake, before anything is pinned or staged
    wheels = wheelhouse.build(prep.needs.lines, rec.provider, log, host=prep.needs.host) \
        if prep.needs and prep.needs.lines else None
    wheel = build_wheel(home() / "wheels")
    # exactly what --dry-run listed and the pin covers: no dot path, no symlink, nothing ignored
    packed = workdir.pack(prep.code) if prep.code is not None else None
    digest = packed.digest if packed is not None else prep.workdir_digest
    cluster_spec = (json.dumps(prep.cluster.to_dict(), indent=1, sort_keys=True, default=str) + "\n").encode()
    requirements = pins.manifest((name, sha) for name, _p, sha in wheels) if wheels is not None else None
    entry = {"cluster": rec.cluster, "wheel": sha256_file(wheel), "spec": sha256(prep.spec_yaml),
             "workdir": digest, "requirements": requirements, "cluster_spec": sha256(cluster_spec),
             # where its attempts run and listen, as run.json says it: a supervisor plans from no other
             "placement": pins.placement_digest(rec)}
    if prep.notify is not None:
        # which channels a supervisor on the host may use: pinned, so no bucket writer picks them
        entry["notify"] = sha256(prep.notify)
    pinned = pinning.pin(provider, rec.cluster, "run", rec.run_id, entry)
    if pinned:
        log(f"pinned run {rec.run_id} on {', '.join(pinned)}")
    store.bucket.write_bytes(f"{store.prefix}/spec.yaml", prep.spec_yaml)
    if prep.notify is not None:
        store.bucket.write_bytes(f"{store.prefix}/notify.json", prep.notify)
    if wheels is not None:
        wheelhouse.stage(store.bucket, wheels)
        log(f"staged the run's requirements: {len(wheels)} wheel(s), manifest sha256 {requirements[:12]}")
    if packed is not None and prep.code is not None:
        sent = stage_workdir(store.bucket, packed)
        for line in left_out_lines(prep.code.skipped):
            log(line)
        log(f"{'staged' if sent else 'already staged'} the workdir {prep.code.root}: {packed.files} files, "
            f"{packed.size / (1 << 20):.1f} MiB, sha256 {packed.digest[:12]}")
        rec.left_out = [{"path": s.path, "why": s.why} for s in prep.code.skipped[:LEFT_OUT_KEPT]]
    wheel_object = runs.wheel_object(store.prefix, wheel.name)
    store.bucket.upload_file(wheel, wheel_object)
    rec.wheel = f"{rec.bucket.rstrip('/')}/{wheel_object}"
    # what a host's bootstrap installs before it runs the agent (templates/host-startup.sh)
    store.write_json(runs.agent_name(rec.cluster), {"wheel_object": wheel_object, "run_id": rec.run_id})
    store.bucket.write_bytes(runs.cluster_spec_name(rec.cluster), cluster_spec)
    store.save(rec)
    store.event("created", cluster=rec.cluster, zone=rec.zone, job=rec.job, model_dir=rec.model_dir,
                num_train_steps=rec.num_train_steps, wheel=wheel.name)
    runs.remember(rec, pin=entry)
    return entry


def stage_workdir(bucket: Any, packed: Any) -> bool:
    """Put the workdir archive in the bucket under its sha256, unless it is there already (the
    same code staged before, byte for byte): True when it was sent. An object of that name with
    other bytes (hosts would refuse it: its digest is not the pinned one) is replaced, even one
    with the same size and CRC32C, which a bucket writer can forge
    (:func:`provision.cloud.storage.addressed.holds` compares sha256s)."""
    from ..cloud.storage import addressed

    if addressed.holds(bucket, packed.object_name, packed.digest, len(packed.data)):
        return False
    addressed.wrote(bucket, packed.object_name, packed.digest, bucket.write_bytes(packed.object_name, packed.data))
    return True


def attempt_command(rec: RunRecord, n: int, tpu: TpuNode) -> dict[str, Any]:
    """What the hosts run for attempt ``n``: the staged spec, and per worker whether it runs the
    job and with which environment (:mod:`provision.runs.launch`)."""
    from .launch import plan

    hosts = tpu.hosts or 1
    program = rec.hosts is not None      # a job: command program: its own ports and coordinator
    launch = plan(provider=rec.provider, arch=tpu.arch, accelerator_type=tpu.accelerator_type,
                  tpu_name=tpu.name, zone=tpu.zone, project=rec.project, runtime=tpu.version,
                  device=tpu.device, endpoints=tpu.endpoints, program_hosts=rec.hosts,
                  backend=rec.backend if rec.backend in ("jax", "tensorflow") else None,
                  ports=free_ports(hosts) if rec.provider == "local" and (hosts > 1 or program) else ())
    first = launch.workers[0]
    return {"env": dict(first.env), "code": rec.code, "attempt": n, **launch.to_command()}


def free_ports(count: int) -> list[int]:
    """Ports free on this machine now, for the TF_CONFIG of an emulated slice's workers."""
    import contextlib
    import socket

    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def open_store(entry_or_rec: Any, target: Target) -> RunStore:
    from ..cloud.storage import open_bucket

    bucket = entry_or_rec["bucket"] if isinstance(entry_or_rec, dict) else entry_or_rec.bucket
    run_id = entry_or_rec["run_id"] if isinstance(entry_or_rec, dict) else entry_or_rec.run_id
    return RunStore(open_bucket(bucket, target), run_id)


def make_executor(provider: Provider, store: RunStore, arch: Arch) -> Any:
    from .executors import BucketExecutor, LocalExecutor

    if provider.name == "local":
        return LocalExecutor(provider, store)
    return BucketExecutor(store, arch)


def cluster_spec_for(provider: Provider, name: str, tpu: TpuNode | None, bucket: str | None = None,
                     spec_digest: str | None = None) -> ClusterSpec:
    """The cluster's spec: this machine's cache, else the copy a run saved in the bucket, else the TPU's.

    ``bucket`` (the run's) is recorded in the spec, so a TPU recreated after a preemption carries
    it in its metadata and its hosts find their work. ``spec_digest``: the bucket's copy is used
    only if its sha256 is this one (the run's pin, on a host: the spec says which service account
    and zones a recreated TPU gets).
    """
    import dataclasses

    from ..cluster import cached_spec

    cached = cached_spec(provider, name) or (_bucket_spec(provider, name, bucket, spec_digest) if bucket else None)
    if cached:
        spec = ClusterSpec.from_dict(cached)
        return dataclasses.replace(spec, bucket=bucket) if bucket else spec
    if tpu is None:
        raise NotFound(f"cluster {name} has no TPU", hint=f"run tpuctl up {name} first")
    return ClusterSpec(name=name, accelerator_type=tpu.accelerator_type, zones=(tpu.zone,), provider=provider.name,
                       project=provider.project, arch=tpu.arch, preemptible=tpu.preemptible, spot=tpu.spot,
                       machine_type=None if tpu.arch == Arch.VM else DEFAULT_MACHINE_TYPE,
                       runtime_version=tpu.version if tpu.arch == Arch.VM else None,
                       tensorflow_version=tpu.version if tpu.arch == Arch.NODE else None,
                       cidr=None, network=tpu.network or "default", bucket=bucket,
                       labels={k: v for k, v in tpu.labels.items() if not k.startswith("tpuctl-")
                               or k == "tpuctl-keep"},
                       api=tpu.api, capacity=("flex-start",) if tpu.capacity == "flex-start" else ())


def _bucket_spec(provider: Provider, name: str, bucket: str, digest: str | None = None) -> dict[str, Any] | None:
    """The spec a run saved beside itself (a host VM has no local cache of what the laptop made)."""
    import json

    from ..basics.errors import TpuctlError
    from ..cloud.storage import open_bucket
    from .pins import sha256

    try:
        b = open_bucket(bucket, Target(provider=provider.name, project=provider.project, zone=None))
        raw = b.read_bytes(runs.cluster_spec_name(name))
        data = json.loads(raw)
    except (TpuctlError, ValueError):
        return None
    if digest is not None and sha256(raw) != digest:
        raise UsageError(f"the spec of cluster {name} in {bucket} is not the one pinned with the run "
                         f"(sha256 {sha256(raw)[:12]}, pinned {digest[:12]}): not supervising from it",
                         hint=f"start the run again with tpuctl train {name}")
    return data if isinstance(data, dict) else None


def hand_over(provider: Provider, target: Target, store: RunStore, rec: RunRecord, cluster: ClusterSpec) -> str:
    """Let the host supervise: on the local provider a detached process here, on GCP the host VM's agent."""
    if provider.name == "local":
        log_path = home() / "runs" / f"{rec.run_id}.supervisor.log"
        private.make_dirs(log_path.parent)
        with open(log_path, "ab", opener=private.opener) as out:
            subprocess.Popen([sys.executable, "-m", "provision", "supervise", rec.run_id, "--where", "host",
                              "--provider", "local"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, env=dict(os.environ))
        return f"a detached supervisor on this machine (log: {log_path})"
    if not cluster.machine_type:
        raise UsageError("this cluster has no host VM to supervise the run",
                         hint=f"create it with a host VM (tpuctl up {cluster.name} without --no-vm), or train in "
                              f"the foreground")
    name = runs.current_name(rec.cluster)
    cur = store.read_json(name) or {}
    cur.update({"supervise_on_host": rec.run_id, "time": time.time()})
    store.write_current(rec.cluster, cur)
    return f"the host VM {cluster.name}'s agent"
