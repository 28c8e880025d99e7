# Two commands do everything on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test clean

install:
	@bash scripts/install_cpu.sh

demo: install
	$(PY) -m sglang_faser.demo

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
