# The README's quick start: `make demo` (the main job on the embedded default) and `make test`.
PY ?= python3

.PHONY: install demo test deps lint bench

install:
	$(PY) -m pip install -q -e '.[test]'

# Crawl the bundled website on loopback for a few rounds and print the db stats.
demo: install
	webdb demo

# Debian packages the SSH integration tests need (real sshd on loopback), then the whole suite.
deps:
	@command -v /usr/sbin/sshd >/dev/null && command -v rsync >/dev/null || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server rsync)

test: deps install
	$(PY) -m pytest -q

lint:
	ruff check . && ruff format --check .
