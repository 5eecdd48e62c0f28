#!/usr/bin/env python3
"""Writes the chat templates of bundled_templates.txt as tokenizer_config-shaped JSON files.

    bundled_templates.py BUNDLE LIST OUT_DIR

BUNDLE is node-llama-cpp's llama/gitRelease.bundle (the llama.cpp source it pins; installed by
scripts/install-node-deps.sh), cloned bare into OUT_DIR/.src; each LIST line NAME FILE CONFIG
becomes OUT_DIR/NAME.json: {"chat_template": <models/templates/FILE>, "source": ..., **CONFIG}.
Standard library and git only. Exit 77 when the bundle is missing, 1 when a listed file is.
"""
import json
import os
import subprocess
import sys


def main():
    bundle, listing, out = sys.argv[1:4]
    if not os.path.isfile(bundle):
        print("SKIP: %s not found (scripts/install-node-deps.sh)" % bundle)
        return 77
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, ".src")
    if not os.path.isdir(src):
        subprocess.run(["git", "clone", "--bare", "--quiet", bundle, src], check=True)
    n = 0
    with open(listing, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, jinja, config = line.split(" ", 2)
            r = subprocess.run(["git", "--git-dir", src, "show", "HEAD:models/templates/" + jinja],
                               capture_output=True)
            if r.returncode != 0:
                print("bundled_templates: models/templates/%s is not in %s" % (jinja, bundle),
                      file=sys.stderr)
                return 1
            doc = {"source": "llama.cpp (node-llama-cpp's bundle) models/templates/" + jinja,
                   "chat_template": r.stdout.decode("utf-8")}
            doc.update(json.loads(config))
            with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as g:
                json.dump(doc, g, ensure_ascii=False)
            n += 1
    print("bundled_templates: %d templates" % n, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
