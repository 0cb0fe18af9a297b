"""`job: keras`: a mistake in the user's module is one line naming the file, the line and the
fix, exit 2, found before the first step: by reading the module (jobs.usercode, no TensorFlow:
what `tpuctl train` and `tpuctl job run --dry-run` check) or, for what only running it tells, by
the job before it trains (the runner in this process). The spec's params take `--set
params.NAME=VALUE` with the type of the spec's value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobs import spec as spec_lib
from jobs import usercode
from jobs.errors import ConfigError
from jobs.spec import SpecError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "examples" / "mlp" / "model.py").read_text()
SPEC = (REPO / "examples" / "mlp" / "spec.yaml").read_text()


def module(tmp_path: Path, old: str = "", new: str = "", name: str = "model.py") -> Path:
    """The example's module with ``old`` replaced by ``new`` (once, and it must be there)."""
    assert not old or EXAMPLE.count(old) == 1, old
    path = tmp_path / name
    path.write_text(EXAMPLE.replace(old, new) if old else EXAMPLE)
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# -- read without running it (no TensorFlow) ---------------------------------------------------

@pytest.mark.parametrize("old, new, marker, expected", [
    ("def loss(labels, outputs):", "def loss(labels, outputs)", "def loss(",
     "expected ':' (SyntaxError: def loss(labels, outputs)); fix the line"),
    ("def dataset(params, split, context):", "def dataset(params, split):", "def dataset(",
     ("dataset() takes 2 arguments but the runner calls dataset(params, split, context); define it "
     "as def dataset(params, split, context)")),
    ("def model(params):", "def model(params, hidden):", "def model(",
     "model() takes 2 arguments but the runner calls model(params); define it as def model(params)"),
    ("def predict(outputs):", "def predict(outputs, *, top):", "def predict(",
     ("predict() needs the keyword argument top that the runner never passes; define it as def "
     "predict(outputs)")),
])
def test_a_wrong_def_is_named_by_file_and_line(tmp_path, old, new, marker, expected):
    path = module(tmp_path, old, new)
    with pytest.raises(ConfigError) as err:
        usercode.check("model.py", [str(tmp_path)])
    assert str(err.value) == f"{path}:{line_of(path, marker)}: {expected}"


def test_what_the_runner_can_call_is_accepted_and_metric_names_are_read(tmp_path):
    module(tmp_path, "def model(params):", "def model(params, *more, hidden=3):")
    code = usercode.check("model.py", [str(tmp_path / "elsewhere"), str(tmp_path)])
    assert code.path == str(tmp_path / "model.py") and code.metrics == ("accuracy",)
    assert set(code.functions) == {"model", "dataset", "loss", "metrics", "predict"}
    # a package module, found by name in the search path
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    module(tmp_path / "pkg", name="net.py")
    assert usercode.check("pkg.net", [str(tmp_path)]).path == str(tmp_path / "pkg" / "net.py")


@pytest.mark.parametrize("module_name, search, expected", [
    ("model.py", ["SEARCH"], ("module model.py not found in SEARCH; put it there, or name it relative "
                             "to the workdir (module: src/model.py, module: mypkg.model)")),
    ("model.py", [], ("module model.py not found: no workdir was given; pass --workdir DIR, the "
                     "directory that holds it (it is staged with the run)")),
    ("pkg.model", ["SEARCH"], "module pkg.model not found in SEARCH"),
])
def test_a_module_that_is_not_there_says_where_it_was_looked_for(tmp_path, module_name, search, expected):
    with pytest.raises(ConfigError) as err:
        usercode.check(module_name, [str(tmp_path) if d == "SEARCH" else d for d in search])
    assert str(err.value).startswith(expected.replace("SEARCH", str(tmp_path)))


def test_a_missing_function_names_the_file(tmp_path):
    path = module(tmp_path, "def loss(labels, outputs):", "def losses(labels, outputs):")
    with pytest.raises(ConfigError) as err:
        usercode.check("model.py", [str(tmp_path)])
    assert str(err.value) == (f"{path}: no function loss(labels, outputs); define it at the top "
                              "level of the module (docs/own-code.md)")


def test_job_run_dry_run_reads_the_module_beside_the_spec(tmp_path):
    module(tmp_path, "def dataset(params, split, context):", "def dataset(params, split):")
    (tmp_path / "spec.yaml").write_text(SPEC)
    proc = subprocess.run([sys.executable, "-m", "provision", "job", "run", str(tmp_path / "spec.yaml"),
                           "--set", f"model_dir={tmp_path / 'run'}", "--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{tmp_path / 'model.py'}:" in proc.stderr and "def dataset(params, split, context)" in proc.stderr


# -- the spec's params -------------------------------------------------------------------------

def keras_spec(tmp_path: Path, *sets: str) -> spec_lib.KerasSpec:
    (tmp_path / "spec.yaml").write_text(SPEC)
    return spec_lib.load(str(tmp_path / "spec.yaml"), [f"model_dir={tmp_path / 'run'}", *sets])


def test_set_params_takes_the_type_of_the_spec_value(tmp_path):
    s = keras_spec(tmp_path, "params.hidden=64", "params.data_seed=7", "hparams=params.hidden,seed")
    assert s.params["hidden"] == 64 and isinstance(s.params["hidden"], int)
    assert s.params["features"] == 8 and s.hparam_values() == {"params.hidden": 64, "seed": 12345}
    assert keras_spec(tmp_path, "params.hidden=1e2").params["hidden"] == 100


@pytest.mark.parametrize("sets, expected", [
    (["params.hiden=3"], ("params has no entry 'hiden' (--set: params.hiden); did you mean 'hidden'? "
                         "add it to the spec's params: first")),
    (["params.hidden=wide"], "params.hidden must be a number like its value 32 in the spec, got 'wide'"),
    (["params=3"], "params must be a mapping"),
    (["hparams=params.width"], "hparams names 'params.width', not a key of keras"),
    (["module=my-model"], "module 'my-model' is neither a .py file nor a module name"),
])
def test_a_bad_params_override_is_one_line(tmp_path, sets, expected):
    with pytest.raises(SpecError) as err:
        keras_spec(tmp_path, *sets)
    assert expected in str(err.value)


def test_params_may_not_take_the_runners_names(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC.replace("  hidden: 32", "  hidden: 32\n  batch_size: 8"))
    with pytest.raises(SpecError) as err:
        spec_lib.load(str(tmp_path / "spec.yaml"), [f"model_dir={tmp_path / 'run'}"])
    assert str(err.value).startswith("params.batch_size is what the runner sets")


# -- what only running it tells: the job, before its first step ---------------------------------

RUNTIME = [
    ("import keras\n", "import keras\nimport kerass\n", "import kerass",
     ("importing model.py raised ModuleNotFoundError: No module named 'kerass'; install it where the "
     "job runs, or fix the import")),
    ('Dense(params["hidden"]', 'Dense(params["width"]', 'params["width"]',
     ("model(params) raised KeyError: 'width'; fix the code (python -m jobs run --verbose shows the "
     "traceback)")),
    ('    return keras.Model(inputs, logits, name="mlp")', "    return logits", "def model(",
     "model(params) returned a KerasTensor, not a keras.Model; return the model"),
    ("        return train_batches(points(params, split), params, context)",
     "        return train_batches(points(params, split)[0], params, context)", "def dataset(",
     ("dataset(params, 'train', context) yields a tensor of shape (32, 8); yield (features, labels) "
     "or (features, labels, weights) batches")),
    ("        return train_batches(points(params, split), params, context)",
     "        return tf.data.Dataset.from_tensor_slices(points(params, split)).batch(10)", "def dataset(",
     ("dataset(params, 'train', context) yields batches of unknown size but params['batch_size'] is "
     "32; batch with .batch(params['batch_size'], drop_remainder=True)")),
    ("    return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)",
     "    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, outputs)",
     "def loss(", ("loss(labels, outputs) returned a scalar; return per-example values, shape [batch] "
                  "(a Keras loss: reduction=None)")),
    ("    return keras.losses.sparse_categorical_crossentropy(labels, outputs, from_logits=True)",
     "    return outputs[:3]", "def loss(",
     "loss(labels, outputs) returned shape (3, 3), not [batch 32, ...]; return one value per example"),
]


@pytest.mark.tf
@pytest.mark.parametrize("old, new, marker, expected", RUNTIME, ids=[r[3].split(" ")[0] for r in RUNTIME])
def test_a_mistake_only_running_finds_is_one_line_before_the_first_step(tmp_path, capsys, old, new,
                                                                         marker, expected):
    from jobs.runner.registry import run_spec

    path = module(tmp_path, old, new)
    spec = keras_spec(tmp_path)
    assert run_spec(spec, search=[str(tmp_path)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [f"tpuctl: error: {path}:{line_of(path, marker)}: {expected}"]
    assert "Traceback" not in err
    assert not list((tmp_path / "run").glob("ckpt-*"))   # nothing trained, nothing to resume


@pytest.mark.tf
def test_verbose_shows_the_traceback_of_the_users_error(tmp_path):
    module(tmp_path, 'Dense(params["hidden"]', 'Dense(params["width"]')
    (tmp_path / "spec.yaml").write_text(SPEC)
    argv = [sys.executable, "-m", "jobs", "run", str(tmp_path / "spec.yaml"), "--set",
            f"model_dir={tmp_path / 'run'}", "--verbose"]
    verbose = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert verbose.returncode == 2 and "model(params) raised KeyError: 'width'" in verbose.stderr
    assert "Traceback (most recent call last)" in verbose.stderr
    assert f'File "{tmp_path / "model.py"}", line' in verbose.stderr
