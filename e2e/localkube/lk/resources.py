"""Resource types served by the localkube API server, the Status error catalogue, and helpers.

A ResourceType describes one (group, version, plural) endpoint: its kind, scope, verbs,
subresources and strategy flags (the knobs kube's registry strategies expose, e.g.
AllowUnconditionalUpdate).  The Registry holds the built-in types and the custom resource types
registered from established CustomResourceDefinitions; it is thread-safe and versioned so that
discovery and OpenAPI documents can be cached.

Errors: every failure raised inside the server is an ApiError carrying a kube Status body
(apimachinery pkg/api/errors semantics; the message texts follow errors.go).
"""

import datetime
import json
import re
import threading

__all__ = [
    "ApiError",
    "ResourceType",
    "Registry",
    "status_success",
    "now_rfc3339",
    "json_copy",
    "fmt_value",
]

# --------------------------------------------------------------------------------------------
# Small helpers


def now_rfc3339():
    """metav1.Time: RFC3339 at second precision, UTC."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_at(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def json_copy(v):
    """A deep copy of a JSON value (dict/list/scalars), much faster than copy.deepcopy."""
    if isinstance(v, dict):
        return {k: json_copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_copy(x) for x in v]
    return v


def fmt_value(v):
    """Formats a value the way field.Invalid prints it (Go %#v-ish for JSON values)."""
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def group_resource(group, plural):
    """schema.GroupResource.String(): 'pods' or 'deployments.apps'."""
    return plural + "." + group if group else plural


def group_kind(group, kind):
    return kind + "." + group if group else kind


# --------------------------------------------------------------------------------------------
# Status errors

_REASON_BY_CODE = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for_code(code):
    return _REASON_BY_CODE.get(code, "InternalError" if code >= 500 else "BadRequest")


class ApiError(Exception):
    """A failure with a kube Status body.  code is the HTTP status (== Status.code)."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        st = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            st["details"] = self.details
        st["code"] = self.code
        return st

    # -- constructors, one per errors.go helper ------------------------------------------
    @staticmethod
    def _details(group, kind, name=None, **extra):
        d = {}
        if name:
            d["name"] = name
        if group:
            d["group"] = group
        if kind:
            d["kind"] = kind
        d.update(extra)
        return d

    @classmethod
    def not_found(cls, group, plural, name):
        return cls(404, "NotFound", '%s "%s" not found' % (group_resource(group, plural), name),
                   cls._details(group, plural, name))

    @classmethod
    def already_exists(cls, group, plural, name, terminating=False):
        msg = '%s "%s" already exists' % (group_resource(group, plural), name)
        if terminating:
            msg = "object is being deleted: " + msg
        return cls(409, "AlreadyExists", msg, cls._details(group, plural, name))

    @classmethod
    def conflict(cls, group, plural, name, err=None):
        if err is None:
            err = ("the object has been modified; please apply your changes to the latest "
                   "version and try again")
        return cls(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                   % (group_resource(group, plural), name, err), cls._details(group, plural, name))

    @classmethod
    def invalid(cls, group, kind, name, causes):
        """causes: list of (reason, field, body) where body is the ErrorBody text."""
        errs = ["%s: %s" % (f, b) if f else b for (_, f, b) in causes]
        agg = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        details = cls._details(group, kind, name or None)
        details["causes"] = [{"reason": r, "message": b, "field": f} for (r, f, b) in causes]
        return cls(422, "Invalid", '%s "%s" is invalid: %s' % (group_kind(group, kind), name, agg),
                   details)

    @classmethod
    def bad_request(cls, message):
        return cls(400, "BadRequest", message)

    @classmethod
    def forbidden(cls, group, plural, name, err, causes=None):
        details = cls._details(group, plural, name)
        if causes:
            details["causes"] = causes
        return cls(403, "Forbidden", '%s "%s" is forbidden: %s'
                   % (group_resource(group, plural), name, err), details)

    @classmethod
    def method_not_allowed(cls, group, plural, action):
        return cls(405, "MethodNotAllowed", "%s is not supported on resources of kind %s"
                   % (action, json.dumps(group_resource(group, plural))),
                   cls._details(group, plural))

    @classmethod
    def not_acceptable(cls, message):
        return cls(406, "NotAcceptable", message)

    @classmethod
    def unsupported_media_type(cls, message):
        return cls(415, "UnsupportedMediaType", message)

    @classmethod
    def expired(cls, message):
        return cls(410, "Expired", message)

    @classmethod
    def internal(cls, message):
        return cls(500, "InternalError", "Internal error occurred: " + message,
                   {"causes": [{"message": message}]})

    @classmethod
    def too_many_requests(cls, message, retry_after):
        return cls(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after},
                   headers={"Retry-After": str(retry_after)})

    @classmethod
    def timeout(cls, message, retry_after=None, causes=None):
        d = {}
        if retry_after is not None:
            d["retryAfterSeconds"] = retry_after
        if causes:
            d["causes"] = causes
        return cls(504, "Timeout", message, d or None)

    @classmethod
    def service_unavailable(cls, message):
        return cls(503, "ServiceUnavailable", message)

    @classmethod
    def too_large(cls, limit):
        return cls(413, "RequestEntityTooLarge",
                   "Request entity too large: limit is %d" % limit)

    @classmethod
    def from_code(cls, code, message, group="", plural="", name="", retry_after=1):
        """A generic failure for fault injection, reason matching the HTTP code."""
        if code == 429:
            return cls.too_many_requests(message, retry_after)
        if code == 404 and plural:
            return cls.not_found(group, plural, name or "")
        if code == 409 and plural:
            return cls.conflict(group, plural, name or "", message)
        if code == 500:
            return cls.internal(message)
        if code == 504:
            return cls.timeout(message, retry_after)
        e = cls(code, reason_for_code(code), message)
        if code == 503:
            e.headers["Retry-After"] = str(retry_after)
            e.details = {"retryAfterSeconds": retry_after}
        return e


def status_success(group, plural, name, uid=None):
    details = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


# --------------------------------------------------------------------------------------------
# Name validation (apimachinery/pkg/util/validation)

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUB = _DNS1123_LABEL + "(\\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_RE_LABEL = re.compile("^" + _DNS1123_LABEL + "$")
_RE_SUB = re.compile("^" + _DNS1123_SUB + "$")
_RE_1035 = re.compile("^" + _DNS1035_LABEL + "$")


def name_errors(kind_rule, name):
    """Returns the error strings for a metadata.name under the given rule."""
    errs = []
    if kind_rule == "subdomain":
        if len(name) > 253:
            errs.append("must be no more than 253 characters")
        if not _RE_SUB.match(name):
            errs.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                        "characters, '-' or '.', and must start and end with an alphanumeric "
                        "character (e.g. 'example.com', regex used for validation is '%s')"
                        % _DNS1123_SUB)
    elif kind_rule == "label":
        if len(name) > 63:
            errs.append("must be no more than 63 characters")
        if not _RE_LABEL.match(name):
            errs.append("a lowercase RFC 1123 label must consist of lower case alphanumeric "
                        "characters or '-', and must start and end with an alphanumeric "
                        "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
                        "'%s')" % _DNS1123_LABEL)
    elif kind_rule == "dns1035":
        if len(name) > 63:
            errs.append("must be no more than 63 characters")
        if not _RE_1035.match(name):
            errs.append("a DNS-1035 label must consist of lower case alphanumeric characters or "
                        "'-', start with an alphabetic character, and end with an alphanumeric "
                        "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                        "'%s')" % _DNS1035_LABEL)
    else:  # path segment (RBAC)
        if name in (".", ".."):
            errs.append('may not be \'%s\'' % name)
        for bad in ("/", "%"):
            if bad in name:
                errs.append("may not contain '%s'" % bad)
    return errs


# --------------------------------------------------------------------------------------------
# Resource types

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
             "log": ["get"], "binding": ["create"], "finalize": ["update"]}

# version priority like kube's version.CompareKubeAwareVersionStrings
_VER_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority_key(v):
    """Sort key: higher is preferred (GA > beta > alpha > non-kube versions)."""
    m = _VER_RE.match(v)
    if not m:
        return (0, 0, 0, v)
    major = int(m.group(1))
    if m.group(2) is None:
        return (3, major, 0, "")
    stab = 2 if m.group(2) == "beta" else 1
    return (stab, major, int(m.group(3)), "")


class ResourceType:
    """One served (group, version, resource)."""

    def __init__(self, group, version, kind, plural, singular, namespaced=True, short_names=(),
                 categories=(), subresources=(), verbs=None, track_generation=False,
                 unconditional_update=True, create_on_update=False, return_deleted=False,
                 name_rule="subdomain", crd=None, schema=None, printer_columns=None,
                 selectable_fields=(), scale=None, list_kind=None, field_selectors=None,
                 status_on_create="clear", storage_key=None, schema_kind=None,
                 to_external=None, from_external=None, field_label_map=None):
        self.group = group
        self.version = version
        self.kind = kind
        self.plural = plural
        self.singular = singular
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.subresources = list(subresources)
        self.verbs = list(verbs or ALL_VERBS)
        self.track_generation = track_generation
        self.unconditional_update = unconditional_update
        self.create_on_update = create_on_update
        self.return_deleted = return_deleted
        self.name_rule = name_rule
        self.crd = crd  # CRD name for custom resources, else None
        self.schema = schema  # openAPIV3Schema for custom resources
        self.printer_columns = printer_columns
        self.selectable_fields = list(selectable_fields)
        self.scale = scale  # {specReplicasPath, statusReplicasPath, labelSelectorPath}
        self.list_kind = list_kind or kind + "List"
        self.field_selectors = set(field_selectors or ()) | {"metadata.name",
                                                             "metadata.namespace"}
        self.status_on_create = status_on_create  # "clear", "keep" or "drop"
        self.has_defaults = _schema_has_defaults(schema) if schema else False
        # a resource stored as another one (events.k8s.io/v1 Events are core/v1 Events):
        # storage_key names the store, to_external / from_external convert the stored form
        # to / from this API's form, field_label_map maps this API's field selectors to the
        # stored form's (kube's AddFieldLabelConversionFunc)
        self._key = storage_key or (group, plural)
        self.schema_kind = schema_kind or kind  # field tree name in lk.builtin_schemas
        self.to_external = to_external
        self.from_external = from_external
        self.field_label_map = field_label_map

    @property
    def key(self):
        """Storage key: every version of a resource shares one store."""
        return self._key

    @property
    def api_version(self):
        return self.group + "/" + self.version if self.group else self.version

    @property
    def group_version(self):
        return self.api_version

    @property
    def is_custom(self):
        return self.crd is not None

    def has_status(self):
        return "status" in self.subresources

    def kind_info(self):
        return {"kind": self.kind, "group": self.group, "version": self.version,
                "plural": self.plural, "printerColumns": self.printer_columns}

    def base_path(self, namespace=None):
        root = "/api/" + self.version if not self.group else "/apis/" + self.api_version
        if self.namespaced and namespace:
            return "%s/namespaces/%s/%s" % (root, namespace, self.plural)
        return "%s/%s" % (root, self.plural)

    def __repr__(self):
        return "ResourceType(%s)" % group_resource(self.group, self.plural + "/" + self.version)


def _schema_has_defaults(schema):
    if isinstance(schema, dict):
        if "default" in schema:
            return True
        return any(_schema_has_defaults(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_schema_has_defaults(v) for v in schema)
    return False


def _bs():
    from lk import builtin_schemas
    return builtin_schemas


def _builtin_types():
    from lk import selectors as _sel

    def fs(plural):
        try:
            return _sel.builtin_field_selectors(plural)
        except Exception:  # pragma: no cover - defensive against helper changes
            return set()

    T = ResourceType
    return [
        # core/v1
        T("", "v1", "Namespace", "namespaces", "namespace", namespaced=False, short_names=["ns"],
          subresources=["status", "finalize"], name_rule="label",
          verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
          field_selectors=fs("namespaces"), return_deleted=True),
        T("", "v1", "Pod", "pods", "pod", short_names=["po"], categories=["all"],
          subresources=["status", "log", "binding"], return_deleted=True,
          field_selectors=fs("pods")),
        T("", "v1", "Service", "services", "service", short_names=["svc"], categories=["all"],
          subresources=["status"], name_rule="dns1035", create_on_update=True,
          return_deleted=True, field_selectors=fs("services")),
        T("", "v1", "Endpoints", "endpoints", "endpoints", short_names=["ep"],
          create_on_update=True),
        T("", "v1", "ConfigMap", "configmaps", "configmap", short_names=["cm"],
          status_on_create="keep"),
        T("", "v1", "Secret", "secrets", "secret", field_selectors=fs("secrets"),
          status_on_create="keep"),
        T("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", short_names=["sa"],
          status_on_create="keep"),
        T("", "v1", "Event", "events", "event", short_names=["ev"], create_on_update=True,
          field_selectors=fs("events"), status_on_create="keep"),
        T("", "v1", "Node", "nodes", "node", namespaced=False, short_names=["no"],
          subresources=["status"], field_selectors=fs("nodes"), status_on_create="keep"),
        # apps/v1
        T("apps", "v1", "Deployment", "deployments", "deployment", short_names=["deploy"],
          categories=["all"], subresources=["status", "scale"], track_generation=True),
        T("apps", "v1", "ReplicaSet", "replicasets", "replicaset", short_names=["rs"],
          categories=["all"], subresources=["status", "scale"], track_generation=True,
          field_selectors=fs("replicasets")),
        T("apps", "v1", "DaemonSet", "daemonsets", "daemonset", short_names=["ds"],
          categories=["all"], subresources=["status"], track_generation=True),
        # coordination.k8s.io/v1
        T("coordination.k8s.io", "v1", "Lease", "leases", "lease", create_on_update=True,
          status_on_create="keep"),
        # rbac
        T("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", create_on_update=True,
          name_rule="path", status_on_create="keep"),
        T("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding",
          create_on_update=True, name_rule="path", status_on_create="keep"),
        T("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole",
          namespaced=False, create_on_update=True, name_rule="path", status_on_create="keep"),
        T("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings",
          "clusterrolebinding", namespaced=False, create_on_update=True, name_rule="path",
          status_on_create="keep"),
        # autoscaling/v2
        T("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers",
          "horizontalpodautoscaler", short_names=["hpa"], categories=["all"],
          subresources=["status"]),
        # events.k8s.io/v1: the same objects as core/v1 Events (one store, converted)
        T("events.k8s.io", "v1", "Event", "events", "event", short_names=["ev"],
          create_on_update=True, status_on_create="keep", storage_key=("", "events"),
          schema_kind="events.k8s.io/Event", to_external=_bs().event_to_v1,
          from_external=_bs().event_from_v1,
          field_selectors=set(_bs().EVENTS_V1_FIELD_LABELS),
          field_label_map=_bs().EVENTS_V1_FIELD_LABELS),
        # apiextensions.k8s.io/v1
        T("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
          "customresourcedefinition", namespaced=False, short_names=["crd", "crds"],
          subresources=["status"], track_generation=True, return_deleted=True),
    ]


# Group order for discovery (kube lists built-in groups in a fixed priority order).
BUILTIN_GROUP_ORDER = ["", "apps", "events.k8s.io", "autoscaling", "rbac.authorization.k8s.io",
                       "coordination.k8s.io", "apiextensions.k8s.io"]


class Registry:
    """All served resource types.  Thread-safe; .generation changes on every (un)registration."""

    def __init__(self):
        self._lock = threading.RLock()
        self._builtin = _builtin_types()
        self._custom = {}  # crd name -> [ResourceType per served version]
        self._custom_group_kind = {}  # (group, kind) -> crd name
        self.generation = 0
        self._rebuild()

    def _rebuild(self):
        types = list(self._builtin)
        for name in sorted(self._custom):
            types.extend(self._custom[name])
        self._types = types
        self._by_path = {(t.group, t.version, t.plural): t for t in types}
        by_gk = {}
        for t in types:
            by_gk.setdefault((t.group, t.kind), []).append(t)
        self._by_gk = by_gk
        self.generation += 1

    def all(self):
        with self._lock:
            return list(self._types)

    def lookup(self, group, version, plural):
        with self._lock:
            return self._by_path.get((group, version, plural))

    def by_group_kind(self, group, kind):
        """A type for (group, kind), preferring the storage/served-first version."""
        with self._lock:
            ts = self._by_gk.get((group, kind))
            return ts[0] if ts else None

    def by_key(self, key):
        """Any served version of the storage key (group, plural)."""
        with self._lock:
            for t in self._types:
                if t.key == key:
                    return t
            return None

    def group_versions(self):
        """[(group, [versions in preference order])] in discovery order."""
        with self._lock:
            groups = {}
            for t in self._types:
                vs = groups.setdefault(t.group, [])
                if t.version not in vs:
                    vs.append(t.version)
        order = [g for g in BUILTIN_GROUP_ORDER if g in groups]
        order += sorted(g for g in groups if g not in BUILTIN_GROUP_ORDER)
        out = []
        for g in order:
            vs = sorted(groups[g], key=version_priority_key, reverse=True)
            out.append((g, vs))
        return out

    def types_for(self, group, version):
        with self._lock:
            return [t for t in self._types if t.group == group and t.version == version]

    def namespaced_keys(self):
        with self._lock:
            seen = []
            for t in self._types:
                if t.namespaced and t.key not in seen:
                    seen.append(t.key)
            return seen

    # -- custom resources ---------------------------------------------------------------
    def register_crd(self, crd):
        """(Re)registers the served versions of an established CRD; returns the types."""
        types = custom_types_from_crd(crd)
        name = crd["metadata"]["name"]
        with self._lock:
            old = self._custom.get(name)
            if old is not None and _same_types(old, types):
                return types
            self._custom[name] = types
            if types:
                self._custom_group_kind[(types[0].group, types[0].kind)] = name
            self._rebuild()
        return types

    def unregister_crd(self, name):
        with self._lock:
            old = self._custom.pop(name, None)
            if old:
                self._custom_group_kind.pop((old[0].group, old[0].kind), None)
            self._rebuild()

    def custom_types(self, crd_name):
        with self._lock:
            return list(self._custom.get(crd_name, ()))


def _same_types(a, b):
    def sig(t):
        return json.dumps([t.version, t.kind, t.plural, t.singular, t.namespaced, t.short_names,
                           t.categories, t.subresources, t.schema, t.printer_columns,
                           t.selectable_fields, t.scale, t.list_kind], sort_keys=True)
    return len(a) == len(b) and all(sig(x) == sig(y) for x, y in zip(a, b))


def storage_version(crd):
    for v in crd.get("spec", {}).get("versions") or []:
        if v.get("storage"):
            return v.get("name")
    return None


def custom_types_from_crd(crd):
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group", "")
    kind = names.get("kind", "")
    plural = names.get("plural", "")
    singular = names.get("singular") or kind.lower()
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    out = []
    versions = [v for v in spec.get("versions") or [] if v.get("served")]
    versions.sort(key=lambda v: version_priority_key(v.get("name", "")), reverse=True)
    for v in versions:
        subs = v.get("subresources") or {}
        subresources = []
        if "status" in subs:
            subresources.append("status")
        scale = None
        if isinstance(subs.get("scale"), dict):
            subresources.append("scale")
            scale = dict(subs["scale"])
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        sel_fields = []
        for sf in v.get("selectableFields") or []:
            jp = sf.get("jsonPath", "")
            if jp.startswith("."):
                jp = jp[1:]
            if jp:
                sel_fields.append(jp)
        out.append(ResourceType(
            group, v.get("name", ""), kind, plural, singular, namespaced=namespaced,
            short_names=names.get("shortNames") or [], categories=names.get("categories") or [],
            subresources=subresources, track_generation=True, unconditional_update=False,
            create_on_update=False, return_deleted=True, name_rule="subdomain",
            crd=crd["metadata"]["name"], schema=schema,
            printer_columns=v.get("additionalPrinterColumns"), selectable_fields=sel_fields,
            scale=scale, list_kind=names.get("listKind") or kind + "List",
            field_selectors=sel_fields, status_on_create="drop"))
    return out
