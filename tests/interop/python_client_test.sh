#!/usr/bin/env bash
# Runs python_client_test.py with Debian's Python, where python3-grpcio,
# python3-protobuf and python3-prometheus-client live (tools/setup.sh).
# (Bazel 4's py_test launcher wants a `python` binary, which Debian lacks.)
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
exec /usr/bin/python3 -B tests/interop/python_client_test.py "$@"
