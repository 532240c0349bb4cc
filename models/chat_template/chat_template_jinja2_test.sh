#!/usr/bin/env bash
# Runs chat_template_jinja2_test.py with Debian's Python (python3-jinja2 from
# tools/setup.sh). Bazel 4's py_test launcher wants a `python` binary Debian lacks.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
exec /usr/bin/python3 -B models/chat_template/chat_template_jinja2_test.py "$@"
