#!/bin/bash
# MATMUL throughput: cuBLAS (torch.matmul) and the megakernel's MATMUL on Llama-3.2-1B's
# shapes, in one run on the GPU machine, and amk's fraction of cuBLAS per shape: of the whole
# launch, and in-launch (the op inside the launch, without the launch's fixed cost).
#   bash bench/matmul.sh BUILD [M]   (from the repository root; BUILD e.g. build-gpu)
set -uo pipefail
B=${1:-build-gpu}
M=${2:-2048}
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
export GI_TYPELIB_PATH=$PWD/$B/introspection LD_LIBRARY_PATH=$PWD/$B/amk-glib
torch_out=$(timeout 300 "$PY" bench/torch_matmul.py --m "$M") || { echo "torch baseline failed"; exit 1; }
amk_out=$(timeout 300 bash .gpu/run.sh python3 bench/matmul.py --m "$M") || status=1
echo "$torch_out"; echo "$amk_out"
echo "$torch_out" | while read -r _ name m n k ms _ tf _; do
  amk_tf=$(echo "$amk_out" | awk -v s="$name" '$1 == "AMK" && $2 == s { print $8 }')
  in_tf=$(echo "$amk_out" | awk -v s="$name" '$1 == "AMK" && $2 == s { print $(NF - 1) }')
  echo "RATIO $name amk/cuBLAS $(awk -v a="$amk_tf" -v t="$tf" 'BEGIN { printf "%.2f", a / t }')" \
    "in-launch $(awk -v a="$in_tf" -v t="$tf" 'BEGIN { printf "%.2f", a / t }')"
done
exit ${status:-0}
