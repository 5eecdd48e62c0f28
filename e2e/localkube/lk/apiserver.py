"""localkube API server: a Kubernetes API server emulator (Python 3 standard library only).

    python3 -m lk.apiserver --dir DIR --port PORT [--host 127.0.0.1]
                            [--bookmark-interval 5] [--history-size 10000]

Serves the REST API of the built-in resources localkube needs and of custom resources from
established CRDs, discovery (legacy and aggregated), OpenAPI v3 (enough for kubectl apply with
validation on), watches (chunked JSON streams), garbage collection, namespace deletion and a fault
injection API under /localkube/faults.  Writes DIR/apiserver.pid and, once the socket is bound,
DIR/apiserver.port; logs to stderr; shuts down cleanly on SIGTERM/SIGINT (both files removed).

Responses are always JSON.  Request bodies are JSON, YAML, or (for the kinds kubectl's typed
clients create: Namespace, ConfigMap, Secret, ServiceAccount, Service, Deployment, RBAC)
protobuf.

Not emulated: authentication/authorization (everything is allowed), admission webhooks,
conversion webhooks (all served versions of a CRD share the stored object, apiVersion rewritten),
protobuf responses, service proxying (clusterIPs are allocated from 10.96.0.0/16 but nothing
routes them; pods get loopback IPs from the kubelet and clients talk to those).  core/v1 and
events.k8s.io/v1 Events share one store, as in kube (each API converts).
"""

import argparse
import base64
import email.utils
import http.server
import json
import logging
import os
import random
import select
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

from lk import discovery
from lk import selectors as sel
from lk.faults import FaultError, Faults
from lk.gc import GarbageCollector
from lk.openapi import OpenAPI
from lk.resources import SUB_VERBS, ApiError, Registry, json_copy
from lk.store import (BOOKMARK, ERROR, INITIAL_EVENTS_END, DeleteOptions, Store, WriteOptions,
                      meta_of)

log = logging.getLogger("localkube.apiserver")

MAX_BODY = 3 * 1024 * 1024
# Go reverse proxies (kubectl proxy) race with a fast upstream: when the answer to a request whose
# body tail the proxy's Transport wrote straight to the socket (more than its 4 KiB write buffer)
# comes back before that Transport's writeLoop did its final "no more body" read, the proxy's
# http.Server drains and closes the inbound body as it writes the response headers, the late read
# fails with "invalid Read on closed Body", and the writeLoop closes the upstream connection in
# the middle of the response ("ReverseProxy read error during body copy: use of closed network
# connection"; the client sees a truncated body).  golang/go#40747.  localkube answers a 900 KiB
# create in a few ms, far faster than kube-apiserver, so it holds the answer to a proxied request
# (X-Forwarded-For) with a body over 4 KiB until this long after the body was read.
PROXIED_BODY_HOLD = 0.05
PROXY_WRITE_BUFFER = 4096
VERSION_INFO = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-localkube",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3", "compiler": "gc",
    "platform": "linux/amd64",
}
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
NOT_FOUND_MSG = "the server could not find the requested resource"


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def json_loads_strict(raw):
    """json.loads that also reports duplicate object keys the way kube's strict decoder
    (sigs.k8s.io/json) does: ['duplicate field "spec.color"', ...] (paths with list indexes,
    'spec.containers[0].name').  The last value wins, as in Go."""
    dups = {}

    def hook(pairs):
        d = dict(pairs)
        if len(d) != len(pairs):
            seen = set()
            names = []
            for k, _ in pairs:
                if k in seen and k not in names:
                    names.append(k)
                seen.add(k)
            dups[id(d)] = (d, names)  # keeps d alive, so its id stays unique
        return d

    obj = json.loads(raw, object_pairs_hook=hook)
    if not dups:
        return obj, []
    out = []

    def walk(v, path):
        if isinstance(v, dict):
            hit = dups.get(id(v))
            if hit is not None and hit[0] is v:
                for n in hit[1]:
                    out.append("duplicate field %s" % json.dumps(path + "." + n if path else n))
            for k, x in v.items():
                walk(x, path + "." + k if path else k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, "%s[%d]" % (path, i))

    walk(obj, "")
    return obj, out


def _qbool(v):
    return v is not None and v.lower() in ("1", "true", "yes")


def _warning_header(text):
    return '299 - "%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def negotiate_output(accept):
    """('json'|'yaml'|'table'|'meta', apiVersion or None).  Raises 406."""
    entries = discovery.parse_accept(accept)
    if not entries:
        return "json", None
    for mime, p in entries:
        if mime in ("application/json", "*/*", "application/*"):
            as_ = p.get("as")
            if as_ == "Table" and p.get("g") == "meta.k8s.io" and p.get("v") in ("v1", "v1beta1"):
                return "table", "meta.k8s.io/" + p["v"]
            if as_ in ("PartialObjectMetadata", "PartialObjectMetadataList") and \
                    p.get("g") == "meta.k8s.io" and p.get("v") in ("v1", "v1beta1"):
                return "meta", "meta.k8s.io/" + p["v"]
            if as_ or p.get("g"):
                continue
            return "json", None
        if mime == "application/yaml":
            return "yaml", None
    raise ApiError.not_acceptable("only the following media types are accepted: "
                                  "application/json, application/yaml, "
                                  "application/vnd.kubernetes.protobuf")


class _Req:
    """A parsed resource request."""
    __slots__ = ("rt", "ns", "name", "sub", "verb", "q")


class ApiServer:
    def __init__(self, directory, host="127.0.0.1", port=0, bookmark_interval=5.0,
                 history_size=10000, watcher_queue=10000):
        self.dir = directory
        self.registry = Registry()
        self.store = Store(self.registry, history_size=history_size,
                           watcher_queue=watcher_queue)
        self.store.bookmark_interval = bookmark_interval
        self.bookmark_interval = bookmark_interval
        self.gc = GarbageCollector(self.store)
        self.faults = Faults()
        self.openapi = OpenAPI(self.registry)
        self.httpd = _HTTPServer((host, port), _Handler)
        self.httpd.api = self
        self.host, self.port = self.httpd.server_address[:2]
        self._thread = None
        self.stopping = threading.Event()
        self.store.bootstrap()
        self.gc.start()

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def serve_forever(self):
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self):
        """Serves in a background thread (tests)."""
        self._thread = threading.Thread(target=self.serve_forever, name="localkube-http",
                                        daemon=True)
        self._thread.start()
        return self

    def shutdown(self):
        self.stopping.set()
        self.store.close_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.gc.stop()


class _HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    block_on_close = False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "localkube"
    sys_version = ""

    # -- plumbing ------------------------------------------------------------------------
    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, fmt, *args):  # silence BaseHTTPRequestHandler's own logging
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_OPTIONS(self):
        self._dispatch("OPTIONS")

    @property
    def api(self):
        return self.server.api

    def _respond(self, code, body, content_type="application/json", headers=None):
        if self._sent:
            return
        self._sent = True
        self._code = code
        reason = http.server.BaseHTTPRequestHandler.responses.get(code, ("",))[0]
        lines = ["HTTP/1.1 %d %s" % (code, reason),
                 "Date: " + email.utils.formatdate(usegmt=True),
                 "Content-Type: " + content_type,
                 "Content-Length: %d" % len(body),
                 "Cache-Control: no-cache, private"]
        for k, v in (headers or {}).items():
            if isinstance(v, list):
                lines.extend("%s: %s" % (k, x) for x in v)
            else:
                lines.append("%s: %s" % (k, v))
        if self._warnings:
            lines.extend("Warning: " + _warning_header(w) for w in self._warnings)
        if self.close_connection:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
        if self.command != "HEAD":
            data += body
        if self._hold_until:
            wait = self._hold_until - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        self.wfile.write(data)

    def _send_json(self, code, obj, headers=None, content_type="application/json"):
        self._respond(code, _dumps(obj), content_type, headers)

    def _send_error(self, e):
        self._send_json(e.code, e.status(), headers=e.headers)

    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            total = 0
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    self.close_connection = True
                    raise ApiError.bad_request("invalid chunked request body")
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    chunks = None  # keep reading (bounded) so the client can read the Status
                    if total > 8 * MAX_BODY:
                        self.close_connection = True
                        raise ApiError.too_large(MAX_BODY)
                data = self.rfile.read(size)
                if chunks is not None:
                    chunks.append(data)
                self.rfile.readline(65537)
            if chunks is None:
                self.close_connection = True
                raise ApiError.too_large(MAX_BODY)
            return b"".join(chunks)
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise ApiError.bad_request("invalid Content-Length")
        if n > MAX_BODY:
            self.close_connection = True
            left = n
            if n <= 8 * MAX_BODY:  # drain so that the client can read the Status
                while left > 0:
                    got = self.rfile.read(min(left, 1 << 20))
                    if not got:
                        break
                    left -= len(got)
            raise ApiError.too_large(MAX_BODY)
        return self.rfile.read(n) if n > 0 else b""

    def _dispatch(self, method):
        self._sent = False
        self._code = 0
        self._warnings = []
        self._strict_errs = []
        self._hold_until = 0
        self._streaming = False
        t0 = time.time()
        ua = self.headers.get("User-Agent") or ""
        try:
            url = urllib.parse.urlsplit(self.path)
            q = {}
            for k, v in urllib.parse.parse_qsl(url.query, keep_blank_values=True):
                q[k] = v
            self._body = self._read_body()
            if len(self._body) > PROXY_WRITE_BUFFER and self.headers.get("X-Forwarded-For"):
                self._hold_until = time.monotonic() + PROXIED_BODY_HOLD
            self._route(method, url.path, q)
        except ApiError as e:
            if not self._sent and not self._streaming:
                self._send_error(e)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            self.close_connection = True
        except Exception as e:  # a bug: answer 500, log, keep serving
            log.exception("handler error: %s %s", method, self.path)
            if not self._sent and not self._streaming:
                try:
                    self._send_error(ApiError.internal("%s: %s" % (type(e).__name__, e)))
                except OSError:
                    self.close_connection = True
            else:
                self.close_connection = True
        finally:
            if not self._streaming:
                log.info("%s %s %d %.1fms %s", method, self.path, self._code,
                         (time.time() - t0) * 1000, ua.split(" ")[0])

    # -- routing -------------------------------------------------------------------------
    def _route(self, method, path, q):
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/")
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/",
                                                                         "/livez/",
                                                                         "/readyz/")):
            return self._respond(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return self._send_json(200, VERSION_INFO)
        if path.startswith("/localkube/faults"):
            return self._faults(method, path, q)
        if path.startswith("/openapi/"):
            return self._openapi(path)
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path != "/" \
            else []
        if not parts or parts[0] not in ("api", "apis"):
            if path == "/":
                return self._send_json(200, {"paths": ["/api", "/api/v1", "/apis", "/healthz",
                                                       "/livez", "/openapi/v3", "/readyz",
                                                       "/version"]})
            raise ApiError(404, "NotFound", NOT_FOUND_MSG,
                           {"causes": [{"reason": "UnexpectedServerResponse",
                                        "message": "404 page not found"}]})
        if parts[0] == "api":
            if len(parts) == 1:
                return self._discovery_root(core=True)
            if parts[1] != "v1":
                raise ApiError(404, "NotFound", NOT_FOUND_MSG)
            if len(parts) == 2:
                return self._resource_list("", "v1")
            return self._resource(method, "", "v1", parts[2:], q)
        if len(parts) == 1:
            return self._discovery_root(core=False)
        group = parts[1]
        if len(parts) == 2:
            d = discovery.api_group(self.api.registry, group)
            if d is None:
                raise ApiError(404, "NotFound", NOT_FOUND_MSG)
            return self._send_json(200, d)
        version = parts[2]
        if len(parts) == 3:
            return self._resource_list(group, version)
        return self._resource(method, group, version, parts[3:], q)

    def _discovery_root(self, core):
        fmt = discovery.negotiate(self.headers.get("Accept"))
        if fmt is None:
            raise ApiError.not_acceptable("only the following media types are accepted: "
                                          "application/json")
        reg = self.api.registry
        if fmt == "legacy":
            if core:
                host = self.headers.get("Host") or self.api.address
                return self._send_json(200, discovery.api_versions(host))
            return self._send_json(200, discovery.api_group_list(reg))
        return self._send_json(200, discovery.aggregated(reg, core, fmt),
                               content_type=discovery.content_type(fmt),
                               headers={"Vary": "Accept"})

    def _resource_list(self, group, version):
        d = discovery.api_resource_list(self.api.registry, group, version)
        if d is None:
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        return self._send_json(200, d)

    def _openapi(self, path):
        if path == "/openapi/v3":
            return self._respond(200, self.api.openapi.index())
        if path.startswith("/openapi/v3/"):
            d = self.api.openapi.document(path[len("/openapi/v3/"):])
            if d is not None:
                return self._respond(200, d[0], headers={"Etag": '"%s"' % d[1]})
        raise ApiError(404, "NotFound", NOT_FOUND_MSG,
                       {"causes": [{"reason": "UnexpectedServerResponse",
                                    "message": "404 page not found"}]})

    # -- faults API ----------------------------------------------------------------------
    def _faults(self, method, path, q):
        api = self.api
        if path.rstrip("/") != "/localkube/faults":
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        if method == "GET":
            return self._send_json(200, {"faults": api.faults.list()})
        if method == "DELETE":
            return self._send_json(200, {"ok": True, "cleared": api.faults.clear()})
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", "method %s is not allowed on "
                           "/localkube/faults" % method)
        try:
            spec = json.loads(self._body or b"null")
        except ValueError as e:
            raise ApiError.bad_request("invalid fault: malformed JSON: %s" % e)
        try:
            f = api.faults.add(spec)
        except FaultError as e:
            raise ApiError.bad_request(str(e))
        if f["type"] == "dropWatches":
            n = api.store.drop_watches()
            log.info("fault: dropped %d watches", n)
            return self._send_json(200, {"ok": True, "fault": f, "dropped": n})
        if f["type"] == "expire":
            rv = api.store.expire()
            log.info("fault: history compacted at %d", rv)
            return self._send_json(200, {"ok": True, "fault": f, "compactedRevision": rv})
        log.info("fault: added %s", f)
        return self._send_json(200, {"ok": True, "fault": f})

    # -- resources -----------------------------------------------------------------------
    def _resource(self, method, group, version, rest, q):
        reg = self.api.registry
        watch_prefix = False
        if rest and rest[0] == "watch":
            watch_prefix = True
            rest = rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            rt = reg.lookup(group, version, rest[2])
            if rt is not None and rt.namespaced:
                ns = rest[1]
                rest = rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = reg.lookup(group, version, plural)
        if rt is None:
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        if (ns is not None and not rt.namespaced) or (name is not None and rt.namespaced and
                                                      ns is None):
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        if rt.namespaced and ns is None and name is None and method not in ("GET", "HEAD"):
            # the all-namespaces path of a namespaced kind serves only list and watch
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                           "the requested resource")
        if name is not None and not name:
            raise ApiError(404, "NotFound", NOT_FOUND_MSG)
        # verb
        if method in ("GET", "HEAD"):
            if name is None:
                verb = "watch" if watch_prefix or _qbool(q.get("watch")) else "list"
            else:
                verb = "get"
        elif method == "POST":
            verb = "create"
            if name is not None and sub != "binding":
                raise ApiError.method_not_allowed(rt.group, rt.plural, "create")
        elif method == "PUT" and name is not None:
            verb = "update"
        elif method == "PATCH" and name is not None:
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name is not None else "deletecollection"
            if sub is not None:
                raise ApiError.method_not_allowed(rt.group, rt.plural, "delete")
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                           "the requested resource")
        if sub is None and verb not in rt.verbs:
            raise ApiError.method_not_allowed(rt.group, rt.plural, verb)
        if sub is not None and not watch_prefix and verb not in SUB_VERBS.get(sub, ()):
            raise ApiError.method_not_allowed(rt.group, rt.plural + "/" + sub, verb)
        if watch_prefix and name is not None:
            verb = "watch"
            q = dict(q)
            q["fieldSelector"] = "metadata.name=" + name
            name = None
        self._apply_faults(verb, rt, sub, ns, name)
        r = _Req()
        r.rt, r.ns, r.name, r.sub, r.verb, r.q = rt, ns, name, sub, verb, q
        getattr(self, "_h_" + verb)(r)

    def _apply_faults(self, verb, rt, sub, ns, name):
        res = rt.plural + ("/" + sub if sub else "")
        ua = self.headers.get("User-Agent") or ""
        latency, fail = self.api.faults.match(verb, res, ua)
        if latency:
            time.sleep(latency / 1000.0)
        if fail is not None:
            code = fail["code"]
            msg = fail.get("message") or "localkube injected fault (%s %s: %d)" % (verb, res,
                                                                                   code)
            raise ApiError.from_code(code, msg, rt.group, rt.plural, name or "",
                                     fail.get("retryAfter", 1))

    # -- request decoding ----------------------------------------------------------------
    def _decode_body(self, rt, allow_yaml=True):
        raw = self._body
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        ctype = ctype.lower()
        if ctype in ("application/yaml", "application/x-yaml", "text/yaml") and allow_yaml:
            try:
                obj, self._strict_errs = _yaml_or_json_strict(raw)
            except Exception as e:
                raise ApiError.bad_request("couldn't get version/kind; yaml parse error: %s" % e)
            return obj
        if ctype == "application/vnd.kubernetes.protobuf":
            try:
                return decode_protobuf(raw)
            except ProtobufError as e:
                log.info("protobuf body not decoded: %s", e)
                raise ApiError.unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json, application/yaml")
            except (UnicodeDecodeError, KeyError, TypeError) as e:
                raise ApiError.bad_request("unable to decode protobuf body: %s" % e)
        if ctype not in ("application/json", "*/*", ""):
            raise ApiError.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml")
        if not raw.strip():
            raise ApiError.bad_request("the body of the request was empty")
        try:
            obj, self._strict_errs = json_loads_strict(raw)
            return obj
        except ValueError as e:
            raise ApiError.bad_request("couldn't get version/kind; json parse error: %s" % e)

    def _write_opts(self, r, kind):
        q = r.q
        dry = q.get("dryRun")
        if dry not in (None, "", "All"):
            raise ApiError.invalid("meta.k8s.io", kind, "", [
                ("FieldValueNotSupported", "dryRun",
                 'Unsupported value: "%s": supported values: "All"' % dry)])
        fv = q.get("fieldValidation")
        if fv not in (None, "", "Ignore", "Warn", "Strict"):
            raise ApiError.invalid("meta.k8s.io", kind, "", [
                ("FieldValueNotSupported", "fieldValidation",
                 'Unsupported value: "%s": supported values: "Ignore", "Strict", "Warn"' % fv)])
        force = q.get("force")
        opts = WriteOptions(dry_run=(dry == "All"), field_manager=q.get("fieldManager") or None,
                            field_validation=fv or "Warn",
                            force=None if force is None else _qbool(force),
                            user_agent=self.headers.get("User-Agent") or "")
        opts.strict_errors = list(self._strict_errs)
        fm = opts.field_manager
        if fm is not None and (len(fm) > 128 or any(not ch.isprintable() for ch in fm)):
            raise ApiError.invalid("meta.k8s.io", kind, "", [
                ("FieldValueTooLong" if len(fm) > 128 else "FieldValueInvalid", "fieldManager",
                 "Too long: may not be more than 128 bytes" if len(fm) > 128 else
                 "Invalid value: %s: must only contain printable characters" % json.dumps(fm))])
        return opts

    def _selectors(self, r):
        ls = fs = None
        try:
            if r.q.get("labelSelector"):
                ls = sel.parse_label_selector(r.q["labelSelector"])
                if ls.empty:
                    ls = None
            if r.q.get("fieldSelector"):
                fs = sel.parse_field_selector(r.q["fieldSelector"], r.rt.field_selectors)
                if fs.empty:
                    fs = None
                elif r.rt.field_label_map:  # selectors run on the stored form
                    fs.requirements = [(r.rt.field_label_map.get(f, f), op, v)
                                       for f, op, v in fs.requirements]
        except sel.SelectorError as e:
            raise ApiError.bad_request(str(e))
        return ls, fs

    def _int_param(self, r, name, minimum=None):
        v = r.q.get(name)
        if v in (None, ""):
            return None
        try:
            n = int(v)
        except ValueError:
            raise ApiError.bad_request("invalid value for %s: %s" % (name, json.dumps(v)))
        if minimum is not None and n < minimum:
            raise ApiError.bad_request("invalid value for %s: %s" % (name, json.dumps(v)))
        return n

    # -- output --------------------------------------------------------------------------
    def _output(self, r, code, obj, single=True, list_meta=None):
        mode, av = negotiate_output(self.headers.get("Accept"))
        headers = {}
        is_status = isinstance(obj, dict) and obj.get("kind") == "Status"
        if mode == "table" and not is_status:
            inc = r.q.get("includeObject") or "Metadata"
            if inc not in ("None", "Metadata", "Object"):
                raise ApiError.bad_request('includeObject: Unsupported value: "%s"' % inc)
            items = [obj] if single else obj
            table = _b_table().to_table(r.rt.kind_info(), items, include_object=inc)
            table["apiVersion"] = av
            if list_meta:
                table["metadata"] = dict(list_meta)
            elif single:
                table.setdefault("metadata", {})["resourceVersion"] = \
                    meta_of(obj).get("resourceVersion", "")
            return self._send_json(code, table, headers,
                                   content_type="application/json;as=Table;v=%s;g=meta.k8s.io"
                                   % av.split("/")[1])
        if mode == "meta" and not is_status:
            if single:
                out = {"kind": "PartialObjectMetadata", "apiVersion": av,
                       "metadata": meta_of(obj)}
            else:
                out = {"kind": "PartialObjectMetadataList", "apiVersion": av,
                       "metadata": list_meta or {},
                       "items": [{"kind": "PartialObjectMetadata", "apiVersion": av,
                                  "metadata": meta_of(o)} for o in obj]}
            return self._send_json(code, out, headers)
        if not single:
            obj = {"kind": r.rt.list_kind, "apiVersion": r.rt.api_version,
                   "metadata": list_meta or {}, "items": obj}
        ctype = "application/yaml" if mode == "yaml" else "application/json"
        return self._send_json(code, obj, headers, content_type=ctype)

    # -- verbs ---------------------------------------------------------------------------
    def _h_get(self, r):
        st = self.api.store
        rv = r.q.get("resourceVersion")
        if rv and rv != "0":
            try:
                st.wait_for_rv(int(rv))
            except ValueError:
                raise ApiError.bad_request("invalid resource version: %s" % rv)
        if r.sub == "scale":
            return self._send_json(200, st.get_scale(r.rt, r.ns, r.name))
        if r.sub == "log":
            return self._pod_log(r)
        obj = st.get(r.rt, r.ns, r.name)
        return self._output(r, 200, obj)

    def _h_list(self, r):
        ls, fs = self._selectors(r)
        limit = self._int_param(r, "limit", 0) or None
        items, lmeta = self.api.store.list(
            r.rt, r.ns, ls, fs, limit=limit, cont=r.q.get("continue") or None,
            rv=r.q.get("resourceVersion") or None, rvm=r.q.get("resourceVersionMatch") or None)
        return self._output(r, 200, items, single=False, list_meta=lmeta)

    def _h_create(self, r):
        if r.sub == "binding":
            return self._pod_binding(r)
        body = self._decode_body(r.rt)
        opts = self._write_opts(r, "CreateOptions")
        code, obj = self.api.store.create(r.rt, r.ns, body, opts)
        self._warnings = opts.warnings
        return self._output(r, code, obj)

    def _h_update(self, r):
        body = self._decode_body(r.rt)
        opts = self._write_opts(r, "UpdateOptions")
        st = self.api.store
        if r.sub == "finalize":
            code, obj = self._finalize(r, body, opts)
        else:
            code, obj = st.update(r.rt, r.ns, r.name, body, opts, sub=r.sub)
        self._warnings = opts.warnings
        if r.sub == "scale":
            return self._send_json(code, obj)
        return self._output(r, code, obj)

    def _finalize(self, r, body, opts):
        st = self.api.store
        if not isinstance(body, dict):
            raise ApiError.bad_request("the object provided is unrecognized (must be of type "
                                       "Namespace)")
        with st.lock:
            old = st.get_raw(r.rt.key, "", r.name)
            if old is None:
                raise ApiError.not_found("", "namespaces", r.name)
            rv = meta_of(body).get("resourceVersion")
            if rv and rv != meta_of(old).get("resourceVersion"):
                raise ApiError.conflict("", "namespaces", r.name)
            return st._finish_update(r.rt, old, json_copy(body), opts, "finalize")

    def _h_patch(self, r):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        ptype = PATCH_TYPES.get(ctype)
        if ptype is None or (ptype == "strategic" and r.rt.is_custom):
            accepted = ["application/json-patch+json", "application/merge-patch+json",
                        "application/apply-patch+yaml"]
            if not r.rt.is_custom:
                accepted.append("application/strategic-merge-patch+json")
            raise ApiError.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types "
                "include: " + ", ".join(accepted))
        raw = self._body
        if not raw.strip():
            raise ApiError.bad_request("the body of the request was empty")
        try:
            if ptype == "apply":
                patch, self._strict_errs = _yaml_or_json_strict(raw)
            else:
                patch, dups = json_loads_strict(raw)
                if ptype != "json":  # a JSON patch's duplicates are in the op list, not fields
                    self._strict_errs = dups
        except Exception as e:
            raise ApiError.bad_request("error decoding patch: %s" % e)
        opts = self._write_opts(r, "PatchOptions")
        code, obj = self.api.store.patch(r.rt, r.ns, r.name, ptype, patch, opts, sub=r.sub)
        self._warnings = opts.warnings
        if r.sub == "scale":
            return self._send_json(code, obj)
        return self._output(r, code, obj)

    def _delete_opts(self, r):
        q = r.q
        body = {}
        if self._body.strip():
            try:
                body = json.loads(self._body)
            except ValueError as e:
                raise ApiError.bad_request("couldn't get version/kind; json parse error: %s" % e)
            if not isinstance(body, dict):
                raise ApiError.bad_request("the object provided is unrecognized (must be of type "
                                           "DeleteOptions)")
        grace = body.get("gracePeriodSeconds")
        if q.get("gracePeriodSeconds") not in (None, ""):
            grace = self._int_param(r, "gracePeriodSeconds")
        prop = q.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = body.get("orphanDependents")
        if q.get("orphanDependents") not in (None, ""):
            orphan = _qbool(q["orphanDependents"])
        causes = []
        if prop is not None and prop not in ("Orphan", "Background", "Foreground"):
            causes.append(("FieldValueNotSupported", "propagationPolicy",
                           'Unsupported value: "%s": supported values: "Foreground", '
                           '"Background", "Orphan", "nil"' % prop))
        if prop is not None and orphan is not None:
            causes.append(("FieldValueInvalid", "propagationPolicy",
                           "Invalid value: %s: orphanDependents and deletionPropagation cannot "
                           "be both set" % json.dumps(prop)))
        dry = q.get("dryRun") or ("All" if "All" in (body.get("dryRun") or []) else None)
        if dry not in (None, "", "All"):
            causes.append(("FieldValueNotSupported", "dryRun",
                           'Unsupported value: "%s": supported values: "All"' % dry))
        if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool)):
            raise ApiError.bad_request("gracePeriodSeconds must be an integer")
        if causes:
            raise ApiError.invalid("meta.k8s.io", "DeleteOptions", "", causes)
        pre = body.get("preconditions") or {}
        return DeleteOptions(grace_period=grace, propagation=prop, orphan_dependents=orphan,
                             precondition_uid=pre.get("uid"),
                             precondition_rv=pre.get("resourceVersion"),
                             dry_run=(dry == "All"))

    def _h_delete(self, r):
        dopts = self._delete_opts(r)
        opts = WriteOptions(user_agent=self.headers.get("User-Agent") or "")
        code, obj = self.api.store.delete(r.rt, r.ns, r.name, dopts, opts)
        return self._output(r, code, obj)

    def _h_deletecollection(self, r):
        ls, fs = self._selectors(r)
        dopts = self._delete_opts(r)
        opts = WriteOptions(user_agent=self.headers.get("User-Agent") or "")
        code, lst = self.api.store.delete_collection(r.rt, r.ns, ls, fs, dopts, opts)
        return self._send_json(code, lst)

    # -- watch ---------------------------------------------------------------------------
    def _h_watch(self, r):
        api = self.api
        st = api.store
        ls, fs = self._selectors(r)
        mode, av = negotiate_output(self.headers.get("Accept"))
        allow_bm = _qbool(r.q.get("allowWatchBookmarks"))
        sie = r.q.get("sendInitialEvents")
        send_initial = None if sie in (None, "") else _qbool(sie)
        timeout = self._int_param(r, "timeoutSeconds", 0)
        inc = r.q.get("includeObject") or "Metadata"
        w, initial, err = st.watch(r.rt, r.ns, ls, fs, rv=r.q.get("resourceVersion") or None,
                                   rvm=r.q.get("resourceVersionMatch") or None,
                                   send_initial=send_initial, allow_bookmarks=allow_bm)
        ctype = "application/json"
        if mode == "table":
            ctype = "application/json;as=Table;v=%s;g=meta.k8s.io" % av.split("/")[1]
        self._streaming = True
        self._sent = True
        self._code = 200
        t0 = time.time()
        log.info("WATCH %s start", self.path)
        hdr = ("HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: %s\r\nCache-Control: no-cache, "
               "private\r\nTransfer-Encoding: chunked\r\n\r\n"
               % (email.utils.formatdate(usegmt=True), ctype)).encode()
        reason = "end"
        try:
            if err is not None:
                data = _dumps({"type": ERROR, "object": err}) + b"\n"
                self.wfile.write(hdr + b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n")
                reason = "expired"
                return
            self.wfile.write(hdr)
            enc = _Encoder(st, r.rt, mode, av, inc)
            if timeout is None:
                timeout = int(1800 * (1 + random.random()))
            now = time.time()
            deadline = now + timeout if timeout > 0 else now + 3600 * 24
            interval = api.bookmark_interval
            next_bm = now + interval if allow_bm else None
            if initial:
                self._write_events(enc, initial, w)
            while True:
                now = time.time()
                if now >= deadline:
                    reason = "timeout"
                    break
                wait = min(deadline - now, 1.0)
                if next_bm is not None:
                    wait = min(wait, max(0.0, next_bm - now))
                items, closed = w.take(wait)
                if items:
                    self._write_events(enc, items, w)
                if closed:
                    reason = w.close_reason or "closed"
                    break
                if api.stopping.is_set():
                    reason = "shutdown"
                    break
                now = time.time()
                if next_bm is not None and now >= next_bm:
                    rv = st.bookmark_rv(w)
                    if rv is not None:
                        self._write_chunk(enc.bookmark(rv, False))
                    next_bm = now + interval
                if not items and self._client_gone():
                    reason = "client gone"
                    return
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout,
                OSError):
            reason = "client gone"
        finally:
            if w is not None:
                st.stop_watch(w)
            self.close_connection = True
            log.info("WATCH %s end (%s) %.1fs", self.path, reason, time.time() - t0)

    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _write_events(self, enc, items, w):
        out = []
        for ev, etype, which in items:
            if etype == BOOKMARK:
                data = enc.bookmark(w.last_rv, which == INITIAL_EVENTS_END)
            else:
                data = enc.event(ev, etype, which)
            out.append(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"".join(out))

    def _client_gone(self):
        try:
            rd, _, _ = select.select([self.connection], [], [], 0)
            if rd:
                data = self.connection.recv(1, socket.MSG_PEEK)
                return data == b""
        except (OSError, ValueError):
            return True
        return False

    # -- pods/log, pods/binding ----------------------------------------------------------
    def _pod_log(self, r):
        st = self.api.store
        pod = st.get(r.rt, r.ns, r.name)
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
        init = [c.get("name") for c in spec.get("initContainers") or [] if isinstance(c, dict)]
        container = r.q.get("container")
        if not container:
            if len(names) != 1:
                raise ApiError.bad_request("a container name must be specified for pod %s, "
                                           "choose one of: [%s]" % (r.name, " ".join(names)))
            container = names[0]
        if container not in names and container not in init:
            raise ApiError.bad_request("container %s is not valid for pod %s"
                                       % (container, r.name))
        d = os.path.join(self.api.dir, "pods", "%s_%s" % (r.ns, r.name))
        fname = container + (".previous.log" if _qbool(r.q.get("previous")) else ".log")
        path = os.path.join(d, fname)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        pos = len(data)  # follow resumes after exactly what was read
        tail = self._int_param(r, "tailLines", 0)
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail else b""
        limit = self._int_param(r, "limitBytes", 1)
        if limit is not None:
            data = data[:limit]
        if not _qbool(r.q.get("follow")):
            return self._respond(200, data, "text/plain")
        # follow: stream until the pod goes away or the client disconnects
        self._streaming = True
        self._sent = True
        self._code = 200
        self.close_connection = True
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            if data:
                self._write_chunk(data)
            deadline = time.time() + 24 * 3600
            while time.time() < deadline and not self.api.stopping.is_set():
                time.sleep(0.2)
                try:
                    size = os.path.getsize(path)
                except OSError:
                    size = pos
                if size < pos:  # truncated (container restarted): start over
                    pos = 0
                if size > pos:
                    with open(path, "rb") as f:
                        f.seek(pos)
                        chunk = f.read(size - pos)
                    pos = size
                    self._write_chunk(chunk)
                    continue
                if st.get_raw(r.rt.key, r.ns, r.name) is None or self._client_gone():
                    break
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def _pod_binding(self, r):
        st = self.api.store
        body = self._decode_body(r.rt)
        target = (body or {}).get("target") or {} if isinstance(body, dict) else {}
        node = target.get("name")
        if not node:
            raise ApiError.invalid("", "Binding", r.name, [
                ("FieldValueRequired", "target.name", "Required value")])
        with st.lock:
            pod = st.get_raw(r.rt.key, r.ns, r.name)
            if pod is None:
                raise ApiError.not_found("", "pods", r.name)
            cur = (pod.get("spec") or {}).get("nodeName")
            if cur:
                raise ApiError.conflict("", "pods/binding", r.name,
                                        "pod %s is already assigned to node %s"
                                        % (r.name, json.dumps(cur)))

            def bind(o):
                o.setdefault("spec", {})["nodeName"] = node
            st.internal_update(r.rt.key, r.ns, r.name, bind, "kube-scheduler")
        return self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                     "status": "Success", "code": 201})


class _Encoder:
    """Encodes watch events for one watcher; JSON forms are cached on the event so each event
    is encoded once per distinct output form across all watchers."""

    def __init__(self, store, rt, mode, av, include_object):
        self.store = store
        self.rt = rt
        self.mode = mode
        self.av = av
        self.inc = include_object
        self.form = (mode, rt.api_version, av, include_object)
        self.first_table = True

    def _obj_bytes(self, obj):
        if self.mode == "meta":
            return _dumps({"kind": "PartialObjectMetadata", "apiVersion": self.av,
                           "metadata": meta_of(obj)})
        return _dumps(self.store.present(self.rt, obj))

    def event(self, ev, etype, which):
        if self.mode == "table":
            obj = self.store.present(self.rt, ev.pick(which))
            table = _b_table().to_table(self.rt.kind_info(), [obj], include_object=self.inc,
                                        no_headers=not self.first_table)
            table["apiVersion"] = self.av
            table.setdefault("metadata", {})["resourceVersion"] = \
                meta_of(obj).get("resourceVersion", "")
            self.first_table = False
            return _dumps({"type": etype, "object": table}) + b"\n"
        key = (etype, which, self.form)
        data = ev.cache.get(key)
        if data is None:
            okey = (which, self.form)
            ob = ev.cache.get(okey)
            if ob is None:
                ob = self._obj_bytes(ev.pick(which))
                ev.cache[okey] = ob
            data = b'{"type":"' + etype.encode() + b'","object":' + ob + b"}\n"
            ev.cache[key] = data
        return data

    def bookmark(self, rv, initial_end):
        md = {"resourceVersion": str(rv), "creationTimestamp": None}
        if initial_end:
            md["annotations"] = {INITIAL_EVENTS_END: "true"}
        return _dumps({"type": BOOKMARK, "object": {"kind": self.rt.kind,
                                                    "apiVersion": self.rt.api_version,
                                                    "metadata": md}}) + b"\n"


# --------------------------------------------------------------------------------------------
# Protobuf request bodies.  kubectl's typed clients (kubectl create namespace/configmap/secret/
# deployment/service/serviceaccount/role/...) POST "application/vnd.kubernetes.protobuf" bodies:
# "k8s\x00" + runtime.Unknown{typeMeta{apiVersion,kind}, raw=<object message>}.  The table
# below maps the field numbers of the messages those commands produce (k8s.io/api
# generated.proto) to JSON names; unknown fields are skipped.  Types: s string, b bytes, i int,
# B bool, T metav1.Time, Q Quantity, I IntOrString, ms/mb/mQ maps of string/bytes/Quantity,
# "M" + message name.  Suffix flags: r repeated, p pointer (a zero value is kept).

_PB = {
    "ObjectMeta": {1: ("name", "s"), 2: ("generateName", "s"), 3: ("namespace", "s"),
                   5: ("uid", "s"), 6: ("resourceVersion", "s"), 7: ("generation", "i"),
                   8: ("creationTimestamp", "T"), 9: ("deletionTimestamp", "T"),
                   10: ("deletionGracePeriodSeconds", "ip"), 11: ("labels", "ms"),
                   12: ("annotations", "ms"), 13: ("ownerReferences", "MOwnerReference r"),
                   14: ("finalizers", "s r")},
    "OwnerReference": {1: ("kind", "s"), 2: ("name", "s"), 3: ("uid", "s"),
                       5: ("apiVersion", "s"), 6: ("controller", "Bp"),
                       7: ("blockOwnerDeletion", "Bp")},
    "LabelSelector": {1: ("matchLabels", "ms"),
                      2: ("matchExpressions", "MLabelSelectorRequirement r")},
    "LabelSelectorRequirement": {1: ("key", "s"), 2: ("operator", "s"), 3: ("values", "s r")},
    "Namespace": {1: ("metadata", "MObjectMeta"), 2: ("spec", "MNamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "s r")},
    "ConfigMap": {1: ("metadata", "MObjectMeta"), 2: ("data", "ms"), 3: ("binaryData", "mb"),
                  4: ("immutable", "Bp")},
    "Secret": {1: ("metadata", "MObjectMeta"), 2: ("data", "mb"), 3: ("type", "s"),
               4: ("stringData", "ms"), 5: ("immutable", "Bp")},
    "ServiceAccount": {1: ("metadata", "MObjectMeta"), 2: ("secrets", "MObjectReference r"),
                       3: ("imagePullSecrets", "MLocalObjectReference r"),
                       4: ("automountServiceAccountToken", "Bp")},
    "ObjectReference": {1: ("kind", "s"), 2: ("namespace", "s"), 3: ("name", "s"),
                        4: ("uid", "s"), 5: ("apiVersion", "s"), 6: ("resourceVersion", "s"),
                        7: ("fieldPath", "s")},
    "LocalObjectReference": {1: ("name", "s")},
    "Service": {1: ("metadata", "MObjectMeta"), 2: ("spec", "MServiceSpec")},
    "ServiceSpec": {1: ("ports", "MServicePort r"), 2: ("selector", "ms"),
                    3: ("clusterIP", "s"), 4: ("type", "s"), 5: ("externalIPs", "s r"),
                    7: ("sessionAffinity", "s"), 8: ("loadBalancerIP", "s"),
                    9: ("loadBalancerSourceRanges", "s r"), 10: ("externalName", "s"),
                    11: ("externalTrafficPolicy", "s"), 12: ("healthCheckNodePort", "i"),
                    13: ("publishNotReadyAddresses", "B"), 17: ("ipFamilyPolicy", "sp"),
                    18: ("clusterIPs", "s r"), 19: ("ipFamilies", "s r"),
                    20: ("allocateLoadBalancerNodePorts", "Bp"),
                    21: ("loadBalancerClass", "sp"), 22: ("internalTrafficPolicy", "sp")},
    "ServicePort": {1: ("name", "s"), 2: ("protocol", "s"), 3: ("port", "i"),
                    4: ("targetPort", "I"), 5: ("nodePort", "i"), 6: ("appProtocol", "sp")},
    "Deployment": {1: ("metadata", "MObjectMeta"), 2: ("spec", "MDeploymentSpec")},
    "DeploymentSpec": {1: ("replicas", "ip"), 2: ("selector", "MLabelSelector"),
                       3: ("template", "MPodTemplateSpec"), 4: ("strategy", "MDeploymentStrategy"),
                       5: ("minReadySeconds", "i"), 6: ("revisionHistoryLimit", "ip"),
                       7: ("paused", "B"), 9: ("progressDeadlineSeconds", "ip")},
    "DeploymentStrategy": {1: ("type", "s"), 2: ("rollingUpdate", "MRollingUpdateDeployment")},
    "RollingUpdateDeployment": {1: ("maxUnavailable", "I"), 2: ("maxSurge", "I")},
    "PodTemplateSpec": {1: ("metadata", "MObjectMeta"), 2: ("spec", "MPodSpec")},
    "PodSpec": {2: ("containers", "MContainer r"), 3: ("restartPolicy", "s"),
                4: ("terminationGracePeriodSeconds", "ip"), 5: ("activeDeadlineSeconds", "ip"),
                6: ("dnsPolicy", "s"), 7: ("nodeSelector", "ms"),
                8: ("serviceAccountName", "s"), 9: ("serviceAccount", "s"),
                10: ("nodeName", "s"), 11: ("hostNetwork", "B"), 16: ("hostname", "s"),
                17: ("subdomain", "s"), 19: ("schedulerName", "s"),
                20: ("initContainers", "MContainer r"),
                15: ("imagePullSecrets", "MLocalObjectReference r"),
                21: ("automountServiceAccountToken", "Bp"), 24: ("priorityClassName", "s"),
                25: ("priority", "ip"), 30: ("enableServiceLinks", "Bp")},
    "Container": {1: ("name", "s"), 2: ("image", "s"), 3: ("command", "s r"),
                  4: ("args", "s r"), 5: ("workingDir", "s"), 6: ("ports", "MContainerPort r"),
                  7: ("env", "MEnvVar r"), 8: ("resources", "MResourceRequirements"),
                  13: ("terminationMessagePath", "s"), 14: ("imagePullPolicy", "s"),
                  16: ("stdin", "B"), 17: ("stdinOnce", "B"), 18: ("tty", "B"),
                  20: ("terminationMessagePolicy", "s")},
    "ContainerPort": {1: ("name", "s"), 2: ("hostPort", "i"), 3: ("containerPort", "i"),
                      4: ("protocol", "s"), 5: ("hostIP", "s")},
    "EnvVar": {1: ("name", "s"), 2: ("value", "s")},
    "ResourceRequirements": {1: ("limits", "mQ"), 2: ("requests", "mQ")},
    "Role": {1: ("metadata", "MObjectMeta"), 2: ("rules", "MPolicyRule r")},
    "ClusterRole": {1: ("metadata", "MObjectMeta"), 2: ("rules", "MPolicyRule r")},
    "PolicyRule": {1: ("verbs", "s r"), 2: ("apiGroups", "s r"), 3: ("resources", "s r"),
                   4: ("resourceNames", "s r"), 5: ("nonResourceURLs", "s r")},
    "RoleBinding": {1: ("metadata", "MObjectMeta"), 2: ("subjects", "MSubject r"),
                    3: ("roleRef", "MRoleRef")},
    "ClusterRoleBinding": {1: ("metadata", "MObjectMeta"), 2: ("subjects", "MSubject r"),
                           3: ("roleRef", "MRoleRef")},
    "Subject": {1: ("kind", "s"), 2: ("apiGroup", "s"), 3: ("name", "s"), 4: ("namespace", "s")},
    "RoleRef": {1: ("apiGroup", "s"), 2: ("kind", "s"), 3: ("name", "s")},
}


class ProtobufError(ValueError):
    pass


def _pb_fields(buf):
    """Yields (field_number, wire_type, value) of one protobuf message."""
    i, n = 0, len(buf)

    def varint():
        nonlocal i
        shift = result = 0
        while True:
            if i >= n:
                raise ProtobufError("truncated varint")
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ProtobufError("varint too long")

    while i < n:
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            yield num, wt, varint()
        elif wt == 2:
            ln = varint()
            if i + ln > n:
                raise ProtobufError("truncated field %d" % num)
            yield num, wt, buf[i:i + ln]
            i += ln
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ProtobufError("unsupported wire type %d" % wt)


def _pb_int(v):
    return v - (1 << 64) if v >= (1 << 63) else v


def _pb_message(buf, name):
    schema = _PB[name]
    out = {}
    for num, wt, v in _pb_fields(buf):
        f = schema.get(num)
        if f is None:
            continue
        key, typ = f
        rep = typ.endswith(" r")
        t = typ[:-2] if rep else typ
        ptr = t.endswith("p") and t not in ("p",)
        if ptr:
            t = t[:-1]
        if t == "s":
            val = bytes(v).decode("utf-8")
        elif t == "b":
            val = base64.b64encode(bytes(v)).decode()
        elif t == "i":
            val = _pb_int(v)
        elif t == "B":
            val = bool(v)
        elif t == "T":
            secs = dict((k, x) for k, _, x in _pb_fields(v)).get(1, 0)
            val = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(secs)) if secs else None
        elif t == "Q":
            val = dict((k, x) for k, _, x in _pb_fields(v)).get(1, b"").decode()
        elif t == "I":
            d = dict((k, x) for k, _, x in _pb_fields(v))
            val = bytes(d.get(3, b"")).decode() if d.get(1) == 1 else _pb_int(d.get(2, 0))
        elif t in ("ms", "mb", "mQ"):
            d = dict((k, x) for k, _, x in _pb_fields(v))
            k = bytes(d.get(1, b"")).decode()
            raw = d.get(2, b"")
            if t == "ms":
                x = bytes(raw).decode()
            elif t == "mb":
                x = base64.b64encode(bytes(raw)).decode()
            else:
                x = dict((a, y) for a, _, y in _pb_fields(raw)).get(1, b"").decode()
            out.setdefault(key, {})[k] = x
            continue
        elif t.startswith("M"):
            val = _pb_message(v, t[1:])
        else:  # pragma: no cover - table typo
            raise ProtobufError("bad schema type %s" % t)
        if rep:
            out.setdefault(key, []).append(val)
            continue
        if not ptr and val in ("", 0, False, None, {}) and not (t == "i" and key in (
                "port", "containerPort")):
            continue
        if val is None:
            continue
        out[key] = val
    return out


def decode_protobuf(raw):
    """Decodes a kube protobuf envelope to a JSON object; raises ProtobufError."""
    if not raw.startswith(b"k8s\x00"):
        raise ProtobufError("missing the k8s protobuf magic number")
    body = memoryview(raw)[4:]
    tm = {}
    obj = b""
    for num, wt, v in _pb_fields(body):
        if num == 1 and wt == 2:
            tm = {k: bytes(x).decode() for k, _, x in _pb_fields(v)}
        elif num == 2 and wt == 2:
            obj = v
    av, kind = tm.get(1, ""), tm.get(2, "")
    if kind not in _PB:
        raise ProtobufError("no protobuf decoder for kind %r" % kind)
    out = {"apiVersion": av, "kind": kind}
    out.update(_pb_message(obj, kind))
    return out


def _b_table():
    from lk import table
    return table


def _yaml_duplicates(raw):
    """Strict decoding errors of duplicate keys in a YAML body (sigs.k8s.io/yaml
    YAMLToJSONStrict): ['yaml: unmarshal errors:\n  line 4: key "c" already set in map']."""
    from lk import yamlmini
    text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
    try:
        yamlmini.loads(text, duplicate_keys="error")
    except Exception as e:
        msg = str(e)
        if "already defined" not in msg:
            return []
        line = msg.split("line ", 1)[-1].split(":", 1)[0] if "line " in msg else "?"
        key = msg.split('mapping key "', 1)[-1].split('"', 1)[0]
        return ['yaml: unmarshal errors:\n  line %s: key "%s" already set in map' % (line, key)]
    return []


def _yaml_or_json_strict(raw):
    """(object, strict decoding errors) of a JSON or YAML body."""
    text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    try:
        return json_loads_strict(text)
    except ValueError:
        from lk import yamlmini
        return yamlmini.loads(text), _yaml_duplicates(text)


# --------------------------------------------------------------------------------------------
# CLI


def _write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m lk.apiserver",
                                description="localkube Kubernetes API server emulator")
    p.add_argument("--dir", required=True, help="state directory (pid/port files, pod logs)")
    p.add_argument("--port", type=int, default=0, help="TCP port (0 = pick a free one)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback)")
    p.add_argument("--bookmark-interval", type=float, default=5.0,
                   help="seconds between watch BOOKMARK events (default 5)")
    p.add_argument("--history-size", type=int, default=10000,
                   help="watch events kept per resource (default 10000)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, args.log_level.upper(),
                                                         logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.makedirs(args.dir, exist_ok=True)
    pid_path = os.path.join(args.dir, "apiserver.pid")
    port_path = os.path.join(args.dir, "apiserver.port")
    _write_atomic(pid_path, "%d\n" % os.getpid())
    api = ApiServer(args.dir, args.host, args.port, bookmark_interval=args.bookmark_interval,
                    history_size=args.history_size)
    _write_atomic(port_path, "%d\n" % api.port)
    log.info("localkube apiserver listening on http://%s (pid %d)", api.address, os.getpid())

    def stop(signum, frame):
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=api.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        api.serve_forever()
    finally:
        for path in (pid_path, port_path):
            try:
                os.unlink(path)
            except OSError:
                pass
        log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
