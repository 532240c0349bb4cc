#!/usr/bin/env bash
# Runs the expertd image with podman as the Kubernetes pod would (non-root,
# read-only root filesystem, no capabilities, the overlay's expertd.json,
# the admin token as a file, a zoo model mounted read-only) and checks:
# gRPC health SERVING, a Generate, GET /metrics, and that SIGTERM drains an
# in-flight Generate and exits 0. Also: no shell in the image, its size.
# Slow and needs root + podman: run by hand, not in CI.
#   deploy/test-image.sh [IMAGE]    (default localhost/expertd:latest, else :latest-cuda)
# Needs bazel-bin/models/zoo/expertd-zoo (tools/bazel.sh build //models/zoo:expertd-zoo).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${EXPERTD_IMAGE_CACHE:-/var/tmp/expertd-image}
# shellcheck source=image/store.sh
source "$repo/deploy/image/store.sh"
image_store_init "$cache"
for tool in podman runc; do
  command -v "$tool" >/dev/null || { echo "test-image: $tool is missing: apt-get install podman runc" >&2; exit 1; }
done
# runc with cgroupfs: works on hosts without systemd and with hybrid cgroups,
# where crun refuses.
podman=(podman --runtime=runc --cgroup-manager=cgroupfs --events-backend=file)
# Podman asks for 1M open files by default; hosts without CAP_SYS_RESOURCE
# (containers, sandboxes) refuse to raise limits, so ask for what is plenty.
limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

image=${1:-}
if [[ -z "$image" ]]; then
  image=localhost/expertd:latest
  "${podman[@]}" image exists "$image" || image=localhost/expertd:latest-cuda
fi
"${podman[@]}" image exists "$image" || { echo "test-image: no image $image: deploy/build-image.sh" >&2; exit 1; }
zoo="$repo/bazel-bin/models/zoo/expertd-zoo"
[[ -x "$zoo" ]] || { echo "test-image: no $zoo: tools/bazel.sh build //models/zoo:expertd-zoo" >&2; exit 1; }

work=$(mktemp -d /var/tmp/expertd-test-image.XXXXXX)
name="expertd-test-$$"
cleanup() {
  "${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "test-image: FAIL: $*" >&2
  "${podman[@]}" logs "$name" 2>&1 | tail -20 >&2 || true
  exit 1
}
pass() { echo "test-image: ok: $*"; }

echo "test-image: $image, $(image_size "$image")"
[[ $("${podman[@]}" image inspect --format '{{.Config.User}}' "$image") == 65532:65532 ]] || fail "the image does not run as 65532"
if "${podman[@]}" run --rm --network=none "${limits[@]}" --entrypoint /bin/sh "$image" -c true >"$work/sh.log" 2>&1; then
  fail "the image has a shell"
fi
grep -q '/bin/sh.*\(no such file\|not found\)' "$work/sh.log" || fail "running /bin/sh failed for another reason: $(cat "$work/sh.log")"
"${podman[@]}" run --rm --network=none "${limits[@]}" "$image" --help >/dev/null || fail "expertd --help does not run in the image"
pass "runs as 65532:65532, no /bin/sh"

# The pod's volumes: model (read-only), config, admin token, pack, run dir.
"$zoo" --preset=default --arch=qwen3_moe --out="$work/models/current" >/dev/null
mkdir -p "$work/config" "$work/admin" "$work/pack" "$work/run"
cp "$repo/deploy/kubernetes/base/expertd.json" "$work/config/expertd.json"
openssl rand -hex 32 >"$work/admin/admin-token"
openssl rand -hex 32 >"$work/admin/http-api-key"
chown -R 65532:65532 "$work/pack" "$work/run"
chmod 0444 "$work/admin/admin-token" "$work/admin/http-api-key"

# The base config as the pod gets it; only what must differ on a shared
# test host is overridden: ports (any free one) and smaller budgets.
"${podman[@]}" run -d --name "$name" --network=host "${limits[@]}" \
  --user 65532:65532 --read-only --cap-drop=all --security-opt=no-new-privileges \
  --tmpfs /tmp:rw,size=64m \
  -v "$work/models:/models:ro" -v "$work/config:/etc/expertd/config:ro" \
  -v "$work/admin:/etc/expertd/admin:ro" -v "$work/pack:/var/lib/expertd/pack" \
  -v "$work/run:/run/expertd" \
  "$image" --config=/etc/expertd/config/expertd.json \
  --listen=127.0.0.1:0 --port_file=/run/expertd/port --metrics_listen=127.0.0.1:0 \
  --admin_listen=127.0.0.1:0 --http_listen=127.0.0.1:0 \
  --device_memory_bytes=512MiB --host_expert_bytes=256MiB --kv_cache_bytes=64MiB \
  --shutdown_grace_seconds=20 --log_format=json >/dev/null

ctl() { "${podman[@]}" exec "$name" /usr/local/bin/expertctl --server="127.0.0.1:$port" "$@"; }

# Wait (bounded) for the port file, then for SERVING.
deadline=$((SECONDS + 120))
until [[ -s "$work/run/port" ]]; do
  ((SECONDS < deadline)) || fail "no port file within 120 s"
  [[ $("${podman[@]}" inspect --format '{{.State.Running}}' "$name") == true ]] || fail "the container exited"
  sleep 0.2
done
# The port file: {"grpc_port": N, "admin_port": A, "metrics_port": M, "http_port": H}.
read -r port admin_port metrics_port < <(python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); print(p["grpc_port"], p["admin_port"], p["metrics_port"])' "$work/run/port")
until ctl health --timeout_seconds=5 >"$work/health.txt" 2>&1; do
  ((SECONDS < deadline)) || fail "not SERVING within 120 s: $(cat "$work/health.txt")"
  sleep 0.5
done
pass "grpc.health.v1 SERVING on port $port ($(ctl health --service=expertd.v1.InferenceService))"
[[ $("${podman[@]}" exec "$name" /usr/local/bin/expertctl --server="127.0.0.1:$admin_port" \
  health --service=expertd.v1.AdminService) == SERVING ]] ||
  fail "AdminService is not SERVING on the admin port $admin_port"
pass "AdminService SERVING on its own port $admin_port"

text=$(ctl generate --prompt="The expert said" --max_new_tokens=16 --temperature=0 --seed=1) ||
  fail "Generate failed"
[[ -n "$text" ]] || fail "Generate returned no text"
pass "Generate: $(printf '%q' "$text")"

python3 - "$metrics_port" <<'PY' || fail "/metrics"
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
samples = {l.split(" ")[0]: float(l.rsplit(" ", 1)[1]) for l in body.splitlines() if l and not l.startswith("#")}
ok = [k for k in samples if k.startswith("expertd:requests_total{") and 'rpc="Generate"' in k and 'code="OK"' in k]
gen = sum(v for k, v in samples.items() if k.startswith("expertd:generation_tokens_total"))
assert ok and samples[ok[0]] >= 1, "no successful Generate counted"
assert gen >= 1, "no generated tokens counted"
print(f"test-image: ok: GET /metrics: {len(samples)} samples, Generate OK = {samples[ok[0]]:.0f}, generated tokens = {gen:.0f}")
PY

# SIGTERM while a Generate is in flight (seen in expertd:num_requests_running):
# it must finish, then the daemon exits 0.
ctl generate --prompt="Drain" --max_new_tokens=1500 --temperature=0 --seed=2 >"$work/inflight.txt" 2>"$work/inflight.err" &
inflight=$!
python3 - "$metrics_port" <<'PY' || fail "the long Generate never showed as running"
import sys, time, urllib.request
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
    running = [float(l.rsplit(" ", 1)[1]) for l in body.splitlines() if l.startswith("expertd:num_requests_running")]
    if running and running[0] >= 1:
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
PY
"${podman[@]}" kill --signal TERM "$name" >/dev/null
status=$("${podman[@]}" wait "$name")
wait "$inflight" || fail "the in-flight Generate failed during the drain: $(cat "$work/inflight.err")"
[[ "$status" == 0 ]] || fail "exit status $status after SIGTERM"
"${podman[@]}" logs "$name" 2>&1 | grep -q '"stop signal"' || fail "no 'stop signal' log line"
pass "SIGTERM: in-flight Generate finished ($(wc -c <"$work/inflight.txt") bytes), exit status 0"
echo "test-image: PASS ($image, $(image_size "$image"))"
