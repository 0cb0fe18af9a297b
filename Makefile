# The README's two set-up commands: `make demo` and `make test` each build the virtual
# environment on a fresh machine (Python packages, TensorFlow, the fake GCS server) and run.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tpuctl-installed
PYTEST_ARGS ?=

.PHONY: demo test test-long bench venv lint clean test-lowest test-beam test-frameworks test-bootstrap bootstrap-rootfs test-package test-browser browser test-venvs

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[train,jax,test,dev,data]'
	touch $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash templates/demo.sh

# beam-marked tests need apache-beam, which cannot live beside TensorFlow: `make test-beam` runs them;
# package-marked ones install venvs from the registry: `make test-package`. Four workers on two
# cores: what make test keeps mostly waits on processes and the fake cloud (docs/contributing.md)
test: $(STAMP)
	$(PY) -m pytest -q -n 4 --dist loadgroup --durations=30 -m "not beam and not long and not package and not frameworks and not browser" $(PYTEST_ARGS)

# The long checks (the supervised runs of half a minute or more, the training, slice and sweep chaos
# seeds, exact resumption of each job, evaluations across a stop, XLA, the emulated v2-32 e2e, 32-core
# slices...: docs/contributing.md lists them): `make test` leaves them out (it took 16 minutes on 2
# cores on 2026-12-06, with the JAX job side; 7 before it); .ci/run runs them.
test-long: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=30 -m "long and not beam and not frameworks and not browser" $(PYTEST_ARGS)

# tpuctl ui in a real headless browser (tests/e2e/test_ui_browser.py): Debian's chromium and its
# chromedriver, installed here when missing (root, apt reachable: CI); Selenium is pointed at
# /usr/bin/chromedriver, so nothing is downloaded at test time.
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver; }

test-browser: $(STAMP) browser
	$(PY) -m pytest -q -m browser tests/e2e/test_ui_browser.py $(PYTEST_ARGS)

# The lowest versions pyproject.toml allows for the direct dependencies (tests/lowest_deps.py
# pins each `>=` floor with `==`; pip resolves the rest), in a venv of their own, running the GCP
# (fake cloud) and staging integration tests. No TensorFlow: the train extra is not installed and
# tf-marked tests are left out. Deselected: three fake-cloud checks that read the ErrorInfo of a
# REST error through google-api-core's `reason`, which it parses over REST only from 2.44.0
# (tpuctl classifies from the HTTP status and message, not from `reason`). The long ones are left
# to make test-long: their requests are the short ones' (a recreate is an up), and they would
# double the target's time. Four workers, as make test: these tests mostly wait on the fake cloud.
LOWEST       ?= .venv-lowest
LOWEST_STAMP := $(LOWEST)/.tpuctl-installed
LOWEST_TESTS ?= tests/integration -m "not tf and not client_error_reason and not long" \
	--ignore=tests/integration/test_startup_script.py --ignore=tests/integration/test_bootstrap_debian12.py

$(LOWEST_STAMP): pyproject.toml tests/lowest_deps.py
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PYTHON) tests/lowest_deps.py > $(LOWEST)/constraints.txt
	$(LOWEST)/bin/python -m pip install --quiet --disable-pip-version-check -c $(LOWEST)/constraints.txt -e '.[test]'
	touch $@

test-lowest: $(LOWEST_STAMP)
	$(LOWEST)/bin/python tests/lowest_deps.py --check
	$(LOWEST)/bin/python -m pytest -q -n 4 --dist loadgroup $(LOWEST_TESTS) $(PYTEST_ARGS)

# The Apache Beam pipeline of `tpuctl data --runner beam|dataflow` (the beam extra), in a venv of
# its own: apache-beam pins protobuf below what TensorFlow needs, and data creation needs no
# TensorFlow, so no train extra here. Beam's in-process runner only (nothing is downloaded at run
# time; Dataflow itself is not reached).
BEAM       ?= .venv-beam
BEAM_STAMP := $(BEAM)/.tpuctl-installed

$(BEAM_STAMP): pyproject.toml
	rm -rf $(BEAM)
	$(PYTHON) -m venv $(BEAM)
	$(BEAM)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BEAM)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,data,beam]'
	touch $@

test-beam: $(BEAM_STAMP)
	$(BEAM)/bin/python -m pytest -q -m beam tests/beam $(PYTEST_ARGS)

# examples/jax and examples/pytorch (job: command, docs/own-code.md) under tpuctl train on the local
# provider, in a venv of their own: CPU jax and CPU torch from PyPI, no TensorFlow (the train extra
# is not needed by a job: command). torch==2.13.0 is a CPU build; an unpinned torch on x86-64 Linux
# is a CUDA build of several GB.
FRAMEWORKS       ?= .venv-frameworks
FRAMEWORKS_STAMP := $(FRAMEWORKS)/.tpuctl-installed

$(FRAMEWORKS_STAMP): pyproject.toml
	rm -rf $(FRAMEWORKS)
	$(PYTHON) -m venv $(FRAMEWORKS)
	$(FRAMEWORKS)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(FRAMEWORKS)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' 'torch==2.13.0' jax fsspec
	touch $@

test-frameworks: $(FRAMEWORKS_STAMP)
	$(FRAMEWORKS)/bin/python -m pytest -q -m frameworks tests/frameworks $(PYTEST_ARGS)

# What users install (tests/package): the sdist and the wheel of `python -m build`, each installed
# into a fresh venv in a temporary folder outside the checkout (dependencies from the registry, no
# train extra), then the installed tpuctl from there: --help, a local up / train --dry-run / down,
# and up / down on the GCP provider against the fake cloud (which runs from the checkout).
test-package: $(STAMP)
	$(PY) -m pytest -q -m package tests/package $(PYTEST_ARGS)

# templates/host-startup.sh for real in a Debian 12 userland without python3-venv (root: debootstrap,
# chroot, mount). The rootfs is built once (about a minute) and cached; the tests run on overlays.
BOOTSTRAP_ROOTFS ?= $(HOME)/.cache/tpuctl/debian12-rootfs

bootstrap-rootfs:
	bash tests/debian12_rootfs.sh "$(BOOTSTRAP_ROOTFS)"

test-bootstrap: $(STAMP) bootstrap-rootfs
	TPUCTL_BOOTSTRAP_ROOTFS="$(BOOTSTRAP_ROOTFS)" $(PY) -m pytest -q -s tests/integration/test_bootstrap_debian12.py $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m tests.benchmarks

lint: $(STAMP)
	$(VENV)/bin/ruff check provision jobs tests
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(LOWEST) $(BEAM) $(FRAMEWORKS) build dist *.egg-info .pytest_cache .hypothesis

# The extra targets' virtual environments only (.ci/run builds them in the background while make
# test runs): the lowest versions, Beam, the frameworks.
test-venvs: $(LOWEST_STAMP) $(BEAM_STAMP) $(FRAMEWORKS_STAMP)
