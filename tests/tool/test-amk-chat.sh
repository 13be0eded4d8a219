#!/bin/sh
# `amk chat`: a conversation from standard input keeps its history (a follow-up question
# is answered from it), /reset and /system start over, /quit leaves; under tmux, as in a
# terminal, Ctrl-C stops a long answer and the chat goes on. Needs AMK_TEST_GGUF (else
# exit 77); the tmux part needs tmux.
# Usage: test-amk-chat.sh PATH/TO/amk
# SPDX-License-Identifier: LGPL-2.1-or-later
set -eu

amk=$1
tmp=$(mktemp -d)
session="amk-chat-test-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$tmp"' EXIT

fail () {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*; do echo "--- $f:" >&2; cat "$f" >&2; done
  exit 1
}

# arguments are checked before the model loads (exit 2)
status=0
"$amk" chat --cpu --template nope >"$tmp/out" 2>"$tmp/err" </dev/null || status=$?
[ "$status" = 2 ] || [ "$status" = 1 ] || fail "--template nope gave exit status $status"
status=0
"$amk" chat --cpu extra-argument >"$tmp/out" 2>"$tmp/err" </dev/null || status=$?
[ "$status" = 2 ] || fail "an argument gave exit status $status, not 2"

if [ -z "${AMK_TEST_GGUF:-}" ] || [ ! -f "$AMK_TEST_GGUF" ]; then
  echo "SKIP: set AMK_TEST_GGUF to a chat model's GGUF file (SmolLM2-135M-Instruct)"
  exit 77
fi

printf 'What is the capital of France?\nAnd of Italy?\n/reset\nWhat is the capital of Germany?\n/quit\n' |
  "$amk" chat --cpu --model "$AMK_TEST_GGUF" --temperature 0 --max-tokens 24 >"$tmp/out" 2>"$tmp/err" ||
  fail "amk chat failed"
sed -n 1p "$tmp/out" | grep -q "Paris" || fail "no Paris in the first answer"
sed -n 2p "$tmp/out" | grep -q "Rome" || fail "the follow-up was not answered from the history"
sed -n 3p "$tmp/out" | grep -q "Berlin" || fail "no Berlin after /reset"
[ "$(grep -c "a new conversation" "$tmp/err")" = 1 ] || fail "/reset was not acknowledged"

if ! command -v tmux >/dev/null; then
  echo "ok (without tmux: the Ctrl-C part skipped)"
  exit 0
fi
# a terminal: a long answer stopped by Ctrl-C, then another question, then /quit
tmux new-session -d -s "$session" -x 200 -y 50 \
  "'$amk' chat --cpu --model '$AMK_TEST_GGUF' --temperature 0 --max-tokens 400 2>&1; echo \"exit status \$?\" > '$tmp/status'; sleep 30"
wait_for () {   # pattern, seconds
  n=0
  while ! tmux capture-pane -p -t "$session" -S -200 | grep -q "$1"; do
    n=$((n + 1)); [ "$n" -le $(($2 * 5)) ] || return 1; sleep 0.2
  done
}
wait_for "^>" 60 || fail "no prompt: $(tmux capture-pane -p -t "$session")"
tmux send-keys -t "$session" "Write a very long story about a dragon who learns to cook." Enter
sleep 4
tmux send-keys -t "$session" C-c
wait_for "(stopped)" 30 || fail "Ctrl-C did not stop the answer: $(tmux capture-pane -p -t "$session")"
tmux send-keys -t "$session" "What is the capital of France?" Enter
wait_for "Paris" 60 || fail "no answer after Ctrl-C: $(tmux capture-pane -p -t "$session")"
tmux send-keys -t "$session" "/quit" Enter
n=0
while [ ! -s "$tmp/status" ]; do n=$((n + 1)); [ "$n" -le 100 ] || fail "/quit did not leave"; sleep 0.2; done
grep -q "exit status 0" "$tmp/status" || fail "amk chat ended with $(cat "$tmp/status")"
echo "ok: history, /reset, Ctrl-C under tmux, /quit"
