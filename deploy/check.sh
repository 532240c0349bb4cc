#!/usr/bin/env bash
# Fast offline checks of everything in deploy/ (CI runs it as //deploy:check_test):
#   - yamllint on every YAML file, shellcheck on every script;
#   - `kubectl kustomize` renders every overlay in kubernetes/overlays/;
#   - every rendered object, and every template (the multi-node
#     LeaderWorkerSet and indexed Job included), validates against the
#     Kubernetes (and Prometheus Operator) API schemas (validate/, npm), with
#     no field the API does not declare;
#   - the validator itself refuses a misspelled field (validate/testdata);
#   - `promtool check rules` and `promtool test rules` on the alert rules;
#   - each overlay's expertd.json is accepted by `expertd --check_config`
#     (and a misspelled flag is not);
#   - the Grafana dashboard parses and every expertd metric it or an alert
#     queries is in the /metrics answer of a running expertd.
# usage: deploy/check.sh [EXPERTD [MODEL_DIR]]
#   (defaults: bazel-bin/server/expertd, tests/data/fixtures/qwen2_moe_mixed;
#   under `bazel test`, the runfiles of //deploy:check_test)
set -euo pipefail

# kustomize refuses files that resolve outside the kustomization, and Bazel's
# runfiles are symlinks into the source tree: under `bazel test`, check a
# dereferenced copy of exactly the declared inputs. The npm packages are not
# Bazel inputs: they come from the source tree, where tools/setup.sh put them.
source_deploy=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
  expertd="${1:-$runfiles/server/expertd}"
  model_dir="${2:-$runfiles/tests/data/fixtures/qwen2_moe_mixed}"
  tmp="${TEST_TMPDIR}"
  cp -rL "$runfiles/deploy" "$tmp/deploy"
  cp -L "${BASH_SOURCE[0]}" "$tmp/deploy/check.sh"
  deploy="$tmp/deploy"
  ln -s "$source_deploy/validate/node_modules" "$deploy/validate/node_modules"
else
  deploy=$source_deploy
  expertd="${1:-$deploy/../bazel-bin/server/expertd}"
  model_dir="${2:-$deploy/../tests/data/fixtures/qwen2_moe_mixed}"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi

fail() { echo "check: FAIL: $*" >&2; exit 1; }

for tool in kubectl node promtool yamllint shellcheck python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing (run tools/setup.sh)"
done
[[ -d "$source_deploy/validate/node_modules/kubernetes-models" ]] ||
  fail "$source_deploy/validate/node_modules is missing (run tools/setup.sh)"
[[ -x "$expertd" ]] || fail "no expertd binary at $expertd (bazel build //server:expertd)"
[[ -f "$model_dir/config.json" ]] || fail "no model at $model_dir"

rules_dir="$deploy/kubernetes/components/prometheus-operator"
dashboard="$rules_dir/grafana-dashboard.json"
mkdir -p "$tmp/rendered"

check_yamllint() { yamllint -s -c "$deploy/.yamllint" "$deploy"; }

check_shellcheck() { shellcheck -x --source-path=SCRIPTDIR "$deploy"/*.sh "$deploy"/image/*.sh; }

check_kustomize() {
  local overlay name count=0
  for overlay in "$deploy"/kubernetes/overlays/*/; do
    name=$(basename "$overlay")
    kubectl kustomize "$overlay" >"$tmp/rendered/$name.yaml" || fail "overlay $name does not render"
    echo "rendered $name: $(grep -c '^kind:' "$tmp/rendered/$name.yaml") objects"
    count=$((count + 1))
  done
  ((count >= 2)) || fail "expected the cpu and gpu overlays at least"
}

check_schemas() {
  node "$deploy/validate/validate.mjs" "$tmp"/rendered/*.yaml "$deploy"/kubernetes/templates/*.yaml
}

# The validator must refuse what the API would silently drop: each
# validate/testdata/unknown-field-*.yaml fails, naming its field.
check_validator() {
  local bad
  node "$deploy/validate/validate.mjs" "$deploy/validate/testdata/known-fields.yaml"
  for bad in "$deploy"/validate/testdata/unknown-field-*.yaml; do
    if node "$deploy/validate/validate.mjs" "$bad" >"$tmp/bad.out" 2>&1; then
      cat "$tmp/bad.out"
      fail "$(basename "$bad"): an unknown field was accepted"
    fi
    grep -q ': unknown field' "$tmp/bad.out" || { cat "$tmp/bad.out"; fail "$(basename "$bad"): failed, but not for its unknown field"; }
    echo "refused as expected: $(grep -o '[^ ]*: unknown field' "$tmp/bad.out")"
  done
}

check_alert_rules() {
  python3 -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"], open(sys.argv[2], "w"))' \
    "$rules_dir/prometheusrule.yaml" "$tmp/rules.yaml"
  promtool check rules "$tmp/rules.yaml"
  cp "$rules_dir/alerts_test.yaml" "$tmp/alerts_test.yaml"
  (cd "$tmp" && promtool test rules alerts_test.yaml)
}

# Each overlay's expertd.json through `expertd --check_config`. The pod's
# paths do not exist here: only those point at local stand-ins.
check_daemon_config() {
  local file local_paths
  printf '%s\n' "check-token-0123456789abcdef" >"$tmp/admin-token"
  printf '%s\n' "check-http-api-key-0123456789" >"$tmp/http-api-key"
  local_paths=("--model_dir=$model_dir" "--admin_token_file=$tmp/admin-token"
    "--api_key_file=$tmp/http-api-key")
  for file in "$tmp"/rendered/*.yaml; do
    python3 - "$file" "$tmp/expertd.json" <<'PY'
import sys, yaml
configs = [d["data"]["expertd.json"] for d in yaml.safe_load_all(open(sys.argv[1]))
           if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("expertd-config")]
if len(configs) != 1:
    sys.exit(f"{sys.argv[1]}: expected one expertd-config ConfigMap, found {len(configs)}")
open(sys.argv[2], "w").write(configs[0])
# Each listener in expertd.json must be the Deployment's port of that name.
import json
config = json.loads(configs[0])
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"]
ports = {p["name"]: p["containerPort"]
         for p in docs[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
for flag, name in [("listen", "grpc"), ("admin_listen", "admin"), ("metrics_listen", "metrics"),
                   ("http_listen", "http")]:
    if flag not in config:
        sys.exit(f"{sys.argv[1]}: expertd.json has no {flag} (the Deployment's {name} port)")
    if int(config[flag].rsplit(":", 1)[1]) != ports.get(name):
        sys.exit(f"{sys.argv[1]}: {flag}={config[flag]} but the Deployment's {name} port is "
                 f"{ports.get(name)}")
PY
    "$expertd" --config="$tmp/expertd.json" "${local_paths[@]}" --check_config ||
      fail "$(basename "$file" .yaml): the ConfigMap's expertd.json is rejected"
  done
  sed 's/"expert_policy"/"expert_polcy"/' "$tmp/expertd.json" >"$tmp/misspelled.json"
  if "$expertd" --config="$tmp/misspelled.json" "${local_paths[@]}" --check_config 2>"$tmp/misspelled.err"; then
    fail "--check_config accepted a misspelled flag"
  fi
  echo "a misspelled flag is refused: $(cat "$tmp/misspelled.err")"
}

# Every expertd metric the dashboard and the alerts query, against the
# /metrics answer of a running daemon (which must then drain and exit 0).
check_metrics() {
  local pid
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["panels"], "no panels"' "$dashboard" ||
    fail "the dashboard does not parse"
  [[ -f "$tmp/rules.yaml" ]] || fail "no rules.yaml (the alert rules check failed)"
  "$expertd" --model_dir="$model_dir" --listen=127.0.0.1:0 --port_file="$tmp/ports.json" \
    --metrics_listen=127.0.0.1:0 --expert_offload --shutdown_grace_seconds=1 \
    --expert_pack_dir="$tmp/pack" --log_format=json 2>"$tmp/expertd.log" &
  pid=$!
  if ! python3 - "$tmp/ports.json" "$tmp/scrape.txt" <<'PY'; then
import json, sys, time, urllib.request
# The port file appears (atomically) once both ports are bound.
deadline = time.monotonic() + 60
while True:
    try:
        port = json.load(open(sys.argv[1]))["metrics_port"]
        break
    except (OSError, ValueError):
        if time.monotonic() > deadline:
            sys.exit("expertd wrote no port file within 60 s")
        time.sleep(0.05)
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
open(sys.argv[2], "w").write(body)
PY
    kill "$pid"
    cat "$tmp/expertd.log" >&2
    fail "no /metrics"
  fi
  kill -TERM "$pid"
  wait "$pid" || fail "expertd did not exit 0 on SIGTERM"
  python3 "$deploy/metric_names.py" "$tmp/scrape.txt" "$dashboard" "$tmp/rules.yaml"
}

# Runs each check even when an earlier one failed; one JUnit test case per
# check under `bazel test` (XML_OUTPUT_FILE), so CI counts and names them.
results="$tmp/results.tsv"
: >"$results"
for check in yamllint shellcheck kustomize schemas validator alert_rules daemon_config metrics; do
  echo "== $check"
  start=$SECONDS
  if (set -euo pipefail; "check_$check") >"$tmp/$check.log" 2>&1; then status=passed; else status=failed; fi
  cat "$tmp/$check.log"
  printf '%s\t%s\t%s\t%s\n' "$check" "$status" "$((SECONDS - start))" "$tmp/$check.log" >>"$results"
  [[ $status == passed ]] || echo "check: $check FAILED"
done
python3 - "$results" "${XML_OUTPUT_FILE:-}" <<'PY'
import sys
from xml.sax.saxutils import quoteattr, escape
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
failed = [r for r in rows if r[1] != "passed"]
if sys.argv[2]:
    cases = []
    for name, status, seconds, log in rows:
        case = f'<testcase classname="deploy.check" name={quoteattr(name)} time="{seconds}"'
        if status == "passed":
            cases.append(case + "/>")
        else:
            tail = escape(open(log, errors="replace").read()[-4000:])
            cases.append(case + f'><failure message="{name} failed">{tail}</failure></testcase>')
    with open(sys.argv[2], "w") as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="deploy_check" '
                f'tests="{len(rows)}" failures="{len(failed)}">' + "".join(cases) + "</testsuite></testsuites>\n")
print(f"deploy: {len(rows) - len(failed)} checks passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
PY
