#!/bin/bash
# Everything the GPU machine checks and measures, in one go (see ../shared/gpu/README.md):
#   bash bench/gpu-check.sh BUILD OUTDIR
# BUILD is a release build folder made on the development machine (with .gpu/ prepared),
# OUTDIR receives the logs, the trace and its timeline picture.
set -uo pipefail
B=${1:-build-gpu}
O=${2:-/tmp/amk-gpu-check}
mkdir -p "$O"
R="bash .gpu/run.sh"
CS=/usr/local/cuda/bin/compute-sanitizer
export GI_TYPELIB_PATH=$PWD/$B/introspection${GI_TYPELIB_PATH:+:$GI_TYPELIB_PATH}
export LD_LIBRARY_PATH=$PWD/$B/amk-glib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
step () { echo "== $1"; shift; "$@" || { echo "FAILED: $*"; status=1; }; }

step "gpu suite" timeout 300 $R meson test -C "$B" --no-rebuild --suite gpu -v > "$O/gpu-suite.log" 2>&1
grep -E "^(ok|not ok)|^# (TIMEOUT|free|max)|Ok:|Fail:|Skipped:" "$O/gpu-suite.log"

# the sanitizers on the tests whose timing they do not disturb
SAFE="-p /amk/gpu/utility-ops -p /amk/gpu/chains -p /amk/gpu/trap -p /amk/gpu/trace -p /amk/gpu/rejected"
step "memcheck" timeout 300 $R $CS --tool memcheck --error-exitcode 9 "$B/tests/gpu/test-gpu" $SAFE > "$O/memcheck.log" 2>&1
tail -1 "$O/memcheck.log"
step "racecheck" timeout 300 $R $CS --tool racecheck --error-exitcode 9 "$B/tests/gpu/test-gpu" $SAFE > "$O/racecheck.log" 2>&1
tail -1 "$O/racecheck.log"
step "synccheck" timeout 300 $R $CS --tool synccheck --error-exitcode 9 "$B/tests/gpu/test-gpu" $SAFE > "$O/synccheck.log" 2>&1
tail -1 "$O/synccheck.log"

step "bench" timeout 200 $R "$B/bench/amk-bench" > "$O/bench.log" 2>&1
cat "$O/bench.log"

step "trace" $R python3 bench/make-trace-demo.py "$O/trace-demo.amk"
step "amk trace" $R "$B/tools/amk" trace "$O/trace-demo.amk" -o "$O/trace.json"
step "timeline" $R python3 tools/amk-trace-to-png.py "$O/trace.json" "$O/trace.png"

# The three sanitizers on every C test program of the gpu suite (the Python files of the
# suite are left out: they test the bindings over the same kernels; but memcheck runs
# test_gpu_quantized.py, the only test of the block-quantized kernels). Last, as it takes
# longest; AMK_GPU_CHECK_QUICK=1 leaves it out. Every test path runs under every tool
# except two, skipped with -s:
#   /amk/gpu/timeout  asserts that the watchdog ends a deadlocked launch within 500 ms of
#                     wall time; a tool's instrumentation of the launch takes longer.
#   /amk/gpu/no-leak  1000 load/launch/destroy cycles, each launch instrumented (many
#                     minutes), comparing the device's free memory before and after,
#                     which the tools' own device allocations move.
# The TRAP and CHECK tests stay (an abort is a record written by a kernel that then
# returns normally; the kernels never execute a device trap), and so does
# /amk/gpu/cancel (it asserts that the cancellation ends the launch, not when). A wait
# that the slowed-down kernel stretches past the 10 s watchdog fails its test with
# AMK_LAUNCH_ERROR_TIMEOUT: a slow run, not a finding (the log says which).
# test-gpu-golden runs SmolLM2 only with AMK_TEST_GGUF set, else it skips.
# Each log: $O/<tool>-<program>.log; shown here: its failed tests and the tool's error
# count. A finding exits 9, a failed test 134 (g_assert), a run past 600 s 124.
if [ "${AMK_GPU_CHECK_QUICK:-0}" != 1 ]; then
  for tool in memcheck racecheck synccheck; do
    for t in test-gpu test-gpu-vector test-gpu-attention test-gpu-share test-gpu-golden; do
      step "$tool $t" timeout 600 $R $CS --tool $tool --error-exitcode 9 "$B/tests/gpu/$t" \
        -s /amk/gpu/timeout -s /amk/gpu/no-leak > "$O/$tool-$t.log" 2>&1
      grep -E "^not ok|ERROR SUMMARY|RACECHECK SUMMARY" "$O/$tool-$t.log" | tail -5
    done
  done
  # the block-quantized ops have no C test program: memcheck over their Python test
  step "memcheck test_gpu_quantized.py" timeout 600 $R $CS --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_quantized.py > "$O/memcheck-quantized.log" 2>&1
  grep -E "passed|failed|ERROR SUMMARY" "$O/memcheck-quantized.log" | tail -3
fi
exit $status
