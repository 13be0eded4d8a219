#!/bin/sh
# `amk save-demo`, `amk verify`, `amk run` and `amk demo` on the CPU executor: the demo
# image verifies and runs, on worker threads (the default) and on the seeded scheduler
# (--seed) with the same outputs, which --output-dir writes; --input uploads a buffer;
# bad seeds are usage errors (exit 2), a file that is no image fails (exit 1).
# Usage: test-amk-run.sh PATH/TO/amk
# SPDX-License-Identifier: LGPL-2.1-or-later
set -eu

amk=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/out"; : >"$tmp/err"

fail () {
  echo "FAIL: $*" >&2
  echo "--- stdout:" >&2; cat "$tmp/out" >&2
  echo "--- stderr:" >&2; cat "$tmp/err" >&2
  exit 1
}

"$amk" save-demo "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || fail "save-demo"
"$amk" verify "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || fail "verify"
grep -q "verified" "$tmp/out" || fail "verify did not say verified"

mkdir "$tmp/threads" "$tmp/seeded"
"$amk" run --cpu -o "$tmp/threads" "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || fail "run"
grep -q "^out f32 \[64\]" "$tmp/out" || fail "run printed no output buffer"
"$amk" run --cpu --seed 3 -o "$tmp/seeded" "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || fail "run --seed 3"
cmp "$tmp/threads/out.bin" "$tmp/seeded/out.bin" || fail "worker threads and the seeded scheduler differ"
[ "$(wc -c <"$tmp/threads/out.bin")" -eq 256 ] || fail "out.bin is not 64 floats"

# another input: 64 floats of 0x40400000 (3.0) bytes
head -c 256 /dev/zero | tr '\0' '\100' >"$tmp/in.bin"
"$amk" run --cpu -i "in=$tmp/in.bin" -o "$tmp/threads" "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || fail "run --input"
cmp -s "$tmp/threads/out.bin" "$tmp/seeded/out.bin" && fail "--input changed nothing"

status=0
"$amk" run --cpu --seed -4 "$tmp/demo.amk" >"$tmp/out" 2>"$tmp/err" || status=$?
[ "$status" -eq 2 ] || fail "a negative seed: exit $status, not 2"
grep -q "seed must not be negative" "$tmp/err" || fail "no word on the negative seed"

printf 'no image' >"$tmp/bad.amk"
status=0
"$amk" run --cpu "$tmp/bad.amk" >"$tmp/out" 2>"$tmp/err" || status=$?
[ "$status" -eq 1 ] || fail "a file that is no image: exit $status, not 1"

"$amk" demo --cpu >"$tmp/out" 2>"$tmp/err" || fail "demo"
grep -q "OK on the CPU executor" "$tmp/out" || fail "demo did not say OK"
echo "ok"
