# ai-engine top-level Makefile: bootstrap (.venv with pinned dependencies)
# and the user-facing targets. The real work lives in tasks.py (invoke) and
# the libraries behind it; these targets exist so a fresh clone needs only
# python3 (>= 3.11), gcc and make.
SHELL       := /bin/bash
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
INVOKE      := $(BIN)/invoke

.PHONY: sysdeps all help venv kernels test deploy render convert zoo clean distclean

# Zoo models the default spec (sysconfig/spec.yaml) serves from build/models.
# Built explicitly before a deploy: the deployer never guesses a model from a
# missing file (a misspelt path must be an error, not a different model).
DEPLOY_ZOO  ?= digits
# The root the default spec deploys into; `make clean` stops its engine first.
DEPLOY_ROOT := build/root

all: kernels

help:
	@echo "make deploy   bootstrap, build kernels, convert the default models, deploy to build/root and start the engine"
	@echo "make test     bootstrap and run the whole test suite (what CI runs)"
	@echo "make kernels  build the compute kernels into build/lib"
	@echo "make render   validate the default spec and render its files into build/rootfs"
	@echo "make zoo      generate the zoo models the default spec serves ($(DEPLOY_ZOO)) into build/models"
	@echo "make convert  convert the default spec's models into build/models/*.aie"
	@echo "make venv     create .venv with the pinned dependencies only"
	@echo "make clean    stop the engine deployed into build/root, then remove build outputs (keeps .venv)"

venv: $(STAMP)

# The stamp depends on every file that decides what is installed, so editing
# the pins re-runs pip; pip itself is idempotent. This machine gets what a
# host runs (host.in), the build machine's packages (build.in, the engine's
# `build` extra) and the tests' (test.in); hosts get host.in only (the bundle).
# --no-compile: pip would byte-compile all ~5,000 modules of the closure
# (23 s of CPU, measured); Python compiles the ones a run imports on first use.
$(STAMP): requirements/constraints.txt requirements/host.in requirements/build.in requirements/test.in pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ai-engine needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -c requirements/constraints.txt -r requirements/host.in -r requirements/build.in -r requirements/test.in
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

kernels: $(STAMP)
	$(INVOKE) build-kernels

# System packages the tests drive for real (sshd for the SSH-fleet deploy
# tests, an aarch64 cross compiler + qemu for the portable-build test). Installed only when missing, only as root with apt; otherwise those
# tests skip and say why.
sysdeps:
	@if { [ ! -x /usr/sbin/sshd ] || [ ! -x /usr/sbin/haproxy ] || ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; } \
	    && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing test system packages: openssh-server (deploy tests), haproxy (balancer tests), gcc-aarch64-linux-gnu + qemu-user (aarch64 build test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      openssh-server haproxy gcc-aarch64-linux-gnu qemu-user >/dev/null) \
	    || echo "warning: could not install test system packages; the tests that need them will skip and say why"; \
	fi

test: $(STAMP) sysdeps
	$(INVOKE) test

render: $(STAMP)
	$(INVOKE) render

zoo: $(STAMP)
	$(INVOKE) zoo $(addprefix --name ,$(DEPLOY_ZOO))

convert: zoo
	$(INVOKE) convert

deploy: zoo
	$(INVOKE) deploy

# The engine's pid file lives under build/root: removing it with the engine
# still running would leave an orphan on the port that `invoke stop` can no
# longer see. So stop it first, and keep build/ when that fails.
clean:
	@if [ -e $(DEPLOY_ROOT)/run/ai-engine.pid ]; then \
	  if [ -x $(INVOKE) ]; then $(INVOKE) stop || { echo "make clean: could not stop the engine under $(DEPLOY_ROOT); build/ kept (stop it, then make clean again)" >&2; exit 1; }; \
	  else echo "make clean: an engine pid file is under $(DEPLOY_ROOT) but $(INVOKE) is missing; build/ kept (make venv && $(INVOKE) stop)" >&2; exit 1; fi; \
	fi
	rm -rf build

distclean: clean
	rm -rf $(VENV)
