"""In-memory object store with kube-apiserver semantics.

One global resourceVersion counter (like the etcd revision), per-resource bounded event history
(for watch resume, continue tokens and exact-RV lists), watcher fan-out with selector transition
semantics, and the registry logic of kube's generic store: create/update/patch/delete with
preconditions, finalizers, graceful pod deletion, status/scale subresources, generation rules,
managedFields, field validation, custom resource pruning/defaulting/validation.

Objects kept in the store are never mutated after they are stored: every write builds a new dict.
So a reader may encode a stored object outside the lock.  The store lock is an RLock; nothing
here ever blocks on I/O while holding it (watchers get bounded in-memory queues).
"""

import base64
import collections
import ipaddress
import json
import logging
import random
import threading
import time
import uuid

from lk import selectors as sel
from lk.resources import (ApiError, Registry, ResourceType, fmt_value, json_copy, name_errors,
                          now_rfc3339, parse_rfc3339, rfc3339_at, status_success, storage_version)

log = logging.getLogger("localkube.apiserver")

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

NS_KEY = ("", "namespaces")
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def _b(mod):
    """Lazy import of helper-B modules (they may appear after this module is imported)."""
    import importlib
    return importlib.import_module("lk." + mod)


def meta_of(obj):
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def obj_key(obj):
    m = meta_of(obj)
    return (m.get("namespace") or "", m.get("name") or "")


def _restamp(obj, rv):
    o = dict(obj)
    m = dict(meta_of(obj))
    m["resourceVersion"] = str(rv)
    o["metadata"] = m
    return o


def _strip_for_compare(obj, keep_managed=False):
    """obj without what a no-op write may differ in: the resourceVersion and managedFields
    (with keep_managed, only the managedFields timestamps: an apply that changes ownership
    alone is a real write)."""
    o = dict(obj)
    m = dict(meta_of(obj))
    mf = m.pop("managedFields", None)
    if keep_managed and mf:
        m["managedFields"] = [{k: v for k, v in e.items() if k != "time"}
                              for e in mf if isinstance(e, dict)]
    m.pop("resourceVersion", None)
    o["metadata"] = m
    return o


def label_selector_string(selector):
    """metav1.LabelSelectorAsSelector(...).String() for a LabelSelector object."""
    if not isinstance(selector, dict):
        return ""
    try:
        return str(sel.selector_from_label_selector_object(selector))
    except Exception:
        parts = ["%s=%s" % (k, v) for k, v in sorted((selector.get("matchLabels") or {}).items())]
        return ",".join(parts)


def _get_path(obj, path):
    """Reads '.spec.replicas'-style paths."""
    cur = obj
    for p in [x for x in path.strip(".").split(".") if x]:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur


def _set_path(obj, path, value):
    parts = [x for x in path.strip(".").split(".") if x]
    cur = obj
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def _remove_dotted(obj, path):
    """Removes a field named by a dotted path such as 'spec.containers[0].foo'."""
    tokens = []
    for part in path.split("."):
        while part:
            if "[" in part:
                head, rest = part.split("[", 1)
                if head:
                    tokens.append(head)
                idx, part = rest.split("]", 1)
                try:
                    tokens.append(int(idx))
                except ValueError:
                    tokens.append(idx)
            else:
                tokens.append(part)
                part = ""
    cur = obj
    for t in tokens[:-1]:
        try:
            cur = cur[t]
        except (KeyError, IndexError, TypeError):
            return
    try:
        if isinstance(cur, dict):
            cur.pop(tokens[-1], None)
    except (IndexError, TypeError):
        pass


# --------------------------------------------------------------------------------------------
# Events and watchers


class Event:
    __slots__ = ("rv", "type", "obj", "prev", "cache", "_prev_rs")

    def __init__(self, rv, etype, obj, prev):
        self.rv = rv
        self.type = etype
        self.obj = obj
        self.prev = prev
        self.cache = {}
        self._prev_rs = None

    def prev_restamped(self):
        if self._prev_rs is None:
            self._prev_rs = _restamp(self.prev, self.rv)
        return self._prev_rs

    def pick(self, which):
        return self.obj if which == "obj" else self.prev_restamped()


class Watcher:
    """A registered watch: filter + bounded queue of (Event, type, which) items."""

    def __init__(self, key, rt, namespace, label_sel, field_sel, maxq=10000):
        self.key = key
        self.rt = rt
        self.namespace = namespace or None
        self.label_sel = label_sel
        self.field_sel = field_sel
        self.maxq = maxq
        self.items = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        self.closed = False
        self.close_reason = None
        self.last_rv = 0  # the RV this watcher is known to be caught up to

    def matches(self, obj):
        if obj is None:
            return False
        m = meta_of(obj)
        if self.namespace is not None and m.get("namespace") != self.namespace:
            return False
        if self.label_sel is not None and not self.label_sel.matches(m.get("labels") or {}):
            return False
        if self.field_sel is not None and not self.field_sel.matches(obj):
            return False
        return True

    def transition(self, ev):
        if ev.type == ADDED:
            return (ADDED, "obj") if self.matches(ev.obj) else None
        if ev.type == DELETED:
            return (DELETED, "obj") if self.matches(ev.prev) else None
        old = self.matches(ev.prev)
        new = self.matches(ev.obj)
        if old and new:
            return (MODIFIED, "obj")
        if new:
            return (ADDED, "obj")
        if old:
            return (DELETED, "prev")
        return None

    def offer(self, item):
        with self.cond:
            if self.closed:
                return False
            if len(self.items) >= self.maxq:
                self.closed = True
                self.close_reason = "overflow"
                self.items.clear()
                self.cond.notify_all()
                return False
            self.items.append(item)
            self.cond.notify_all()
            return True

    def close(self, reason):
        with self.cond:
            if not self.closed:
                self.closed = True
                self.close_reason = reason
            self.cond.notify_all()

    def take(self, timeout):
        """Waits up to timeout for items; returns (items, closed)."""
        with self.cond:
            if not self.items and not self.closed and timeout > 0:
                self.cond.wait(timeout)
            items = list(self.items)
            self.items.clear()
            return items, self.closed


# --------------------------------------------------------------------------------------------
# Options


class WriteOptions:
    def __init__(self, dry_run=False, field_manager=None, field_validation=None, force=None,
                 user_agent="", internal=False):
        self.dry_run = dry_run
        self.field_manager = field_manager
        self.field_validation = field_validation or "Warn"
        self.force = force
        self.user_agent = user_agent or ""
        self.internal = internal
        self.warnings = []
        # strict decoding errors found while decoding the body (duplicate fields), reported
        # together with the unknown fields under fieldValidation Strict / Warn
        self.strict_errors = []
        self._strict_reported = False

    def manager(self, default="unknown"):
        """managerOrUserAgent: fieldManager, else the User-Agent up to the first '/'
        (printable characters only, at most 128 bytes)."""
        if self.field_manager:
            return self.field_manager
        out = []
        size = 0
        for ch in self.user_agent.split("/")[0]:
            if not ch.isprintable():
                continue
            n = len(ch.encode("utf-8"))
            if size + n > 128:
                break
            out.append(ch)
            size += n
        return "".join(out) or default


class DeleteOptions:
    def __init__(self, grace_period=None, propagation=None, orphan_dependents=None,
                 precondition_uid=None, precondition_rv=None, dry_run=False):
        self.grace_period = grace_period
        self.propagation = propagation
        self.orphan_dependents = orphan_dependents
        self.precondition_uid = precondition_uid
        self.precondition_rv = precondition_rv
        self.dry_run = dry_run


# --------------------------------------------------------------------------------------------
# The store


class Store:
    def __init__(self, registry=None, history_size=10000, watcher_queue=10000):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.registry = registry or Registry()
        self.history_size = history_size
        self.watcher_queue = watcher_queue
        self.rv = 0
        self.compact_rv = 0
        self.data = {}
        self.hist = {}
        self.trimmed = {}
        self.watchers = {}
        self.uid_index = {}
        self.owner_index = {}
        self.listeners = []
        self.used_ips = set()
        self.used_node_ports = set()
        self._next_ip = 10
        self.bookmark_interval = 5.0

    # -- bootstrap ----------------------------------------------------------------------
    def bootstrap(self):
        opts = WriteOptions(user_agent="localkube/apiserver", internal=True)
        nst = self.registry.lookup("", "v1", "namespaces")
        for ns in INITIAL_NAMESPACES:
            self.create(nst, None, {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": ns}}, opts)
        svc = self.registry.lookup("", "v1", "services")
        self.create(svc, "default", {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": "10.96.0.1", "type": "ClusterIP",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                "targetPort": 6443}]}}, opts)

    # -- low-level primitives (caller holds the lock) -----------------------------------
    def _bucket(self, key):
        b = self.data.get(key)
        if b is None:
            b = self.data[key] = {}
        return b

    def _get(self, key, ns, name):
        return self.data.get(key, {}).get((ns or "", name))

    def hist_start(self, key):
        return max(self.compact_rv, self.trimmed.get(key, 0))

    def _commit(self, key, etype, obj, prev):
        """Stores (or removes) obj, records and dispatches the event.  Returns the stored obj."""
        self.rv += 1
        rv = self.rv
        bucket = self._bucket(key)
        if etype == DELETED:
            k = obj_key(prev)
            bucket.pop(k, None)
            stored = _restamp(prev, rv)
        else:
            stored = _restamp(obj, rv)
            k = obj_key(stored)
            bucket[k] = stored
        self._index(key, k, prev, None if etype == DELETED else stored)
        ev = Event(rv, etype, stored, prev)
        h = self.hist.get(key)
        if h is None:
            h = self.hist[key] = collections.deque()
        h.append(ev)
        while len(h) > self.history_size:
            old = h.popleft()
            self.trimmed[key] = old.rv
        ws = self.watchers.get(key)
        if ws:
            dead = []
            for w in ws:
                t = w.transition(ev)
                if t is not None and not w.offer((ev, t[0], t[1])):
                    dead.append(w)
            for w in dead:
                self._unregister(w)
        if key == CRD_KEY:
            self._crd_changed(etype, stored, prev)
        if key == ("", "services"):
            self._service_changed(etype, stored, prev)
        for fn in self.listeners:
            try:
                fn(key, ev)
            except Exception:  # pragma: no cover - listener bugs must not break writes
                log.exception("store listener failed")
        self.changed.notify_all()
        return stored

    def _index(self, key, k, prev, new):
        if prev is not None:
            pm = meta_of(prev)
            if pm.get("uid"):
                self.uid_index.pop(pm["uid"], None)
            for ref in pm.get("ownerReferences") or []:
                s = self.owner_index.get(ref.get("uid"))
                if s is not None:
                    s.discard((key, k[0], k[1]))
                    if not s:
                        del self.owner_index[ref.get("uid")]
        if new is not None:
            nm = meta_of(new)
            if nm.get("uid"):
                self.uid_index[nm["uid"]] = (key, k[0], k[1])
            for ref in nm.get("ownerReferences") or []:
                if isinstance(ref, dict) and ref.get("uid"):
                    self.owner_index.setdefault(ref["uid"], set()).add((key, k[0], k[1]))

    def _crd_changed(self, etype, stored, prev):
        name = meta_of(stored).get("name")
        if etype == DELETED:
            spec = stored.get("spec") or {}
            key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            self.registry.unregister_crd(name)
            for w in self.watchers.pop(key, []):  # the endpoint is gone: end its watches
                w.close("resource removed")
            return
        for c in (stored.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Established" and c.get("status") == "True":
                self.registry.register_crd(stored)
                return

    def _service_changed(self, etype, stored, prev):
        """Keeps the clusterIP / nodePort allocation sets in step with stored services."""
        if prev is not None:
            spec = prev.get("spec") or {}
            for ip in spec.get("clusterIPs") or []:
                self.used_ips.discard(ip)
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and p.get("nodePort"):
                    self.used_node_ports.discard(p["nodePort"])
        if etype != DELETED:
            spec = stored.get("spec") or {}
            for ip in spec.get("clusterIPs") or []:
                self.used_ips.add(ip)
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and p.get("nodePort"):
                    self.used_node_ports.add(p["nodePort"])

    def _unregister(self, w):
        ws = self.watchers.get(w.key)
        if ws and w in ws:
            ws.remove(w)

    # -- read helpers --------------------------------------------------------------------
    def present(self, rt, obj):
        """The object as served at rt's version (CR apiVersion rewrite + read defaulting, the
        events.k8s.io/v1 form of a stored core/v1 Event)."""
        if obj is None:
            return obj
        if not rt.is_custom:
            if rt.to_external is not None and obj.get("apiVersion") != rt.api_version:
                return rt.to_external(obj)
            return obj
        out = obj
        if obj.get("apiVersion") != rt.api_version:
            out = dict(obj)
            out["apiVersion"] = rt.api_version
        if rt.has_defaults and rt.schema:
            try:
                out = _b("schema").apply_defaults(json_copy(out), rt.schema)
            except Exception:
                log.exception("read defaulting failed")
        return out

    def get(self, rt, ns, name):
        with self.lock:
            obj = self._get(rt.key, ns if rt.namespaced else "", name)
        if obj is None:
            raise ApiError.not_found(rt.group, rt.plural, name)
        return self.present(rt, obj)

    def get_raw(self, key, ns, name):
        with self.lock:
            return self._get(key, ns, name)

    def objects(self, key, ns=None):
        with self.lock:
            b = self.data.get(key, {})
            if ns is None:
                return list(b.values())
            return [o for (n, _), o in b.items() if n == ns]

    def namespace_state(self, ns):
        """None (missing), 'Active' or 'Terminating'."""
        o = self._get(NS_KEY, "", ns)
        if o is None:
            return None
        if meta_of(o).get("deletionTimestamp") or \
                (o.get("status") or {}).get("phase") == "Terminating":
            return "Terminating"
        return "Active"

    # ==================================================================================
    # CREATE
    # ==================================================================================
    def create(self, rt, ns, body, opts):
        """POST.  Returns (http_code, object)."""
        body = self._check_body(rt, body)
        meta = body.setdefault("metadata", {})
        ns = ns or ""
        if rt.namespaced:
            bns = meta.get("namespace")
            if bns and ns and bns != ns:
                raise ApiError.bad_request("the namespace of the provided object does not match "
                                           "the namespace sent on the request")
            ns = ns or bns or ""
            if not ns:
                raise ApiError.bad_request("the server could not find the requested resource")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        with self.lock:
            return self._create_locked(rt, ns, body, opts)

    def _create_locked(self, rt, ns, body, opts, via_update=False, applied_managed=None):
        meta = body["metadata"]
        if rt.namespaced:
            st = self.namespace_state(ns)
            name_for_err = meta.get("name") or meta.get("generateName") or ""
            if st is None:
                raise ApiError.not_found("", "namespaces", ns)
            if st == "Terminating":
                raise ApiError.forbidden(
                    rt.group, rt.plural, name_for_err,
                    "unable to create new content in namespace %s because it is being "
                    "terminated" % ns,
                    causes=[{"reason": "NamespaceTerminating",
                             "message": "namespace %s is being terminated" % ns,
                             "field": "metadata.namespace"}])
        if rt.is_custom:
            crd = self._get(CRD_KEY, "", rt.crd)
            if crd is None:
                raise ApiError.not_found(rt.group, rt.plural, meta.get("name") or "")
            if meta_of(crd).get("deletionTimestamp"):
                raise ApiError(405, "MethodNotAllowed", "create not allowed while custom "
                               "resource definition is terminating")
        if meta.get("resourceVersion") and not via_update:
            raise ApiError(500, "Unknown", "resourceVersion should not be set on objects to be "
                           "created")
        meta.pop("resourceVersion", None)
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.track_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.has_status():
            if rt.status_on_create == "drop":
                body.pop("status", None)
            elif rt.status_on_create == "clear":
                body["status"] = {}
        obj = self._prepare(rt, body, None, opts, None)
        generated = not meta.get("name") and meta.get("generateName")
        if not meta.get("name") and not generated:
            raise ApiError.invalid(rt.group, rt.kind, "", [
                ("FieldValueRequired", "metadata.name",
                 "Required value: name or generateName is required")])
        if applied_managed:
            obj["metadata"]["managedFields"] = applied_managed
        else:
            self._add_managed(rt, obj, None, opts, "Update", None)
        bucket = self._bucket(rt.key)
        for _attempt in range(8):
            if generated:
                obj["metadata"]["name"] = meta["generateName"] + "".join(
                    random.choice(_GEN_CHARS) for _ in range(5))
            name = obj["metadata"]["name"]
            self._validate_name(rt, obj, name)
            existing = bucket.get((ns if rt.namespaced else "", name))
            if existing is None:
                break
            if not generated:
                raise ApiError.already_exists(
                    rt.group, rt.plural, name,
                    terminating=bool(meta_of(existing).get("deletionTimestamp")))
        else:
            raise ApiError.already_exists(rt.group, rt.plural, obj["metadata"]["name"])
        if rt.key == ("", "services"):
            self._allocate_service(rt, obj, None)
        if rt.key == CRD_KEY:
            self._crd_status(obj, None)
        if opts.dry_run:
            return 201, self.present(rt, obj)
        stored = self._commit(rt.key, ADDED, obj, None)
        if rt.key == NS_KEY:
            self._namespace_created(stored)
        return 201, self.present(rt, stored)

    def _namespace_created(self, ns_obj):
        sat = self.registry.lookup("", "v1", "serviceaccounts")
        name = meta_of(ns_obj)["name"]
        if self._get(sat.key, name, "default") is None:
            sa = {"apiVersion": "v1", "kind": "ServiceAccount",
                  "metadata": {"name": "default", "namespace": name}}
            try:
                self._create_locked(sat, name, sa, WriteOptions(
                    user_agent="localkube/serviceaccount-controller", internal=True))
            except ApiError:
                log.exception("creating default service account")

    def _check_body(self, rt, body, patch=False):
        if not isinstance(body, dict):
            raise ApiError.bad_request("the object provided is unrecognized (must be of type %s)"
                                       % rt.kind)
        if not rt.is_custom:
            # kube decodes built-ins into Go structs: an unparsable metav1.Time / MicroTime
            # fails the decode (400; a patched object that does not decode is 422 "patch")
            err = _b("builtin_schemas").time_error(rt.schema_kind, body)
            if err:
                if patch:
                    raise ApiError.invalid("", "", "", [
                        ("FieldValueInvalid", "patch", "Invalid value: %s: %s" % (
                            json.dumps(json.dumps(body, separators=(",", ":"))), err))])
                raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: %s"
                                           % (rt.kind, rt.version, rt.kind, err))
        body = json_copy(body)
        kind = body.get("kind")
        av = body.get("apiVersion")
        if rt.is_custom and not kind:
            raise ApiError.bad_request("Object 'Kind' is missing in '%s'"
                                       % json.dumps(body, separators=(",", ":"))[:200])
        if av and av != rt.api_version:
            raise ApiError.bad_request("the API version in the data (%s) does not match the "
                                       "expected API version (%s)" % (av, rt.api_version))
        if kind and kind != rt.kind:
            raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: no kind "
                                       "\"%s\" is registered for version \"%s\""
                                       % (kind, rt.version, rt.kind, kind, rt.api_version))
        body["kind"] = rt.kind
        body["apiVersion"] = rt.api_version
        m = body.get("metadata")
        if m is None:
            body["metadata"] = {}
        elif not isinstance(m, dict):
            raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: "
                                       "metadata must be an object" % (rt.kind, rt.version,
                                                                       rt.kind))
        return body

    def _validate_name(self, rt, obj, name):
        """ValidateObjectMeta's name checks: generateName as a prefix (a trailing '-' is
        masked), then the name itself."""
        causes = []
        gen = meta_of(obj).get("generateName")
        if gen and rt.key != CRD_KEY:
            # apimachinery maskTrailingDash (it really drops two characters)
            masked = gen[:-2] + "a" if len(gen) > 1 and gen.endswith("-") else gen
            for e in name_errors(rt.name_rule, masked):
                causes.append(("FieldValueInvalid", "metadata.generateName",
                               "Invalid value: %s: %s" % (fmt_value(gen), e)))
        if rt.key != CRD_KEY:  # CRD names are checked by the CRD validation
            for e in name_errors(rt.name_rule, name):
                causes.append(("FieldValueInvalid", "metadata.name",
                               "Invalid value: %s: %s" % (fmt_value(name), e)))
        if causes:
            raise ApiError.invalid(rt.group, rt.kind, name, causes)

    # ==================================================================================
    # Preparation shared by create and update: defaults, kind rules, schema, validation
    # ==================================================================================
    def _prepare(self, rt, new, old, opts, sub):
        """Returns the object to store; raises ApiError on validation failures."""
        causes = []
        meta = new["metadata"]
        # label / annotation validation
        labels = meta.get("labels")
        if labels is not None and not isinstance(labels, dict):
            raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: "
                                       "metadata.labels must be a map" % (rt.kind, rt.version,
                                                                          rt.kind))
        for k, v in (labels or {}).items():
            for e in sel.validate_label_key(k):
                causes.append(("FieldValueInvalid", "metadata.labels",
                               "Invalid value: %s: %s" % (fmt_value(k), e)))
            if not isinstance(v, str):
                raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: json: "
                                           "cannot unmarshal %s into Go struct field "
                                           "ObjectMeta.metadata.labels of type string"
                                           % (rt.kind, rt.version, rt.kind, _json_type(v)))
            for e in sel.validate_label_value(v):
                causes.append(("FieldValueInvalid", "metadata.labels",
                               "Invalid value: %s: %s" % (fmt_value(v), e)))
        ann = meta.get("annotations")
        if ann is not None:
            if not isinstance(ann, dict) or any(not isinstance(v, str) for v in ann.values()):
                raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: "
                                           "metadata.annotations must be a map of strings"
                                           % (rt.kind, rt.version, rt.kind))
        fins = meta.get("finalizers")
        if fins is not None and (not isinstance(fins, list) or
                                 any(not isinstance(f, str) for f in fins)):
            raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: "
                                       "metadata.finalizers must be a list of strings"
                                       % (rt.kind, rt.version, rt.kind))
        if old is not None and meta_of(old).get("deletionTimestamp"):
            added = [f for f in (fins or []) if f not in (meta_of(old).get("finalizers") or [])]
            if added:
                causes.append(("FieldValueForbidden", "metadata.finalizers",
                               "Forbidden: no new finalizers can be added if the object is "
                               "being deleted, found new finalizers []string{%s}"
                               % ", ".join(json.dumps(f) for f in added)))
        refs = meta.get("ownerReferences")
        if refs is not None and not isinstance(refs, list):
            raise ApiError.bad_request("%s in version \"%s\" cannot be handled as a %s: "
                                       "metadata.ownerReferences must be a list"
                                       % (rt.kind, rt.version, rt.kind))
        controllers = 0
        for ref in refs or []:
            if not isinstance(ref, dict):
                continue
            for f, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"),
                            ("uid", "uid")):
                if not ref.get(f):
                    causes.append(("FieldValueInvalid", "metadata.ownerReferences." + f,
                                   'Invalid value: "": %s must not be empty' % what))
            if ref.get("controller"):
                controllers += 1
        if controllers > 1:
            causes.append(("FieldValueInvalid", "metadata.ownerReferences",
                           "Invalid value: %s: Only one reference can have Controller set to "
                           "true" % fmt_value(refs)))
        if rt.is_custom:
            new = self._prepare_custom(rt, new, opts, causes)
        else:
            new = self._prepare_builtin(rt, new, old, opts, sub, causes)
        if not rt.is_custom or not rt.schema:
            self._field_validation(rt, [], opts)  # duplicate fields of schema-less kinds
        if causes:
            raise ApiError.invalid(rt.group, rt.kind, meta_of(new).get("name") or
                                   meta_of(new).get("generateName") or "", causes)
        return new

    def _field_validation(self, rt, unknown, opts):
        """fieldValidation for the strict decoding errors of one write: the body's duplicate
        fields (opts.strict_errors) and the unknown fields.  Strict -> 400, Warn -> Warning
        headers, Ignore -> nothing.  Reports once per write."""
        errs = [] if opts._strict_reported else list(opts.strict_errors)
        opts._strict_reported = True
        errs += ["unknown field %s" % json.dumps(p) for p in unknown]
        if not errs:
            return
        mode = opts.field_validation
        if mode == "Strict":
            raise ApiError.bad_request("strict decoding error: " + ", ".join(errs))
        if mode == "Warn":
            opts.warnings.extend(errs)

    def _prepare_custom(self, rt, new, opts, causes):
        schema = rt.schema
        if not schema:
            return new
        sch = _b("schema")
        meta = new.get("metadata")
        pruned, unknown = sch.prune(new, schema)
        if isinstance(pruned, dict):
            # metadata is never pruned beyond the ObjectMeta fields
            pruned["metadata"] = meta
            pruned["apiVersion"] = new["apiVersion"]
            pruned["kind"] = new["kind"]
            new = pruned
        unknown = [u for u in unknown if not (u == "metadata" or u.startswith("metadata.")
                                              or u in ("apiVersion", "kind"))]
        self._field_validation(rt, unknown, opts)
        new = sch.apply_defaults(new, schema)
        new["metadata"] = meta
        for c in sch.validate(new, schema):
            if c.field == "metadata" or (c.field or "").startswith("metadata."):
                continue
            causes.append((c.reason, c.field, c.message))
        return new

    def _prepare_builtin(self, rt, new, old, opts, sub, causes):
        bs = _b("builtin_schemas")
        try:
            unknown = bs.unknown_fields(rt.schema_kind, new)
        except Exception:
            log.exception("unknown_fields(%s)", rt.kind)
            unknown = []
        unknown = [u for u in unknown if not u.startswith("metadata.managedFields")]
        self._field_validation(rt, unknown, opts)
        for p in unknown:
            _remove_dotted(new, p)
        if rt.from_external is not None and new.get("apiVersion") == rt.api_version:
            new = rt.from_external(new)  # events.k8s.io/v1 Event -> the stored core/v1 Event
        kind = rt.kind
        if kind == "Secret":
            self._prepare_secret(rt, new)
        try:
            new = bs.default_object(kind, new)
        except Exception:
            log.exception("default_object(%s)", kind)
        meta = new["metadata"]
        spec = new.get("spec")
        if kind == "Namespace":
            if old is None:
                new["spec"] = {"finalizers": ["kubernetes"]}
                new["status"] = {"phase": "Active"}
            else:
                new["spec"] = old.get("spec", {"finalizers": ["kubernetes"]}) \
                    if sub != "finalize" else new.get("spec") or {}
            labels = dict(meta.get("labels") or {})
            labels["kubernetes.io/metadata.name"] = meta.get("name", "")
            meta["labels"] = labels
        elif kind == "Pod":
            if not isinstance(spec, dict) or not spec.get("containers"):
                causes.append(("FieldValueRequired", "spec.containers", "Required value"))
            else:
                for i, c in enumerate(spec.get("containers") or []):
                    if not isinstance(c, dict):
                        continue
                    if not c.get("name"):
                        causes.append(("FieldValueRequired", "spec.containers[%d].name" % i,
                                       "Required value"))
                    if not c.get("image"):
                        causes.append(("FieldValueRequired", "spec.containers[%d].image" % i,
                                       "Required value"))
                spec.setdefault("serviceAccountName", "default")
                spec.setdefault("serviceAccount", spec.get("serviceAccountName"))
            if old is None:
                new["status"] = {"phase": "Pending", "qosClass": _qos_class(spec or {})}
            elif sub is None and old is not None and isinstance(spec, dict):
                oldspec = old.get("spec") or {}
                if oldspec.get("nodeName") and spec.get("nodeName") != oldspec.get("nodeName"):
                    causes.append(("FieldValueForbidden", "spec",
                                   "Forbidden: pod updates may not change fields other than "
                                   "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                                   "`spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                                   "additions to existing tolerations), "
                                   "`spec.terminationGracePeriodSeconds` (allow it to be set to "
                                   "1 if it was previously negative)"))
        elif kind in ("Deployment", "ReplicaSet", "DaemonSet"):
            if not isinstance(spec, dict):
                causes.append(("FieldValueRequired", "spec.selector", "Required value"))
            else:
                selector = spec.get("selector")
                tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
                if not isinstance(selector, dict) or not (selector.get("matchLabels") or
                                                          selector.get("matchExpressions")):
                    causes.append(("FieldValueRequired", "spec.selector", "Required value"))
                else:
                    try:
                        ls = sel.selector_from_label_selector_object(selector)
                        if not ls.matches(tlabels):
                            causes.append(("FieldValueInvalid", "spec.template.metadata.labels",
                                           "Invalid value: %s: `selector` does not match "
                                           "template `labels`" % _go_map(tlabels)))
                    except sel.SelectorError as e:
                        causes.append(("FieldValueInvalid", "spec.selector",
                                       "Invalid value: %s: %s" % (fmt_value(selector), e)))
                    if old is not None and sub is None:
                        oldsel = (old.get("spec") or {}).get("selector")
                        if oldsel is not None and oldsel != selector:
                            causes.append(("FieldValueInvalid", "spec.selector",
                                           "Invalid value: %s: field is immutable"
                                           % _label_selector_go(selector)))
                if kind != "DaemonSet":
                    r = spec.get("replicas")
                    if isinstance(r, int) and not isinstance(r, bool) and r < 0:
                        causes.append(("FieldValueInvalid", "spec.replicas",
                                       "Invalid value: %d: must be greater than or equal to 0"
                                       % r))
                tspec = (spec.get("template") or {}).get("spec") or {}
                if not tspec.get("containers"):
                    causes.append(("FieldValueRequired", "spec.template.spec.containers",
                                   "Required value"))
        elif kind == "Service":
            if isinstance(spec, dict):
                t = spec.get("type", "ClusterIP")
                if t != "ExternalName" and not spec.get("ports") and \
                        spec.get("clusterIP") != "None":
                    causes.append(("FieldValueRequired", "spec.ports", "Required value"))
                for i, p in enumerate(spec.get("ports") or []):
                    port = p.get("port") if isinstance(p, dict) else None
                    if not isinstance(port, int) or isinstance(port, bool) or \
                            not 1 <= port <= 65535:
                        causes.append(("FieldValueInvalid", "spec.ports[%d].port" % i,
                                       "Invalid value: %s: must be between 1 and 65535, "
                                       "inclusive" % fmt_value(port if port is not None else 0)))
                if old is None:
                    new["status"] = {"loadBalancer": {}}
            else:
                causes.append(("FieldValueRequired", "spec.ports", "Required value"))
        elif kind == "ConfigMap":
            for fld in ("data", "binaryData"):
                d = new.get(fld)
                if d is not None and not isinstance(d, dict):
                    raise ApiError.bad_request("ConfigMap in version \"v1\" cannot be handled as "
                                               "a ConfigMap: %s must be a map" % fld)
                for k, v in (d or {}).items():
                    if fld == "data" and not isinstance(v, str):
                        raise ApiError.bad_request(
                            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: "
                            "cannot unmarshal %s into Go struct field ConfigMap.data of type "
                            "string" % _json_type(v))
        elif kind == "CustomResourceDefinition":
            self._validate_crd(rt, new, old, causes)
        elif kind == "Event":
            _validate_event(rt, new, old, causes)
        return new

    def _prepare_secret(self, rt, new):
        data = new.get("data")
        if data is not None and not isinstance(data, dict):
            raise ApiError.bad_request("Secret in version \"v1\" cannot be handled as a Secret: "
                                       "data must be a map")
        data = dict(data or {})
        for k, v in data.items():
            if not isinstance(v, str):
                raise ApiError.bad_request("Secret in version \"v1\" cannot be handled as a "
                                           "Secret: json: cannot unmarshal %s into Go struct "
                                           "field Secret.data of type []uint8" % _json_type(v))
            try:
                base64.b64decode(v, validate=True)
            except Exception:
                pos = _bad_b64_pos(v)
                raise ApiError.bad_request("Secret in version \"v1\" cannot be handled as a "
                                           "Secret: illegal base64 data at input byte %d" % pos)
        sd = new.pop("stringData", None)
        if isinstance(sd, dict):
            for k, v in sd.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        if data or "data" in new:
            new["data"] = data
        new.setdefault("type", "Opaque")

    # -- services -----------------------------------------------------------------------
    def _allocate_service(self, rt, obj, old):
        spec = obj.setdefault("spec", {})
        t = spec.get("type", "ClusterIP")
        if t == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
            return
        if old is not None:
            ospec = old.get("spec") or {}
            if not spec.get("clusterIP") and ospec.get("clusterIP"):
                spec["clusterIP"] = ospec["clusterIP"]
                spec["clusterIPs"] = ospec.get("clusterIPs") or [ospec["clusterIP"]]
            elif spec.get("clusterIP") != ospec.get("clusterIP") and ospec.get("clusterIP"):
                raise ApiError.invalid(rt.group, rt.kind, meta_of(obj)["name"], [
                    ("FieldValueInvalid", "spec.clusterIPs[0]",
                     "Invalid value: []string{%s}: may not change once set"
                     % json.dumps(spec.get("clusterIP")))])
        ip = spec.get("clusterIP")
        if ip == "None":
            spec["clusterIPs"] = ["None"]
        elif not ip:
            ip = self._next_cluster_ip()
            spec["clusterIP"] = ip
            spec["clusterIPs"] = [ip]
        elif old is None or (old.get("spec") or {}).get("clusterIP") != ip:
            try:
                addr = ipaddress.ip_address(ip)
                ok = addr in ipaddress.ip_network("10.96.0.0/16")
            except ValueError:
                ok = False
            if not ok:
                raise ApiError.invalid(rt.group, rt.kind, meta_of(obj)["name"], [
                    ("FieldValueInvalid", "spec.clusterIPs",
                     "Invalid value: []string{%s}: failed to allocate IP %s: the provided IP "
                     "(%s) is not in the valid range. The range of valid IPs is 10.96.0.0/16"
                     % (json.dumps(ip), ip, ip))])
            if ip in self.used_ips:
                raise ApiError.invalid(rt.group, rt.kind, meta_of(obj)["name"], [
                    ("FieldValueInvalid", "spec.clusterIPs",
                     "Invalid value: []string{%s}: failed to allocate IP %s: provided IP is "
                     "already allocated" % (json.dumps(ip), ip))])
            spec["clusterIPs"] = [ip]
        if ip != "None":
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        if t in ("NodePort", "LoadBalancer"):
            old_ports = {}
            if old is not None:
                for p in (old.get("spec") or {}).get("ports") or []:
                    if isinstance(p, dict) and p.get("nodePort"):
                        old_ports[(p.get("port"), p.get("protocol", "TCP"))] = p["nodePort"]
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and not p.get("nodePort"):
                    prev = old_ports.get((p.get("port"), p.get("protocol", "TCP")))
                    if prev:
                        p["nodePort"] = prev
                        continue
                    for cand in range(30000, 32768):
                        if cand not in self.used_node_ports:
                            p["nodePort"] = cand
                            self.used_node_ports.add(cand)
                            break
            spec.setdefault("externalTrafficPolicy", "Cluster")

    def _next_cluster_ip(self):
        for _ in range(65000):
            n = self._next_ip
            self._next_ip = 10 if self._next_ip >= 65533 else self._next_ip + 1
            ip = "10.96.%d.%d" % (n // 256, n % 256)
            if n % 256 in (0, 255) or ip in self.used_ips:
                continue
            self.used_ips.add(ip)
            return ip
        raise ApiError.internal("failed to allocate a serviceIP: range is full")

    # -- CRDs ---------------------------------------------------------------------------
    def _validate_crd(self, rt, new, old, causes):
        spec = new.get("spec")
        name = meta_of(new).get("name", "")
        if not isinstance(spec, dict):
            causes.append(("FieldValueRequired", "spec", "Required value"))
            return
        group = spec.get("group") or ""
        names = spec.get("names") or {}
        plural = names.get("plural") or ""
        if not group:
            causes.append(("FieldValueRequired", "spec.group", "Required value"))
        elif "." not in group:
            causes.append(("FieldValueInvalid", "spec.group", "Invalid value: %s: should be a "
                           "domain with at least one dot" % json.dumps(group)))
        if not plural:
            causes.append(("FieldValueRequired", "spec.names.plural", "Required value"))
        elif name_errors("label", plural):
            causes.append(("FieldValueInvalid", "spec.names.plural", "Invalid value: %s: %s"
                           % (json.dumps(plural), name_errors("label", plural)[0])))
        if not names.get("kind"):
            causes.append(("FieldValueRequired", "spec.names.kind", "Required value"))
        if not names.get("singular"):
            names = dict(names)
            names["singular"] = (names.get("kind") or "").lower()
            spec["names"] = names
        names.setdefault("listKind", (names.get("kind") or "") + "List")
        if plural and group and name != plural + "." + group:
            causes.append(("FieldValueInvalid", "metadata.name",
                           "Invalid value: %s: must be spec.names.plural+\".\"+spec.group"
                           % json.dumps(name)))
        scope = spec.get("scope")
        if scope not in ("Namespaced", "Cluster"):
            causes.append(("FieldValueNotSupported" if scope else "FieldValueRequired",
                           "spec.scope", ("Unsupported value: %s: supported values: "
                                          "\"Cluster\", \"Namespaced\"" % json.dumps(scope))
                           if scope else "Required value"))
        versions = spec.get("versions")
        if not isinstance(versions, list) or not versions:
            causes.append(("FieldValueInvalid", "spec.versions", "Invalid value: null: must "
                           "have exactly one version marked as storage version"))
            return
        storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
        if len(storage) != 1:
            causes.append(("FieldValueInvalid", "spec.versions",
                           "Invalid value: %s: must have exactly one version marked as storage "
                           "version" % _go_versions(versions)))
        seen = set()
        sch = _b("schema")
        for i, v in enumerate(versions):
            if not isinstance(v, dict):
                continue
            vn = v.get("name")
            if not vn:
                causes.append(("FieldValueRequired", "spec.versions[%d].name" % i,
                               "Required value"))
            elif vn in seen:
                causes.append(("FieldValueInvalid", "spec.versions", "Invalid value: %s: must "
                               "contain unique version names" % _go_versions(versions)))
            seen.add(vn)
            v.setdefault("served", False)
            v.setdefault("storage", False)
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            if schema is None:
                causes.append(("FieldValueRequired",
                               "spec.versions[%d].schema.openAPIV3Schema" % i,
                               "Required value: schemas are required"))
            else:
                base = "spec.versions[%d].schema.openAPIV3Schema" % i
                try:
                    errs = sch.structural_errors(schema, base)
                except Exception as e:
                    errs = ["%s: Invalid value: %s" % (base, e)]
                for e in errs:
                    fld, _, body = e.partition(": ")
                    if not body:
                        fld, body = base, e
                    causes.append(("FieldValueForbidden" if body.startswith("Forbidden") else
                                   "FieldValueRequired" if body.startswith("Required") else
                                   "FieldValueNotSupported" if body.startswith("Unsupported")
                                   else "FieldValueInvalid", fld, body))
            subs = v.get("subresources") or {}
            scale = subs.get("scale")
            if isinstance(scale, dict):
                if not str(scale.get("specReplicasPath", "")).startswith(".spec"):
                    causes.append(("FieldValueInvalid",
                                   "spec.versions[%d].subresources.scale.specReplicasPath" % i,
                                   "Invalid value: %s: should be a json path under .spec"
                                   % json.dumps(scale.get("specReplicasPath", ""))))
                if not str(scale.get("statusReplicasPath", "")).startswith(".status"):
                    causes.append(("FieldValueInvalid",
                                   "spec.versions[%d].subresources.scale.statusReplicasPath" % i,
                                   "Invalid value: %s: should be a json path under .status"
                                   % json.dumps(scale.get("statusReplicasPath", ""))))
        if old is not None:
            ospec = old.get("spec") or {}
            if ospec.get("group") != group:
                causes.append(("FieldValueInvalid", "spec.group", "Invalid value: %s: field is "
                               "immutable" % json.dumps(group)))
            if (ospec.get("names") or {}).get("plural") != plural:
                causes.append(("FieldValueInvalid", "status.storedVersions",
                               "Invalid value: %s: field is immutable" % json.dumps(plural)))
            if ospec.get("scope") != scope:
                causes.append(("FieldValueInvalid", "spec.scope", "Invalid value: %s: field is "
                               "immutable" % json.dumps(scope)))
        if not causes:
            self._crd_status(new, old)

    def _crd_status(self, crd, old):
        spec = crd.get("spec") or {}
        now = now_rfc3339()
        names = dict(spec.get("names") or {})
        names.setdefault("singular", (names.get("kind") or "").lower())
        names.setdefault("listKind", (names.get("kind") or "") + "List")
        ostatus = (old or {}).get("status") or {}
        stored = list(ostatus.get("storedVersions") or [])
        sv = storage_version(crd)
        if sv and sv not in stored:
            stored.append(sv)
        conds = []
        for c in ostatus.get("conditions") or []:
            if c.get("type") in ("NamesAccepted", "Established", "Terminating"):
                conds.append(c)
        if not conds:
            conds = [
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
                 "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": now,
                 "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted"},
            ]
        crd["status"] = {"conditions": conds, "acceptedNames": names, "storedVersions": stored}

    # ==================================================================================
    # UPDATE (PUT) and PATCH
    # ==================================================================================
    def update(self, rt, ns, name, body, opts, sub=None):
        """PUT.  Returns (http_code, object)."""
        if sub == "scale":
            return self._scale_write(rt, ns, name, lambda cur: body, opts, is_put=True)
        body = self._check_body(rt, body)
        meta = body["metadata"]
        if meta.get("name") != name:
            raise ApiError.bad_request("the name of the object (%s) does not match the name on "
                                       "the URL (%s)" % (meta.get("name") or "", name))
        ns = ns if rt.namespaced else ""
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise ApiError.bad_request("the namespace of the provided object does not match "
                                           "the namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        with self.lock:
            old = self._get(rt.key, ns, name)
            if old is None:
                if rt.create_on_update and sub is None:
                    meta.pop("resourceVersion", None)
                    return self._create_locked(rt, ns, body, opts, via_update=True)
                raise ApiError.not_found(rt.group, rt.plural, name)
            new_rv = meta.get("resourceVersion")
            if not new_rv:
                if not rt.unconditional_update:
                    raise ApiError.invalid(rt.group, rt.kind, name, [
                        ("FieldValueInvalid", "metadata.resourceVersion",
                         "Invalid value: 0x0: must be specified for an update")])
            elif new_rv != meta_of(old).get("resourceVersion"):
                raise ApiError.conflict(rt.group, rt.plural, name)
            if meta.get("uid") and meta["uid"] != meta_of(old).get("uid"):
                raise ApiError.conflict(rt.group, rt.plural, name,
                                        "Precondition failed: UID in precondition: %s, UID in "
                                        "object meta: %s" % (meta["uid"], meta_of(old)["uid"]))
            return self._finish_update(rt, old, body, opts, sub)

    def patch(self, rt, ns, name, ptype, patch_body, opts, sub=None):
        """PATCH.  ptype: 'json', 'merge', 'strategic', 'apply'.  Returns (code, obj)."""
        pmod = _b("patch")
        ns = ns if rt.namespaced else ""
        if ptype == "strategic" and rt.is_custom:
            raise ApiError.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml")
        if ptype == "apply" and not opts.field_manager:
            raise ApiError.invalid("meta.k8s.io", "PatchOptions", "", [
                ("FieldValueRequired", "fieldManager", "Required value: is required for apply "
                 "patch")])
        if ptype != "apply" and opts.force is not None:
            raise ApiError.invalid("meta.k8s.io", "PatchOptions", "", [
                ("FieldValueForbidden", "force", "Forbidden: may not be specified for non-apply "
                 "patch")])
        if ptype == "json":
            if not isinstance(patch_body, list):
                raise ApiError.bad_request("json: cannot unmarshal object into Go value of type "
                                           "jsonpatch.Patch")
        elif not isinstance(patch_body, dict):
            raise ApiError.bad_request("the object provided is unrecognized (must be of type %s)"
                                       % ("Patch" if ptype != "apply" else rt.kind))

        def apply_to(cur):
            try:
                if ptype == "json":
                    return pmod.json_patch(cur, patch_body)
                if ptype == "merge":
                    return pmod.merge_patch(cur, patch_body)
                if ptype == "strategic":
                    return pmod.strategic_merge_patch(cur, patch_body, cur.get("kind") or rt.kind)
                return self._server_side_apply(rt, cur, patch_body, opts, sub)
            except pmod.PatchError as e:
                code = getattr(e, "code", 400) or 400
                if code == 409:
                    raise ApiError(409, "Conflict", str(e), {"causes": getattr(e, "causes", None)
                                                             or []})
                if code == 422:
                    raise ApiError(422, "Invalid", str(e))
                raise ApiError(code, "BadRequest" if code == 400 else "Invalid", str(e))

        if sub == "scale":
            return self._scale_write(rt, ns, name, apply_to, opts, is_put=False)
        with self.lock:
            old = self._get(rt.key, ns, name)
            if old is None:
                if ptype == "apply" and sub is None:
                    body = apply_to(None)
                    body = self._check_body(rt, body, patch=True)
                    m = body["metadata"]
                    if m.get("name") and m["name"] != name:
                        raise ApiError.bad_request("the name of the object (%s) does not match "
                                                   "the name on the URL (%s)" % (m["name"], name))
                    m["name"] = name
                    if rt.namespaced:
                        if m.get("namespace") and m["namespace"] != ns:
                            raise ApiError.bad_request("the namespace of the provided object does "
                                                       "not match the namespace sent on the "
                                                       "request")
                        m["namespace"] = ns
                    else:
                        m.pop("namespace", None)
                    m.pop("resourceVersion", None)
                    return self._create_locked(rt, ns, body, opts, via_update=True,
                                               applied_managed=m.get("managedFields"))
                raise ApiError.not_found(rt.group, rt.plural, name)
            cur = json_copy(self.present(rt, old))
            new = apply_to(cur)
            if not isinstance(new, dict):
                raise ApiError.bad_request("the patch result is not an object")
            new = self._check_body(rt, new, patch=True)
            m = new["metadata"]
            if m.get("name") != name:
                raise ApiError.bad_request("the name of the object (%s) does not match the name "
                                           "on the URL (%s)" % (m.get("name") or "", name))
            if rt.namespaced and (m.get("namespace") or ns) != ns:
                raise ApiError.bad_request("the namespace of the provided object does not match "
                                           "the namespace sent on the request")
            orv = meta_of(old).get("resourceVersion")
            if m.get("resourceVersion") and m["resourceVersion"] != orv:
                raise ApiError.conflict(rt.group, rt.plural, name)
            if m.get("uid") and m["uid"] != meta_of(old).get("uid"):
                raise ApiError.conflict(rt.group, rt.plural, name,
                                        "Precondition failed: UID in precondition: %s, UID in "
                                        "object meta: %s" % (m["uid"], meta_of(old)["uid"]))
            return self._finish_update(rt, old, new, opts, sub,
                                       keep_managed=(ptype == "apply"))

    def _server_side_apply(self, rt, cur, applied, opts, sub):
        """Server-side apply with kube's field manager chain around it: conflicts with Apply
        and Update managers of any subresource; `kubectl apply --server-side` (manager
        "kubectl") may take over, without a conflict, fields that kubectl client-side apply
        last applied with the same values (lastAppliedManager), and keeps an existing
        last-applied-configuration annotation in step (lastAppliedUpdater)."""
        pmod = _b("patch")
        applied = dict(applied)
        if sub is None and rt.has_status():
            applied.pop("status", None)  # reset on the main resource: not applied, not owned
        force = bool(opts.force)
        manager = opts.field_manager

        def run(force_):
            return pmod.apply_patch(cur, applied, manager, force_, kind=rt.kind,
                                    schema=rt.schema,
                                    subresource=sub if sub in ("status",) else None,
                                    conflict_operations=("Apply", "Update"),
                                    subresource_conflicts=True)
        try:
            out = run(force)
        except pmod.PatchError as e:
            if getattr(e, "code", 400) != 409 or force or manager != "kubectl" or cur is None:
                raise
            allowed = pmod.last_applied_allowed_conflicts(cur, kind=rt.kind, schema=rt.schema)
            fields = [c.get("field") for c in (getattr(e, "causes", None) or [])]
            if not fields or any(f not in allowed for f in fields):
                if allowed:
                    left = [c for c in e.causes if c.get("field") not in allowed]
                    raise pmod.PatchError(
                        _conflict_message(left), 409, "Conflict", left)
                raise
            out = run(True)
        if manager == "kubectl" and cur is not None and isinstance(out, dict):
            ann = meta_of(cur).get("annotations") or {}
            if pmod.LAST_APPLIED in ann:
                md = out.setdefault("metadata", {})
                md["annotations"] = dict(md.get("annotations") or {})
                md["annotations"][pmod.LAST_APPLIED] = pmod.build_last_applied(applied)
        return out

    def _finish_update(self, rt, old, new, opts, sub, keep_managed=False):
        """Common tail of PUT/PATCH: subresource isolation, kind rules, generation, no-op check,
        managedFields, delete-on-last-finalizer.  Caller holds the lock."""
        omet = meta_of(old)
        if sub == "status":
            body_status = new.get("status")
            nm = new.get("metadata") or {}
            upd = json_copy(old)
            if body_status is None:
                upd.pop("status", None)
            else:
                upd["status"] = body_status
            if keep_managed and nm.get("managedFields") is not None:
                upd["metadata"]["managedFields"] = nm.get("managedFields")
            new = upd
        elif sub == "finalize":
            upd = json_copy(old)
            upd["spec"] = dict(upd.get("spec") or {})
            upd["spec"]["finalizers"] = list((new.get("spec") or {}).get("finalizers") or [])
            new = upd
        else:
            if rt.has_status():
                if "status" in old:
                    new["status"] = json_copy(old["status"])
                else:
                    new.pop("status", None)
        m = new["metadata"]
        if not keep_managed:
            m.pop("managedFields", None)
            if omet.get("managedFields") is not None:
                m["managedFields"] = json_copy(omet["managedFields"])
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "name", "namespace"):
            if f in omet:
                m[f] = omet[f]
            else:
                m.pop(f, None)
        m.pop("selfLink", None)
        m["resourceVersion"] = omet.get("resourceVersion")
        if "generation" in omet:
            m["generation"] = omet["generation"]
        else:
            m.pop("generation", None)
        new = self._prepare(rt, new, old, opts, sub)
        if rt.key == ("", "services") and sub is None:
            self._allocate_service(rt, new, old)
        m = new["metadata"]
        # generation
        if rt.track_generation and sub not in ("status",):
            if _generation_changed(rt, old, new):
                m["generation"] = int(omet.get("generation") or 0) + 1
        # no-op
        if _strip_for_compare(new, keep_managed) == _strip_for_compare(old, keep_managed):
            return 200, self.present(rt, old)
        self._add_managed(rt, new, old, opts, "Apply" if keep_managed else "Update", sub)
        # deletion when the last finalizer goes away
        if m.get("deletionTimestamp") and not m.get("finalizers") and \
                not m.get("deletionGracePeriodSeconds") and \
                not (rt.key == NS_KEY and (new.get("spec") or {}).get("finalizers")):
            if opts.dry_run:
                return 200, self.present(rt, new)
            self._commit(rt.key, DELETED, None, new)
            stored = _restamp(new, self.rv)
            return 200, self.present(rt, stored)
        if opts.dry_run:
            return 200, self.present(rt, new)
        stored = self._commit(rt.key, MODIFIED, new, old)
        return 200, self.present(rt, stored)

    # -- managedFields -------------------------------------------------------------------
    def _add_managed(self, rt, obj, old, opts, operation, sub):
        """managedFields of a write.  Apply: the entries server-side apply computed.  Update
        (create, PUT, non-apply PATCH): the writer's Update entry takes the fields it added or
        changed, other entries lose them (structured-merge-diff's Updater.Update)."""
        m = obj["metadata"]
        if operation == "Apply":
            entries = [e for e in (m.get("managedFields") or []) if isinstance(e, dict)]
            m["managedFields"] = _b("patch").sort_managed_fields(entries)
            return
        if sub == "status":
            scope = "status"
        elif sub is None and rt.has_status():
            scope = "nostatus"  # .status is reset on writes to the main resource
        else:
            scope = None
        entries = meta_of(old).get("managedFields") if old is not None else None
        try:
            out = _b("patch").update_managed_fields(
                old, obj, entries, opts.manager(), rt.api_version, kind=rt.kind,
                schema=rt.schema, now=now_rfc3339(),
                subresource=sub if sub in ("status", "scale") else None, scope=scope)
        except Exception:  # pragma: no cover - never fail a write over bookkeeping
            log.exception("managedFields update of %s", rt.kind)
            return
        if out:
            m["managedFields"] = out
        else:
            m.pop("managedFields", None)

    # ==================================================================================
    # Scale subresource
    # ==================================================================================
    def _scale_paths(self, rt):
        if rt.is_custom:
            sc = rt.scale or {}
            return (sc.get("specReplicasPath", ".spec.replicas"),
                    sc.get("statusReplicasPath", ".status.replicas"),
                    sc.get("labelSelectorPath"))
        return ".spec.replicas", ".status.replicas", None

    def scale_view(self, rt, obj):
        spec_p, status_p, sel_p = self._scale_paths(rt)
        m = meta_of(obj)
        spec_r = _get_path(obj, spec_p)
        if spec_r is None and not rt.is_custom:
            spec_r = 1
        status_r = _get_path(obj, status_p) or 0
        if rt.is_custom:
            selector = _get_path(obj, sel_p) if sel_p else None
        else:
            selector = label_selector_string((obj.get("spec") or {}).get("selector"))
        sm = {"name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
              "resourceVersion": m.get("resourceVersion"),
              "creationTimestamp": m.get("creationTimestamp")}
        if not rt.namespaced:
            sm.pop("namespace")
        scale = {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": sm,
                 "spec": {}, "status": {"replicas": status_r}}
        if spec_r is not None:
            scale["spec"]["replicas"] = spec_r
        if selector:
            scale["status"]["selector"] = selector
        return scale

    def get_scale(self, rt, ns, name):
        with self.lock:
            obj = self._get(rt.key, ns if rt.namespaced else "", name)
            if obj is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            return self.scale_view(rt, obj)

    def _scale_write(self, rt, ns, name, compute, opts, is_put):
        with self.lock:
            old = self._get(rt.key, ns, name)
            if old is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            cur = self.scale_view(rt, old)
            new_scale = compute(json_copy(cur))
            if not isinstance(new_scale, dict):
                raise ApiError.bad_request("the object provided is unrecognized (must be of type "
                                           "Scale)")
            sm = new_scale.get("metadata") or {}
            if is_put and sm.get("name") and sm.get("name") != name:
                raise ApiError.bad_request("the name of the object (%s) does not match the name "
                                           "on the URL (%s)" % (sm.get("name"), name))
            rv = sm.get("resourceVersion")
            if rv and rv != meta_of(old).get("resourceVersion"):
                raise ApiError.conflict(rt.group, rt.plural, name)
            replicas = (new_scale.get("spec") or {}).get("replicas")
            if replicas is None:
                replicas = 0
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError.invalid("autoscaling", "Scale", name, [
                    ("FieldValueInvalid", "spec.replicas", "Invalid value: %s: must be greater "
                     "than or equal to 0" % fmt_value(replicas))])
            new = json_copy(old)
            spec_p = self._scale_paths(rt)[0]
            _set_path(new, spec_p, replicas)
            code, obj = self._finish_update(rt, old, new, opts, "scale")
            return code, self.scale_view(rt, self._get(rt.key, ns, name) or obj)

    # ==================================================================================
    # DELETE
    # ==================================================================================
    def delete(self, rt, ns, name, dopts, opts=None):
        """Returns (http_code, body)."""
        ns = ns if rt.namespaced else ""
        opts = opts or WriteOptions()
        with self.lock:
            obj = self._get(rt.key, ns, name)
            if obj is None:
                raise ApiError.not_found(rt.group, rt.plural, name)
            m = meta_of(obj)
            if dopts.precondition_uid is not None and dopts.precondition_uid != m.get("uid"):
                raise ApiError.conflict(rt.group, rt.plural, name,
                                        "Precondition failed: UID in precondition: %s, UID in "
                                        "object meta: %s" % (dopts.precondition_uid, m.get("uid")))
            if dopts.precondition_rv is not None and \
                    dopts.precondition_rv != m.get("resourceVersion"):
                raise ApiError.conflict(rt.group, rt.plural, name,
                                        "Precondition failed: ResourceVersion in precondition: %s, "
                                        "ResourceVersion in object meta: %s"
                                        % (dopts.precondition_rv, m.get("resourceVersion")))
            if rt.key == NS_KEY and name in PROTECTED_NAMESPACES:
                raise ApiError.forbidden("", "namespaces", name,
                                         "this namespace may not be deleted")
            new = json_copy(obj)
            nm = new["metadata"]
            changed = False
            now = time.time()
            # graceful deletion (pods bound to a node)
            graceful = False
            if rt.key == ("", "pods"):
                spec = obj.get("spec") or {}
                phase = (obj.get("status") or {}).get("phase")
                grace = dopts.grace_period
                if grace is None:
                    grace = spec.get("terminationGracePeriodSeconds")
                    if grace is None:
                        grace = 30
                if grace < 0:
                    grace = 1
                if spec.get("nodeName") and phase not in ("Succeeded", "Failed") and grace > 0:
                    graceful = True
                    cur = m.get("deletionGracePeriodSeconds")
                    if m.get("deletionTimestamp") and cur is not None and cur <= grace:
                        pass  # already pending with a shorter or equal grace period
                    else:
                        nm["deletionTimestamp"] = rfc3339_at(now + grace)
                        nm["deletionGracePeriodSeconds"] = grace
                        changed = True
                elif m.get("deletionTimestamp") and m.get("deletionGracePeriodSeconds"):
                    nm["deletionGracePeriodSeconds"] = 0
                    changed = True
            # GC finalizers from the options
            fins = list(nm.get("finalizers") or [])
            orphan = None
            if dopts.orphan_dependents is not None:
                orphan = bool(dopts.orphan_dependents)
                foreground = False if orphan else None
            elif dopts.propagation:
                orphan = dopts.propagation == "Orphan"
                foreground = dopts.propagation == "Foreground"
            else:
                foreground = None
            if orphan is not None:
                if orphan and "orphan" not in fins:
                    fins.append("orphan")
                if not orphan and "orphan" in fins:
                    fins.remove("orphan")
            if foreground is not None:
                if foreground and "foregroundDeletion" not in fins:
                    fins.append("foregroundDeletion")
                if not foreground and "foregroundDeletion" in fins:
                    fins.remove("foregroundDeletion")
            if rt.key == CRD_KEY and CRD_CLEANUP_FINALIZER not in fins:
                fins.append(CRD_CLEANUP_FINALIZER)
            if fins != (nm.get("finalizers") or []):
                nm["finalizers"] = fins
                changed = True
            pending = bool(fins) or graceful or \
                (rt.key == NS_KEY and (obj.get("spec") or {}).get("finalizers"))
            if pending:
                if not nm.get("deletionTimestamp"):
                    nm["deletionTimestamp"] = rfc3339_at(now)
                    if not graceful:
                        nm["deletionGracePeriodSeconds"] = 0
                    if "generation" in nm:
                        nm["generation"] = int(nm["generation"]) + 1
                    changed = True
                if rt.key == NS_KEY:
                    st = dict(new.get("status") or {})
                    if st.get("phase") != "Terminating":
                        st["phase"] = "Terminating"
                        new["status"] = st
                        changed = True
                if rt.key == CRD_KEY:
                    st = dict(new.get("status") or {})
                    conds = [c for c in st.get("conditions") or [] if c.get("type") !=
                             "Terminating"]
                    conds.append({"type": "Terminating", "status": "True",
                                  "lastTransitionTime": now_rfc3339(),
                                  "reason": "InstanceDeletionPending",
                                  "message": "CustomResourceDefinition marked for deletion; "
                                             "CustomResource deletion will begin soon"})
                    if [c.get("type") for c in (obj.get("status") or {}).get("conditions") or []]\
                            != [c.get("type") for c in conds]:
                        st["conditions"] = conds
                        new["status"] = st
                        changed = True
                code = 202 if dopts.orphan_dependents is False else 200
                if dopts.dry_run or not changed:
                    return code, self.present(rt, new if dopts.dry_run else obj)
                stored = self._commit(rt.key, MODIFIED, new, obj)
                return code, self.present(rt, stored)
            # immediate removal
            if dopts.dry_run:
                last = obj
            else:
                self._commit(rt.key, DELETED, None, obj)
                last = _restamp(obj, self.rv)
            if rt.return_deleted:
                return 200, self.present(rt, last)
            return 200, status_success(rt.group, rt.plural, name, m.get("uid"))

    def delete_collection(self, rt, ns, label_sel, field_sel, dopts, opts=None):
        with self.lock:
            items = [o for o in self._current_items(rt.key, ns if rt.namespaced else None)
                     if _obj_matches(o, label_sel, field_sel)]
            out = []
            for o in items:
                m = meta_of(o)
                try:
                    code, body = self.delete(rt, m.get("namespace"), m.get("name"), dopts, opts)
                except ApiError as e:
                    if e.code == 404:
                        continue
                    raise
                out.append(self.present(rt, o) if body.get("kind") == "Status" else body)
            return 200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                         "metadata": {"resourceVersion": str(self.rv)}, "items": out}

    # ==================================================================================
    # LIST
    # ==================================================================================
    def _current_items(self, key, ns):
        b = self.data.get(key, {})
        if ns is None:
            return [b[k] for k in sorted(b)]
        return [b[k] for k in sorted(k for k in b if k[0] == ns)]

    def _snapshot_items(self, key, ns, rv):
        """The objects of key as of revision rv (caller checked rv >= hist_start)."""
        state = dict(self.data.get(key, {}))
        h = self.hist.get(key) or ()
        for ev in reversed(h):
            if ev.rv <= rv:
                break
            k = obj_key(ev.prev if ev.type == DELETED else ev.obj)
            if ev.prev is None:
                state.pop(k, None)
            else:
                state[k] = ev.prev
        keys = sorted(k for k in state if ns is None or k[0] == ns)
        return [state[k] for k in keys]

    def wait_for_rv(self, rv, timeout=3.0):
        deadline = time.time() + timeout
        with self.lock:
            while self.rv < rv:
                left = deadline - time.time()
                if left <= 0:
                    raise ApiError.timeout(
                        "Too large resource version: %d, current: %d" % (rv, self.rv), 1,
                        [{"reason": "ResourceVersionTooLarge",
                          "message": "Too large resource version"}])
                self.changed.wait(left)

    def list(self, rt, ns, label_sel=None, field_sel=None, limit=None, cont=None, rv=None,
             rvm=None):
        """Returns (items, list_metadata) with items already presented for rt."""
        ns = ns if rt.namespaced and ns else None
        if rvm and rvm not in ("Exact", "NotOlderThan"):
            raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                ("FieldValueNotSupported", "resourceVersionMatch",
                 "Unsupported value: %s: supported values: \"Exact\", \"NotOlderThan\", \"\""
                 % json.dumps(rvm))])
        if rvm and not rv:
            raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                 "provided")])
        if rvm and cont:
            raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 "Forbidden: resourceVersionMatch is forbidden when continue is provided")])
        if rvm == "Exact" and rv == "0":
            raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion "
                 "\"0\"")])
        rv_n = None
        if rv:
            try:
                rv_n = int(rv)
                if rv_n < 0:
                    raise ValueError
            except ValueError:
                raise ApiError.bad_request("invalid resource version: %s" % rv)
        if cont and rv and rv != "0":
            raise ApiError.bad_request("specifying resource version is not allowed when using "
                                       "continue")
        start = None
        exact = None
        if cont:
            exact, start = _decode_continue(cont)
        elif rv_n and (rvm == "Exact" or (not rvm and limit)):
            exact = rv_n
        elif rv_n and rv_n > 0:
            with self.lock:
                cur = self.rv
            if rv_n > cur:
                self.wait_for_rv(rv_n)
        with self.lock:
            if exact is not None:
                if exact > self.rv:
                    raise ApiError.timeout("Too large resource version: %d, current: %d"
                                           % (exact, self.rv), 1,
                                           [{"reason": "ResourceVersionTooLarge",
                                             "message": "Too large resource version"}])
                if exact < self.hist_start(rt.key):
                    if cont:
                        raise ApiError.expired(
                            "The provided continue parameter is too old to display a consistent "
                            "list result. You can start a new list without the continue "
                            "parameter, or use the continue token in this response to retrieve "
                            "the remainder of the results. Continuing with the provided token "
                            "results in an inconsistent list - objects that were created, "
                            "modified, or deleted between the time the first chunk was returned "
                            "and now may show up in the list.")
                    raise ApiError.expired("too old resource version: %d (%d)"
                                           % (exact, self.hist_start(rt.key) + 1))
                list_rv = exact
                items = self._snapshot_items(rt.key, ns, exact) if exact < self.rv else \
                    self._current_items(rt.key, ns)
            else:
                list_rv = self.rv
                items = self._current_items(rt.key, ns)
        filtered = label_sel is not None or field_sel is not None
        if filtered:
            items = [o for o in items if _obj_matches(o, label_sel, field_sel)]
        if start is not None:
            items = [o for o in items if obj_key(o) > start]
        lmeta = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            page = items[:limit]
            last = obj_key(page[-1])
            lmeta["continue"] = _encode_continue(list_rv, last)
            if not filtered:
                lmeta["remainingItemCount"] = len(items) - limit
            items = page
        return [self.present(rt, o) for o in items], lmeta

    # ==================================================================================
    # WATCH
    # ==================================================================================
    def watch(self, rt, ns, label_sel=None, field_sel=None, rv=None, rvm=None,
              send_initial=None, allow_bookmarks=False):
        """Registers a watcher.  Returns (watcher, initial_items, error_status).

        initial_items are (Event-like, type, which) tuples to send before the queue.  When the
        requested RV is too old, watcher is None and error_status holds the 410 Status."""
        ns = ns if rt.namespaced and ns else None
        if send_initial is not None:
            if rvm != "NotOlderThan":
                raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                    ("FieldValueForbidden", "resourceVersionMatch",
                     "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                     "NotOlderThan")])
            if send_initial and not allow_bookmarks:
                raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                    ("FieldValueForbidden", "allowWatchBookmarks",
                     "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to "
                     "true")])
        elif rvm:
            raise ApiError.invalid("meta.k8s.io", "ListOptions", "", [
                ("FieldValueForbidden", "resourceVersionMatch",
                 "Forbidden: resourceVersionMatch is forbidden for watch unless "
                 "sendInitialEvents is provided")])
        rv_n = None
        if rv:
            try:
                rv_n = int(rv)
                if rv_n < 0:
                    raise ValueError
            except ValueError:
                raise ApiError.bad_request("invalid resource version: %s" % rv)
        w = Watcher(rt.key, rt, ns, label_sel, field_sel, self.watcher_queue)
        initial = []
        with self.lock:
            synthetic = (send_initial is True) or (send_initial is None and not rv_n)
            if synthetic:
                for o in self._current_items(rt.key, ns):
                    if w.matches(o):
                        initial.append((_Synthetic(o), ADDED, "obj"))
                if send_initial:
                    initial.append((None, BOOKMARK, INITIAL_EVENTS_END))
            else:
                if rv_n is None:
                    rv_n = self.rv
                if rv_n < self.hist_start(rt.key):
                    st = ApiError.expired("too old resource version: %d (%d)"
                                          % (rv_n, self.hist_start(rt.key) + 1)).status()
                    return None, [], st
                for ev in self.hist.get(rt.key) or ():
                    if ev.rv <= rv_n:
                        continue
                    t = w.transition(ev)
                    if t is not None:
                        initial.append((ev, t[0], t[1]))
            w.last_rv = self.rv
            self.watchers.setdefault(rt.key, []).append(w)
        return w, initial, None

    def stop_watch(self, w):
        with self.lock:
            self._unregister(w)
        w.close("stopped")

    def bookmark_rv(self, w):
        """The RV a BOOKMARK may carry for w right now (None if events are queued)."""
        with self.lock:
            with w.cond:
                if w.items:
                    return None
            return self.rv

    def drop_watches(self):
        with self.lock:
            ws = [w for lst in self.watchers.values() for w in lst]
            self.watchers = {}
        for w in ws:
            w.close("dropped")
        return len(ws)

    def close_all(self):
        return self.drop_watches()

    def expire(self):
        """Compacts history: every RV and continue token issued so far becomes too old."""
        with self.lock:
            self.rv += 1
            self.compact_rv = self.rv
            self.hist = {}
            self.changed.notify_all()
            return self.compact_rv

    # -- internal helpers used by GC ------------------------------------------------------
    def internal_update(self, key, ns, name, mutate, manager, sub=None):
        """Read-modify-write of a stored object as an internal controller (no RV check).
        mutate(obj) edits a private copy in place; returning False skips the write."""
        rt = self.registry.by_key(key)
        if rt is None:
            return None
        with self.lock:
            old = self._get(key, ns, name)
            if old is None:
                return None
            new = json_copy(old)
            if mutate(new) is False:
                return old
            opts = WriteOptions(field_manager=manager, internal=True, field_validation="Ignore")
            try:
                _, obj = self._finish_update(rt, old, new, opts, sub)
            except ApiError as e:
                log.warning("internal update of %s %s/%s failed: %s", key, ns, name, e.message)
                return None
            return obj


class _Synthetic:
    """An initial ADDED for watch (not from history): rv is the object's own RV."""
    __slots__ = ("obj", "cache", "type", "rv", "prev")

    def __init__(self, obj):
        self.obj = obj
        self.cache = {}
        self.type = ADDED
        self.prev = None
        try:
            self.rv = int(meta_of(obj).get("resourceVersion") or 0)
        except ValueError:
            self.rv = 0

    def pick(self, which):
        return self.obj


# --------------------------------------------------------------------------------------------
# helpers


def _obj_matches(o, label_sel, field_sel):
    if label_sel is not None and not label_sel.matches(meta_of(o).get("labels") or {}):
        return False
    if field_sel is not None and not field_sel.matches(o):
        return False
    return True


def _generation_changed(rt, old, new):
    if rt.is_custom:
        def strip(o):
            d = {k: v for k, v in o.items() if k not in ("metadata", "apiVersion", "kind")}
            if rt.has_status():
                d.pop("status", None)
            return d
        return strip(old) != strip(new)
    return old.get("spec") != new.get("spec")


def _conflict_message(causes):
    """'Apply failed with N conflict(s): ...' for FieldManagerConflict causes."""
    if len(causes) == 1:
        return "Apply failed with 1 conflict: %s: %s" % (causes[0]["message"], causes[0]["field"])
    by = {}
    for c in causes:
        by.setdefault(c["message"], []).append(c["field"])
    parts = []
    for m in sorted(by):
        parts.append(m.replace("conflict with", "conflicts with", 1) + ":")
        parts.extend("- " + f for f in by[m])
    return "Apply failed with %d conflicts: %s" % (len(causes), "\n".join(parts))


def _encode_continue(rv, last_key):
    tok = {"v": "meta.k8s.io/v1", "rv": rv, "start": "%s/%s\x00" % last_key}
    return base64.urlsafe_b64encode(json.dumps(tok, separators=(",", ":")).encode()).decode() \
        .rstrip("=")


def _decode_continue(cont):
    try:
        pad = "=" * (-len(cont) % 4)
        tok = json.loads(base64.urlsafe_b64decode(cont + pad))
        if tok.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown version")
        rv = int(tok["rv"])
        start = tok["start"]
        if not start.endswith("\x00"):
            raise ValueError("bad start")
        ns, _, name = start[:-1].partition("/")
        return rv, (ns, name)
    except Exception:
        raise ApiError.bad_request("continue key is not valid: incorrect encoded start "
                                   "resourceVersion (version meta.k8s.io/v1)")


def _validate_event(rt, ev, old, causes):
    """ValidateEventCreate / ValidateEventUpdate (pkg/apis/core/validation/events.go) on the
    stored core/v1 form; rt is the API the write came through (events.k8s.io/v1 writes get the
    strict checks, core/v1 writes only the legacy ones)."""
    v1 = rt.group == "events.k8s.io"
    ns = meta_of(ev).get("namespace") or ""
    io = ev.get("involvedObject") if isinstance(ev.get("involvedObject"), dict) else {}
    ion = io.get("namespace") or ""
    rc_field = "reportingController" if v1 else "reportingComponent"

    def text(k):
        v = ev.get(k)
        return v if isinstance(v, str) else ""
    if not ev.get("eventTime"):
        if not ion:
            if ns not in ("", "default"):
                causes.append(("FieldValueInvalid", "involvedObject.namespace",
                               'Invalid value: "": does not match event.namespace'))
        elif ns != ion:
            causes.append(("FieldValueInvalid", "involvedObject.namespace",
                           "Invalid value: %s: does not match event.namespace" % fmt_value(ion)))
    else:
        if not ion and ns not in ("default", "kube-system"):
            causes.append(("FieldValueInvalid", "involvedObject.namespace",
                           'Invalid value: "": does not match event.namespace'))
        rc = text("reportingComponent")
        if not rc:
            causes.append(("FieldValueRequired", rc_field, "Required value"))
        for e in sel.validate_label_key(rc):
            causes.append(("FieldValueInvalid", rc_field, "Invalid value: %s: %s"
                           % (fmt_value(rc), e)))
        for k, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128),
                         ("message", 1024)):
            if not text(k) and k != "message":
                causes.append(("FieldValueRequired", k, "Required value"))
            if len(text(k)) > limit:
                causes.append(("FieldValueInvalid", k, 'Invalid value: "": can have at most %d '
                               "characters" % limit))
    if not v1:
        return
    series = ev.get("series")
    if old is None or series != old.get("series"):
        if isinstance(series, dict):
            if not isinstance(series.get("count"), int) or series.get("count") < 2:
                causes.append(("FieldValueInvalid", "series.count",
                               'Invalid value: "": should be at least 2'))
            if not series.get("lastObservedTime"):
                causes.append(("FieldValueRequired", "series.lastObservedTime",
                               "Required value"))
    if old is None:
        if not ev.get("eventTime"):
            causes.append(("FieldValueRequired", "eventTime", "Required value"))
        if ev.get("type") not in ("Normal", "Warning"):
            causes.append(("FieldValueInvalid", "type", 'Invalid value: "": has invalid value: '
                           "%s" % (ev.get("type") or "")))
        for k in ("firstTimestamp", "lastTimestamp", "count"):
            if ev.get(k):
                causes.append(("FieldValueInvalid", k, 'Invalid value: "": needs to be unset'))
        if (ev.get("source") or {}).get("component") or (ev.get("source") or {}).get("host"):
            causes.append(("FieldValueInvalid", "source", 'Invalid value: "": needs to be unset'))
        return
    for k in ("involvedObject", "reason", "type", "firstTimestamp", "lastTimestamp", "count",
              "source", "eventTime", "action", "related", "reportingComponent",
              "reportingInstance"):
        if (ev.get(k) or None) != (old.get(k) or None):
            causes.append(("FieldValueInvalid", "reportingController" if k ==
                           "reportingComponent" else k, "Invalid value: %s: field is immutable"
                           % fmt_value(ev.get(k))))


def _qos_class(spec):
    req_any = False
    guaranteed = True
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    for c in containers:
        if not isinstance(c, dict):
            continue
        res = c.get("resources") or {}
        reqs = res.get("requests") or {}
        lims = res.get("limits") or {}
        if reqs or lims:
            req_any = True
        for r in ("cpu", "memory"):
            lim = lims.get(r)
            rq = reqs.get(r, lim)
            if lim is None or str(rq) != str(lim):
                guaranteed = False
    if not req_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if v is None:
        return "null"
    return "string"


def _bad_b64_pos(v):
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for i, ch in enumerate(v):
        if ch not in alphabet:
            return i
    return max(0, len(v) - (len(v) % 4 or 4))


def _go_map(d):
    return "map[string]string{%s}" % ", ".join("%s:%s" % (json.dumps(k), json.dumps(v))
                                               for k, v in sorted(d.items()))


def _label_selector_go(s):
    ml = (s or {}).get("matchLabels") or {}
    return "v1.LabelSelector{MatchLabels:%s, MatchExpressions:[]v1.LabelSelectorRequirement" \
           "(nil)}" % _go_map(ml)


def _go_versions(versions):
    parts = []
    for v in versions:
        if isinstance(v, dict):
            parts.append("apiextensions.CustomResourceDefinitionVersion{Name:%s, Served:%s, "
                         "Storage:%s}" % (json.dumps(v.get("name", "")),
                                          "true" if v.get("served") else "false",
                                          "true" if v.get("storage") else "false"))
    return "[]apiextensions.CustomResourceDefinitionVersion{%s}" % ", ".join(parts)


__all__ = ["Store", "Watcher", "Event", "WriteOptions", "DeleteOptions", "ADDED", "MODIFIED",
           "DELETED", "BOOKMARK", "ERROR", "NS_KEY", "CRD_KEY", "INITIAL_EVENTS_END",
           "label_selector_string", "meta_of", "parse_rfc3339", "ResourceType"]
