#!/usr/bin/env bash
# Checks the `tokenize` command-line contract (see tokenize_main.cc) against
# ids from the HF oracle data.
set -uo pipefail
ROOT="${TEST_SRCDIR:-.}/expertd"
[ -d "$ROOT/models" ] || ROOT=.
BIN="$ROOT/models/tokenizer/tokenize"
TOK="$ROOT/models/tokenizer/testdata/llama2/tokenizer.json"
fails=0
check() {  # name, want, got
  if [ "$2" == "$3" ]; then echo "ok   $1"; else echo "FAIL $1: want [$2] got [$3]"; fails=$((fails + 1)); fi
}

check "encode" "[22557,1526]" "$(printf 'Hello world' | "$BIN" --tokenizer="$TOK")"
check "encode with BOS" "[1,22557,1526]" "$(printf 'Hello world' | "$BIN" --tokenizer="$TOK" --add_special_tokens)"
check "decode" '"<s> Hello world"' "$(echo '[1,22557,1526]' | "$BIN" --tokenizer="$TOK" --decode)"
check "decode skip" '"Hello world"' "$(echo '[1, 22557, 1526]' | "$BIN" --tokenizer="$TOK" --decode --skip_special_tokens)"
check "jsonl encode" $'[22557]\n[]\n[1,22557]' \
  "$(printf '"Hello"\n""\n"<s>Hello"\n' | "$BIN" --tokenizer="$TOK" --jsonl)"
check "jsonl decode" $'"Hello"\n""\n"Hello world"' \
  "$(printf '[22557]\n[]\n[1,22557,1526]\n' | "$BIN" --tokenizer="$TOK" --jsonl --decode --skip_special_tokens)"
check "decode escapes" '"a\nb"' "$(printf 'a\nb' | "$BIN" --tokenizer="$TOK" | "$BIN" --tokenizer="$TOK" --decode)"

err=$(echo '[99999999]' | "$BIN" --tokenizer="$TOK" --decode 2>&1 >/dev/null); rc=$?
check "bad id exits non-zero" "1" "$rc"
case "$err" in *99999999*) check "bad id message" ok ok ;; *) check "bad id message" "mentions id" "$err" ;; esac
printf '"ok"\nnot json\n' | "$BIN" --tokenizer="$TOK" --jsonl >/dev/null 2>&1
check "bad jsonl line exits non-zero" "1" "$?"
printf 'x' | "$BIN" --tokenizer=/nonexistent.json >/dev/null 2>&1
check "missing tokenizer exits non-zero" "1" "$?"
printf 'x' | "$BIN" >/dev/null 2>&1
check "missing flag exits non-zero" "2" "$?"

[ "$fails" = 0 ] && echo "all passed" || { echo "$fails failed"; exit 1; }
