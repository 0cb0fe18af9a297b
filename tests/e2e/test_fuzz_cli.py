"""Fuzz tpuctl's command line: random argv from the real command and option vocabulary, with
good values, hostile values and garbage (the local provider by default; ``--project tpuctl-test``
reaches the fake cloud and fake-gcs-server). Twice: through the installed ``tpuctl`` entry point as
a subprocess, as a user runs it (the console script calls ``main()`` without argv), and in-process
through ``main(argv)``, which is fast enough for long campaigns.

Invariants, for every argv:
- the exit code is 0, 1 or 2; never a traceback or an "internal error";
- a non-zero exit prints exactly one ``tpuctl: error:`` line (click's own parse errors included:
  tpuctl prints them in that same form), and no click ``Error:`` block;
- with ``--json`` in effect, a failure still leaves exactly one JSON document on stdout;
- exit 2 created nothing: no local record, bucket file or run, no create call to the fake cloud;
- no process is left behind (a fuzzed ``train`` with a valid spec runs with ``--dry-run``);
- no injected command ran.

``TPUCTL_FUZZ_EXAMPLES=2000`` runs a longer campaign."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.cli import cli
from provision.commands.common import json_mode
from tests.conftest import run_tpuctl_process

EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_EXAMPLES", "120"))
# A subprocess costs an interpreter start (and, on the fake cloud, the client libraries' imports).
PROCESS_EXAMPLES = int(os.environ.get("TPUCTL_FUZZ_PROCESS_EXAMPLES", "60"))
CREATES = ("compute.instances.insert", "tpu.v1.nodes.create", "tpu.v2.nodes.create", "tpu.v2.queuedResources.create",
           "compute.instances.setMetadata", "tpu.v2.nodes.patch")


def _commands() -> dict[tuple[str, ...], click.Command]:
    out: dict[tuple[str, ...], click.Command] = {}
    for name, cmd in cli.commands.items():
        if name in ("agent", "ui"):       # the host daemon, the page's server: a success never returns
            continue
        if isinstance(cmd, click.Group):
            for sub, subcmd in cmd.commands.items():
                out[(name, sub)] = subcmd
        else:
            out[(name,)] = cmd
    return out


COMMANDS = _commands()
VALUE_OPTIONS = {o for c in COMMANDS.values() for p in c.params if isinstance(p, click.Option) and not p.is_flag
                 for o in p.opts}
ALL_OPTIONS = sorted({o for c in COMMANDS.values() for p in c.params if isinstance(p, click.Option)
                      for o in (*p.opts, *p.secondary_opts)})


def _children() -> set[int]:
    """Live processes this test started: its children, and whatever a ``tpuctl`` subprocess left
    running (orphans are not our children, but they inherited this test's TPUCTL_HOME)."""
    me = str(os.getpid())
    marker = f"TPUCTL_HOME={os.environ['TPUCTL_HOME']}".encode() + b"\0"
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        if stat.parent.name == me:
            continue
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            if fields[1] == me or marker in (stat.parent / "environ").read_bytes():
                out.add(int(stat.parent.name))
        except (OSError, IndexError):
            continue
    return out


# What the local provider's "host VM" runs by design and keeps running after the command returns:
# the --autodown agent and a detached (--detach) supervisor. They are stopped after each example so
# the next one starts clean; anything else left behind is a bug.
HOST_DAEMONS = ("provision.host.autodown autodown", "provision supervise")


def _stop_if_host_daemon(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True          # already gone
    if not any(d in cmdline for d in HOST_DAEMONS):
        return False
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    return True


@pytest.fixture
def world(tmp_path, monkeypatch, fakegcp, fake_gcs, tpuctl):
    """A working directory with data and specs, a local cluster ``fz``, and the fake cloud."""
    monkeypatch.chdir(tmp_path)
    for key in ("TPUCTL_LOCAL_TPU_CREATE_SECONDS", "TPUCTL_LOCAL_VM_CREATE_SECONDS", "TPUCTL_LOCAL_DELETE_SECONDS"):
        monkeypatch.setenv(key, "0")
    env = fakegcp.env()
    for key in ("TPUCTL_TPU_API_ENDPOINT", "TPUCTL_COMPUTE_API_ENDPOINT", "TPUCTL_TPU_GRPC_ENDPOINT",
                "TPUCTL_BILLING_API_ENDPOINT", "TPUCTL_CREDENTIALS"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("TPUCTL_ZONE", "us-central1-b")
    fakegcp.set_latencies(scale=0.05)
    bucket = f"fz-{os.getpid()}-{len(list(tmp_path.parent.iterdir()))}"    # one per test in this process
    fake_gcs.create_bucket(bucket)
    execs: list = []
    monkeypatch.setattr(os, "execv", lambda *a: execs.append(a))   # `tpuctl job run` of a good spec
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("x")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "bert_config.json").write_text(json.dumps({"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1,
                                                       "num_attention_heads": 2, "intermediate_size": 8,
                                                       "max_position_embeddings": 64}))
    (bert / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    (bert / "train.tsv").write_text("text\tlabel\na\tx\nb\ty\n")
    good = tmp_path / "good.yaml"
    good.write_text(f"job: bert-finetune\nbert_dir: {bert}\ntrain_file: {bert / 'train.tsv'}\nmax_seq_length: 16\n"
                    f"num_train_steps: 4\nmodel_dir: {tmp_path / 'model'}\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "unknown.yaml").write_text("job: bert-finetune\nnum_train_step: 3\n")
    (tmp_path / "bomb.yaml").write_text('job: bert-finetune\nlabels: [&a ["x","x"], [*a,*a]]\n')
    assert tpuctl("up", "fz", "--no-vm").code == 0
    return {"root": tmp_path, "good": str(good), "bucket": f"gs://{bucket}", "fake": fakegcp,
            "pwned": tmp_path / "pwned", "execs": execs}


def _values(world) -> st.SearchStrategy[str]:
    pwned = world["pwned"]
    good = ["fz", "fz2", "us-central1-b", "us-central1-b,us-central1-c", "europe-west4-a", "us-central2-b", "v2-8",
            "v3-8", "v4-8", "v5litepod-4", "vm", "node", "10.240.8.0/29", "30m", "1s", "2", "gs://fz-local",
            world["bucket"], world["bucket"] + "/data", "team=nlp", "tpuctl-keep=true", "num_train_steps=3",
            "tpuctl-test", "local", "gcp", "8", "1M", "src", str(world["root"] / "src"), "dst",
            world["good"], "list.yaml", "unknown.yaml", "bomb.yaml", "missing.yaml", "leave", "stop", "ask",
            "*.tmp", "US", "tpuctl-host@tpuctl-test.iam.gserviceaccount.com"]
    garbage = ["", "-", "--", f"$(touch {pwned})", f"`touch {pwned}`", f"a;touch {pwned}", "a\nb", "x\n", "x\x00",
               "\U0001F600", "\uff56\uff12-8", "9" * 60, "-1", "1e400", "nan", "inf", "../../etc", "gs://", "gs://../x",
               "gs://b/../../x", "s3://x", "file:///etc/passwd", "A" * 300, "--json", "-z"]
    return st.sampled_from(good) | st.sampled_from(garbage) | st.text(max_size=16)


def _good_options(world) -> dict[str, list[str]]:
    """A sensible value for each option, so that a good share of the fuzzed commands succeed."""
    return {
        "--zone": ["us-central1-b", "us-central1-b,us-central1-c", "europe-west4-a"], "-z": ["us-central1-b"],
        "--accelerator-type": ["v2-8", "v3-8", "v4-8"], "-a": ["v2-8"], "--arch": ["vm", "node"],
        "--machine-type": ["n1-standard-2"], "--runtime-version": ["tpu-vm-tf-2.16.1-pjrt"],
        "--tf-version": ["2.12.0"], "--cidr": ["10.240.8.0/29"], "--network": ["default"],
        "--subnetwork": ["default"], "--bucket": ["gs://fz-local", world["bucket"]], "--label": ["team=nlp"],
        "--valid-until": ["1h"], "--service-account": ["tpuctl-host@tpuctl-test.iam.gserviceaccount.com"],
        "--autodown": ["30m"], "--timeout": ["30s", "2m"], "--provider": ["local", "gcp"],
        "--project": ["tpuctl-test"], "--job": [world["good"], "unknown.yaml", "bomb.yaml"],
        "--set": ["num_train_steps=3", "learning_rate=1e-4"], "--workdir": ["src"], "--code": ["src"], "--max-preemptions": ["1"],
        "--max-failures": ["1"], "--poll": ["1"], "--on-interrupt": ["leave", "stop"], "--exclude": ["*.tmp"],
        "--location": ["US", "us-central1"], "--jobs": ["4"], "--part-size": ["16M"], "--idle-for": ["30m"],
        "--attempt": ["1"], "--worker": ["0"], "--where": ["host"],
    }


def _positionals(world) -> dict[tuple[str, ...], list[list[str]]]:
    return {
        ("up",): [["fz"], ["fz2"], ["fz3"]], ("status",): [[], ["fz"]], ("train",): [["fz"]], ("logs",): [["fz"]],
        ("stage",): [["src", "gs://fz-local/data"], ["src", "dst"], ["gs://fz-local/data", "dst"],
                     ["src", world["bucket"] + "/data"], [world["bucket"] + "/data", "dst2"]],
        ("down",): [["fz2"], ["fz3"], ["fz"]], ("cost",): [[], ["fz"]], ("simulate", "preempt"): [["fz"]],
        ("job", "run"): [[world["good"]], ["list.yaml"]], ("supervise",): [["fz"]],
    }


def _argv(world):
    values = _values(world)
    good_options = _good_options(world)
    positionals = _positionals(world)
    paths = sorted(COMMANDS) + [("frobnicate",), ()]

    @st.composite
    def build(draw):
        mode = draw(st.sampled_from(["valid", "valid", "mutated", "mutated", "random"]))
        path = draw(st.sampled_from(sorted(COMMANDS) if mode != "random" else paths))
        cmd = COMMANDS.get(path)
        argv = list(path)
        options = [p for p in cmd.params if isinstance(p, click.Option)] if cmd else []
        if mode in ("valid", "mutated"):
            argv += draw(st.sampled_from(positionals.get(path, [[]])))
            chosen = draw(st.lists(st.sampled_from(options), max_size=3, unique_by=lambda o: o.name)
                          if options else st.just([]))
            chosen += [o for o in options if o.required and o not in chosen]
            if any(o.name == "project" for o in options) and draw(st.integers(0, 4)) == 0:
                chosen += [o for o in options if o.name == "project" and o not in chosen]   # the fake cloud
            for opt in chosen:
                name = opt.opts[0]
                argv.append(name)
                if not opt.is_flag:
                    argv.append(draw(st.sampled_from(good_options.get(name, ["1"]))))
            for _ in range(draw(st.integers(1, 2)) if mode == "mutated" else 0):
                how = draw(st.sampled_from(["replace", "insert-option", "insert-value", "drop"]))
                at = draw(st.integers(len(path), max(len(path), len(argv))))
                if how == "replace" and at < len(argv):
                    argv[at] = draw(values)
                elif how == "insert-option":
                    argv.insert(at, draw(st.sampled_from(ALL_OPTIONS)))
                elif how == "insert-value":
                    argv.insert(at, draw(values))
                elif at < len(argv):
                    del argv[at]
        else:
            n_args = len([p for p in cmd.params if isinstance(p, click.Argument)]) if cmd else 0
            for _ in range(draw(st.integers(0, n_args + 1))):
                argv.append(draw(values))
            for _ in range(draw(st.integers(0, 5))):
                choice = draw(st.integers(0, 9))
                if options and choice < 7:
                    opt = draw(st.sampled_from(options))
                    argv.append(draw(st.sampled_from(opt.opts + opt.secondary_opts)))
                    if not opt.is_flag:
                        argv.append(draw(values))
                elif choice < 8:
                    argv.append(draw(st.sampled_from(ALL_OPTIONS)))
                else:
                    argv.append(draw(values))
        if draw(st.integers(0, 3)) == 0:
            argv.append("--json")
        if path in (("train",), ("job", "run")) and world["good"] in argv and "--dry-run" not in argv:
            argv.append("--dry-run")      # a real run would start TensorFlow: minutes, not milliseconds
        return argv

    return build()


def _snapshot(root: Path) -> set[str]:
    home = Path(os.environ["TPUCTL_HOME"])
    return {str(p.relative_to(home)) for p in home.rglob("*") if p.is_file() and not p.name.endswith(".lock")}


def _json_in_effect(argv: list[str], through: str) -> bool:
    """In-process, tpuctl's own state says; through the entry point, --json counts unless it was
    taken as the value of the option before it (``--project --json``)."""
    if through == "in-process":
        return json_mode()
    words = argv[:argv.index("--")] if "--" in argv else argv
    if "--json" not in words:
        return False
    i = words.index("--json")
    before = words[i - 1] if i else ""
    return not (before in VALUE_OPTIONS and (i < 2 or words[i - 2] not in VALUE_OPTIONS))


def _check(argv, r, world, before_files, before_children, through="in-process"):
    where = f"argv={argv!r}\nexit={r.code}\nstdout={r.out[-1500:]}\nstderr={r.err[-1500:]}"
    assert r.code in (0, 1, 2), where
    assert "Traceback" not in r.err and "internal error" not in r.err, where
    if r.code != 0:
        lines = [ln for ln in r.err.splitlines() if ln.startswith("tpuctl: error:")]
        assert len(lines) == 1, where
        assert not any(ln.startswith("Error:") for ln in r.err.splitlines()), where
        if _json_in_effect(argv, through):
            doc = json.loads(r.out)   # exactly one JSON document, even on failure
            assert isinstance(doc, dict) and ("error" in doc or doc.get("ok") is False), where
    if r.code == 2:
        assert _snapshot(world["root"]) == before_files, where
        counts = world["fake"].call_counts()
        assert not any(counts.get(c) for c in CREATES), (where, counts)
    leftover = _children() - before_children
    unintended = {pid for pid in leftover if not _stop_if_host_daemon(pid)}
    assert not unintended, (where, unintended)
    assert not world["pwned"].exists(), where


def _passable(argv: list[str]) -> bool:
    """What an exec can carry: no NUL byte, nothing the file system encoding cannot write."""
    try:
        return all("\x00" not in a and os.fsencode(a) is not None for a in argv)
    except UnicodeEncodeError:
        return False


@pytest.mark.parametrize("through", ["entry-point", "in-process"])
def test_fuzz_the_command_line(world, tpuctl, through):
    strategy = _argv(world)
    if through == "entry-point":
        strategy = strategy.filter(_passable)
    baseline = _children()

    @settings(max_examples=PROCESS_EXAMPLES if through == "entry-point" else EXAMPLES, deadline=None,
              database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                    HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(argv=strategy)
    def run(argv):
        world["fake"].clear_calls()
        before_files = _snapshot(world["root"])
        if through == "entry-point":
            r = run_tpuctl_process(*argv, cwd=world["root"], timeout=120)
        else:
            r = tpuctl(*argv)
        _check(argv, r, world, before_files, baseline, through)
        if os.environ.get("TPUCTL_FUZZ_LOG"):
            with open(os.environ["TPUCTL_FUZZ_LOG"], "a") as fh:
                fh.write(json.dumps([r.code, argv, r.err.strip().splitlines()[-1:] ]) + "\n")

    run()
