"""Test helper: start/stop a localkube API server on a free loopback port and talk to it.

    from tests.lkserver import LocalApiServer
    with LocalApiServer() as srv:                 # subprocess: python3 -m lk.apiserver
        code, body, headers = srv.request("GET", "/api/v1/namespaces")
        srv.kubectl("get", "ns", "-o", "json")    # real kubectl with a private kubeconfig/cache
        for ev in srv.watch("/api/v1/namespaces/default/configmaps?watch=1", max_events=2): ...

LocalApiServer(in_process=True) runs the server in a thread of the test process instead (faster
to start; used by unit tests that poke at internals through srv.api).
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # e2e/localkube
KUBECTL = os.environ.get("KUBECTL", shutil.which("kubectl") or "/usr/bin/kubectl")


class LocalApiServer:
    def __init__(self, directory=None, in_process=False, extra_args=(), bookmark_interval=None,
                 history_size=None, log_level="INFO"):
        self._own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="lk-apiserver-")
        self.in_process = in_process
        self.extra_args = list(extra_args)
        self.bookmark_interval = bookmark_interval
        self.history_size = history_size
        self.log_level = log_level
        self.proc = None
        self.api = None
        self.port = None
        self._kubeconfig = None
        self._cache_dir = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, timeout=15.0):
        if self.in_process:
            if ROOT not in sys.path:
                sys.path.insert(0, ROOT)
            from lk.apiserver import ApiServer
            kw = {}
            if self.bookmark_interval is not None:
                kw["bookmark_interval"] = self.bookmark_interval
            if self.history_size is not None:
                kw["history_size"] = self.history_size
            self.api = ApiServer(self.dir, "127.0.0.1", 0, **kw).start()
            self.port = self.api.port
        else:
            args = [sys.executable, "-m", "lk.apiserver", "--dir", self.dir, "--port", "0",
                    "--log-level", self.log_level]
            if self.bookmark_interval is not None:
                args += ["--bookmark-interval", str(self.bookmark_interval)]
            if self.history_size is not None:
                args += ["--history-size", str(self.history_size)]
            args += self.extra_args
            self._log = open(os.path.join(self.dir, "apiserver.log"), "ab")
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=self._log,
                                         stderr=subprocess.STDOUT)
            port_file = os.path.join(self.dir, "apiserver.port")
            deadline = time.time() + timeout
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError("apiserver exited with %s; log: %s" % (
                        self.proc.returncode, self.log_text()[-2000:]))
                try:
                    with open(port_file) as f:
                        txt = f.read().strip()
                    if txt:
                        self.port = int(txt)
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            else:
                self.stop()
                raise RuntimeError("apiserver did not write its port file")
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                code, _, _ = self.request("GET", "/healthz", timeout=2)
                if code == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("apiserver not healthy")

    def stop(self):
        if self.api is not None:
            self.api.shutdown()
            self.api = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self._log.close()
            self.proc = None
        for d in (self._cache_dir,):
            if d:
                shutil.rmtree(d, ignore_errors=True)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "apiserver.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    # -- HTTP ----------------------------------------------------------------------------
    def request(self, method, path, body=None, content_type=None, headers=None, timeout=10):
        """Returns (status, decoded JSON body or text, headers)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = dict(headers or {})
            data = None
            if body is not None:
                if isinstance(body, (bytes, str)):
                    data = body.encode() if isinstance(body, str) else body
                else:
                    data = json.dumps(body).encode()
                hdrs.setdefault("Content-Type", content_type or "application/json")
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            return resp.status, parsed, resp.headers
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body, **kw):
        return self.request("PUT", path, body, **kw)

    def patch(self, path, body, ptype="merge", **kw):
        ct = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
              "strategic": "application/strategic-merge-patch+json",
              "apply": "application/apply-patch+yaml"}.get(ptype, ptype)
        return self.request("PATCH", path, body, content_type=ct, **kw)

    def delete(self, path, body=None, **kw):
        return self.request("DELETE", path, body, **kw)

    def watch(self, path, max_events=None, timeout=5.0, headers=None, until=None):
        """Opens a watch and returns the decoded events read before max_events, until(events)
        returning True, the stream ending, or timeout seconds passing."""
        events = []
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            hdr = "".join("%s: %s\r\n" % kv for kv in (headers or {}).items())
            sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n" % (path, hdr)).encode())
            f = sock.makefile("rb")
            deadline = time.time() + timeout
            status_line = f.readline()
            self.last_watch_status = int(status_line.split()[1])
            chunked = False
            while True:
                line = f.readline()
                if not line or line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            buf = b""
            while time.time() < deadline:
                sock.settimeout(max(0.05, deadline - time.time()))
                try:
                    if chunked:
                        size_line = f.readline()
                        if not size_line:
                            break
                        size = int(size_line.strip() or b"0", 16)
                        if size == 0:
                            break
                        data = f.read(size)
                        f.readline()
                    else:
                        data = f.read1(65536)
                        if not data:
                            break
                except (socket.timeout, TimeoutError):
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        events.append(json.loads(line))
                if max_events is not None and len(events) >= max_events:
                    break
                if until is not None and until(events):
                    break
            return events
        finally:
            sock.close()

    # -- kubectl -------------------------------------------------------------------------
    def kubeconfig(self):
        if self._kubeconfig is None:
            self._kubeconfig = os.path.join(self.dir, "kubeconfig")
            with open(self._kubeconfig, "w") as f:
                json.dump({
                    "apiVersion": "v1", "kind": "Config",
                    "clusters": [{"name": "localkube", "cluster": {"server": self.url}}],
                    "users": [{"name": "localkube", "user": {}}],
                    "contexts": [{"name": "localkube", "context": {
                        "cluster": "localkube", "user": "localkube", "namespace": "default"}}],
                    "current-context": "localkube"}, f)
        return self._kubeconfig

    def kubectl(self, *args, input=None, timeout=30, check=False):
        """Runs real kubectl against this server; returns CompletedProcess (text)."""
        if self._cache_dir is None:
            self._cache_dir = tempfile.mkdtemp(prefix="lk-kubectl-cache-")
        cmd = [KUBECTL, "--kubeconfig", self.kubeconfig(), "--cache-dir", self._cache_dir]
        cmd += list(args)
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        env["HOME"] = self.dir
        p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                           env=env)
        if check and p.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s%s" % (
                " ".join(args), p.returncode, p.stdout, p.stderr))
        return p


def quote(s):
    return urllib.parse.quote(s, safe="")
