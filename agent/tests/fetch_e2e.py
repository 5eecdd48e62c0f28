#!/usr/bin/python3
"""Black-box test of `tandem-agent fetch`, the model downloader of the pods' init containers.

    fetch_e2e.py TANDEM_AGENT TANDEM_GENMODEL WORK_DIR      (the model generator is not used)

A scripted HTTP server on 127.0.0.1 (standard library only) plays a file server and the Hugging
Face hub; each case runs the agent the way the operator renders it (`fetch --uri URI --output
PATH`) and checks the result, the exit status, stderr and the requests the server saw:
  * resume: the first GET of a file is cut after N bytes; the agent retries with
    `Range: bytes=N-` and the result's sha256 matches; a .part left by an earlier run is resumed
    (`Range: bytes=K-`); a server that ignores Range (200) restarts the file; a .part that is
    already complete gets 416 and is renamed without downloading again;
  * retries: a 500 then success; a 503 with Retry-After: 2 is waited for (not the 1 s backoff);
  * a 404 exits 1 with a message naming the URI; bad usage exits 2;
  * the hub: a repository listing (config.json, model.safetensors, tokenizer.json, README.md,
    pytorch_model.bin, original/consolidated.pth) fetches exactly the first three, sends
    `Authorization: Bearer <HF_TOKEN>` to the hub but not across the redirect of
    model.safetensors to another host; a Mistral-style repository skips the safetensors file its
    index does not name; hf://org/repo@rev/file fetches one file at that revision; 401 (no token)
    mentions HF_TOKEN; a missing repository is named; a listing holding "../evil.json" is refused
    and nothing is written outside --output;
  * an output that is complete already is not downloaded again (no GET, for the file server
    and the hub);
  * file:// of a file and of a directory;
  * progress lines on stderr.
Every wait is bounded; the whole test takes a few seconds. Exit 0 pass, 1 fail, 77 skip.
"""

import hashlib
import http.server
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

FAILS = []
TOKEN = "hf_test_token_123"
DROP_AT = 1 << 20  # the first GET of big.bin is cut after this many bytes


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def blob(seed, size):
    return random.Random(seed).getrandbits(8 * size).to_bytes(size, "little")


def sha(data):
    return hashlib.sha256(data).hexdigest()


FILES = {
    "/files/big.bin": blob(1, 3 * 1024 * 1024 + 123),  # cut on its first GET
    "/files/resume.bin": blob(2, 200000),
    "/files/norange.bin": blob(3, 150000),  # the server ignores Range
    "/files/complete.bin": blob(4, 70000),  # its .part is complete already
    "/files/small.bin": blob(5, 5000),
    "/flaky/x.bin": blob(6, 9000),  # 500 on the first GET
    "/busy/y.bin": blob(7, 8000),  # 503 + Retry-After: 2 on the first GET
}

HUB = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}\n',
    "model.safetensors": blob(8, 300000),
    "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}\n',
    "README.md": b"# a model\n",
    "pytorch_model.bin": blob(9, 1000),
    "original/consolidated.pth": blob(10, 1000),
}
SIZED = {"config.json", "model.safetensors"}  # the listing gives sizes for these only

MISTRAL = {
    "config.json": b'{"model_type": "mistral"}\n',
    "model.safetensors.index.json": json.dumps(
        {"metadata": {"total_size": 4000},
         "weight_map": {"a.weight": "model-00001-of-00001.safetensors",
                        "b.weight": "model-00001-of-00001.safetensors"}}).encode(),
    "model-00001-of-00001.safetensors": blob(11, 4000),
    "consolidated.safetensors": blob(12, 4000),
}


class Server:
    """The scripted server: what it saw, under a lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.log = []  # (method, path, headers dict with lower-case names, status)
        self.counts = {}
        self.port = 0
        self.hub_needs_token = False  # the hub answers 401 without "Bearer TOKEN"

    def seen(self, method=None, path=None):
        with self.lock:
            return [e for e in self.log
                    if (method is None or e[0] == method) and (path is None or e[1] == path)]

    def clear(self):
        with self.lock:
            self.log.clear()


STATE = Server()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self.route(head=False)

    def do_HEAD(self):
        self.route(head=True)

    def record(self, status):
        path = self.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in self.headers.items()}
        with STATE.lock:
            STATE.log.append((self.command, path, headers, status))

    def nth(self, key):
        """How many GETs of key came before this one."""
        with STATE.lock:
            n = STATE.counts.get(key, 0)
            if self.command == "GET":
                STATE.counts[key] = n + 1
            return n

    def reply(self, status, body=b"", headers=None, head=False):
        self.record(status)
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def serve_bytes(self, data, head, honour_range=True):
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if not honour_range or not m:
            return self.reply(200, data, {"Accept-Ranges": "bytes"} if honour_range else {},
                              head=head)
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else len(data) - 1
        if first >= len(data):
            return self.reply(416, b"", {"Content-Range": "bytes */%d" % len(data)}, head=head)
        last = min(last, len(data) - 1)
        return self.reply(206, data[first:last + 1],
                          {"Content-Range": "bytes %d-%d/%d" % (first, last, len(data))},
                          head=head)

    def hub_auth_ok(self):
        if not STATE.hub_needs_token:
            return True
        return self.headers.get("Authorization") == "Bearer " + TOKEN

    def route(self, head):
        path = self.path.split("?", 1)[0]
        if path in FILES:
            data = FILES[path]
            n = self.nth(path)
            if path == "/files/big.bin" and not head and n == 0:
                # Cut the transfer: the headers promise everything, DROP_AT bytes come.
                self.record(200)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:DROP_AT])
                self.wfile.flush()
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return None
            if path == "/flaky/x.bin" and not head and n == 0:
                return self.reply(500, b"upstream broke\n")
            if path == "/busy/y.bin" and not head and n == 0:
                return self.reply(503, b"busy\n", {"Retry-After": "2"})
            return self.serve_bytes(data, head, honour_range=path != "/files/norange.bin")
        if path == "/missing.bin":
            return self.reply(404, b"no such file\n", head=head)
        if path.startswith("/cdn/"):
            name = path[len("/cdn/"):]
            return self.serve_bytes(HUB[name], head) if name in HUB else self.reply(404)
        return self.hub(path, head)

    def hub(self, path, head):
        m = re.fullmatch(r"/api/models/([^/]+)/([^/]+)/revision/([^/]+)", path)
        if m:
            org, repo, rev = m.groups()
            if repo == "private":
                return self.reply(401, b'{"error":"Invalid username or password."}',
                                  {"X-Error-Code": "RepoNotFound",
                                   "X-Error-Message": "Invalid username or password."})
            if not self.hub_auth_ok():
                return self.reply(401, b"bad token")
            if org != "org" or rev != "main" or repo not in ("repo", "mistral", "evil"):
                return self.reply(404, b'{"error":"Repository not found"}',
                                  {"X-Error-Code": "RepoNotFound"})
            if repo == "repo":
                siblings = [dict({"rfilename": n}, **({"size": len(d)} if n in SIZED else {}))
                            for n, d in HUB.items()]
            elif repo == "mistral":
                siblings = [{"rfilename": n, "size": len(d)} for n, d in MISTRAL.items()]
            else:
                siblings = [{"rfilename": "config.json"}, {"rfilename": "../evil.json"}]
            body = json.dumps({"id": org + "/" + repo, "sha": "0" * 40,
                               "siblings": siblings}).encode()
            return self.reply(200, body, {"Content-Type": "application/json"}, head=head)
        m = re.fullmatch(r"/org/(repo|mistral|evil)/resolve/([^/]+)/(.+)", path)
        if m:
            repo, rev, name = m.groups()
            if not self.hub_auth_ok():
                return self.reply(401, b"bad token", head=head)
            files = MISTRAL if repo == "mistral" else HUB
            if name not in files:
                return self.reply(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"},
                                  head=head)
            if name == "model.safetensors" and repo == "repo":
                # The hub sends LFS files to its CDN: another host name for the same server.
                return self.reply(302, b"", {"Location": "http://%s:%d/cdn/%s" % (
                    CDN_HOST, STATE.port, name)}, head=head)
            return self.serve_bytes(files[name], head)
        return self.reply(404, b"not found", head=head)


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that hang up (the cut transfer) are part of the script


def localhost_is_loopback():
    try:
        infos = socket.getaddrinfo("localhost", None, socket.AF_INET)
        return any(i[4][0] == "127.0.0.1" for i in infos)
    except OSError:
        return False


CDN_HOST = "localhost" if localhost_is_loopback() else "127.0.0.1"


def run(agent, uri, output, env_extra=None, extra=(), timeout=40):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "http_proxy",
                        "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:%d/" % STATE.port
    env["NO_PROXY"] = env["no_proxy"] = "*"
    env.update(env_extra or {})
    args = [agent, "fetch", "--uri", uri, "--output", output] + list(extra)
    try:
        p = subprocess.run(args, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, "fetch %s did not finish within %d s" % (uri, timeout))
        return 124, ""
    err = p.stderr.decode("utf-8", "replace")
    if os.environ.get("FETCH_E2E_VERBOSE"):
        print("$ fetch --uri %s  (exit %d)\n%s" % (uri, p.returncode, err), flush=True)
    return p.returncode, err


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def main():
    if len(sys.argv) != 4:
        print("usage: fetch_e2e.py TANDEM_AGENT TANDEM_GENMODEL WORK_DIR", file=sys.stderr)
        return 2
    agent, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[3])
    if not os.access(agent, os.X_OK):
        print("skip: no agent at", agent)
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        srv = QuietServer(("127.0.0.1", 0), Handler)
    except OSError as e:
        print("skip: cannot listen on loopback:", e)
        return 77
    STATE.port = srv.server_address[1]
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    base = "http://127.0.0.1:%d" % STATE.port
    started = time.monotonic()
    try:
        cases(agent, work, base)
    finally:
        srv.shutdown()
        srv.server_close()
    took = time.monotonic() - started
    check(took < 60, "the cases took %.1f s" % took)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("fetch_e2e: all checks passed in %.1f s" % took)
    return 0


def cases(agent, work, base):
    models = os.path.join(work, "models")

    # -- resume after a cut connection, into a parent directory that does not exist yet --
    out = os.path.join(models, "deep", "big.bin")
    rc, err = run(agent, base + "/files/big.bin", out)
    gets = STATE.seen("GET", "/files/big.bin")
    check(rc == 0, "big.bin: exit %d: %s" % (rc, err))
    check(len(gets) == 2, "big.bin: %d GETs, expected 2 (cut, then resumed)" % len(gets))
    if len(gets) == 2:
        check("range" not in gets[0][2], "big.bin: the first GET asked for a range")
        check(gets[1][2].get("range") == "bytes=%d-" % DROP_AT,
              "big.bin: the retry asked %r, expected bytes=%d-" % (gets[1][2].get("range"),
                                                                   DROP_AT))
    data = read(out)
    check(data is not None and sha(data) == sha(FILES["/files/big.bin"]),
          "big.bin: the result's sha256 differs")
    check(not os.path.exists(out + ".part"), "big.bin: the .part was left behind")
    check(re.search(r"fetch: big\.bin [0-9.]+/3\.0 MiB \(100%\) [0-9.]+ (B|KiB|MiB|GiB)/s", err),
          "big.bin: no final progress line on stderr: %s" % err)
    check("retrying" in err, "big.bin: the retry was not announced: %s" % err)

    # -- an already complete output is not downloaded again (HEAD only) --
    STATE.clear()
    rc, err = run(agent, base + "/files/big.bin", out)
    check(rc == 0, "big.bin again: exit %d: %s" % (rc, err))
    check(not STATE.seen("GET"), "big.bin again: the server saw a GET")
    check("already complete" in err, "big.bin again: not reported complete: %s" % err)

    # -- a .part from an earlier run is resumed --
    STATE.clear()
    out = os.path.join(models, "resume.bin")
    os.makedirs(models, exist_ok=True)
    with open(out + ".part", "wb") as f:
        f.write(FILES["/files/resume.bin"][:12345])
    rc, err = run(agent, base + "/files/resume.bin", out)
    gets = STATE.seen("GET", "/files/resume.bin")
    check(rc == 0, "resume.bin: exit %d: %s" % (rc, err))
    check([g[2].get("range") for g in gets] == ["bytes=12345-"],
          "resume.bin: ranges asked %r" % [g[2].get("range") for g in gets])
    check(read(out) == FILES["/files/resume.bin"], "resume.bin: wrong content")

    # -- a server that ignores Range: the part is started over --
    out = os.path.join(models, "norange.bin")
    with open(out + ".part", "wb") as f:
        f.write(b"\xff" * 777)
    rc, err = run(agent, base + "/files/norange.bin", out)
    check(rc == 0, "norange.bin: exit %d: %s" % (rc, err))
    check(read(out) == FILES["/files/norange.bin"], "norange.bin: wrong content (appended?)")

    # -- a complete .part: 416, renamed without a body --
    STATE.clear()
    out = os.path.join(models, "complete.bin")
    with open(out + ".part", "wb") as f:
        f.write(FILES["/files/complete.bin"])
    rc, err = run(agent, base + "/files/complete.bin", out)
    gets = STATE.seen("GET", "/files/complete.bin")
    check(rc == 0, "complete.bin: exit %d: %s" % (rc, err))
    check([g[3] for g in gets] == [416], "complete.bin: answers %r" % [g[3] for g in gets])
    check(read(out) == FILES["/files/complete.bin"], "complete.bin: wrong content")

    # -- retries: 500 then success; 503 with Retry-After --
    STATE.clear()
    out = os.path.join(models, "x.bin")
    rc, err = run(agent, base + "/flaky/x.bin", out)
    check(rc == 0, "x.bin: exit %d: %s" % (rc, err))
    check([g[3] for g in STATE.seen("GET")] == [500, 200],
          "x.bin: answers %r" % [g[3] for g in STATE.seen("GET")])
    check(read(out) == FILES["/flaky/x.bin"], "x.bin: wrong content")
    check("HTTP 500" in err, "x.bin: the 500 was not reported: %s" % err)

    STATE.clear()
    out = os.path.join(models, "y.bin")
    t0 = time.monotonic()
    rc, err = run(agent, base + "/busy/y.bin", out)
    took = time.monotonic() - t0
    check(rc == 0 and read(out) == FILES["/busy/y.bin"], "y.bin: exit %d: %s" % (rc, err))
    check(1.9 <= took < 10, "y.bin: Retry-After: 2 took %.2f s (the backoff is 1 s)" % took)

    # -- a 404 fails with one line naming the URI; no .part is left to confuse --
    uri = base + "/missing.bin"
    out = os.path.join(models, "missing.bin")
    rc, err = run(agent, uri, out)
    check(rc == 1, "missing.bin: exit %d, expected 1" % rc)
    check(re.search(r"^fetch: %s: .*404" % re.escape(uri), err, re.M),
          "missing.bin: the message does not name the URI and the 404: %s" % err)
    check(not os.path.exists(out), "missing.bin: an output appeared")

    # -- bad usage --
    rc, err = run(agent, "s3://bucket/key", os.path.join(models, "s3"))
    check(rc == 2 and "usage:" in err and "scheme" in err, "s3://: exit %d: %s" % (rc, err))

    # -- the hub: a repository, with a token; the redirect to the CDN drops it --
    STATE.clear()
    STATE.hub_needs_token = True
    out = os.path.join(models, "repo")
    rc, err = run(agent, "hf://org/repo", out, {"HF_TOKEN": TOKEN + "\n"})
    check(rc == 0, "hf://org/repo: exit %d: %s" % (rc, err))
    got = sorted(os.path.relpath(os.path.join(d, n), out)
                 for d, _, names in os.walk(out) for n in names)
    check(got == ["config.json", "model.safetensors", "tokenizer.json"],
          "hf://org/repo: fetched %r" % got)
    for name in got:
        check(read(os.path.join(out, name)) == HUB[name], "hf://org/repo: %s differs" % name)
    resolves = STATE.seen("GET")
    fetched = sorted(e[1] for e in resolves if "/resolve/" in e[1])
    check(fetched == ["/org/repo/resolve/main/config.json",
                      "/org/repo/resolve/main/model.safetensors",
                      "/org/repo/resolve/main/tokenizer.json"],
          "hf://org/repo: resolved %r" % fetched)
    for e in resolves:
        if e[1].startswith("/api/") or "/resolve/" in e[1]:
            check(e[2].get("authorization") == "Bearer " + TOKEN,
                  "hf://org/repo: %s without the token" % e[1])
    cdn = STATE.seen("GET", "/cdn/model.safetensors")
    check(len(cdn) == 1, "hf://org/repo: %d CDN GETs" % len(cdn))
    if CDN_HOST != "127.0.0.1" and cdn:
        check("authorization" not in cdn[0][2], "hf://org/repo: the token went to the CDN host")

    # ... and again: complete files are kept (sizes from the listing, HEAD for the others)
    STATE.clear()
    rc, err = run(agent, "hf://org/repo", out, {"HF_TOKEN": TOKEN})
    check(rc == 0, "hf://org/repo again: exit %d: %s" % (rc, err))
    again = [e[1] for e in STATE.seen("GET") if not e[1].startswith("/api/")]
    check(again == [], "hf://org/repo again: downloaded %r" % again)
    heads = sorted(e[1] for e in STATE.seen("HEAD"))
    check(heads == ["/org/repo/resolve/main/tokenizer.json"],
          "hf://org/repo again: HEADs %r (sizes of the listing unused?)" % heads)

    # ... a wrong token
    rc, err = run(agent, "hf://org/repo", os.path.join(models, "repo2"), {"HF_TOKEN": "nope"})
    check(rc == 1 and "HF_TOKEN" in err, "hf:// wrong token: exit %d: %s" % (rc, err))
    STATE.hub_needs_token = False

    # -- a Mistral-style repository: the safetensors the index does not name are skipped --
    STATE.clear()
    out = os.path.join(models, "mistral")
    rc, err = run(agent, "hf://org/mistral", out)
    check(rc == 0, "hf://org/mistral: exit %d: %s" % (rc, err))
    check(sorted(os.listdir(out)) == ["config.json", "model-00001-of-00001.safetensors",
                                      "model.safetensors.index.json"],
          "hf://org/mistral: fetched %r" % sorted(os.listdir(out)))
    check(not STATE.seen("GET", "/org/mistral/resolve/main/consolidated.safetensors"),
          "hf://org/mistral: consolidated.safetensors was downloaded")

    # -- one file at a revision --
    STATE.clear()
    out = os.path.join(models, "cfg.json")
    rc, err = run(agent, "hf://org/repo@v2/config.json", out)
    check(rc == 0 and read(out) == HUB["config.json"], "hf:// @v2 file: exit %d: %s" % (rc, err))
    check([e[1] for e in STATE.seen("GET")] == ["/org/repo/resolve/v2/config.json"],
          "hf:// @v2 file: requests %r" % [e[1] for e in STATE.seen("GET")])
    rc, err = run(agent, "hf://org/repo/nothere.gguf", os.path.join(models, "nothere.gguf"))
    check(rc == 1 and "not found" in err and "hf://org/repo/nothere.gguf" in err,
          "hf:// missing file: exit %d: %s" % (rc, err))

    # -- 401 without a token mentions HF_TOKEN; a missing repository is named --
    uri = "hf://org/private"
    rc, err = run(agent, uri, os.path.join(models, "private"))
    check(rc == 1 and "HF_TOKEN" in err and uri in err, "%s: exit %d: %s" % (uri, rc, err))
    check(len(err.strip().splitlines()) == 1, "%s: more than one line: %s" % (uri, err))
    rc, err = run(agent, "hf://org/nope", os.path.join(models, "nope"))
    check(rc == 1 and "org/nope" in err and "not found" in err,
          "hf://org/nope: exit %d: %s" % (rc, err))

    # -- a listing that points outside --output --
    STATE.clear()
    out = os.path.join(models, "evil", "inner")
    rc, err = run(agent, "hf://org/evil", out)
    check(rc == 1 and "../evil.json" in err, "hf://org/evil: exit %d: %s" % (rc, err))
    check(not os.path.exists(os.path.join(models, "evil", "evil.json")) and
          not os.path.exists(os.path.join(models, "evil.json")),
          "hf://org/evil: a file was written outside --output")
    check(not [e for e in STATE.seen("GET") if "/resolve/" in e[1]],
          "hf://org/evil: files were fetched from a refused listing")

    # -- file:// of a file and of a directory --
    src = os.path.join(work, "src")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "w.gguf"), "wb") as f:
        f.write(FILES["/files/small.bin"])
    with open(os.path.join(src, "sub", "config.json"), "wb") as f:
        f.write(HUB["config.json"])
    out = os.path.join(models, "local.gguf")
    rc, err = run(agent, "file://" + os.path.join(src, "w.gguf"), out)
    check(rc == 0 and read(out) == FILES["/files/small.bin"], "file:// file: exit %d: %s" % (
        rc, err))
    out = os.path.join(models, "localdir")
    rc, err = run(agent, "file://" + src, out)
    check(rc == 0 and read(os.path.join(out, "sub", "config.json")) == HUB["config.json"] and
          read(os.path.join(out, "w.gguf")) == FILES["/files/small.bin"],
          "file:// directory: exit %d: %s" % (rc, err))
    rc, err = run(agent, "file://" + os.path.join(src, "absent"), os.path.join(models, "absent"))
    check(rc == 1 and "absent" in err, "file:// missing: exit %d: %s" % (rc, err))


if __name__ == "__main__":
    sys.exit(main())
