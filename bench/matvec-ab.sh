#!/bin/bash
# Two builds of the library alternating over MATVEC shapes in one command, so that their
# tile times are compared on the same machine in the same minutes (bench/NOTES.md: the
# method that held up). From the repository root on the GPU machine:
#   bash bench/matvec-ab.sh LIBDIR_A LIBDIR_B [ROUNDS] [TYPES]
# LIBDIR_*: folders holding a libamk-glib-1.0.so (build-gpu/amk-glib, or a copy of an older
# build); ROUNDS 2 by default; TYPES as bench/matvec-types.py takes them (q4_k,q5_k,q6_k,
# q8_0 by default). The shapes are Llama-3.2-1B's gate/up and down and Llama-3.1-8B's
# gate/up and down, in the tiles the compiler gives them. Prints one line per build,
# shape and type: "A|B MV TYPE ROWSxK tiles of T: ... tile median M us ...".
# AMK_AB_RUNNER (default `bash .gpu/run.sh`) runs each command; QMV_DRY=1 with an empty
# runner (and PYTHON, a python3 with PyGObject) checks the programs on the CPU executor
# instead (no GPU).
set -uo pipefail
A=${1:?usage: matvec-ab.sh LIBDIR_A LIBDIR_B [ROUNDS] [TYPES]}
B=${2:?usage: matvec-ab.sh LIBDIR_A LIBDIR_B [ROUNDS] [TYPES]}
ROUNDS=${3:-2}
TYPES=${4:-q4_k,q5_k,q6_k,q8_0}
RUNNER=${AMK_AB_RUNNER-bash .gpu/run.sh}
export GI_TYPELIB_PATH=${GI_TYPELIB_PATH:-$PWD/build-gpu/introspection}
status=0
for r in $(seq "$ROUNDS"); do
  for side in A B; do
    lib=$A
    [ "$side" = B ] && lib=$B
    for shape in "16384x2048 128" "2048x8192 16" "28672x4096 128" "4096x14336 32"; do
      # shellcheck disable=SC2086 # the runner and the shape are words
      out=$(LD_LIBRARY_PATH=$(realpath "$lib") timeout 120 $RUNNER "${PYTHON:-python3}" bench/matvec-types.py $shape "$TYPES" 2>&1) ||
        { echo "FAILED: $side round $r $shape"; echo "$out" | tail -5; status=1; continue; }
      echo "$out" | grep -E "^MV|dry run" | sed "s/^/$side /"
    done
  done
done
exit $status
