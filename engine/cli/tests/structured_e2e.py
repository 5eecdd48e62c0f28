#!/usr/bin/env python3
"""Structured output and tool calling end to end: `tandem-engine serve` on a small random model,
driven by the official `openai` npm client, answers validated by ajv
(engine/reference/structured_output.mjs, engine/reference/tool_calls.mjs: the latter against a
server with --enable-auto-tool-choice --tool-call-parser hermes and one without).

    structured_e2e.py TANDEM_ENGINE TANDEM_GENMODEL WORK_DIR [N_SCHEMAS]

A random model knows nothing of JSON: every answer that parses and validates does so because the
grammar masked the logits. Exit 77 (skipped) when node or the npm packages are missing.
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_e2e import FAILS, Server, check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "reference")
NODE_MODULES = os.path.join(REFERENCE, "node_modules")


def main():
    exe, gen, work = sys.argv[1:4]
    n_schemas = sys.argv[4] if len(sys.argv) > 4 else "200"
    if not shutil.which("node") or not all(
            os.path.isdir(os.path.join(NODE_MODULES, p)) for p in ("openai", "ajv")):
        print("skipped: node or engine/reference/node_modules/{openai,ajv} missing "
              "(scripts/install-node-deps.sh)")
        return 77
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    srv = Server(exe, model, ["--max-model-len", "2048", "--max-num-seqs", "16"],
                 os.path.join(work, "server.log"))
    tools = None
    try:
        r = subprocess.run(["node", os.path.join(REFERENCE, "structured_output.mjs"),
                            "http://127.0.0.1:%d/v1" % srv.port, n_schemas],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600, cwd=REFERENCE)
        print(r.stdout, end="")
        check(r.returncode == 0, "structured output checks (exit %d)" % r.returncode)
        tools = Server(exe, model, ["--max-model-len", "2048", "--enable-auto-tool-choice",
                                    "--tool-call-parser", "hermes"],
                       os.path.join(work, "server-tools.log"))
        r = subprocess.run(["node", os.path.join(REFERENCE, "tool_calls.mjs"),
                            "http://127.0.0.1:%d/v1" % tools.port,
                            "http://127.0.0.1:%d/v1" % srv.port],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=300, cwd=REFERENCE)
        print(r.stdout, end="")
        check(r.returncode == 0, "tool calling checks (exit %d)" % r.returncode)
    finally:
        srv.stop()
        if tools:
            tools.stop()
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
