#!/bin/sh
# `amk generate`: without a model it says how to get one; with AMK_TEST_GGUF (else the
# rest is skipped: exit 77) it streams the text after the prompt and ends with the
# token count and time, the prefill's speed, the time to the first token, the
# generation's speed and the executor on stderr; --prefill-chunk 1 (every prompt token
# through the decode step) gives the same text; bad arguments and prompts fail before
# anything is printed; the prompt from stdin, --quiet, --stop, --ctx-size and the seed.
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

# no model in an empty cache: exit 1 and a pointer to amk fetch-model
if env -u AMK_MODEL -u AMK_CACHE_DIR XDG_CACHE_HOME="$tmp/cache" "$amk" generate --cpu "Hello" >"$tmp/out" 2>"$tmp/err"; then
  fail "succeeded without a model"
fi
grep -q "amk fetch-model" "$tmp/err" || fail "no hint at amk fetch-model"

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
grep -Eq "^Loaded .* in [0-9.]+ s: [0-9.]+ MiB of weights$" "$tmp/err" || fail "no loading line"
tail -n 1 "$tmp/err" | grep -Eq "^3 tokens in [0-9.]+ s: prompt [0-9]+ tokens at [0-9.]+ tokens/s, first token after [0-9.]+ s, generation at [0-9.]+ tokens/s \([0-9.]+ ms per token\), CPU executor$" || fail "no summary line"
summary=$(tail -n 1 "$tmp/err")

# the prompt one decode step per token gives the same text
"$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 3 --prefill-chunk 1 "The capital of France is" \
  >"$tmp/out1" 2>"$tmp/err" || fail "amk generate --prefill-chunk 1 failed"
cmp -s "$tmp/out" "$tmp/out1" || fail "--prefill-chunk 1 gave another text"
status=0
"$amk" generate --prefill-chunk -1 "Hello" >"$tmp/out1" 2>"$tmp/err" || status=$?
[ "$status" = 2 ] || fail "--prefill-chunk -1 gave exit status $status, not 2"

# bad prompts and options are refused before anything is printed (exit 2, empty stdout)
for args in "--system x Hello" "--ctx-size -1 Hello" "--stop= Hello"; do
  status=0
  # shellcheck disable=SC2086
  "$amk" generate --cpu --model "$AMK_TEST_GGUF" $args >"$tmp/out1" 2>"$tmp/err" || status=$?
  [ "$status" = 2 ] && [ ! -s "$tmp/out1" ] || fail "'$args' gave exit status $status or output"
done
for prompt in "" "$(printf '\377\376')"; do
  status=0
  "$amk" generate --cpu --model "$AMK_TEST_GGUF" "$prompt" >"$tmp/out1" 2>"$tmp/err" || status=$?
  [ "$status" = 2 ] && [ ! -s "$tmp/out1" ] || fail "a bad prompt gave exit status $status or output"
done
# a prompt longer than --ctx-size: exit 1, nothing echoed
status=0
"$amk" generate --cpu --model "$AMK_TEST_GGUF" --ctx-size 8 "The capital of France is the city of lights and" \
  >"$tmp/out1" 2>"$tmp/err" || status=$?
[ "$status" = 1 ] && [ ! -s "$tmp/out1" ] || fail "a prompt beyond --ctx-size gave exit status $status or output"
grep -q -- "--ctx-size" "$tmp/err" || fail "no advice to give a longer --ctx-size"
# errors are one sentence, without the domain and code of the GError
if grep -q "domain" "$tmp/err"; then fail "an error message carries its GError domain"; fi

# the prompt from standard input, --quiet prints the generated text only
echo "The capital of France is" | "$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 3 --quiet - \
  >"$tmp/out1" 2>"$tmp/err" || fail "amk generate - failed"
[ "The capital of France is$(cat "$tmp/out1")" = "$(cat "$tmp/out")" ] || fail "--quiet - gave another text"
[ ! -s "$tmp/err" ] || fail "--quiet printed on stderr"

# --stop ends the text where it first ends with the stop string
"$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 20 --quiet --stop "," "1, 2, 3" \
  >"$tmp/out1" 2>"$tmp/err" || fail "--stop failed"
[ "$(cat "$tmp/out1")" = "," ] || fail "--stop , gave '$(cat "$tmp/out1")'"

# without --seed each run draws its own seed, shown by --verbose; a given seed repeats
for k in 1 2; do
  "$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 1 --verbose "Hi" >/dev/null 2>"$tmp/seed$k" ||
    fail "--verbose failed"
done
s1=$(grep "^Seed " "$tmp/seed1") && s2=$(grep "^Seed " "$tmp/seed2") || fail "--verbose shows no seed"
[ "$s1" != "$s2" ] || fail "two runs without --seed used the same seed: $s1"
for k in 1 2; do
  "$amk" generate --cpu --model "$AMK_TEST_GGUF" --max-tokens 6 --temperature 1 --seed 7 --quiet "Once" \
    >"$tmp/sampled$k" 2>/dev/null || fail "sampling failed"
done
cmp -s "$tmp/sampled1" "$tmp/sampled2" || fail "--seed 7 gave two texts"
echo "ok: $(head -n 1 "$tmp/out"); $summary"
