#!/usr/bin/env bash
# Fast offline checks of everything in deploy/ (CI runs it as //deploy:check_test):
#   - yamllint on every YAML file, shellcheck on every script;
#   - `kubectl kustomize` renders every overlay in kubernetes/overlays/;
#   - every rendered object, and every template, validates against the
#     Kubernetes (and Prometheus Operator) API schemas (validate/, npm);
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
step() { echo "== $*"; }

for tool in kubectl node promtool yamllint shellcheck python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing (run tools/setup.sh)"
done
[[ -d "$source_deploy/validate/node_modules/kubernetes-models" ]] ||
  fail "$source_deploy/validate/node_modules is missing (run tools/setup.sh)"
[[ -x "$expertd" ]] || fail "no expertd binary at $expertd (bazel build //server:expertd)"
[[ -f "$model_dir/config.json" ]] || fail "no model at $model_dir"

step "yamllint"
yamllint -s -c "$deploy/.yamllint" "$deploy"

step "shellcheck"
shellcheck -x --source-path=SCRIPTDIR "$deploy"/*.sh "$deploy"/image/*.sh

step "kustomize"
rendered=()
for overlay in "$deploy"/kubernetes/overlays/*/; do
  name=$(basename "$overlay")
  kubectl kustomize "$overlay" >"$tmp/$name.yaml" || fail "overlay $name does not render"
  rendered+=("$tmp/$name.yaml")
  echo "rendered $name: $(grep -c '^kind:' "$tmp/$name.yaml") objects"
done
((${#rendered[@]} >= 2)) || fail "expected the cpu and gpu overlays at least"

step "schemas"
node "$deploy/validate/validate.mjs" "${rendered[@]}" "$deploy"/kubernetes/templates/*.yaml

step "alert rules"
rules_dir="$deploy/kubernetes/components/prometheus-operator"
python3 -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"], open(sys.argv[2], "w"))' \
  "$rules_dir/prometheusrule.yaml" "$tmp/rules.yaml"
promtool check rules "$tmp/rules.yaml"
cp "$rules_dir/alerts_test.yaml" "$tmp/alerts_test.yaml"
(cd "$tmp" && promtool test rules alerts_test.yaml)

step "daemon config (expertd --check_config)"
# The pod's paths do not exist here: point only those at local stand-ins.
printf '%s\n' "check-token-0123456789abcdef" >"$tmp/admin-token"
local_paths=("--model_dir=$model_dir" "--admin_token_file=$tmp/admin-token")
for file in "${rendered[@]}"; do
  python3 - "$file" "$tmp/expertd.json" <<'PY'
import sys, yaml
configs = [d["data"]["expertd.json"] for d in yaml.safe_load_all(open(sys.argv[1]))
           if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("expertd-config")]
if len(configs) != 1:
    sys.exit(f"{sys.argv[1]}: expected one expertd-config ConfigMap, found {len(configs)}")
open(sys.argv[2], "w").write(configs[0])
PY
  "$expertd" --config="$tmp/expertd.json" "${local_paths[@]}" --check_config ||
    fail "$(basename "$file" .yaml): the ConfigMap's expertd.json is rejected"
done
sed 's/"expert_policy"/"expert_polcy"/' "$tmp/expertd.json" >"$tmp/misspelled.json"
if "$expertd" --config="$tmp/misspelled.json" "${local_paths[@]}" --check_config 2>"$tmp/misspelled.err"; then
  fail "--check_config accepted a misspelled flag"
fi
echo "a misspelled flag is refused: $(cat "$tmp/misspelled.err")"

step "dashboard and alert metrics against a running expertd"
dashboard="$rules_dir/grafana-dashboard.json"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["panels"], "no panels"' "$dashboard" ||
  fail "the dashboard does not parse"
"$expertd" --model_dir="$model_dir" --listen=127.0.0.1:0 --port_file="$tmp/port" \
  --metrics_listen=127.0.0.1:0 --expert_offload --shutdown_grace_seconds=1 \
  --expert_pack_dir="$tmp/pack" --log_format=json 2>"$tmp/expertd.log" &
pid=$!
python3 - "$tmp/expertd.log" "$tmp/scrape.txt" <<'PY' || { kill "$pid"; cat "$tmp/expertd.log" >&2; fail "no /metrics"; }
import json, sys, time, urllib.request
deadline = time.monotonic() + 60
port = None
while port is None:
    if time.monotonic() > deadline:
        sys.exit("expertd did not log 'metrics listening' within 60 s")
    for line in open(sys.argv[1]):
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("msg") == "metrics listening":
            port = entry["port"]
    time.sleep(0.1)
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
open(sys.argv[2], "w").write(body)
PY
kill -TERM "$pid"
wait "$pid" || fail "expertd did not exit 0 on SIGTERM"
python3 "$deploy/metric_names.py" "$tmp/scrape.txt" "$dashboard" "$tmp/rules.yaml"

echo "deploy: all checks passed"
