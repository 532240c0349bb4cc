#!/usr/bin/env bash
# Runs openai_client_test.mjs with Node's test runner. The `openai` package is
# installed by tools/setup.sh (npm ci of tests/openai/package-lock.json) next
# to the source package.json, found here through the runfiles symlink.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
src_dir="$(dirname "$(readlink -f tests/openai/package.json)")"
if [ ! -d "$src_dir/node_modules/openai" ]; then
  echo "tests/openai/node_modules/openai is missing: run tools/setup.sh" >&2
  exit 1
fi
export NODE_PATH="$src_dir/node_modules"
export EXPERTD="$PWD/server/expertd"
export MODEL_DIR="$PWD/tests/data/zoo_default"
export TEMPLATE_CONFIG="$PWD/models/chat_template/testdata/qwen3/tokenizer_config.json"
# ESM resolves packages from the script's directory: run a copy beside node_modules' parent.
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/openai-e2e.XXXXXX")"
ln -s "$src_dir/node_modules" "$work/node_modules"
cp tests/openai/openai_client_test.mjs "$work/"
exec node --test --test-reporter=spec "$work/openai_client_test.mjs"
