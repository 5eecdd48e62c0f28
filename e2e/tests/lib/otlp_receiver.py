#!/usr/bin/env python3
"""A minimal OTLP/HTTP JSON trace receiver (Python standard library only), for tests.

    otlp_receiver.py [--host 127.0.0.1] [--port 4318] [--out spans.jsonl]

Accepts POST /v1/traces with Content-Type application/json (an ExportTraceServiceRequest in the
OTLP JSON mapping), answers 200 {} (or 415/400 for other bodies), and keeps every span flattened
with its resource's service.name. As a module: Receiver(host, port).start() ... .spans() ...
.stop(). As a program: appends one JSON line per span to --out until SIGTERM.
"""

import argparse
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _value(v):
    """An OTLP AnyValue as a Python value (intValue is a decimal string in OTLP JSON)."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    return v


def attrs(lst):
    return {a["key"]: _value(a["value"]) for a in lst or []}


def flatten(body):
    """The spans of one ExportTraceServiceRequest, each a dict with "service" and "attrs" added."""
    out = []
    for rs in body.get("resourceSpans", []):
        res = attrs(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                s = dict(s)
                s["service"] = res.get("service.name")
                s["resource"] = res
                s["attrs"] = attrs(s.get("attributes"))
                out.append(s)
    return out


class Receiver:
    def __init__(self, host="127.0.0.1", port=4318, on_span=None):
        self._lock = threading.Lock()
        self._spans = []
        self.posts = 0
        self.errors = []
        self._on_span = on_span
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet
                pass

            def _answer(self, code, body):
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(n)
                if self.path != "/v1/traces":
                    return self._answer(404, '{"error":"not /v1/traces"}')
                if not (self.headers.get("Content-Type") or "").startswith("application/json"):
                    rec.errors.append("content-type %r" % self.headers.get("Content-Type"))
                    return self._answer(415, '{"error":"json only"}')
                try:
                    spans = flatten(json.loads(data))
                except (ValueError, AttributeError, TypeError) as e:
                    rec.errors.append("bad body: %s" % e)
                    return self._answer(400, '{"error":"bad body"}')
                with rec._lock:
                    rec.posts += 1
                    rec._spans.extend(spans)
                if rec._on_span:
                    for s in spans:
                        rec._on_span(s)
                self._answer(200, "{}")

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def spans(self):
        with self._lock:
            return list(self._spans)

    def clear(self):
        with self._lock:
            self._spans = []
            self.posts = 0

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=4318)
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    out = sys.stdout if a.out == "-" else open(a.out, "a")
    lock = threading.Lock()

    def write(s):
        with lock:
            out.write(json.dumps(s) + "\n")
            out.flush()

    r = Receiver(a.host, a.port, on_span=write).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("listening on %s/v1/traces" % r.url, file=sys.stderr, flush=True)
    stop.wait()
    r.stop()


if __name__ == "__main__":
    main()
