#!/usr/bin/env python3
"""The engine's server driven by clients no one here wrote (Python 3 stdlib + node).

    openai_client_e2e.py TANDEM_ENGINE TANDEM_GENMODEL WORK_DIR

Generates a small llama model and starts `tandem-engine serve --api-key ...`. Over raw HTTP:
vLLM's API key rules (401 with {"error":"Unauthorized"} on every /v1 path without a valid
"Authorization: Bearer" key, unknown /v1 paths 401 without and 404 with one, OPTIONS and the
paths outside /v1 open, the scheme case-insensitive, $VLLM_API_KEY when no flag is given, no
check at all without keys). Then the official `openai` npm client (engine/reference/openai_client.mjs) runs its
checks against the same server. Exit 77 (skipped) when node or the npm packages are missing.
"""

import http.client
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_e2e import FAILS, Server, check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_MODULES = os.path.join(HERE, "..", "..", "reference", "node_modules")


def request(srv, method, path, key=None, body=None, auth=None):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    elif key is not None:
        headers["Authorization"] = "Bearer " + key
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def run_keys(srv, key, key2):
    comp = {"prompt": "hello", "max_tokens": 2, "temperature": 0}
    for auth in (None, "Bearer " + key + "x", "Basic " + key, "Bearer", "Bearer  " + key, key):
        st, body = request(srv, "POST", "/v1/completions", body=comp, auth=auth)
        check(st == 401 and json.loads(body) == {"error": "Unauthorized"},
              "auth %r: 401 {'error':'Unauthorized'}, got %d %r" % (auth, st, body[:100]))
    for auth in ("Bearer " + key, "bearer " + key, "BEARER " + key2):
        st, body = request(srv, "POST", "/v1/completions", body=comp, auth=auth)
        check(st == 200, "auth %r: 200, got %d %r" % (auth, st, body[:200]))
    st, _ = request(srv, "GET", "/v1/models")
    check(st == 401, "/v1/models without a key: %d" % st)
    st, _ = request(srv, "GET", "/v1/models", key=key)
    check(st == 200, "/v1/models with the key: %d" % st)
    st, _ = request(srv, "GET", "/v1/no-such-thing")
    check(st == 401, "unknown /v1 path without a key: %d (want 401)" % st)
    st, _ = request(srv, "GET", "/v1/no-such-thing", key=key)
    check(st == 404, "unknown /v1 path with the key: %d (want 404)" % st)
    st, _ = request(srv, "OPTIONS", "/v1/completions")
    check(st != 401, "OPTIONS needs no key: %d" % st)
    for path in ("/health", "/metrics", "/version", "/ping"):
        st, _ = request(srv, "GET", path)
        check(st == 200, "%s needs no key: %d" % (path, st))
    st, _ = request(srv, "POST", "/tokenize", body={"prompt": "hi"})
    check(st == 200, "/tokenize needs no key (outside /v1, as in vLLM): %d" % st)
    st, _ = request(srv, "GET", "/metrics")
    _, metrics = request(srv, "GET", "/metrics")
    check(b'route="gate"' in metrics, "401s are counted under route=\"gate\" on /metrics")


def main():
    exe, gen, work = sys.argv[1:4]
    if not shutil.which("node") or not os.path.isdir(os.path.join(NODE_MODULES, "openai")):
        print("skipped: node or engine/reference/node_modules/openai missing "
              "(scripts/install-node-deps.sh)")
        return 77
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    key, key2 = "sk-tandem-test", "second-key"
    srv = Server(exe, model, ["--api-key", key, key2], os.path.join(work, "server.log"))
    try:
        run_keys(srv, key, key2)
        env = dict(os.environ, NODE_PATH=NODE_MODULES)
        r = subprocess.run(["node", os.path.join(NODE_MODULES, "..", "openai_client.mjs"),
                            "http://127.0.0.1:%d/v1" % srv.port, key, key2],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=240, cwd=os.path.join(NODE_MODULES, ".."))
        print(r.stdout, end="")
        check(r.returncode == 0, "openai npm client checks (exit %d)" % r.returncode)
    finally:
        srv.stop()

    # $VLLM_API_KEY when no --api-key is given; no keys: nothing is checked
    os.environ["VLLM_API_KEY"] = "from-env"
    srv = Server(exe, model, [], os.path.join(work, "server-env.log"))
    try:
        st, _ = request(srv, "GET", "/v1/models")
        check(st == 401, "$VLLM_API_KEY: /v1/models without a key: %d" % st)
        st, _ = request(srv, "GET", "/v1/models", key="from-env")
        check(st == 200, "$VLLM_API_KEY: with it: %d" % st)
    finally:
        srv.stop()
    os.environ["VLLM_API_KEY"] = "flag-wins-over-env"
    srv = Server(exe, model, ["--api-key", "flag"], os.path.join(work, "server-flag.log"))
    try:
        st, _ = request(srv, "GET", "/v1/models", key="flag-wins-over-env")
        check(st == 401, "--api-key wins over $VLLM_API_KEY: %d" % st)
        st, _ = request(srv, "GET", "/v1/models", key="flag")
        check(st == 200, "--api-key: %d" % st)
    finally:
        srv.stop()
    del os.environ["VLLM_API_KEY"]
    srv = Server(exe, model, [], os.path.join(work, "server-open.log"))
    try:
        st, _ = request(srv, "GET", "/v1/models")
        check(st == 200, "no keys: /v1/models open: %d" % st)
    finally:
        srv.stop()
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
