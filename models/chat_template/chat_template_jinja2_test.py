"""Byte-for-byte comparison of our chat-template interpreter with jinja2.

The reference is Python's jinja2 configured exactly as Hugging Face
transformers configures it for apply_chat_template: ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension and a
`{% generation %}` tag, raise_exception and strftime_now globals, and tojson
overridden by json.dumps(ensure_ascii=False, ...). Expectations are generated
here, at test time, so the test always compares against the installed jinja2.

For every real template (testdata/*/tokenizer_config.json) x every conversation
(testdata/conversations.json), and for every synthetic template
(testdata/feature_templates.json): either both render the same bytes, or both
fail (with the same message when the template called raise_exception).
"""
import glob
import json
import os
import subprocess
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = "models/chat_template"
BINARY = os.path.join(HERE, "render_chat_template")
TESTDATA = os.path.join(HERE, "testdata")


class RaisedException(jinja2.exceptions.TemplateError):
    """raise_exception's error (HF raises TemplateError; a subclass tells it apart)."""


class GenerationTag(Extension):
    """HF's AssistantTracker without the tracking: renders the body in place."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise RaisedException(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_environment()


def reference(template, variables):
    try:
        return {"text": template.render(**variables)}
    except RaisedException as e:
        return {"raised": str(e)}
    except Exception as e:  # any other render error: we only require that both fail
        return {"failed": f"{type(e).__name__}: {e}"}


def special_tokens(config):
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token"):
        token = config.get(name)
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            out[name] = token
    return out


def run_binary(args, payload):
    proc = subprocess.run([BINARY] + args, input=json.dumps(payload, ensure_ascii=False).encode(),
                          capture_output=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{BINARY} {args} exited {proc.returncode}: {proc.stderr.decode()}")
    return json.loads(proc.stdout.decode())


def compare(label, expected, got, failures):
    if "text" in expected:
        if got.get("text") != expected["text"]:
            failures.append(f"{label}: expected {expected['text']!r}\n   got {got!r}")
        return
    if "error" not in got:
        failures.append(f"{label}: jinja2 failed ({expected}), we rendered {got!r}")
    elif "raised" in expected and got["error"] != expected["raised"]:
        failures.append(f"{label}: raise_exception message {expected['raised']!r}, got {got['error']!r}")


def check_real_templates(failures):
    conversations = json.load(open(os.path.join(TESTDATA, "conversations.json"), encoding="utf-8"))
    configs = sorted(glob.glob(os.path.join(TESTDATA, "*", "tokenizer_config.json")))
    assert len(configs) >= 6, configs
    compared = 0
    for path in configs:
        model = os.path.basename(os.path.dirname(path))
        config = json.load(open(path, encoding="utf-8"))
        template = ENV.from_string(config["chat_template"])
        cases = []
        for c in conversations:
            cases.append({"messages": c["messages"], "tools": c.get("tools"),
                          "add_generation_prompt": c["add_generation_prompt"],
                          "kwargs": c.get("kwargs", {})})
        results = run_binary([f"--tokenizer_config={path}"], cases)
        assert len(results) == len(cases)
        rendered = 0
        for c, got in zip(conversations, results):
            variables = dict(special_tokens(config))
            variables.update(c.get("kwargs", {}))
            variables.update(messages=c["messages"], tools=c.get("tools"), documents=None,
                             add_generation_prompt=c["add_generation_prompt"])
            expected = reference(template, variables)
            rendered += "text" in expected
            compare(f"{model}/{c['name']}", expected, got, failures)
            compared += 1
        # Most conversations must render: a corpus the templates reject proves little.
        assert rendered >= len(conversations) // 2, (model, rendered)
    return compared


def check_feature_templates(failures):
    features = json.load(open(os.path.join(TESTDATA, "feature_templates.json"), encoding="utf-8"))
    results = run_binary(["--raw"], features)
    for feature, got in zip(features, results):
        label = f"feature/{feature['name']}"
        if "load_error" in got:
            failures.append(f"{label}: did not load: {got['load_error']}")
            continue
        expected = reference(ENV.from_string(feature["template"]), feature["variables"])
        compare(label, expected, got, failures)
    return len(features)


def check_load_time_errors(failures):
    unsupported = {
        "{% include 'x' %}": "{% include %}",
        "{% extends 'x' %}": "{% extends %}",
        "{% call foo() %}x{% endcall %}": "{% call %}",
        "{% filter upper %}x{% endfilter %}": "{% filter %}",
        "{{ x|frobnicate }}": "filter 'frobnicate'",
        "{{ x is frobnicated }}": "test 'frobnicated'",
        "{{ cycler(1, 2) }}": "function 'cycler'",
        "{{ x.append(1) }}": "method 'append'",
        "{% if x %}unterminated": "missing {% endif %}",
    }
    results = run_binary(["--raw"], [{"template": t, "variables": {}} for t in unsupported])
    for (template, construct), got in zip(unsupported.items(), results):
        if construct not in got.get("load_error", ""):
            failures.append(f"load error for {template!r} should name {construct!r}: {got}")
    return len(unsupported)


def main():
    os.environ.setdefault("TZ", "UTC")
    failures = []
    n = check_real_templates(failures)
    n += check_feature_templates(failures)
    n += check_load_time_errors(failures)
    for f in failures:
        print("FAIL", f)
    print(f"{n - len(failures)} of {n} cases identical to jinja2 {jinja2.__version__}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
