#!/bin/bash
# Random-weight checkpoints of real model shapes on the GPU machine: writes them with
# transformers (and its reference logits of a greedy run), checks amk's decode step
# against them on the megakernel (test-hf-model), then times amk generate on both and
# the PyTorch baseline of the Llama-3.2-1B step (bench/torch_layer.py --model: the same
# shapes in PyTorch, replayed as a CUDA graph).
#   bash bench/hf-gpu-check.sh BUILD OUTDIR [TOKENS]
set -uo pipefail
B=${1:-build-gpu}
O=${2:-/tmp/amk-hf-check}
N=${3:-64}
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$O"
export GI_TYPELIB_PATH=$PWD/$B/introspection${GI_TYPELIB_PATH:+:$GI_TYPELIB_PATH}
export LD_LIBRARY_PATH=$PWD/$B/amk-glib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step () { echo "== $1"; shift; "$@" || { echo "FAILED: $*"; status=1; }; }

for preset in llama-3.2-1b qwen3-0.6b; do
  step "checkpoint $preset" timeout 400 "$PY" tools/make-random-checkpoint.py "$preset" "/tmp/$preset" \
    --reference --device cuda --new-tokens "$N" > "$O/make-$preset.log" 2>&1
  tail -2 "$O/make-$preset.log"
done
step "amk vs transformers (megakernel)" env AMK_TEST_HF_CHECKPOINTS=/tmp/llama-3.2-1b:/tmp/qwen3-0.6b \
  G_TEST_SRCDIR="$PWD/tests" timeout 400 bash .gpu/run.sh "$B/tests/unit/test-hf-model" \
  -p /amk/hf-model/env-checkpoints --verbose > "$O/test-hf-model.log" 2>&1
grep -vE "^# (Start|End) of" "$O/test-hf-model.log" | tail -12
for preset in llama-3.2-1b qwen3-0.6b; do
  step "amk generate $preset" timeout 200 bash .gpu/run.sh "$B/tools/amk" generate -m "/tmp/$preset" \
    -n "$N" "The capital of France is" > "$O/generate-$preset.log" 2>&1
  tail -1 "$O/generate-$preset.log"
done
step "trace of one llama-3.2-1b step" timeout 200 bash .gpu/run.sh python3 bench/model-trace.py \
  /tmp/llama-3.2-1b "$O/llama-3.2-1b-trace.json"
step "PyTorch llama-3.2-1b" timeout 300 "$PY" bench/torch_layer.py --model --pos "$N" \
  > "$O/torch-model.log" 2>&1
grep TORCH_MODEL "$O/torch-model.log"
exit $status
