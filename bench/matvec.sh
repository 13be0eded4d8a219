#!/bin/bash
# MATVEC bandwidth: the PyTorch baseline and the megakernel, in one run on the GPU machine.
#   bash bench/matvec.sh BUILD [LOGDIR]   (from the repository root; BUILD e.g. build-gpu)
# Prints the copy bandwidth, torch.mv on the three shapes, then amk-matvec-bench with the
# cp.async ring (default: AMK_MATVEC_SMEM_BYTES of dynamic shared memory) and with the
# direct path (--smem 0), and a summary of the PASS/FAIL, COPY, TORCH and BEST lines.
# Exit status 1 when a check or a step failed.
set -uo pipefail
B=${1:-build-gpu}
O=${2:-/tmp/amk-matvec}
PY=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}
mkdir -p "$O"
status=0
step () {
  local name=$1 log=$2; shift 2
  echo; echo "== $name"
  "$@" 2>&1 | tee "$O/$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAILED: $*"; status=1; }
}

step "PyTorch baseline" torch.log timeout 300 "$PY" bench/torch_matvec.py --repeats 50
step "amk MATVEC (cp.async ring)" ring.log timeout 300 bash .gpu/run.sh "$B/bench/amk-matvec-bench" --repeats 20
step "amk MATVEC (direct loads, no dynamic shared memory)" direct.log \
  timeout 300 bash .gpu/run.sh "$B/bench/amk-matvec-bench" --repeats 20 --smem 0

echo; echo "== summary (logs in $O)"
grep -hE "^(COPY|TORCH|BEST|FAIL)|checks$" "$O/torch.log" "$O/ring.log" "$O/direct.log"
exit $status
