"""OpenAPI v3 documents, enough for kubectl 1.32 (see the reference, section 0.A).

* GET /openapi/v3 -> {"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=H"},
  "apis/apps/v1": {...}, ...}}; H changes whenever the document changes, so kubectl's HTTP cache
  never serves a stale document.
* GET /openapi/v3/<api/v1|apis/G/V> -> a document whose item paths carry get/put/patch/delete
  operations; every PATCH operation has "x-kubernetes-group-version-kind" (an object) and a
  "fieldValidation" query parameter, which makes kubectl skip client-side validation (it needs
  /openapi/v2 protobuf otherwise) and rely on server-side field validation.  PATCH request bodies
  list json-patch, merge-patch and apply-patch but NOT strategic-merge-patch, so kubectl's
  client-side apply computes strategic merge patches for built-ins from its compiled-in types
  instead of from these (deliberately shallow) schemas.
* components.schemas: for custom resources the CRD's openAPIV3Schema; for built-in kinds a
  schema generated from lk.builtin_schemas' field trees (types, nested properties, named
  component schemas such as io.k8s.api.core.v1.Container, some descriptions), so
  `kubectl explain deployment.spec.replicas` and `kubectl explain pod.spec.containers` work.
"""

import hashlib
import json
import threading

from lk import builtin_schemas

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"

_BUILTIN_PKG = {"": "io.k8s.api.core", "apps": "io.k8s.api.apps",
                "coordination.k8s.io": "io.k8s.api.coordination",
                "rbac.authorization.k8s.io": "io.k8s.api.rbac",
                "autoscaling": "io.k8s.api.autoscaling",
                "events.k8s.io": "io.k8s.api.events",
                "apiextensions.k8s.io":
                    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"}


def schema_name(t):
    if t.is_custom:
        rev = ".".join(reversed(t.group.split(".")))
        return "%s.%s.%s" % (rev, t.version, t.kind)
    return "%s.%s.%s" % (_BUILTIN_PKG.get(t.group, "io.k8s.api." + t.group), t.version, t.kind)


def gv_path(group, version):
    return "api/" + version if not group else "apis/%s/%s" % (group, version)


def _param(name, where, desc, required=False):
    p = {"name": name, "in": where, "description": desc, "schema": {"type": "string",
                                                                     "uniqueItems": True}}
    if required:
        p["required"] = True
    return p


_WRITE_PARAMS = [
    _param("dryRun", "query", "When present, indicates that modifications should not be "
           "persisted. Valid values are: - All: all dry run stages will be processed"),
    _param("fieldManager", "query", "fieldManager is a name associated with the actor or "
           "entity that is making these changes."),
    _param("fieldValidation", "query", "fieldValidation instructs the server on how to handle "
           "objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. "
           "Valid values are: - Ignore - Warn - Strict"),
]
_FORCE = {"name": "force", "in": "query", "description": "Force is going to \"force\" Apply "
          "requests.", "schema": {"type": "boolean", "uniqueItems": True}}


def _resp(ref):
    return {"description": "OK", "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/" + ref}}}}


def _op(action, t, ref, op_id, params=None, body=None, code="200"):
    op = {"description": "%s the specified %s" % (action, t.kind),
          "operationId": op_id,
          "responses": {code: _resp(ref), "401": {"description": "Unauthorized"}},
          "x-kubernetes-action": action,
          "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version,
                                              "kind": t.kind}}
    if params:
        op["parameters"] = params
    if body:
        op["requestBody"] = body
    return op


def _paths_for(t):
    ref = schema_name(t)
    root = "/api/" + t.version if not t.group else "/apis/%s/%s" % (t.group, t.version)
    camel = t.kind
    suffix = "".join(p.capitalize() for p in (t.group or "core").replace("-", ".").split(".")) \
        + t.version.capitalize()
    common = [_param("name", "path", "name of the %s" % t.kind, required=True)]
    if t.namespaced:
        common.append(_param("namespace", "path", "object name and auth scope, such as for "
                             "teams and projects", required=True))
        item = "%s/namespaces/{namespace}/%s/{name}" % (root, t.plural)
        coll = "%s/namespaces/{namespace}/%s" % (root, t.plural)
        ns_word = "Namespaced"
    else:
        item = "%s/%s/{name}" % (root, t.plural)
        coll = "%s/%s" % (root, t.plural)
        ns_word = ""
    common.append(_param("pretty", "query", "If 'true', then the output is pretty printed."))
    patch_body = {"content": {
        "application/apply-patch+yaml": {"schema": {"$ref": "#/components/schemas/" + PATCH}},
        "application/json-patch+json": {"schema": {"$ref": "#/components/schemas/" + PATCH}},
        "application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/" + PATCH}},
    }, "required": True}
    put_body = {"content": {"*/*": {"schema": {"$ref": "#/components/schemas/" + ref}}},
                "required": True}
    paths = {}
    paths[item] = {
        "get": _op("get", t, ref, "read%s%s%s" % (suffix, ns_word, camel)),
        "put": _op("put", t, ref, "replace%s%s%s" % (suffix, ns_word, camel),
                   params=list(_WRITE_PARAMS), body=put_body),
        "patch": _op("patch", t, ref, "patch%s%s%s" % (suffix, ns_word, camel),
                     params=list(_WRITE_PARAMS) + [_FORCE], body=patch_body),
        "delete": _op("delete", t, STATUS, "delete%s%s%s" % (suffix, ns_word, camel),
                      params=[_param("dryRun", "query", "dry run"),
                              _param("propagationPolicy", "query", "propagation policy")]),
        "parameters": common,
    }
    coll_params = [p for p in common if p["name"] != "name"]
    paths[coll] = {
        "get": _op("list", t, ref, "list%s%s%s" % (suffix, ns_word, camel),
                   params=[_param(n, "query", n) for n in (
                       "labelSelector", "fieldSelector", "limit", "continue",
                       "resourceVersion", "resourceVersionMatch", "timeoutSeconds", "watch",
                       "allowWatchBookmarks", "sendInitialEvents")]),
        "post": _op("post", t, ref, "create%s%s%s" % (suffix, ns_word, camel),
                    params=list(_WRITE_PARAMS), body=put_body, code="201"),
        "parameters": coll_params,
    }
    for sub in t.subresources:
        if sub not in ("status", "scale"):
            continue
        sref = ref if sub == "status" else "io.k8s.api.autoscaling.v1.Scale"
        sp = item + "/" + sub
        paths[sp] = {
            "get": _op("get", t, sref, "read%s%s%s%s" % (suffix, ns_word, camel,
                                                        sub.capitalize())),
            "put": _op("put", t, sref, "replace%s%s%s%s" % (suffix, ns_word, camel,
                                                           sub.capitalize()),
                       params=list(_WRITE_PARAMS), body=put_body),
            "patch": _op("patch", t, sref, "patch%s%s%s%s" % (suffix, ns_word, camel,
                                                             sub.capitalize()),
                         params=list(_WRITE_PARAMS) + [_FORCE], body=patch_body),
            "parameters": common,
        }
        # subresource operations must not look like the main kind's PATCH to kubectl
        for verb in ("get", "put", "patch"):
            paths[sp][verb]["x-kubernetes-group-version-kind"] = (
                {"group": "autoscaling", "version": "v1", "kind": "Scale"} if sub == "scale"
                else {"group": t.group, "version": t.version, "kind": t.kind})
    return paths


def _kind_schema(t, components):
    """The kind's schema; referenced component schemas are added to components."""
    gvk = [{"group": t.group, "kind": t.kind, "version": t.version}]
    if t.is_custom and isinstance(t.schema, dict):
        sch = json.loads(json.dumps(t.schema))
        sch.setdefault("type", "object")
        props = sch.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"allOf": [{"$ref": "#/components/schemas/" + OBJECT_META}],
                             "default": {}}
        sch["x-kubernetes-group-version-kind"] = gvk
        return sch
    gen = None if t.is_custom else builtin_schemas.openapi_schemas(t.schema_kind,
                                                                  schema_name(t))
    if gen is not None:
        sch, comps = gen
        for name, c in comps.items():
            components.setdefault(name, c)
        sch = dict(sch)
        sch["x-kubernetes-group-version-kind"] = gvk
        return sch
    return {"description": "%s (localkube: shallow schema)" % t.kind, "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/" + OBJECT_META}],
                             "default": {}},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "x-kubernetes-group-version-kind": gvk}


def build_document(registry, group, version):
    types = registry.types_for(group, version)
    if not types:
        return None
    paths = {}
    schemas = {
        STATUS: {"type": "object", "x-kubernetes-group-version-kind": [
            {"group": "", "kind": "Status", "version": "v1"}]},
        PATCH: {"type": "object", "description": "Patch is provided to give a concrete name and "
                "type to the Kubernetes PATCH request body."},
    }
    schemas.update(builtin_schemas.object_meta_components())
    for t in types:
        paths.update(_paths_for(t))
        schemas[schema_name(t)] = _kind_schema(t, schemas)
        if "scale" in t.subresources:
            schemas["io.k8s.api.autoscaling.v1.Scale"] = {
                "type": "object", "x-kubernetes-group-version-kind": [
                    {"group": "autoscaling", "kind": "Scale", "version": "v1"}]}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0-localkube"},
            "paths": paths, "components": {"schemas": schemas}}


class OpenAPI:
    """Caches encoded documents per registry generation."""

    def __init__(self, registry):
        self.registry = registry
        self._lock = threading.Lock()
        self._gen = None
        self._docs = {}
        self._index = None

    def _refresh(self):
        gen = self.registry.generation
        if gen == self._gen:
            return
        docs = {}
        for g, vs in self.registry.group_versions():
            for v in vs:
                d = build_document(self.registry, g, v)
                if d is None:
                    continue
                body = json.dumps(d, separators=(",", ":"), sort_keys=True).encode()
                h = hashlib.sha512(body).hexdigest().upper()
                docs[gv_path(g, v)] = (body, h)
        self._docs = docs
        self._index = json.dumps({"paths": {
            p: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (p, h)}
            for p, (_, h) in sorted(docs.items())}}, separators=(",", ":")).encode()
        self._gen = gen

    def index(self):
        with self._lock:
            self._refresh()
            return self._index

    def document(self, path):
        """(body_bytes, hash) or None."""
        with self._lock:
            self._refresh()
            return self._docs.get(path.strip("/"))
