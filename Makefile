# robotrl: make demo | make test   (both set everything up first)
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
APTSTAMP := $(VENV)/.apt-ok
# Debian packages: FFmpeg libraries for lerobot video decoding, EGL/OSMesa for MuJoCo offscreen rendering.
APT_PACKAGES := libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 \
                libavdevice59 libavfilter8 libegl1 libgl1 libosmesa6
PYTEST_ARGS ?=

# Python 3.12 found robustly: a python3.12 on PATH, then pyenv's 3.12.x, then common prefixes.
PYTHON312 := $(shell \
  for c in "$$(command -v python3.12 2>/dev/null)" \
           "$$(PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$$)' | tail -n1) pyenv which python3.12 2>/dev/null)" \
           /usr/local/bin/python3.12 /usr/bin/python3.12; do \
    if [ -n "$$c" ] && [ -x "$$c" ] && "$$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then echo "$$c"; break; fi; \
  done)

.PHONY: help setup test test-slow test-all lint demo clean

help:
	@echo "make demo   set up and run the main job on the simulated default"
	@echo "make test   set up and run the test suite (quick tier; make test-slow for the slow tier)"
	@echo "make lint   ruff + mypy"

setup: $(STAMP)

$(APTSTAMP):
	@mkdir -p $(VENV)
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then echo "setup: Debian packages present"; \
	elif [ "$$(id -u)" = "0" ]; then echo "setup: installing Debian packages:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "setup: missing Debian packages:$$missing"; \
	  echo "setup: run as root, or: sudo apt-get install$$missing  (video decoding and offscreen rendering need them)"; exit 1; fi
	@touch $@

# Reinstalls only when pyproject.toml changes (the stamp is older than it).
$(STAMP): pyproject.toml $(APTSTAMP)
	@if [ -z "$(PYTHON312)" ]; then echo "setup: Python 3.12 not found (lerobot 0.6 needs it). Install it (e.g. 'pyenv install 3.12') or put python3.12 on PATH."; exit 1; fi
	@if [ ! -x $(VPY) ] || ! $(VPY) -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then \
	  echo "setup: creating $(VENV) with $(PYTHON312)"; rm -rf $(VENV)/bin $(VENV)/lib $(VENV)/include $(VENV)/pyvenv.cfg; \
	  $(PYTHON312) -m venv $(VENV); fi
	@echo "setup: installing robotrl and its dependencies into $(VENV) (first time: a few minutes, several GB for torch)"
	@$(VPY) -m pip install --quiet --upgrade pip
	@$(VPY) -m pip install --quiet --progress-bar off -e '.[dev]'
	@touch $@
	@echo "setup: done"

test: setup
	$(VPY) -m pytest -m "not slow and not gpu and not hardware" $(PYTEST_ARGS)

# pytest exits 5 when no test is marked slow yet; that is not a failure.
test-slow: setup
	$(VPY) -m pytest -m "slow and not gpu and not hardware" $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-all: setup
	$(VPY) -m pytest -m "not hardware" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy hardware  # imports as robotrl.hardware, lives outside robotrl/

demo: setup
	@bash launch/demo.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
