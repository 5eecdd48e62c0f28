"""PATCH semantics of kube-apiserver: JSON patch, merge patch, strategic merge patch, apply.

Pure functions; every function returns new objects and never mutates its inputs.

    json_patch(doc, ops)                        RFC 6902 (application/json-patch+json)
    merge_patch(doc, patch)                     RFC 7386 (application/merge-patch+json)
    strategic_merge_patch(doc, patch, kind)     application/strategic-merge-patch+json
    apply_patch(existing, applied, manager, force, ...)   application/apply-patch+yaml
    PatchError(message, code, reason=None, causes=None)   .code is 400, 409 or 422
    update_managed_fields(old, new, entries, manager, api_version, ...)   Update ownership
    last_applied_allowed_conflicts(live, ...) / build_last_applied(applied)
                                                kubectl's client-side -> server-side upgrade

Strategic merge patch follows k8s.io/apimachinery/pkg/util/strategicpatch (mergeMap,
mergeSlice, mergeSliceWithSpecialElements, normalizeElementOrder, mergeSortedSlice) with a
compiled-in table of patchStrategy / patchMergeKey struct tags for the built-in kinds localkube
serves (see _TYPES below).  Directives: $patch: replace|delete|merge (maps and list elements),
$retainKeys, $setElementOrder/<field>, $deleteFromPrimitiveList/<field>.

JSON patch apply errors use the messages of github.com/evanphx/json-patch, which kube wraps in a
422 "the server rejected our request due to an error in our request" Status whose cause carries
the detail (PatchError.detail / .causes).
"""

import copy
import json
import time

__all__ = [
    "PatchError",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
    "apply_patch",
    "json_pointer_get",
    "json_equal",
    "smp_list_strategy",
    "KIND_BY_RESOURCE",
]


class PatchError(Exception):
    """A patch that cannot be applied.  code: HTTP status (400, 409, 422)."""

    def __init__(self, message, code=400, reason=None, causes=None, detail=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason or {400: "BadRequest", 409: "Conflict", 422: "Invalid"}.get(
            code, "BadRequest"
        )
        self.causes = causes or []
        self.detail = detail if detail is not None else message

    def __str__(self):
        return self.message


_MISSING = object()


def json_equal(a, b):
    """JSON value equality: 1 == 1.0, but true != 1 and "1" != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return a == b


# --------------------------------------------------------------------------------------------
# JSON patch (RFC 6902)


def _unprocessable(detail):
    return PatchError(
        "the server rejected our request due to an error in our request",
        422,
        "Invalid",
        [{"reason": "UnexpectedServerResponse", "message": detail}],
        detail,
    )


def _parse_pointer(ptr):
    if not isinstance(ptr, str):
        raise PatchError("json patch: path must be a string", 400)
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise _unprocessable("JSON pointer must be empty or start with a \"/\": %s" % ptr)
    parts = []
    for raw in ptr[1:].split("/"):
        out = []
        i = 0
        while i < len(raw):
            c = raw[i]
            if c == "~":
                nxt = raw[i + 1:i + 2]
                if nxt == "0":
                    out.append("~")
                elif nxt == "1":
                    out.append("/")
                else:
                    raise _unprocessable("invalid JSON pointer escape in %s" % ptr)
                i += 2
                continue
            out.append(c)
            i += 1
        parts.append("".join(out))
    return parts


def _list_index(tok, n, allow_end, op, ptr):
    if tok == "-" and allow_end:
        return n
    neg = tok.startswith("-")
    digits = tok[1:] if neg else tok
    if not digits.isdigit() or (len(digits) > 1 and digits[0] == "0") or not digits.isascii():
        raise _unprocessable("%s operation does not apply: doc is missing path: %s: missing value"
                             % (op, json.dumps(ptr)))
    idx = int(tok)
    if idx < 0:
        idx += n  # evanphx/json-patch supports negative indices (kube leaves it on)
    limit = n if allow_end else n - 1
    if idx < 0 or idx > limit:
        raise _unprocessable("Unable to access invalid index: %s: invalid index referenced" % tok)
    return idx


def _resolve_parent(doc, parts, op, ptr):
    cur = doc
    for tok in parts[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise _unprocessable("%s operation does not apply: doc is missing path: %s: "
                                     "missing value" % (op, json.dumps(ptr)))
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_list_index(tok, len(cur), False, op, ptr)]
        else:
            raise _unprocessable("%s operation does not apply: doc is missing path: %s: "
                                 "missing value" % (op, json.dumps(ptr)))
    return cur


def json_pointer_get(doc, ptr):
    """Value at a JSON pointer; raises PatchError(422) when missing."""
    parts = _parse_pointer(ptr)
    if not parts:
        return doc
    parent = _resolve_parent(doc, parts, "get", ptr)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable("doc is missing key: %s: missing value" % ptr)
        return parent[last]
    if isinstance(parent, list):
        return parent[_list_index(last, len(parent), False, "get", ptr)]
    raise _unprocessable("doc is missing key: %s: missing value" % ptr)


def _op_add(doc, parts, value, ptr, opname="add"):
    if not parts:
        return value
    parent = _resolve_parent(doc, parts, opname, ptr)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        idx = _list_index(last, len(parent), True, opname, ptr)
        parent.insert(idx, value)
    else:
        raise _unprocessable("%s operation does not apply: doc is missing path: %s: missing value"
                             % (opname, json.dumps(ptr)))
    return doc


def _op_remove(doc, parts, ptr, opname="remove"):
    if not parts:
        raise _unprocessable("%s operation does not apply: cannot remove the whole document"
                             % opname)
    parent = _resolve_parent(doc, parts, opname, ptr)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable("Unable to remove nonexistent key: %s: missing value" % last)
        return doc, parent.pop(last)
    if isinstance(parent, list):
        idx = _list_index(last, len(parent), False, opname, ptr)
        return doc, parent.pop(idx)
    raise _unprocessable("%s operation does not apply: doc is missing path: %s: missing value"
                         % (opname, json.dumps(ptr)))


def _op_replace(doc, parts, value, ptr):
    if not parts:
        return value
    parent = _resolve_parent(doc, parts, "replace", ptr)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable("replace operation does not apply: doc is missing key: %s: "
                                 "missing value" % ptr)
        parent[last] = value
    elif isinstance(parent, list):
        idx = _list_index(last, len(parent), False, "replace", ptr)
        parent[idx] = value
    else:
        raise _unprocessable("replace operation does not apply: doc is missing key: %s: "
                             "missing value" % ptr)
    return doc


_OPS = ("add", "remove", "replace", "move", "copy", "test")


def json_patch(doc, ops):
    """Applies an RFC 6902 operation list to a copy of doc and returns it.

    Malformed operations (not a list, op not an object, unknown op, missing path/value/from) raise
    PatchError code 400; operations that do not apply (missing paths, failed test) raise 422.
    """
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch",
                         400)
    for n, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError("json patch operation %d is not an object" % n, 400)
        kind = op.get("op")
        if not isinstance(kind, str) or kind not in _OPS:
            raise PatchError("Unexpected kind: %s" % (kind if isinstance(kind, str) else
                                                      json.dumps(kind)), 400)
        if "path" not in op or not isinstance(op["path"], str):
            raise PatchError("json patch %s operation is missing the \"path\" string" % kind, 400)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError("json patch %s operation is missing the \"value\" field" % kind, 400)
        if kind in ("move", "copy") and not isinstance(op.get("from"), str):
            raise PatchError("json patch %s operation is missing the \"from\" string" % kind, 400)
    doc = copy.deepcopy(doc)
    for op in ops:
        kind = op["op"]
        ptr = op["path"]
        parts = _parse_pointer(ptr)
        if kind == "add":
            doc = _op_add(doc, parts, copy.deepcopy(op["value"]), ptr)
        elif kind == "remove":
            doc, _ = _op_remove(doc, parts, ptr)
        elif kind == "replace":
            doc = _op_replace(doc, parts, copy.deepcopy(op["value"]), ptr)
        elif kind == "move":
            frm = op["from"]
            fparts = _parse_pointer(frm)
            if len(parts) > len(fparts) and parts[:len(fparts)] == fparts:
                raise _unprocessable("move operation does not apply: from path %s is a prefix of "
                                     "path %s" % (frm, ptr))
            try:
                json_pointer_get(doc, frm)
            except PatchError:
                raise _unprocessable("move operation does not apply: doc is missing from path: "
                                     "%s: missing value" % frm) from None
            doc, val = _op_remove(doc, fparts, frm, "move")
            doc = _op_add(doc, parts, val, ptr, "move")
        elif kind == "copy":
            frm = op["from"]
            try:
                val = json_pointer_get(doc, frm)
            except PatchError:
                raise _unprocessable("copy operation does not apply: doc is missing from path: "
                                     "%s: missing value" % json.dumps(frm)) from None
            doc = _op_add(doc, parts, copy.deepcopy(val), ptr, "copy")
        else:  # test
            try:
                have = json_pointer_get(doc, ptr)
            except PatchError:
                have = _MISSING
            if have is _MISSING:
                if op["value"] is None:
                    continue  # evanphx treats a missing value as equal to null
                raise _unprocessable("testing value %s failed: test failed" % ptr)
            if not json_equal(have, op["value"]):
                raise _unprocessable("testing value %s failed: test failed" % ptr)
    return doc


# --------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386)


def merge_patch(doc, patch):
    """RFC 7386: null deletes, objects merge recursively, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# --------------------------------------------------------------------------------------------
# Patch metadata for built-in kinds: field -> (patchStrategy, patchMergeKey, element/field type).
# Taken from the struct tags in k8s.io/api (core/v1, apps/v1, ...).  Fields not listed are
# merged as plain maps (objects) or replaced whole (lists).


def _f(strategy="", key=None, sub=None):
    return (strategy, key, sub)


OBJECT_META = {
    "finalizers": _f("merge"),
    "ownerReferences": _f("merge", "uid"),
}
PROBE = {}
CONTAINER = {
    "ports": _f("merge", "containerPort"),
    "env": _f("merge", "name"),
    "volumeMounts": _f("merge", "mountPath"),
    "volumeDevices": _f("merge", "devicePath"),
    "livenessProbe": _f(sub=PROBE),
    "readinessProbe": _f(sub=PROBE),
    "startupProbe": _f(sub=PROBE),
}
VOLUME = {}
POD_SPEC = {
    "volumes": _f("merge,retainKeys", "name", VOLUME),
    "initContainers": _f("merge", "name", CONTAINER),
    "containers": _f("merge", "name", CONTAINER),
    "ephemeralContainers": _f("merge", "name", CONTAINER),
    "imagePullSecrets": _f("merge", "name"),
    "hostAliases": _f("merge", "ip"),
    "topologySpreadConstraints": _f("merge", "topologyKey"),
    "resourceClaims": _f("merge,retainKeys", "name"),
    "schedulingGates": _f("merge", "name"),
}
POD_STATUS = {
    "conditions": _f("merge", "type"),
    "podIPs": _f("merge", "ip"),
    "hostIPs": _f("merge", "ip"),
    "resourceClaimStatuses": _f("merge,retainKeys", "name"),
}
POD_TEMPLATE_SPEC = {"metadata": _f(sub=OBJECT_META), "spec": _f(sub=POD_SPEC)}
CONDITIONS_STATUS = {"conditions": _f("merge", "type")}


def _kind(spec=None, status=None):
    t = {"metadata": _f(sub=OBJECT_META)}
    if spec is not None:
        t["spec"] = _f(sub=spec)
    if status is not None:
        t["status"] = _f(sub=status)
    return t


_TYPES = {
    "Pod": _kind(POD_SPEC, POD_STATUS),
    "PodTemplate": {"metadata": _f(sub=OBJECT_META), "template": _f(sub=POD_TEMPLATE_SPEC)},
    "Deployment": _kind(
        {"template": _f(sub=POD_TEMPLATE_SPEC), "strategy": _f("retainKeys", sub={})},
        CONDITIONS_STATUS,
    ),
    "ReplicaSet": _kind({"template": _f(sub=POD_TEMPLATE_SPEC)}, CONDITIONS_STATUS),
    "DaemonSet": _kind({"template": _f(sub=POD_TEMPLATE_SPEC)}, CONDITIONS_STATUS),
    "StatefulSet": _kind({"template": _f(sub=POD_TEMPLATE_SPEC)}, CONDITIONS_STATUS),
    "Job": _kind({"template": _f(sub=POD_TEMPLATE_SPEC)}, {}),
    "CronJob": _kind(
        {"jobTemplate": _f(sub={"metadata": _f(sub=OBJECT_META),
                                "spec": _f(sub={"template": _f(sub=POD_TEMPLATE_SPEC)})})},
        {},
    ),
    "ReplicationController": _kind({"template": _f(sub=POD_TEMPLATE_SPEC)}, CONDITIONS_STATUS),
    "Service": _kind({"ports": _f("merge", "port")}, CONDITIONS_STATUS),
    "Endpoints": _kind(),
    "Node": _kind({"podCIDRs": _f("merge")},
                  {"addresses": _f("merge", "type"), "conditions": _f("merge", "type")}),
    "Namespace": _kind({}, CONDITIONS_STATUS),
    "ServiceAccount": dict(_kind(), secrets=_f("merge", "name")),
    "ConfigMap": _kind(),
    "Secret": _kind(),
    "Event": _kind(),
    "Lease": _kind({}),
    "Role": _kind(),
    "ClusterRole": _kind(),
    "RoleBinding": _kind(),
    "ClusterRoleBinding": _kind(),
    "HorizontalPodAutoscaler": _kind({}, CONDITIONS_STATUS),
    "PersistentVolumeClaim": _kind({}, CONDITIONS_STATUS),
    "CustomResourceDefinition": _kind(),
}

KIND_BY_RESOURCE = {
    "pods": "Pod",
    "podtemplates": "PodTemplate",
    "deployments": "Deployment",
    "replicasets": "ReplicaSet",
    "daemonsets": "DaemonSet",
    "statefulsets": "StatefulSet",
    "jobs": "Job",
    "cronjobs": "CronJob",
    "replicationcontrollers": "ReplicationController",
    "services": "Service",
    "endpoints": "Endpoints",
    "nodes": "Node",
    "namespaces": "Namespace",
    "serviceaccounts": "ServiceAccount",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "events": "Event",
    "leases": "Lease",
    "roles": "Role",
    "clusterroles": "ClusterRole",
    "rolebindings": "RoleBinding",
    "clusterrolebindings": "ClusterRoleBinding",
    "horizontalpodautoscalers": "HorizontalPodAutoscaler",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "customresourcedefinitions": "CustomResourceDefinition",
}
_KIND_LOWER = {k.lower(): k for k in _TYPES}


def _root_type(kind):
    if not kind:
        return {"metadata": _f(sub=OBJECT_META)}
    k = KIND_BY_RESOURCE.get(kind) or _KIND_LOWER.get(kind.lower()) or kind
    return _TYPES.get(k, {"metadata": _f(sub=OBJECT_META)})


def _lookup(t, field):
    if t is None:
        return "", None, None
    v = t.get(field)
    if v is None:
        return "", None, None
    return v


def smp_list_strategy(kind, path):
    """(patchStrategy, patchMergeKey) for a dotted field path of a kind, e.g.
    smp_list_strategy("Deployment", "spec.template.spec.containers") == ("merge", "name")."""
    t = _root_type(kind)
    strategy, key = "", None
    for part in path.split("."):
        strategy, key, t = _lookup(t, part)
    return strategy, key


# --------------------------------------------------------------------------------------------
# Strategic merge patch

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def _bad(msg):
    return PatchError(msg, 400)


def _go_fmt(v):
    """Rough Go %v of a JSON value, for error messages."""
    if isinstance(v, dict):
        return "map[" + " ".join("%s:%s" % (k, _go_fmt(v[k])) for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(_go_fmt(x) for x in v) + "]"
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _discard_nulls(v):
    if isinstance(v, dict):
        return {k: _discard_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_discard_nulls(x) for x in v]
    return v


def _smp_map(orig, patch, t):
    """mergeMap: orig and patch are owned (mutable) copies."""
    if _DIRECTIVE in patch:
        d = patch[_DIRECTIVE]
        if d == "replace":
            p = dict(patch)
            del p[_DIRECTIVE]
            return p
        if d == "delete":
            return {}
        if d != "merge":
            raise _bad("unknown patch type: %s in map: %s" % (_go_fmt(d), _go_fmt(patch)))
        patch = dict(patch)
        del patch[_DIRECTIVE]
    if _RETAIN_KEYS in patch:
        rk = patch.pop(_RETAIN_KEYS)
        if not isinstance(rk, list) or not all(isinstance(x, str) for x in rk):
            raise _bad("invalid patch format of retainKeys")
        for k in list(orig):
            if k not in rk:
                del orig[k]
    for key in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(key)
        field = key[len(_SET_ORDER):]
        if not isinstance(order, list):
            raise _bad("invalid patch format of setElementOrder list")
        plist = patch.pop(field, _MISSING)
        dlist = patch.pop(_DELETE_PRIMITIVE + field, _MISSING)
        strategy, mkey, sub = _lookup(t, field)
        if plist is None:
            orig.pop(field, None)
            continue
        if plist is not _MISSING and not isinstance(plist, list):
            orig[field] = _discard_nulls(plist)
            continue
        if dlist is not _MISSING and not isinstance(dlist, list):
            raise _bad("invalid patch format of primitive list")
        olist = orig.get(field)
        had = isinstance(olist, list)
        olist = olist if had else []
        plist = [] if plist is _MISSING else plist
        if "merge" in strategy.split(","):
            merged, server_order = _smp_list_merge(olist, plist, mkey, sub,
                                                   None if dlist is _MISSING else dlist)
        else:
            merged, server_order = [_discard_nulls(x) for x in plist], []
        result = _normalize_order(merged, order, server_order, mkey)
        if result or had:
            orig[field] = result
    for k, pv in list(patch.items()):
        if k.startswith(_DELETE_PRIMITIVE):
            field = k[len(_DELETE_PRIMITIVE):]
            if not isinstance(pv, list):
                raise _bad("invalid patch format of primitive list")
            ov = orig.get(field)
            if isinstance(ov, list):
                orig[field] = [x for x in ov if not any(json_equal(x, d) for d in pv)]
            continue
        if k.startswith("$"):
            raise _bad("unrecognized strategic merge patch directive %s" % json.dumps(k))
        if pv is None:
            orig.pop(k, None)
            continue
        strategy, mkey, sub = _lookup(t, k)
        strategies = strategy.split(",")
        ov = orig.get(k, _MISSING)
        if isinstance(pv, dict):
            if "replace" in strategies:
                orig[k] = _smp_map({}, pv, sub)
            else:
                orig[k] = _smp_map(ov if isinstance(ov, dict) else {}, pv, sub)
        elif isinstance(pv, list):
            if "merge" in strategies:
                base = ov if isinstance(ov, list) else []
                merged, server_order = _smp_list_merge(base, pv, mkey, sub, None)
                patch_items = [x for x in pv if not (isinstance(x, dict) and _DIRECTIVE in x)]
                orig[k] = _normalize_order(merged, patch_items, server_order, mkey)
            else:
                orig[k] = _discard_nulls(pv)
        else:
            orig[k] = pv
    return orig


def _ident(item, mkey):
    if mkey is not None and isinstance(item, dict):
        return ("k", json.dumps(item.get(mkey), sort_keys=True))
    return ("v", json.dumps(item, sort_keys=True))


def _smp_list_merge(orig, patch, mkey, sub, delete_list):
    """mergeSlice minus the final ordering.  Returns (merged, server_order)."""
    orig = list(orig)
    if any(isinstance(x, list) for x in patch):
        raise _bad("lists of lists are not supported")
    maps = [x for x in patch if isinstance(x, dict)]
    if patch and maps and len(maps) != len(patch):
        raise _bad("types don't match in strategic merge patch list: %s" % _go_fmt(patch))
    is_map_list = bool(maps) or (not patch and any(isinstance(x, dict) for x in orig))
    if not is_map_list:
        merged = []
        for x in orig + list(patch):
            if not any(json_equal(x, y) for y in merged):
                merged.append(x)
        if delete_list is not None:
            merged = [x for x in merged if not any(json_equal(x, d) for d in delete_list)]
        return merged, orig
    if mkey is None:
        raise _bad("cannot merge lists without merge key")
    plain = []
    replace = False
    for item in patch:
        if _DIRECTIVE in item:
            d = item[_DIRECTIVE]
            if d == "delete":
                if mkey not in item:
                    raise _bad("map: %s does not contain declared merge key: %s"
                               % (_go_fmt(item), mkey))
                orig = [o for o in orig if not (isinstance(o, dict) and mkey in o
                                                and json_equal(o[mkey], item[mkey]))]
            elif d == "replace":
                replace = True
            elif d == "merge":
                raise _bad("merging lists cannot yet be specified in the patch")
            else:
                raise _bad("unknown patch type: %s in map: %s" % (_go_fmt(d), _go_fmt(item)))
        else:
            plain.append(item)
    if replace:
        return [_smp_map({}, copy.deepcopy(p), sub) for p in plain], []
    merged = list(orig)
    for item in plain:
        if mkey not in item:
            raise _bad("map: %s does not contain declared merge key: %s" % (_go_fmt(item), mkey))
        for i, o in enumerate(merged):
            if isinstance(o, dict) and mkey in o and json_equal(o[mkey], item[mkey]):
                merged[i] = _smp_map(copy.deepcopy(o), copy.deepcopy(item), sub)
                break
        else:
            merged.append(_smp_map({}, copy.deepcopy(item), sub))
    return merged, orig


def _normalize_order(merged, order, server_order, mkey):
    """normalizeElementOrder + mergeSortedSlice: items named in `order` come in that order,
    the others keep their server order and are interleaved by the server's order."""
    order_idx = {}
    for i, it in enumerate(order):
        order_idx.setdefault(_ident(it, mkey), i)
    server_idx = {}
    for i, it in enumerate(server_order):
        server_idx.setdefault(_ident(it, mkey), i)
    patch_items = [x for x in merged if _ident(x, mkey) in order_idx]
    server_only = [x for x in merged if _ident(x, mkey) not in order_idx]
    patch_items.sort(key=lambda x: order_idx[_ident(x, mkey)])
    server_only.sort(key=lambda x: server_idx.get(_ident(x, mkey), len(server_idx)))
    out = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if i >= len(server_only):
            out.append(patch_items[j])
            j += 1
        elif j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        else:
            li = server_idx.get(_ident(server_only[i], mkey), -1)
            ri = server_idx.get(_ident(patch_items[j], mkey), -1)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j])
                j += 1
    return out


def strategic_merge_patch(doc, patch, kind):
    """Kubernetes strategic merge patch of a built-in kind (Kind or plural resource name)."""
    if not isinstance(patch, dict):
        raise _bad("strategic merge patch must be a JSON object")
    base = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    return _smp_map(base, copy.deepcopy(patch), _root_type(kind))


# --------------------------------------------------------------------------------------------
# Server-side apply (approximation)


class _Node:
    """Field metadata cursor for apply: built-in table or a CRD structural schema."""

    def __init__(self, table=None, schema=None):
        self.table = table
        self.schema = schema

    def child(self, k):
        """Returns (list_kind, keys, child_node, map_atomic) for field k.

        list_kind: 'assoc' (merge by keys), 'set' (primitive set) or 'atomic'."""
        if self.schema is not None:
            s = self.schema
            props = s.get("properties") or {}
            sub = props.get(k)
            if sub is None and isinstance(s.get("additionalProperties"), dict):
                sub = s["additionalProperties"]
            if sub is None:
                if k == "metadata" and self.table is not None:
                    return "atomic", None, _Node(table=OBJECT_META), False
                return "atomic", None, _Node(), False
            lt = sub.get("x-kubernetes-list-type")
            items = sub.get("items") if isinstance(sub.get("items"), dict) else None
            node = _Node(schema=items if sub.get("type") == "array" else sub)
            if k == "metadata" and self.table is not None:
                node = _Node(table=OBJECT_META)
            atomic_map = sub.get("x-kubernetes-map-type") == "atomic"
            if lt == "map":
                return "assoc", list(sub.get("x-kubernetes-list-map-keys") or []), node, atomic_map
            if lt == "set":
                return "set", None, node, atomic_map
            return "atomic", None, node, atomic_map
        strategy, mkey, sub = _lookup(self.table, k)
        node = _Node(table=sub)
        if "merge" in strategy.split(","):
            if mkey:
                return "assoc", [mkey], node, False
            return "set", None, node, False
        return "atomic", None, node, False


def _root_node(kind, schema):
    if schema is not None:
        return _Node(table={"metadata": _f(sub=OBJECT_META)}, schema=schema)
    return _Node(table=_root_type(kind))


_IGNORED_META = {
    "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds",
}


def _key_of(item, keys):
    return {k: item[k] for k in keys if isinstance(item, dict) and k in item}


def _enc(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _field_set(obj, node, path=(), out=None, root=True):
    """Leaf paths (tuples of ('f', name) / ('k', json) / ('v', json) / ('.',)) of obj."""
    if out is None:
        out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if root and k in ("apiVersion", "kind"):
                continue
            if path == (("f", "metadata"),) and k in _IGNORED_META:
                continue
            lk, keys, child, atomic_map = node.child(k)
            p = path + (("f", k),)
            if isinstance(v, list):
                if lk == "assoc":
                    for item in v:
                        if isinstance(item, dict):
                            ip = p + (("k", _enc(_key_of(item, keys))),)
                            out.add(ip + ((".",),))
                            _field_set(item, child, ip, out, False)
                        else:
                            out.add(p)
                elif lk == "set":
                    for item in v:
                        out.add(p + (("v", _enc(item)),))
                    if not v:
                        out.add(p)
                else:
                    out.add(p)
            elif isinstance(v, dict) and not atomic_map:
                if v:
                    # a map whose keys are all ignored (metadata.name...) owns nothing
                    _field_set(v, child, p, out, False)
                else:
                    out.add(p)
            else:
                out.add(p)
    return out


def _fields_to_v1(paths):
    tree = {}
    for p in sorted(paths, key=lambda x: len(x)):
        cur = tree
        for el in p:
            if el[0] == ".":
                name = "."
            else:
                name = el[0] + ":" + el[1]
            cur = cur.setdefault(name, {})
    return tree


def _v1_to_fields(tree, prefix=(), out=None):
    if out is None:
        out = set()
    if not isinstance(tree, dict):
        return out
    if not tree and prefix:
        out.add(prefix)
    for name, sub in tree.items():
        if name == ".":
            out.add(prefix + ((".",),))
            continue
        kind, _, rest = name.partition(":")
        if kind not in ("f", "k", "v", "i") or not _:
            continue
        _v1_to_fields(sub, prefix + ((kind, rest),), out)
    return out


def path_string(p):
    """fieldpath.Path.String(): .spec.containers[name="c"].image"""
    s = []
    for el in p:
        if el[0] == "f":
            s.append("." + el[1])
        elif el[0] == "k":
            try:
                kv = json.loads(el[1])
            except ValueError:
                kv = {}
            s.append("[" + ",".join("%s=%s" % (k, json.dumps(kv[k])) for k in sorted(kv)) + "]")
        elif el[0] == "v":
            s.append("[=" + el[1] + "]")
        elif el[0] == "i":
            s.append("[" + el[1] + "]")
    return "".join(s)


def _value_at(obj, p):
    cur = obj
    for el in p:
        if el[0] == ".":
            return cur
        if el[0] == "f":
            if not isinstance(cur, dict) or el[1] not in cur:
                return _MISSING
            cur = cur[el[1]]
        elif el[0] == "k":
            if not isinstance(cur, list):
                return _MISSING
            want = json.loads(el[1])
            for item in cur:
                if isinstance(item, dict) and all(
                        k in item and json_equal(item[k], v) for k, v in want.items()):
                    cur = item
                    break
            else:
                return _MISSING
        elif el[0] == "v":
            if not isinstance(cur, list):
                return _MISSING
            want = json.loads(el[1])
            if not any(json_equal(x, want) for x in cur):
                return _MISSING
            return want
        elif el[0] == "i":
            if not isinstance(cur, list) or not el[1].isdigit() or int(el[1]) >= len(cur):
                return _MISSING
            cur = cur[int(el[1])]
    return cur


def _is_key_field(p):
    """True for the path of a key field of an associative list item (k:{"name":..}/f:name)."""
    if len(p) < 2 or p[-1][0] != "f" or p[-2][0] != "k":
        return False
    try:
        return p[-1][1] in json.loads(p[-2][1])
    except ValueError:
        return False


def _delete_at(obj, p):
    if p and p[-1][0] == ".":
        p = p[:-1]
    if not p:
        return
    parent = _value_at(obj, p[:-1])
    last = p[-1]
    if last[0] == "f" and isinstance(parent, dict):
        parent.pop(last[1], None)
    elif last[0] == "k" and isinstance(parent, list):
        want = json.loads(last[1])
        parent[:] = [x for x in parent if not (isinstance(x, dict) and all(
            k in x and json_equal(x[k], v) for k, v in want.items()))]
    elif last[0] == "v" and isinstance(parent, list):
        want = json.loads(last[1])
        parent[:] = [x for x in parent if not json_equal(x, want)]


def _ssa_merge(live, applied, node):
    if not isinstance(applied, dict) or not isinstance(live, dict):
        return copy.deepcopy(applied)
    out = dict(live)
    for k, av in applied.items():
        if av is None:
            out.pop(k, None)
            continue
        lk, keys, child, atomic_map = node.child(k)
        lv = out.get(k, _MISSING)
        if isinstance(av, dict):
            if atomic_map:
                out[k] = copy.deepcopy(av)
            else:
                out[k] = _ssa_merge(lv if isinstance(lv, dict) else {}, av, child)
        elif isinstance(av, list) and isinstance(lv, list) and lk == "assoc":
            res = list(lv)
            for item in av:
                if not isinstance(item, dict):
                    res.append(copy.deepcopy(item))
                    continue
                want = _key_of(item, keys)
                for i, x in enumerate(res):
                    if isinstance(x, dict) and _key_of(x, keys) == want and all(
                            json_equal(x.get(kk), want[kk]) for kk in want):
                        res[i] = _ssa_merge(x, item, child)
                        break
                else:
                    res.append(_ssa_merge({}, item, child))
            out[k] = res
        elif isinstance(av, list) and isinstance(lv, list) and lk == "set":
            res = list(lv)
            for item in av:
                if not any(json_equal(item, x) for x in res):
                    res.append(copy.deepcopy(item))
            out[k] = res
        else:
            out[k] = copy.deepcopy(av)
    return out


def _now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def apply_patch(existing, applied, manager, force=False, kind=None, schema=None, now=None,
                subresource=None, conflict_operations=("Apply",), subresource_conflicts=False):
    """Server-side apply, approximated.  Returns the new object (inputs are not modified).

    What it does:
      * existing None: the result is the applied configuration.
      * otherwise the applied configuration is merged recursively into the existing object:
        maps merge; lists whose field has a merge key (built-in patchMergeKey table, or a CRD
        schema's x-kubernetes-list-type: map + x-kubernetes-list-map-keys) merge item by item;
        primitive "merge" lists / list-type set are unions; every other list is replaced.
      * field ownership is tracked in metadata.managedFields as FieldsV1 (f:, k:, v: and "."
        entries, as kube writes them).  The manager's Apply entry is replaced by the set of
        fields in this applied configuration; fields it applied before and omits now are
        removed from the object unless another manager also owns them.
      * conflicts: a field in the applied configuration that another manager whose operation
        is in conflict_operations (default: Apply only) owns, and whose live value differs,
        is a conflict -> PatchError 409 'Apply failed with 1 conflict: conflict with "other":
        .spec.replicas'.  force=True takes the fields over from the other managers instead.
    Approximations: kube also reports conflicts with Update managers (opt in with
    conflict_operations=("Apply", "Update")) and with managers of other subresources (opt in
    with subresource_conflicts=True), merges ownership at finer granularity, and
    re-defaults/validates, which the caller does.  Conflicts name the manager as kube's
    printManager does: "editor" using v1 for Update managers, with subresource "scale"...
    """
    if not isinstance(applied, dict):
        raise _bad("apply patch must be an object")
    if not manager:
        raise _bad("PATCH, application/apply-patch+yaml requests must have a fieldManager")
    meta = applied.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields"):
        raise _bad("metadata.managedFields must be nil")
    applied = copy.deepcopy(applied)
    if isinstance(applied.get("metadata"), dict):
        applied["metadata"].pop("managedFields", None)
    node = _root_node(kind or applied.get("kind"), schema)
    now = now or _now_rfc3339()
    api_version = applied.get("apiVersion") or (existing or {}).get("apiVersion", "")

    base = copy.deepcopy(existing) if isinstance(existing, dict) else {}
    entries = []
    if isinstance(base.get("metadata"), dict):
        entries = [dict(e) for e in (base["metadata"].pop("managedFields", None) or [])
                   if isinstance(e, dict)]

    def is_mine(e):
        return (e.get("manager") == manager and e.get("operation") == "Apply"
                and (e.get("subresource") or None) == (subresource or None))

    mine = [e for e in entries if is_mine(e)]
    prev = _v1_to_fields(mine[0].get("fieldsV1")) if mine else set()
    new = _field_set(applied, node)

    others = [(e, _v1_to_fields(e.get("fieldsV1") or {})) for e in entries if not is_mine(e)]

    def differs(p):
        av = _value_at(applied, p)
        lv = _value_at(base, p)
        if p and p[-1][0] == ".":
            return lv is _MISSING
        return lv is _MISSING or not json_equal(av, lv)

    conflicts = []
    changed = set()
    for e, fields in others:
        for p in sorted(new & fields, key=path_string):
            if differs(p):
                changed.add(p)
                if e.get("operation") in conflict_operations and (
                        subresource_conflicts or
                        (e.get("subresource") or None) == (subresource or None)):
                    conflicts.append((print_manager(e), p))
    if conflicts and not force:
        raise _conflict_error(conflicts)

    merged = _ssa_merge(base, applied, node)

    # the other managers lose the fields whose value this apply changed
    kept = []
    for e, fields in others:
        remaining = fields - changed
        if remaining != fields:
            if not remaining:
                continue
            e = dict(e)
            e["fieldsV1"] = _fields_to_v1(remaining)
        kept.append((e, remaining))
    owned_by_others = set()
    for _, fields in kept:
        owned_by_others |= fields

    def owned_elsewhere(p):
        core = p[:-1] if p and p[-1][0] == "." else p
        for q in owned_by_others:
            if q[:len(core)] == core:
                return True
        return False

    deleted = []
    for p in sorted(prev - new, key=len):
        core = p[:-1] if p and p[-1][0] == "." else p
        if any(core[:len(d)] == d for d in deleted):
            continue  # an ancestor is already gone
        if any(q[:len(core)] == core for q in new):
            continue  # still applied below this point
        if _is_key_field(core):
            continue  # the identity of a list item stays while the item does
        if not owned_elsewhere(p):
            _delete_at(merged, p)
            deleted.append(core)

    fields_v1 = _fields_to_v1(new)
    if mine and mine[0].get("fieldsV1") == fields_v1 and json_equal(merged, base) and \
            mine[0].get("apiVersion") == api_version:
        # a no-op apply keeps its timestamp, so the object stays byte-identical (kube's
        # IgnoreManagedFieldsTimestampsTransformer) and no new resourceVersion is needed
        now = mine[0].get("time") or now
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1,
    }
    if subresource:
        entry["subresource"] = subresource
    out_entries = []
    placed = False
    for e in entries:
        if is_mine(e):
            if not placed:
                out_entries.append(entry)
                placed = True
            continue
        for ke, _ in kept:
            if ke.get("manager") == e.get("manager") and ke.get("operation") == e.get(
                    "operation") and ke.get("subresource") == e.get("subresource"):
                out_entries.append(ke)
                break
    if not placed:
        out_entries.append(entry)
    merged.setdefault("metadata", {})
    if not isinstance(merged["metadata"], dict):
        merged["metadata"] = {}
    merged["metadata"]["managedFields"] = out_entries
    return merged


def print_manager(e):
    """k8s.io/apimachinery fieldmanager printManager: '"m"', '"m" with subresource "status"',
    '"m" using v1' (Update managers; the manager identifier carries no time)."""
    out = json.dumps(e.get("manager", ""))
    if e.get("subresource"):
        out += " with subresource %s" % json.dumps(e["subresource"])
    if e.get("operation") == "Update":
        out += " using %s" % e.get("apiVersion", "")
    return out


def _conflict_error(conflicts):
    def mgr(m):
        return m

    if len(conflicts) == 1:
        m, p = conflicts[0]
        msg = "Apply failed with 1 conflict: conflict with %s: %s" % (mgr(m), path_string(p))
    else:
        by = {}
        for m, p in conflicts:
            by.setdefault(m, []).append(p)
        parts = []
        for m in sorted(by):
            parts.append("conflicts with %s:" % mgr(m))
            for p in by[m]:
                parts.append("- %s" % path_string(p))
        msg = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(parts))
    causes = [
        {"reason": "FieldManagerConflict", "message": "conflict with %s" % mgr(m),
         "field": path_string(p)}
        for m, p in conflicts
    ]
    return PatchError(msg, 409, "Conflict", causes)


# --------------------------------------------------------------------------------------------
# managedFields of Update operations (structured-merge-diff Updater.Update) and the
# client-side -> server-side apply upgrade of kubectl (fieldmanager lastAppliedManager)


def _scope_filter(paths, scope):
    if scope == "nostatus":
        return {p for p in paths if not p or p[0] != ("f", "status")}
    if scope == "status":
        return {p for p in paths if p and p[0] == ("f", "status")}
    return paths


def sort_managed_fields(entries):
    """kube's sortEncodedManagedFields: by operation (Apply first), time, manager, apiVersion,
    subresource."""
    return sorted(entries, key=lambda e: (e.get("operation") or "", e.get("time") or "",
                                          e.get("manager") or "", e.get("apiVersion") or "",
                                          e.get("subresource") or ""))


def update_managed_fields(old, new, entries, manager, api_version, kind=None, schema=None,
                          now=None, subresource=None, scope=None):
    """The managedFields after an Update by manager (create when old is None): the fields the
    write added or changed move to manager's Update entry (keyed by manager, apiVersion and
    subresource) and leave every other entry; removed fields leave every entry; entries left
    owning nothing are dropped.  scope "nostatus" ignores .status (the main resource of a kind
    with a status subresource), "status" looks only at .status.  Returns the new list."""
    node = _root_node(kind or (new or {}).get("kind"), schema)
    old_fs = _scope_filter(_field_set(old, node), scope) if isinstance(old, dict) else set()
    new_fs = _scope_filter(_field_set(new, node), scope) if isinstance(new, dict) else set()
    added = new_fs - old_fs
    removed = old_fs - new_fs
    modified = set()
    for p in new_fs & old_fs:
        if p and p[-1][0] == ".":
            continue
        if not json_equal(_value_at(old, p), _value_at(new, p)):
            modified.add(p)
    changed = added | modified

    def is_mine(e):
        return (e.get("manager") == manager and e.get("operation") == "Update" and
                e.get("apiVersion") == api_version and
                (e.get("subresource") or None) == (subresource or None))

    out = []
    mine = set()
    for e in entries or []:
        if not isinstance(e, dict):
            continue
        fields = _v1_to_fields(e.get("fieldsV1") or {})
        if is_mine(e):
            mine = fields
            continue
        left = fields - changed - removed
        if left != fields:
            if not left:
                continue
            e = dict(e)
            e["fieldsV1"] = _fields_to_v1(left)
        out.append(e)
    mine = (mine - removed) | changed
    if mine:
        entry = {"manager": manager, "operation": "Update", "apiVersion": api_version,
                 "time": now or _now_rfc3339(), "fieldsType": "FieldsV1",
                 "fieldsV1": _fields_to_v1(mine)}
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    return sort_managed_fields(out)


def last_applied_allowed_conflicts(live, kind=None, schema=None):
    """The field paths (as strings, '.data.key') a `kubectl apply --server-side` may take over
    from client-side apply without a conflict: those in the live object's
    kubectl.kubernetes.io/last-applied-configuration whose live value is still the applied
    one (fieldmanager lastAppliedManager.allowedConflictsFromLastApplied)."""
    ann = ((live or {}).get("metadata") or {}).get("annotations") or {}
    raw = ann.get(LAST_APPLIED)
    if not raw:
        return set()
    try:
        last = json.loads(raw)
    except ValueError:
        return set()
    if not isinstance(last, dict):
        return set()
    node = _root_node(kind or last.get("kind"), schema)
    out = set()
    for p in _field_set(last, node):
        if p and p[-1][0] == ".":
            if _value_at(live, p) is not _MISSING:
                out.add(path_string(p))
            continue
        lv = _value_at(live, p)
        if lv is not _MISSING and json_equal(lv, _value_at(last, p)):
            out.add(path_string(p))
    return out


def build_last_applied(applied):
    """fieldmanager buildLastApplied: the applied configuration, without the annotation itself,
    as Go's JSON encoder writes an unstructured object (sorted keys, compact)."""
    obj = copy.deepcopy(applied)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        meta["annotations"].pop(LAST_APPLIED, None)
        if not meta["annotations"]:
            del meta["annotations"]
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
