# The README's quick start: `make demo` (the main job on the embedded default) and `make test`.
# Both run from the project's own virtualenv (.venv), made with the python3 found on PATH, so they
# work the same on a system python under PEP 668 and inside any active venv. Nothing is installed
# with --user or --break-system-packages.
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test deps lint bench clean-venv

$(VPY):
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "make: '$(PY) -m venv' is not available: install it first, e.g. 'apt-get install python3-venv' (Debian/Ubuntu)" >&2; \
	  exit 2; }
	$(PY) -m venv $(VENV)

# Reinstalled when the package metadata changes (the code itself is an editable install).
$(STAMP): $(VPY) setup.py pyproject.toml
	$(VPY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

install: $(STAMP)

# Crawl the bundled website on loopback for a few rounds and print the db stats.
demo: install
	$(VENV)/bin/webdb demo

# Debian packages the integration tests need (real sshd on loopback), then the whole suite.
deps:
	@command -v /usr/sbin/sshd >/dev/null && command -v rsync >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync)

test: deps install
	$(VPY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean-venv:
	rm -rf $(VENV)
