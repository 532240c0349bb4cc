#!/usr/bin/env bash
# Replays corpus files through a fuzz target's replay binary (a target whose
# entry point lives beside its parser, not in tests/fuzz): replay_corpus.sh
# BINARY FILE... ; the binary aborts on the first input that breaks an
# invariant.
set -euo pipefail
bin=$1
shift
(($#)) || { echo "replay_corpus.sh: no corpus files" >&2; exit 1; }
exec "$bin" "$@"
