"""A small, thread-safe Kubernetes REST client for localkube's own components.

Standard library only.  It speaks to any Kubernetes API server (localkube's emulator or a real
one over plain HTTP/HTTPS without auth) the way client-go does:

* ``Client``: get / list (with paging) / create / update / update_status / patch (merge, json,
  strategic, apply) / delete (propagationPolicy, gracePeriodSeconds, preconditions) / watch.
  Keep-alive connections, one per thread.  5xx, 429 (honouring Retry-After) and connection
  errors are retried with exponential backoff.
* ``watch``: a generator over the newline-delimited JSON event stream (partial lines are
  buffered; an ERROR event is raised as ``ApiError``, so a 410 tells the caller to relist).
* ``Informer``: list + watch into a dict cache with add/update/delete callbacks, re-watch from the
  last resourceVersion when a stream ends, relist on 410 Expired, and an optional resync.
* ``WorkQueue``: client-go's de-duplicating work queue with delayed and rate-limited adds.

Every request carries ``User-Agent: localkube/<component>``.
"""

import collections
import heapq
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
import urllib.parse

log = logging.getLogger("lk.client")

Resource = collections.namedtuple("Resource", "api_version plural kind namespaced")

PODS = Resource("v1", "pods", "Pod", True)
NODES = Resource("v1", "nodes", "Node", False)
SERVICES = Resource("v1", "services", "Service", True)
ENDPOINTS = Resource("v1", "endpoints", "Endpoints", True)
CONFIGMAPS = Resource("v1", "configmaps", "ConfigMap", True)
SECRETS = Resource("v1", "secrets", "Secret", True)
NAMESPACES = Resource("v1", "namespaces", "Namespace", False)
EVENTS = Resource("v1", "events", "Event", True)
DEPLOYMENTS = Resource("apps/v1", "deployments", "Deployment", True)
REPLICASETS = Resource("apps/v1", "replicasets", "ReplicaSet", True)
DAEMONSETS = Resource("apps/v1", "daemonsets", "DaemonSet", True)
LEASES = Resource("coordination.k8s.io/v1", "leases", "Lease", True)
ENDPOINTSLICES = Resource("discovery.k8s.io/v1", "endpointslices", "EndpointSlice", True)

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

RETRY_CODES = (429, 500, 502, 503, 504)


class ApiError(Exception):
    """A non-2xx answer (or an ERROR watch event) carrying the Status body."""

    def __init__(self, code, status=None, retry_after=None):
        self.code = int(code)
        self.status = status if isinstance(status, dict) else {}
        self.reason = self.status.get("reason", "")
        self.message = self.status.get("message", "") or (
            status if isinstance(status, str) else "")
        self.retry_after = retry_after
        super().__init__("%d %s: %s" % (self.code, self.reason, self.message))

    @property
    def not_found(self):
        return self.code == 404

    @property
    def conflict(self):
        return self.code == 409 and self.reason != "AlreadyExists"

    @property
    def already_exists(self):
        return self.code == 409 and self.reason == "AlreadyExists"

    @property
    def expired(self):
        return self.code == 410 or self.reason in ("Expired", "Gone")


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def parse_time(s):
    """RFC 3339 (seconds or fractional, 'Z' or offset) -> epoch seconds; None when absent."""
    if not s:
        return None
    import datetime
    try:
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def obj_key(obj):
    md = obj.get("metadata", {})
    ns = md.get("namespace")
    return "%s/%s" % (ns, md.get("name")) if ns else md.get("name", "")


def split_key(key):
    if "/" in key:
        ns, name = key.split("/", 1)
        return ns, name
    return None, key


def rv_int(obj):
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class WatchDecoder:
    """Turns the bytes of a watch stream into events.

    Events are newline-delimited JSON documents; a chunk may end in the middle of a line (or of
    a UTF-8 sequence), so incomplete lines are buffered.  A document spread over several lines
    (pretty-printed) is accepted too: lines are joined until they parse.
    """

    MAX_PENDING = 64 << 20

    def __init__(self):
        self._buf = b""
        self._pending = b""

    def feed(self, data):
        self._buf += data
        events = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            line, self._buf = self._buf[:nl], self._buf[nl + 1:]
            cand = self._pending + line
            if not cand.strip():
                self._pending = b""
                continue
            try:
                events.append(json.loads(cand.decode("utf-8")))
                self._pending = b""
            except ValueError:
                if len(cand) > self.MAX_PENDING:
                    raise ValueError("watch stream: unparseable event of %d bytes" % len(cand))
                self._pending = cand + b"\n"
        if len(self._buf) > self.MAX_PENDING:
            raise ValueError("watch stream: line longer than %d bytes" % self.MAX_PENDING)
        return events

    def finish(self):
        """End of stream: a last document without a trailing newline still counts."""
        rest = (self._pending + self._buf).strip()
        self._buf = self._pending = b""
        if not rest:
            return []
        try:
            return [json.loads(rest.decode("utf-8"))]
        except ValueError:
            log.warning("watch stream ended inside an event (%d bytes dropped)", len(rest))
            return []


class Client:
    """Thread-safe REST client; one keep-alive connection per thread."""

    def __init__(self, server, component="client", timeout=30.0, retries=6, token=None,
                 verify=True):
        u = urllib.parse.urlsplit(server.rstrip("/"))
        if u.scheme not in ("http", "https"):
            raise ValueError("server must be http:// or https://: %r" % server)
        self.server = server.rstrip("/")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.user_agent = "localkube/%s" % component
        self.timeout = timeout
        self.retries = retries
        self.token = token
        self._ssl = None
        if u.scheme == "https":
            self._ssl = ssl.create_default_context()
            if not verify:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        self._local = threading.local()
        self._discovery = {}
        self._lock = threading.Lock()

    # ---- plumbing -------------------------------------------------------------------------

    def _new_conn(self, timeout):
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _conn(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._new_conn(self.timeout)
            self._local.conn = c
        return c

    def _drop_conn(self):
        c = getattr(self._local, "conn", None)
        self._local.conn = None
        if c is not None:
            try:
                c.close()
            except OSError:
                pass

    def close(self):
        """Closes this thread's keep-alive connection."""
        self._drop_conn()

    def _headers(self, content_type=None, accept="application/json"):
        h = {"User-Agent": self.user_agent, "Accept": accept}
        if content_type:
            h["Content-Type"] = content_type
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    @staticmethod
    def _query(params):
        if not params:
            return ""
        items = [(k, str(v).lower() if isinstance(v, bool) else str(v))
                 for k, v in params.items() if v is not None]
        return "?" + urllib.parse.urlencode(items) if items else ""

    @staticmethod
    def _decode(data):
        if not data:
            return {}
        try:
            return json.loads(data.decode("utf-8"))
        except ValueError:
            return {"message": data.decode("utf-8", "replace")}

    def request(self, method, path, params=None, body=None, content_type="application/json",
                retries=None, raw=False):
        """Send one request (retrying 5xx/429/connection errors); returns the decoded JSON."""
        url = self.prefix + path + self._query(params)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        attempts = self.retries if retries is None else retries
        delay = 0.1
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = self._conn()
                conn.request(method, url, body=data,
                             headers=self._headers(content_type if data is not None else None))
                resp = conn.getresponse()
                payload = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self._drop_conn()
            except (OSError, http.client.HTTPException) as e:
                self._drop_conn()
                if attempt > attempts:
                    raise ConnectionError("%s %s: %s" % (method, path, e)) from e
                log.debug("%s %s: %s (retry %d)", method, path, e, attempt)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 2.0)
                continue
            if 200 <= resp.status < 300:
                if raw:
                    return payload
                return self._decode(payload)
            status = self._decode(payload)
            ra = resp.getheader("Retry-After")
            retry_after = None
            if ra:
                try:
                    retry_after = float(ra)
                except ValueError:
                    retry_after = None
            err = ApiError(resp.status, status, retry_after)
            if resp.status in RETRY_CODES and attempt <= attempts:
                wait = retry_after if retry_after is not None else delay * (0.5 + random.random())
                log.debug("%s %s: %s (retry %d in %.2fs)", method, path, err, attempt, wait)
                time.sleep(min(wait, 30.0))
                delay = min(delay * 2, 2.0)
                continue
            raise err

    # ---- paths ----------------------------------------------------------------------------

    @staticmethod
    def path(res, namespace=None, name=None, subresource=None):
        av = res.api_version
        p = "/api/" + av if "/" not in av else "/apis/" + av
        if res.namespaced and namespace:
            p += "/namespaces/" + urllib.parse.quote(namespace, safe="")
        p += "/" + res.plural
        if name is not None:
            p += "/" + urllib.parse.quote(name, safe="")
            if subresource:
                p += "/" + subresource
        return p

    # ---- verbs ----------------------------------------------------------------------------

    def get(self, res, name, namespace=None, subresource=None):
        return self.request("GET", self.path(res, namespace, name, subresource))

    def get_or_none(self, res, name, namespace=None):
        try:
            return self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    def list(self, res, namespace=None, label_selector=None, field_selector=None, limit=500,
             resource_version=None):
        """All items (following `continue`); returns the list object with every item in it.

        When a continue token has expired (410) the list restarts without paging, like
        client-go's pager.  Items get apiVersion/kind filled in.
        """
        params = {"labelSelector": label_selector, "fieldSelector": field_selector,
                  "limit": limit or None, "resourceVersion": resource_version}
        items = []
        first = None
        cont = None
        while True:
            p = dict(params)
            if cont:
                p["continue"] = cont
                p.pop("resourceVersion", None)
            try:
                page = self.request("GET", self.path(res, namespace), p)
            except ApiError as e:
                if cont and e.expired:
                    log.info("list %s: continue token expired; full list", res.plural)
                    params["limit"] = None
                    items, first, cont = [], None, None
                    continue
                raise
            if first is None:
                first = page
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                break
        for it in items:
            it.setdefault("apiVersion", res.api_version)
            it.setdefault("kind", res.kind)
        out = dict(first)
        out["items"] = items
        md = dict(out.get("metadata") or {})
        md.pop("continue", None)
        md.pop("remainingItemCount", None)
        out["metadata"] = md
        return out

    def create(self, res, obj, namespace=None, subresource=None, name=None):
        ns = namespace or obj.get("metadata", {}).get("namespace") or (
            "default" if res.namespaced else None)
        if subresource:
            return self.request("POST", self.path(res, ns, name, subresource), body=obj)
        return self.request("POST", self.path(res, ns), body=obj)

    def update(self, res, obj, namespace=None):
        md = obj.get("metadata", {})
        return self.request("PUT", self.path(res, namespace or md.get("namespace"),
                                             md["name"]), body=obj)

    def update_status(self, res, obj, namespace=None):
        md = obj.get("metadata", {})
        return self.request("PUT", self.path(res, namespace or md.get("namespace"),
                                             md["name"], "status"), body=obj)

    def patch(self, res, name, patch, namespace=None, patch_type="merge", subresource=None,
              field_manager=None, force=None):
        ctype = PATCH_TYPES.get(patch_type, patch_type)
        body = patch
        if patch_type == "apply" and not isinstance(patch, (bytes, str)):
            body = json.dumps(patch).encode("utf-8")  # JSON is YAML
        elif isinstance(patch, str):
            body = patch.encode("utf-8")
        params = {"fieldManager": field_manager, "force": force}
        return self.request("PATCH", self.path(res, namespace, name, subresource), params,
                            body=body, content_type=ctype)

    def delete(self, res, name, namespace=None, propagation_policy=None,
               grace_period_seconds=None, preconditions=None):
        """DELETE; returns the answer (the object or a Status).  NotFound raises ApiError."""
        opts = {"kind": "DeleteOptions", "apiVersion": "v1"}
        params = {}
        if propagation_policy:
            opts["propagationPolicy"] = propagation_policy
            params["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            opts["gracePeriodSeconds"] = int(grace_period_seconds)
            params["gracePeriodSeconds"] = int(grace_period_seconds)
        if preconditions:
            opts["preconditions"] = preconditions
        return self.request("DELETE", self.path(res, namespace, name), params, body=opts)

    def watch(self, res, namespace=None, resource_version=None, label_selector=None,
              field_selector=None, timeout_seconds=None, bookmarks=True, on_conn=None):
        """Generator of watch events ({'type':..., 'object':...}) from one stream.

        Ends when the server ends the stream.  An ERROR event is raised as ApiError (code 410
        for an expired resourceVersion).  `on_conn(conn)` receives the connection so that another
        thread can close it to stop the watch.
        """
        params = {"watch": "true", "resourceVersion": resource_version,
                  "labelSelector": label_selector, "fieldSelector": field_selector,
                  "allowWatchBookmarks": "true" if bookmarks else None,
                  "timeoutSeconds": int(timeout_seconds) if timeout_seconds else None}
        sock_timeout = (timeout_seconds or 1800) + 60
        conn = self._new_conn(sock_timeout)
        if on_conn:
            on_conn(conn)
        try:
            conn.request("GET", self.prefix + self.path(res, namespace) + self._query(params),
                         headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                ra = resp.getheader("Retry-After")
                raise ApiError(resp.status, self._decode(resp.read()),
                               float(ra) if ra and ra.replace(".", "", 1).isdigit() else None)
            dec = WatchDecoder()
            while True:
                try:
                    chunk = resp.read1(65536)
                except (http.client.IncompleteRead, ValueError) as e:
                    # server closed mid-chunk (a dropped watch): end of this stream
                    log.debug("watch %s: stream cut: %s", res.plural, e)
                    chunk = b""
                if not chunk:
                    events = dec.finish()
                else:
                    events = dec.feed(chunk)
                for ev in events:
                    if ev.get("type") == "ERROR":
                        st = ev.get("object") or {}
                        raise ApiError(st.get("code") or 500, st)
                    yield ev
                if not chunk:
                    return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    # ---- discovery ------------------------------------------------------------------------

    def has_resource(self, group_version, name):
        """True when discovery of group_version lists `name` (e.g. 'pods/binding')."""
        with self._lock:
            cached = self._discovery.get(group_version)
        if cached is None:
            p = "/api/" + group_version if "/" not in group_version else "/apis/" + group_version
            try:
                doc = self.request("GET", p, retries=2)
                cached = {r.get("name") for r in doc.get("resources") or []}
            except (ApiError, ConnectionError):
                cached = set()
            with self._lock:
                self._discovery[group_version] = cached
        return name in cached


# ---- informer ------------------------------------------------------------------------------


class Informer:
    """list + watch of one resource into a dict cache keyed by 'ns/name' (or 'name').

    Handlers run in the informer thread and must be quick (enqueue work).  on_update gets
    (old, new); on_delete gets the last known object.
    """

    def __init__(self, client, res, namespace=None, label_selector=None, field_selector=None,
                 resync=0.0, watch_timeout=(240, 300), name=None):
        self.client = client
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.name = name or res.plural
        self._cache = {}
        self._overlay = {}
        self._lock = threading.RLock()
        self._handlers = []
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._conn = None
        self._threads = []
        self.rv = None
        self.relists = 0
        self.watches = 0

    def add_handler(self, on_add=None, on_update=None, on_delete=None):
        self._handlers.append((on_add, on_update, on_delete))

    def start(self):
        t = threading.Thread(target=self._run, name="informer-" + self.name, daemon=True)
        t.start()
        self._threads.append(t)
        if self.resync > 0:
            r = threading.Thread(target=self._resync_loop, name="resync-" + self.name,
                                 daemon=True)
            r.start()
            self._threads.append(r)
        return self

    def stop(self):
        self._stop.set()
        c = self._conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def join(self, timeout=5.0):
        for t in self._threads:
            t.join(timeout)

    def wait_synced(self, timeout=None):
        return self._synced.wait(timeout)

    @property
    def synced(self):
        return self._synced.is_set()

    # ---- cache reads ----------------------------------------------------------------------

    def get(self, key_or_ns, name=None):
        key = key_or_ns if name is None else ("%s/%s" % (key_or_ns, name) if key_or_ns else name)
        with self._lock:
            o = self._cache.get(key)
            ov = self._overlay.get(key)
            if ov is not None and (o is None or rv_int(ov) > rv_int(o)):
                return ov
            return o

    def list(self, namespace=None, predicate=None):
        with self._lock:
            objs = [self._newer(k, o) for k, o in self._cache.items()]
            objs += [o for k, o in self._overlay.items() if k not in self._cache]
        out = []
        for o in objs:
            if namespace is not None and o.get("metadata", {}).get("namespace") != namespace:
                continue
            if predicate is not None and not predicate(o):
                continue
            out.append(o)
        return out

    def keys(self):
        with self._lock:
            return list(set(self._cache) | set(self._overlay))

    def _newer(self, key, o):
        ov = self._overlay.get(key)
        if ov is not None and rv_int(ov) > rv_int(o):
            return ov
        return o

    def mutate(self, obj):
        """Record a write this process just made, ahead of its watch event: reads (get, list)
        return it until the watch catches up; handlers still see every watch event with the
        previous watched state as `old` (so change detection keeps working)."""
        if not isinstance(obj, dict) or not obj.get("metadata"):
            return
        key = obj_key(obj)
        with self._lock:
            old = self._cache.get(key)
            if old is not None and rv_int(old) >= rv_int(obj):
                return
            self._overlay[key] = obj

    # ---- dispatch -------------------------------------------------------------------------

    def _fire(self, kind, *args):
        for h in self._handlers:
            fn = h[{"add": 0, "update": 1, "delete": 2}[kind]]
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:  # a handler bug must not kill the informer
                log.exception("informer %s: %s handler failed", self.name, kind)

    def _apply(self, etype, obj):
        obj.setdefault("apiVersion", self.res.api_version)
        obj.setdefault("kind", self.res.kind)
        key = obj_key(obj)
        with self._lock:
            old = self._cache.get(key)
            ov = self._overlay.get(key)
            if ov is not None and (etype == "DELETED" or rv_int(obj) >= rv_int(ov)):
                del self._overlay[key]
            if etype == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        if etype == "DELETED":
            self._fire("delete", obj)
        elif old is None:
            self._fire("add", obj)
        else:
            self._fire("update", old, obj)

    def _replace(self, items):
        new = {}
        for o in items:
            new[obj_key(o)] = o
        with self._lock:
            old = self._cache
            self._cache = dict(new)
            self._overlay = {}
        for k, o in old.items():
            if k not in new:
                self._fire("delete", o)
        for k, o in new.items():
            prev = old.get(k)
            if prev is None:
                self._fire("add", o)
            elif rv_int(prev) != rv_int(o) or prev != o:
                self._fire("update", prev, o)

    def _resync_loop(self):
        while not self._stop.wait(self.resync):
            if not self._synced.is_set():
                continue
            for o in self.list():
                self._fire("update", o, o)

    # ---- the reflector loop ---------------------------------------------------------------

    def _set_conn(self, c):
        self._conn = c
        if self._stop.is_set() and c is not None:
            raise ConnectionError("informer stopped")

    def _run(self):
        try:
            self._reflect()
        finally:
            self.client.close()  # this thread's keep-alive connection

    def _reflect(self):
        need_list = True
        backoff = 0.2
        while not self._stop.is_set():
            if need_list:
                try:
                    lst = self.client.list(self.res, self.namespace, self.label_selector,
                                           self.field_selector)
                except (ApiError, ConnectionError) as e:
                    log.warning("informer %s: list failed: %s", self.name, e)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                self.rv = (lst.get("metadata") or {}).get("resourceVersion")
                self.relists += 1
                self._replace(lst.get("items") or [])
                self._synced.set()
                need_list = False
                backoff = 0.2
            started = time.monotonic()
            nevents = 0
            try:
                lo, hi = self.watch_timeout
                self.watches += 1
                for ev in self.client.watch(self.res, self.namespace, self.rv,
                                            self.label_selector, self.field_selector,
                                            timeout_seconds=random.randint(lo, hi),
                                            on_conn=self._set_conn):
                    if self._stop.is_set():
                        break
                    nevents += 1
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    etype = ev.get("type")
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(etype, obj)
                    if rv:
                        self.rv = rv
                backoff = 0.2
            except ApiError as e:
                if e.expired:
                    log.info("informer %s: %s; relisting", self.name, e)
                    need_list = True
                    continue
                log.warning("informer %s: watch failed: %s", self.name, e)
                wait = e.retry_after if e.retry_after is not None else backoff
                self._stop.wait(min(wait, 30.0))
                backoff = min(backoff * 2, 5.0)
                continue
            except (OSError, http.client.HTTPException, ValueError) as e:
                if self._stop.is_set():
                    break
                log.info("informer %s: watch stream broke: %s", self.name, e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            finally:
                self._conn = None
            if nevents == 0 and time.monotonic() - started < 1.0:
                # a very short watch: the server is unhappy; do not spin
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)


# ---- work queue ----------------------------------------------------------------------------


class WorkQueue:
    """De-duplicating queue: a key is never handed to two workers at once (client-go style)."""

    def __init__(self, name="queue", base_delay=0.05, max_delay=30.0):
        self.name = name
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._dirty = set()
        self._processing = set()
        self._delayed = []  # heap of (ready_at, seq, key)
        self._seq = 0
        self._failures = {}
        self._base = base_delay
        self._max = max_delay
        self._shutdown = False

    def add(self, key):
        with self._cond:
            if self._shutdown or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key, delay):
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            self._seq += 1
            heapq.heappush(self._delayed, (time.monotonic() + delay, self._seq, key))
            self._cond.notify()

    def add_rate_limited(self, key):
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        self.add_after(key, min(self._base * (2 ** n), self._max))

    def forget(self, key):
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key):
        with self._cond:
            return self._failures.get(key, 0)

    def _promote(self):
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            if key not in self._dirty:
                self._dirty.add(key)
                if key not in self._processing:
                    self._queue.append(key)

    def get(self, timeout=None):
        """Next key, or None on shutdown (or timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._promote()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    return None
                wait = None
                if self._delayed:
                    wait = max(0.0, self._delayed[0][0] - time.monotonic())
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key):
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shutdown(self):
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self):
        with self._cond:
            return len(self._queue)


# ---- object helpers shared by the controllers, the scheduler and the kubelet -------------

_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


def random_suffix(n=5):
    return "".join(random.choice(_ALPHANUMS) for _ in range(n))


def safe_encode(s):
    """rand.SafeEncodeString: maps each byte onto the vowel-free alphabet."""
    return "".join(_ALPHANUMS[b % len(_ALPHANUMS)] for b in s.encode("utf-8"))


def generate_name(base, n=5):
    """names.SimpleNameGenerator: base truncated to 58 chars + 5 random characters."""
    if len(base) > 63 - n:
        base = base[:63 - n]
    return base + random_suffix(n)


def fnv32a(data, h=0x811C9DC5):
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def get_condition(obj_status, ctype):
    for c in (obj_status or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def controller_ref(obj):
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def owner_ref(owner, block=True):
    md = owner["metadata"]
    return {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"),
            "name": md["name"], "uid": md["uid"], "controller": True,
            "blockOwnerDeletion": block}


def is_pod_ready(pod):
    c = get_condition(pod.get("status"), "Ready")
    return c is not None and c.get("status") == "True"


def is_pod_available(pod, min_ready_seconds, now=None):
    """podutil.IsPodAvailable: Ready for at least minReadySeconds."""
    if not is_pod_ready(pod):
        return False
    if not min_ready_seconds:
        return True
    c = get_condition(pod.get("status"), "Ready")
    t = parse_time(c.get("lastTransitionTime"))
    now = time.time() if now is None else now
    return t is not None and t + min_ready_seconds <= now


def is_pod_terminal(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_pod_active(pod):
    """controller.IsPodActive: not terminal and not being deleted."""
    return not is_pod_terminal(pod) and not pod.get("metadata", {}).get("deletionTimestamp")
