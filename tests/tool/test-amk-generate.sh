#!/bin/sh
# `amk generate`: without a model it says how to get one; with AMK_TEST_GGUF (else the
# rest is skipped: exit 77) it streams the text after the prompt and ends with the
# token count and time, the prefill's speed, the time to the first token, the
# generation's speed and the executor on stderr; --prefill-chunk 1 (every prompt token
# through the decode step) gives the same text.
# Usage: test-amk-generate.sh PATH/TO/amk
# SPDX-License-Identifier: LGPL-2.1-or-later
set -eu

amk=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail () {
  echo "FAIL: $*" >&2
  echo "--- stdout:" >&2; cat "$tmp/out" >&2
  echo "--- stderr:" >&2; cat "$tmp/err" >&2
  exit 1
}

# no model in an empty cache: exit 1 and a pointer to tools/fetch-model.sh
if env -u AMK_MODEL XDG_CACHE_HOME="$tmp/cache" "$amk" generate --cpu "Hello" >"$tmp/out" 2>"$tmp/err"; then
  fail "succeeded without a model"
fi
grep -q "fetch-model.sh" "$tmp/err" || fail "no hint at tools/fetch-model.sh"

# bad options are usage errors (exit 2)
status=0
"$amk" generate --temperature -1 "Hello" >"$tmp/out" 2>"$tmp/err" || status=$?
[ "$status" = 2 ] || fail "--temperature -1 gave exit status $status, not 2"

if [ -z "${AMK_TEST_GGUF:-}" ] || [ ! -f "$AMK_TEST_GGUF" ]; then
  echo "SKIP: set AMK_TEST_GGUF to a llama GGUF file (SmolLM2-135M-Instruct)"
  exit 77
fi

"$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 3 "The capital of France is" \
  >"$tmp/out" 2>"$tmp/err" || fail "amk generate failed"
grep -q "^The capital of France is Paris" "$tmp/out" || fail "not the greedy text"
grep -q "^Loaded " "$tmp/err" || fail "no loading line"
tail -n 1 "$tmp/err" | grep -Eq "^3 tokens in [0-9.]+ s: prompt [0-9]+ tokens at [0-9.]+ tokens/s, first token after [0-9.]+ s, generation at [0-9.]+ tokens/s \([0-9.]+ ms per token\), CPU executor$" || fail "no summary line"
summary=$(tail -n 1 "$tmp/err")

# the prompt one decode step per token gives the same text
"$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 3 --prefill-chunk 1 "The capital of France is" \
  >"$tmp/out1" 2>"$tmp/err" || fail "amk generate --prefill-chunk 1 failed"
cmp -s "$tmp/out" "$tmp/out1" || fail "--prefill-chunk 1 gave another text"
status=0
"$amk" generate --prefill-chunk -1 "Hello" >"$tmp/out1" 2>"$tmp/err" || status=$?
[ "$status" = 2 ] || fail "--prefill-chunk -1 gave exit status $status, not 2"
echo "ok: $(head -n 1 "$tmp/out"); $summary"
