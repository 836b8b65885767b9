# The README's quick start: `make demo` (the main job on the embedded default) and `make test`.
# Both run from the project's own virtualenv (.venv), made with the python3 found on PATH, so they
# work the same on a system python under PEP 668 and inside any active venv. Nothing is installed
# with --user or --break-system-packages.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test deps lint bench clean-venv screenshots

$(VPY):
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "make: '$(PY) -m venv' is not available: install it first, e.g. 'apt-get install python3-venv' (Debian/Ubuntu)" >&2; \
	  exit 2; }
	$(PY) -m venv $(VENV)

# Reinstalled when the package metadata or the C sources change (the Python code itself is an
# editable install; the compiled extensions are built by the install).
$(STAMP): $(VPY) setup.py pyproject.toml $(wildcard webdb/tables/_blockc_src/*.[ch] webdb/writer/_stagesc_src/*.[ch])
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

install: $(STAMP)

# Crawl the bundled website on loopback for a few rounds and print the db stats.
demo: install
	$(VENV)/bin/webdb demo

# Debian packages the integration tests need: real sshd and rsync on loopback, nginx for the
# fetcher's tests against a real web server; gcc and the headers of the python that makes the
# venv, so that `pip install` builds the compiled block codec (optional elsewhere, required by
# CI: tests/test_blockc.py); chromium and its driver for the dashboard's browser test
# (tests/test_serve.py).  Installs only what is missing (needs root).
PY_H := $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)/Python.h
DEB_DEPS := /usr/sbin/sshd:openssh-server /usr/bin/rsync:rsync /usr/sbin/nginx:nginx /usr/bin/gcc:gcc $(PY_H):python3-dev \
  /usr/bin/chromium:chromium /usr/bin/chromedriver:chromium-driver
deps:
	@missing=$$(for d in $(DEB_DEPS); do test -e "$${d%%:*}" || echo "$${d#*:}"; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# The whole suite on every core (pytest-xdist), one line per finished test file.
# PYTEST_ARGS replaces the selection, e.g. `make test PYTEST_ARGS='tests/test_tables.py'`.
PYTEST_ARGS ?= -n auto
test: deps install
	$(VPY) -m pytest $(PYTEST_ARGS)

# The README's pictures of `webdb serve` (docs/img/serve-*.png), taken by its browser test.
screenshots: deps install
	WEBDB_SCREENSHOTS=docs/img $(VPY) -m pytest -q tests/test_serve.py -k "overview or rounds or inlinks"

# The benchmark (bench/run.py): the workload, webdb and its peers side by side, bench/results.md.
# N pages (default 100000); BENCH_ARGS adds run.py options, e.g. BENCH_ARGS='--runs 3 --rounds 10'.
N ?= 100000
BENCH_ARGS ?=
bench: install
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[bench]'
	$(VPY) bench/run.py --pages $(N) $(BENCH_ARGS)

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean-venv:
	rm -rf $(VENV)
