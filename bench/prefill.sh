#!/bin/bash
# Prefill speed: transformers' eager prefill and amk's (library defaults) of the same
# checkpoint, in one run on the GPU machine.
#   bash bench/prefill.sh BUILD FOLDER [TOKENS]   (from the repository root)
# FOLDER: a Hugging Face checkpoint (tools/make-random-checkpoint.py makes one).
set -uo pipefail
B=${1:-build-gpu}
F=$2
N=${3:-2048}
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
export GI_TYPELIB_PATH=$PWD/$B/introspection LD_LIBRARY_PATH=$PWD/$B/amk-glib
timeout 300 "$PY" bench/torch_prefill.py "$F" "$N" || echo "torch baseline failed"
timeout 300 bash .gpu/run.sh python3 bench/prefill.py "$F" "$N" 5
