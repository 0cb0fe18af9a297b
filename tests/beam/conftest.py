"""The Beam tests exist only where apache-beam does (`make test-beam`'s .venv-beam): it cannot be
installed beside TensorFlow, so the main venv does not collect them at all (and `make test-beam`,
finding none there, would fail with pytest's "no tests ran" instead of passing quietly)."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("apache_beam") else ["test_pretraining_beam.py"]
