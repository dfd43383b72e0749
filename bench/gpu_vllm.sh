#!/usr/bin/env bash
# The prepared vLLM-on-GPU measurement: bench/gpu_vllm.py with a random-weight ~0.5 B Llama, --device cuda
# --dtype bfloat16, stopped at 8 minutes. Needs a Python with vLLM (AGENTPRM_VLLM_PYTHON, .venv-vllm, or this one).
#   bash bench/gpu_vllm.sh              # figures in runs/gpu-vllm/gpu_vllm.json (OUT=... to move them)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 480 "$PY" bench/gpu_vllm.py --size 0.5b --device cuda --dtype bfloat16 --out "${OUT:-runs/gpu-vllm}" "$@"
