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
exit $status
