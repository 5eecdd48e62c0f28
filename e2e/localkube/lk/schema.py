"""OpenAPI v3 structural schemas of CustomResourceDefinitions: checks, pruning, defaulting,
validation, and kube's 422 message format.  Pure functions; inputs are never modified.

    structural_errors(schema, path="spec.versions[0].schema.openAPIV3Schema") -> list[str]
    prune(obj, schema) -> (new_obj, unknown_paths)
    apply_defaults(obj, schema) -> new_obj
    validate(obj, schema) -> list[Cause]
    format_invalid_message(kind, group, name, causes) -> str
    Cause(reason, field, message): .error() == "field: message", .to_dict() for Status causes

Semantics follow k8s.io/apiextensions-apiserver (pkg/apiserver/schema: structural invariants,
pruning, defaulting) and the kube-openapi validator with kube's conversion to field errors
(apiserver/validation: Required, NotSupported, TooLong, TooMany, Invalid), whose messages read
e.g. 'spec.replicas: Invalid value: 15: spec.replicas in body should be less than or equal to
10'.  CEL (x-kubernetes-validations) is not evaluated.
"""

import base64
import copy
import json
import math
import re
import uuid
from collections import namedtuple

__all__ = [
    "Cause",
    "structural_errors",
    "prune",
    "apply_defaults",
    "validate",
    "format_invalid_message",
    "go_quote",
    "go_value",
]

_TYPES = ("array", "boolean", "integer", "number", "object", "string")
_FORBIDDEN_KEYS = (
    "$ref",
    "definitions",
    "dependencies",
    "deprecated",
    "discriminator",
    "id",
    "patternProperties",
    "readOnly",
    "writeOnly",
    "xml",
    "$schema",
)
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


class Cause(namedtuple("Cause", "reason field message")):
    """One field error: reason (FieldValueInvalid, ...), field path, message (error body)."""

    __slots__ = ()

    def error(self):
        return "%s: %s" % (self.field, self.message)

    def to_dict(self):
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self):
        return self.error()


def go_quote(s):
    """Go's %q / strconv.Quote for a string."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _go_float(v):
    """Go's %v of a float64 (strconv 'g' with shortest repr, no trailing .0)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    r = repr(v)
    if "e" in r:
        mant, exp = r.split("e")
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-")
        return "%se%s%02d" % (mant, sign, int(digits))
    return r


def go_value(v):
    """How field.Error prints a bad value: strings %q, numbers and bools %v, else Go-ish."""
    if v is None:
        return '"null"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return go_quote(v)
    if isinstance(v, dict):
        return "map[string]interface {}{" + ", ".join(
            "%s:%s" % (go_quote(k), _go_raw(v[k])) for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[]interface {}{" + ", ".join(_go_raw(x) for x in v) + "}"
    return str(v)


def _go_raw(v):
    if v is None:
        return "interface {}(nil)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "%d" % v
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return go_quote(v)
    return go_value(v)


# --------------------------------------------------------------------------------------------
# Structural schema checks


def structural_errors(schema, path="spec.versions[0].schema.openAPIV3Schema"):
    """Reasons why schema is not structural (or uses forbidden constructs); [] when fine."""
    errs = []
    if not isinstance(schema, dict):
        return ["%s: Required value: must not be empty" % path]
    _structural(schema, path, errs, root=True, in_junctor=False)
    if schema.get("type") not in (None, "", "object"):
        errs.append("%s.type: Invalid value: %s: must be object at the root"
                    % (path, go_quote(str(schema.get("type")))))
    if not schema.get("type") and not schema.get("x-kubernetes-preserve-unknown-fields") and \
            not schema.get("x-kubernetes-int-or-string"):
        errs.append("%s.type: Required value: must not be empty at the root" % path)
    meta = (schema.get("properties") or {}).get("metadata")
    if isinstance(meta, dict):
        _check_metadata(meta, path + ".properties[metadata]", errs)
    return _dedup(errs)


def _dedup(errs):
    seen = set()
    out = []
    for e in errs:
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out


def _check_metadata(meta, path, errs):
    allowed = {"type", "properties", "description", "nullable", "default"}
    for k in meta:
        if k not in allowed:
            errs.append("%s: Forbidden: must not specify anything other than name and "
                        "generateName, but metadata is implicitly specified" % (path + "." + k))
    if meta.get("type") not in (None, "object"):
        errs.append("%s.type: Invalid value: %s: must be object"
                    % (path, go_quote(str(meta.get("type")))))
    for k, v in (meta.get("properties") or {}).items():
        if k not in ("name", "generateName"):
            errs.append("%s.properties[%s]: Forbidden: must not specify anything other than "
                        "name and generateName, but metadata is implicitly specified" % (path, k))
        elif isinstance(v, dict) and v.get("type") not in (None, "string"):
            errs.append("%s.properties[%s].type: Invalid value: %s: must be string"
                        % (path, k, go_quote(str(v.get("type")))))


def _structural(s, path, errs, root, in_junctor):
    if not isinstance(s, dict):
        errs.append("%s: Invalid value: %s: must be an object" % (path, go_value(s)))
        return
    for k in _FORBIDDEN_KEYS:
        if k in s:
            errs.append("%s.%s: Forbidden: %s is not supported" % (path, k, k))
    t = s.get("type")
    if t is not None and t != "" and t not in _TYPES:
        errs.append("%s.type: Unsupported value: %s: supported values: %s"
                    % (path, go_quote(str(t)), ", ".join(go_quote(x) for x in _TYPES)))
    if s.get("uniqueItems") is True:
        errs.append("%s.uniqueItems: Forbidden: uniqueItems cannot be set to true since the "
                    "runtime complexity becomes quadratic" % path)
    ap = s.get("additionalProperties")
    if ap is False:
        errs.append("%s.additionalProperties: Forbidden: additionalProperties cannot be set to "
                    "false" % path)
    if ap is not None and s.get("properties"):
        errs.append("%s.additionalProperties: Forbidden: additionalProperties and properties "
                    "are mutual exclusive" % path)
    pu = s.get("x-kubernetes-preserve-unknown-fields")
    if pu is False:
        errs.append("%s.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be "
                    "true or undefined" % path)
    if s.get("x-kubernetes-int-or-string") is True and t:
        errs.append("%s.type: Invalid value: %s: must be empty if x-kubernetes-int-or-string is "
                    "true" % (path, go_quote(str(t))))
    if s.get("x-kubernetes-embedded-resource") is True and t != "object" and not in_junctor:
        errs.append("%s.type: Invalid value: %s: must be object if x-kubernetes-embedded-resource "
                    "is true" % (path, go_quote(str(t or ""))))
    lt = s.get("x-kubernetes-list-type")
    if lt is not None:
        if lt not in ("atomic", "set", "map"):
            errs.append("%s.x-kubernetes-list-type: Unsupported value: %s: supported values: "
                        "\"atomic\", \"set\", \"map\"" % (path, go_quote(str(lt))))
        elif t != "array":
            errs.append("%s.x-kubernetes-list-type: Invalid value: %s: must only be used if type "
                        "is array" % (path, go_quote(str(lt))))
        if lt == "map":
            keys = s.get("x-kubernetes-list-map-keys")
            if not keys:
                errs.append("%s.x-kubernetes-list-map-keys: Required value: must not be empty if "
                            "x-kubernetes-list-type is map" % path)
            items = s.get("items")
            if isinstance(items, dict) and items.get("type") not in (None, "object"):
                errs.append("%s.items.type: Invalid value: %s: must be object if parent array's "
                            "x-kubernetes-list-type is map"
                            % (path, go_quote(str(items.get("type")))))
            if isinstance(items, dict) and keys:
                props = items.get("properties") or {}
                for k in keys:
                    if k not in props:
                        errs.append("%s.x-kubernetes-list-map-keys: Invalid value: %s: entries "
                                    "must all be names of item properties"
                                    % (path, go_quote(str(k))))
    elif s.get("x-kubernetes-list-map-keys") is not None:
        errs.append("%s.x-kubernetes-list-map-keys: Forbidden: must not be set if "
                    "x-kubernetes-list-type is not map" % path)
    mt = s.get("x-kubernetes-map-type")
    if mt is not None and mt not in ("granular", "atomic"):
        errs.append("%s.x-kubernetes-map-type: Unsupported value: %s: supported values: "
                    "\"granular\", \"atomic\"" % (path, go_quote(str(mt))))

    if in_junctor:
        for k in ("type", "description", "default", "additionalProperties", "nullable",
                  "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
                  "x-kubernetes-int-or-string"):
            if k in s:
                errs.append("%s.%s: Forbidden: must be empty to be structural" % (path, k))
    elif not t and not s.get("x-kubernetes-int-or-string") and \
            not s.get("x-kubernetes-preserve-unknown-fields") and not root:
        where = _where(path)
        errs.append("%s.type: Required value: must not be empty for specified %s" % (path, where))

    props = s.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            errs.append("%s.properties: Invalid value: must be an object" % path)
        else:
            for k in sorted(props):
                _structural(props[k], "%s.properties[%s]" % (path, k), errs, False, in_junctor)
    items = s.get("items")
    if items is not None:
        if isinstance(items, list):
            errs.append("%s.items: Forbidden: items must be a schema object and not an array"
                        % path)
        else:
            _structural(items, path + ".items", errs, False, in_junctor)
    elif t == "array" and not in_junctor:
        errs.append("%s.items: Required value: must be specified" % path)
    if isinstance(ap, dict):
        _structural(ap, path + ".additionalProperties", errs, False, in_junctor)
    for j in _JUNCTORS:
        sub = s.get(j)
        if sub is None:
            continue
        subs = [sub] if j == "not" else (sub if isinstance(sub, list) else [])
        for i, x in enumerate(subs):
            jp = "%s.%s" % (path, j) if j == "not" else "%s.%s[%d]" % (path, j, i)
            _structural(x, jp, errs, False, True)
            _outside_check(x, s, jp, errs)
    # default values must be pruned and valid: checked lightly
    if "default" in s and not in_junctor and s["default"] is not None:
        pruned, unknown = prune(s["default"], s, root=False)
        if unknown:
            errs.append("%s.default: Invalid value: %s: must not have unknown fields"
                        % (path, go_value(s["default"])))


def _where(path):
    if path.endswith(".items"):
        return "array items"
    if path.endswith(".additionalProperties"):
        return "additionalProperties"
    return "object fields"


def _outside_check(inner, outer, path, errs):
    """Structural rule 2: everything a junctor specifies must also be specified outside."""
    if not isinstance(inner, dict):
        return
    for k, v in (inner.get("properties") or {}).items():
        op = (outer.get("properties") or {}) if isinstance(outer, dict) else {}
        if k not in op:
            errs.append("%s.properties[%s]: Required value: must be specified outside of the "
                        "value validation too" % (path, k))
        else:
            _outside_check(v, op[k], "%s.properties[%s]" % (path, k), errs)
    if isinstance(inner.get("items"), dict):
        if not isinstance(outer, dict) or not isinstance(outer.get("items"), dict):
            errs.append("%s.items: Required value: must be specified outside of the value "
                        "validation too" % path)
        else:
            _outside_check(inner["items"], outer["items"], path + ".items", errs)


# --------------------------------------------------------------------------------------------
# Pruning


def prune(obj, schema, root=True):
    """Drops fields the schema does not specify.  Returns (new_obj, unknown field paths).

    At the root apiVersion, kind and metadata are kept as they are.  Unknown fields are kept
    under x-kubernetes-preserve-unknown-fields: true (pruning resumes under the properties it
    does specify); x-kubernetes-embedded-resource keeps apiVersion/kind/metadata of the
    embedded object; additionalProperties (a schema or true) keeps every key.
    """
    unknown = []
    out = _prune(copy.deepcopy(obj), schema, "", unknown, root=root)
    return out, unknown


def _join(path, key):
    return key if not path else path + "." + key


def _prune(v, s, path, unknown, root=False, embedded=False):
    if not isinstance(s, dict):
        return v
    if isinstance(v, dict):
        props = s.get("properties") or {}
        ap = s.get("additionalProperties")
        preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
        is_embedded = embedded or s.get("x-kubernetes-embedded-resource") is True
        out = {}
        for k, x in v.items():
            if (root or is_embedded) and k in ("apiVersion", "kind"):
                out[k] = x
                continue
            if (root or is_embedded) and k == "metadata":
                if is_embedded and not root and isinstance(x, dict):
                    out[k] = _prune_embedded_meta(x, _join(path, k), unknown)
                else:
                    out[k] = x
                continue
            if k in props:
                out[k] = _prune(x, props[k], _join(path, k), unknown)
            elif isinstance(ap, dict):
                out[k] = _prune(x, ap, _join(path, k), unknown)
            elif ap is True or preserve:
                out[k] = x
            else:
                unknown.append(_join(path, k))
        return out
    if isinstance(v, list):
        items = s.get("items")
        if isinstance(items, dict):
            return [_prune(x, items, "%s[%d]" % (path, i), unknown) for i, x in enumerate(v)]
        return v
    return v


_OBJECT_META_FIELDS = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
}


def _prune_embedded_meta(meta, path, unknown):
    out = {}
    for k, x in meta.items():
        if k in _OBJECT_META_FIELDS:
            out[k] = x
        else:
            unknown.append(_join(path, k))
    return out


# --------------------------------------------------------------------------------------------
# Defaulting


def apply_defaults(obj, schema):
    """Structural defaulting (apiextensions structuraldefaulting.Default) plus the removal of
    nulls on non-nullable fields that have no default.  Defaults are applied to missing fields
    and to null non-nullable fields, then recursively inside (so defaults nest)."""
    out = copy.deepcopy(obj)
    return _default(out, schema)


def _non_nullable_null(v, s):
    return v is None and isinstance(s, dict) and not s.get("nullable", False)


def _default(x, s):
    if not isinstance(s, dict):
        return x
    if isinstance(x, dict):
        props = s.get("properties") or {}
        for k, p in props.items():
            if not isinstance(p, dict) or "default" not in p or p["default"] is None:
                continue
            if k not in x or _non_nullable_null(x[k], p):
                x[k] = copy.deepcopy(p["default"])
        ap = s.get("additionalProperties")
        for k in list(x):
            v = x[k]
            if k in props:
                p = props[k]
                if _non_nullable_null(v, p) and not (isinstance(p, dict) and "default" in p):
                    del x[k]
                    continue
                x[k] = _default(v, p)
            elif isinstance(ap, dict):
                if _non_nullable_null(v, ap):
                    if ap.get("default") is not None:
                        x[k] = copy.deepcopy(ap["default"])
                    else:
                        del x[k]
                        continue
                x[k] = _default(x[k], ap)
        return x
    if isinstance(x, list):
        items = s.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(x):
                if _non_nullable_null(v, items) and items.get("default") is not None:
                    x[i] = copy.deepcopy(items["default"])
                x[i] = _default(x[i], items)
        return x
    return x


# --------------------------------------------------------------------------------------------
# Validation


def _type_of(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "unknown"


def _is_type(v, t):
    vt = _type_of(v)
    if t == "number":
        return vt in ("integer", "number")
    return vt == t


def _invalid(path, value, detail):
    return Cause("FieldValueInvalid", path, "Invalid value: %s: %s" % (go_value(value), detail))


def _type_invalid(path, value, detail):
    return Cause("FieldValueTypeInvalid", path,
                 "Invalid value: %s: %s" % (go_value(value), detail))


def _num(v):
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
        return int(v)
    return v


_DATE_TIME_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_IPV4_OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4_RE = re.compile("^" + _IPV4_OCTET + r"(\." + _IPV4_OCTET + "){3}$")
_DURATION_RE = re.compile(r"^([+-]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w))+$")
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME_RE = re.compile("^" + _HOST_LABEL + r"(\." + _HOST_LABEL + ")*$")


def _format_ok(fmt, v):
    if fmt == "int32":
        return not isinstance(v, (int, float)) or -(2**31) <= v <= 2**31 - 1
    if fmt == "int64":
        return not isinstance(v, (int, float)) or -(2**63) <= v <= 2**63 - 1
    if not isinstance(v, str):
        return True
    if fmt in ("date-time", "datetime"):
        return bool(_DATE_TIME_RE.match(v))
    if fmt == "date":
        return bool(_DATE_RE.match(v))
    if fmt == "byte":
        try:
            base64.b64decode(v, validate=True)
            return True
        except ValueError:
            return False
    if fmt == "ipv4":
        return bool(_IPV4_RE.match(v))
    if fmt == "uuid":
        try:
            uuid.UUID(v)
            return len(v) == 36
        except ValueError:
            return False
    if fmt == "duration":
        return bool(_DURATION_RE.match(v))
    if fmt == "hostname":
        return len(v) <= 253 and bool(_HOSTNAME_RE.match(v))
    return True


def validate(obj, schema):
    """Validates obj against a structural schema; returns a list of Cause (empty = valid)."""
    causes = []
    if not isinstance(schema, dict):
        return causes
    _validate(obj, schema, "", causes, root=True)
    return causes


def _path_name(path):
    return path if path else "."


def _validate(v, s, path, causes, root=False):
    if not isinstance(s, dict):
        return
    name = _path_name(path)
    nullable = s.get("nullable", False)
    t = s.get("type")
    ios = s.get("x-kubernetes-int-or-string") is True
    if v is None:
        if nullable:
            return
        if t:
            causes.append(_type_invalid(path, "null", "%s in body must be of type %s: %s"
                                        % (name, t, go_quote("null"))))
            return
        if ios:
            causes.append(_type_invalid(path, "null",
                                        "%s in body must be of type integer,string: %s"
                                        % (name, go_quote("null"))))
            return
        return
    if ios:
        if not (_is_type(v, "integer") or isinstance(v, str)):
            vt = _type_of(v)
            causes.append(_type_invalid(path, vt, "%s in body must be of type integer,string: %s"
                                        % (name, go_quote(vt))))
            return
    elif t:
        if not _is_type(v, t):
            vt = _type_of(v)
            causes.append(_type_invalid(path, vt, "%s in body must be of type %s: %s"
                                        % (name, t, go_quote(vt))))
            return
    fmt = s.get("format")
    if fmt and not _format_ok(fmt, v):
        causes.append(_invalid(path, _num(v), "%s in body must be of type %s: %s"
                               % (name, fmt, go_quote(json.dumps(v) if not isinstance(v, str)
                                                      else v))))
    if "enum" in s and isinstance(s["enum"], list):
        from .patch import json_equal  # local import: patch has no dependency on schema

        if not any(json_equal(v, e) for e in s["enum"]):
            vals = [e if isinstance(e, str) else json.dumps(e) for e in s["enum"]]
            causes.append(Cause("FieldValueNotSupported", path, "Unsupported value: %s: "
                                "supported values: %s" % (go_value(_num(v)),
                                                          ", ".join(go_quote(x) for x in vals))))
    if isinstance(v, str):
        n = len(v)
        if "maxLength" in s and n > s["maxLength"]:
            m = int(s["maxLength"])
            causes.append(Cause("FieldValueTooLong", path, "Too long: may not be more than %d %s"
                                % (m, "byte" if m == 1 else "bytes")))
        if "minLength" in s and n < s["minLength"]:
            causes.append(_invalid(path, v, "%s in body should be at least %d chars long"
                                   % (name, s["minLength"])))
        if "pattern" in s:
            try:
                ok = re.search(s["pattern"], v) is not None
            except re.error:
                ok = True
            if not ok:
                causes.append(_invalid(path, v, "%s in body should match '%s'"
                                       % (name, s["pattern"])))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        nv = _num(v)
        if "maximum" in s:
            mx = s["maximum"]
            if s.get("exclusiveMaximum") is True:
                if v >= mx:
                    causes.append(_invalid(path, nv, "%s in body should be less than %s"
                                           % (name, go_value(_num(mx)))))
            elif v > mx:
                causes.append(_invalid(path, nv, "%s in body should be less than or equal to %s"
                                       % (name, go_value(_num(mx)))))
        if "minimum" in s:
            mn = s["minimum"]
            if s.get("exclusiveMinimum") is True:
                if v <= mn:
                    causes.append(_invalid(path, nv, "%s in body should be greater than %s"
                                           % (name, go_value(_num(mn)))))
            elif v < mn:
                causes.append(_invalid(path, nv, "%s in body should be greater than or equal to %s"
                                       % (name, go_value(_num(mn)))))
        mo = s.get("multipleOf")
        if isinstance(mo, (int, float)) and mo > 0:
            q = v / mo
            if abs(q - round(q)) > 1e-9:
                causes.append(_invalid(path, nv, "%s in body should be a multiple of %s"
                                       % (name, go_value(_num(mo)))))
    if isinstance(v, list):
        n = len(v)
        if "maxItems" in s and n > s["maxItems"]:
            m = int(s["maxItems"])
            causes.append(Cause("FieldValueTooMany", path, "Too many: %d: must have at most %d %s"
                                % (n, m, "item" if m == 1 else "items")))
        if "minItems" in s and n < s["minItems"]:
            causes.append(_invalid(path, n, "%s in body should have at least %d items"
                                   % (name, s["minItems"])))
        items = s.get("items")
        if isinstance(items, dict):
            for i, x in enumerate(v):
                _validate(x, items, "%s[%d]" % (path, i), causes)
        _list_type_errors(v, s, path, causes)
    if isinstance(v, dict):
        n = len(v)
        if "maxProperties" in s and n > s["maxProperties"]:
            m = int(s["maxProperties"])
            causes.append(Cause("FieldValueTooMany", path, "Too many: %d: must have at most %d %s"
                                % (n, m, "item" if m == 1 else "items")))
        if "minProperties" in s and n < s["minProperties"]:
            causes.append(_invalid(path, n, "%s in body should have at least %d properties"
                                   % (name, s["minProperties"])))
        for r in s.get("required") or []:
            if r not in v:
                causes.append(Cause("FieldValueRequired", _join(path, r), "Required value"))
        props = s.get("properties") or {}
        ap = s.get("additionalProperties")
        embedded = s.get("x-kubernetes-embedded-resource") is True
        if embedded:
            for k in ("apiVersion", "kind"):
                if not v.get(k):
                    causes.append(Cause("FieldValueRequired", _join(path, k),
                                        "Required value: must not be empty"))
        for k in sorted(v):
            if (root or embedded) and k == "metadata":
                meta_schema = props.get("metadata")
                if isinstance(meta_schema, dict) and isinstance(v[k], dict):
                    _validate(v[k], meta_schema, _join(path, k), causes)
                continue
            if root and k in ("apiVersion", "kind"):
                continue
            if k in props:
                _validate(v[k], props[k], _join(path, k), causes)
            elif isinstance(ap, dict):
                _validate(v[k], ap, _join(path, k), causes)
    _junctor_errors(v, s, path, causes)


def _list_type_errors(v, s, path, causes):
    lt = s.get("x-kubernetes-list-type")
    if lt == "set":
        seen = []
        for i, x in enumerate(v):
            if any(_json_eq(x, y) for y in seen):
                shown = x if isinstance(x, (dict, list)) else _num(x)
                causes.append(Cause("FieldValueDuplicate", "%s[%d]" % (path, i),
                                    "Duplicate value: %s" % go_value(shown)))
            else:
                seen.append(x)
    elif lt == "map":
        keys = s.get("x-kubernetes-list-map-keys") or []
        seen = []
        for i, x in enumerate(v):
            if not isinstance(x, dict):
                continue
            kv = {k: x[k] for k in keys if k in x}
            if any(_json_eq(kv, y) for y in seen):
                causes.append(Cause("FieldValueDuplicate", "%s[%d]" % (path, i),
                                    "Duplicate value: %s" % go_value(kv)))
            else:
                seen.append(kv)


def _json_eq(a, b):
    from .patch import json_equal

    return json_equal(a, b)


def _sub_causes(v, s, path):
    c = []
    _validate(v, s, path, c)
    return c


def _junctor_errors(v, s, path, causes):
    name = _path_name(path)
    for i, sub in enumerate(s.get("allOf") or []):
        causes.extend(_sub_causes(v, sub, path))
    any_of = s.get("anyOf")
    if isinstance(any_of, list) and any_of:
        if not any(not _sub_causes(v, sub, path) for sub in any_of):
            causes.append(_invalid(path, v if not isinstance(v, (dict, list)) else "",
                                   "%s in body must validate at least one schema (anyOf)" % name))
    one_of = s.get("oneOf")
    if isinstance(one_of, list) and one_of:
        n = sum(1 for sub in one_of if not _sub_causes(v, sub, path))
        if n != 1:
            causes.append(_invalid(path, v if not isinstance(v, (dict, list)) else "",
                                   "%s in body must validate one and only one schema (oneOf)"
                                   % name))
    nt = s.get("not")
    if isinstance(nt, dict) and not _sub_causes(v, nt, path):
        causes.append(_invalid(path, v if not isinstance(v, (dict, list)) else "",
                               "%s in body must not validate the schema (not)" % name))


# --------------------------------------------------------------------------------------------
# 422 message


def format_invalid_message(kind, group, name, causes):
    """'<Kind>.<group> "<name>" is invalid: <f>: <m>' (one cause) or '[f1: m1, f2: m2]'.
    Duplicate messages are folded as utilerrors.NewAggregate does; core kinds have no group."""
    qk = kind + "." + group if group else kind
    msgs = []
    for c in causes:
        if isinstance(c, Cause):
            m = c.error()
        elif isinstance(c, dict):
            m = "%s: %s" % (c.get("field", ""), c.get("message", ""))
        else:
            m = str(c)
        if m not in msgs:
            msgs.append(m)
    if not msgs:
        return "%s %s is invalid" % (qk, go_quote(name))
    if len(msgs) == 1:
        return "%s %s is invalid: %s" % (qk, go_quote(name), msgs[0])
    return "%s %s is invalid: [%s]" % (qk, go_quote(name), ", ".join(msgs))
