#!/usr/bin/env bash
# The prepared GPU check: bench/gpu_check.py with --device cuda --dtype bfloat16, stopped at 8 minutes.
#   bash bench/gpu_check.sh              # figures in runs/gpu-check/gpu_check.json (OUT=... to move them)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
exec timeout 480 "$PY" bench/gpu_check.py --device cuda --dtype bfloat16 --out "${OUT:-runs/gpu-check}" "$@"
