"""Label and field selectors, as kube-apiserver parses and evaluates them.

Pure functions, no I/O.  Label selector grammar and error messages follow
k8s.io/apimachinery/pkg/labels/selector.go (lexer + recursive descent parser);
field selectors follow k8s.io/apimachinery/pkg/fields/selector.go.

Public API:
    SelectorError
    parse_label_selector(s) -> LabelSelector
    selector_from_label_selector_object(obj) -> LabelSelector
    parse_field_selector(s, allowed) -> FieldSelector
    builtin_field_selectors(kind) -> set[str]
    validate_label_key(key) -> list[str]; validate_label_value(value) -> list[str]
"""

import re

__all__ = [
    "SelectorError",
    "Requirement",
    "LabelSelector",
    "FieldSelector",
    "parse_label_selector",
    "selector_from_label_selector_object",
    "parse_field_selector",
    "builtin_field_selectors",
    "field_value",
    "validate_label_key",
    "validate_label_value",
    "EVERYTHING",
]


class SelectorError(Exception):
    """A malformed selector; str(e) is the message kube would put in a 400 Status."""


# --------------------------------------------------------------------------------------------
# Validation of label keys and values (k8s.io/apimachinery/pkg/util/validation)

_QNAME_CHAR_FMT = "[A-Za-z0-9]"
_QNAME_EXT_CHAR_FMT = "[-A-Za-z0-9_.]"
_QUALIFIED_NAME_FMT = "(" + _QNAME_CHAR_FMT + _QNAME_EXT_CHAR_FMT + "*)?" + _QNAME_CHAR_FMT
_QUALIFIED_NAME_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QUALIFIED_NAME_RE = re.compile("^" + _QUALIFIED_NAME_FMT + "$")
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_RE = re.compile("^" + _LABEL_VALUE_FMT + "$")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_RE = re.compile("^" + _DNS1123_SUBDOMAIN_FMT + "$")


def _regex_error(msg, fmt, *examples):
    """validation.RegexError, including kube's odd double space between examples."""
    if not examples:
        return msg + " (regex used for validation is '" + fmt + "')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += "'" + ex + "', "
    return msg + "regex used for validation is '" + fmt + "')"


def _max_len_error(n):
    return "must be no more than %d characters" % n


def _dns1123_subdomain_errors(value):
    errs = []
    if len(value) > 253:
        errs.append(_max_len_error(253))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def validate_label_key(key):
    """validation.IsQualifiedName: returns a list of error strings (empty when valid)."""
    errs = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + e for e in _dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len_error(63))
    if name and not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_ERR, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def validate_label_value(value):
    """validation.IsValidLabelValue: returns a list of error strings (empty when valid)."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(
            _regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _quote(s):
    """Go's %q for the strings that appear in selectors (ASCII printable)."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Requirements and label selectors

IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "in", "notin", "=", "==", "!="
EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN = "exists", "!", "gt", "lt"

_BINARY_OPERATORS = [IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN]


def _parse_int64(s):
    if not re.match(r"^[+-]?[0-9]+$", s):
        return None
    v = int(s)
    if v < -(2**63) or v >= 2**63:
        return None
    return v


class Requirement:
    """One term of a label selector: key, operator and a set of values."""

    __slots__ = ("key", "operator", "values")

    def __init__(self, key, operator, values=()):
        errs = validate_label_key(key)
        if errs:
            raise SelectorError("key: Invalid value: %s: %s" % (_quote(key), "; ".join(errs)))
        values = list(values)
        if operator in (IN, NOT_IN):
            if not values:
                raise SelectorError(
                    "values: Invalid value: []string(nil): for 'in', 'notin' operators, "
                    "values set can't be empty"
                )
        elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
            if len(values) != 1:
                raise SelectorError(
                    "values: Invalid value: %s: exact-match compatibility requires one single "
                    "value" % _go_string_slice(values)
                )
        elif operator in (EXISTS, DOES_NOT_EXIST):
            if values:
                raise SelectorError(
                    "values: Invalid value: %s: values set must be empty for exists and does "
                    "not exist" % _go_string_slice(values)
                )
        elif operator in (GREATER_THAN, LESS_THAN):
            if len(values) != 1:
                raise SelectorError(
                    "values: Invalid value: %s: for 'Gt', 'Lt' operators, exactly one value is "
                    "required" % _go_string_slice(values)
                )
            if _parse_int64(values[0]) is None:
                raise SelectorError(
                    "values[0]: Invalid value: %s: for 'Gt', 'Lt' operators, the value must be an "
                    "integer" % _quote(values[0])
                )
        else:
            raise SelectorError(
                "operator: Unsupported value: %s: supported values: %s"
                % (_quote(str(operator)),
                   ", ".join(_quote(o) for o in _BINARY_OPERATORS + [EXISTS, DOES_NOT_EXIST]))
            )
        for i, v in enumerate(values):
            verrs = validate_label_value(v)
            if verrs:
                raise SelectorError(
                    "values[%d][%s]: Invalid value: %s: %s" % (i, key, _quote(v), "; ".join(verrs))
                )
        self.key = key
        self.operator = operator
        # kube stores values as a set and prints them sorted
        self.values = sorted(set(values))

    def matches(self, labels):
        has = self.key in labels
        op = self.operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return has and labels[self.key] in self.values
        if op in (NOT_IN, NOT_EQUALS):
            return (not has) or labels[self.key] not in self.values
        if op == EXISTS:
            return has
        if op == DOES_NOT_EXIST:
            return not has
        if op in (GREATER_THAN, LESS_THAN):
            if not has:
                return False
            lv = _parse_int64(str(labels[self.key]))
            if lv is None:
                return False
            rv = int(self.values[0])
            return lv > rv if op == GREATER_THAN else lv < rv
        return False

    def __str__(self):
        op = self.operator
        if op == EXISTS:
            return self.key
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        if op in (IN, NOT_IN):
            return "%s %s (%s)" % (self.key, op, ",".join(self.values))
        sym = {EQUALS: "=", DOUBLE_EQUALS: "==", NOT_EQUALS: "!=", GREATER_THAN: ">",
               LESS_THAN: "<"}[op]
        return self.key + sym + self.values[0]

    def __repr__(self):
        return "Requirement(%r, %r, %r)" % (self.key, self.operator, self.values)

    def __eq__(self, other):
        return (
            isinstance(other, Requirement)
            and (self.key, self.operator, self.values) == (other.key, other.operator, other.values)
        )

    def __hash__(self):
        return hash((self.key, self.operator, tuple(self.values)))


def _go_string_slice(values):
    if not values:
        return "[]string(nil)"
    return "[]string{" + ", ".join(_quote(v) for v in values) + "}"


class LabelSelector:
    """A conjunction of Requirements.  `nothing=True` builds labels.Nothing()."""

    def __init__(self, requirements=(), nothing=False):
        self.requirements = sorted(requirements, key=lambda r: r.key)
        self.nothing = nothing

    @property
    def empty(self):
        """True when the selector places no constraint (matches everything)."""
        return not self.nothing and not self.requirements

    def matches(self, labels):
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self):
        return ",".join(str(r) for r in self.requirements)

    def __repr__(self):
        return "LabelSelector(%r)" % str(self)

    def __eq__(self, other):
        return (
            isinstance(other, LabelSelector)
            and self.nothing == other.nothing
            and self.requirements == other.requirements
        )

    def __hash__(self):
        return hash((self.nothing, tuple(self.requirements)))


EVERYTHING = LabelSelector()


# --- lexer ---------------------------------------------------------------------------------

_T_ERROR, _T_EOS, _T_CLOSEPAR, _T_COMMA, _T_NOTEXIST, _T_DEQ, _T_EQ = range(7)
_T_GT, _T_ID, _T_IN, _T_LT, _T_NEQ, _T_NOTIN, _T_OPENPAR = range(7, 14)

_STRING_TO_TOKEN = {
    ")": _T_CLOSEPAR,
    ",": _T_COMMA,
    "!": _T_NOTEXIST,
    "==": _T_DEQ,
    "=": _T_EQ,
    ">": _T_GT,
    "in": _T_IN,
    "<": _T_LT,
    "!=": _T_NEQ,
    "notin": _T_NOTIN,
    "(": _T_OPENPAR,
}
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")


def _lex(s):
    """Tokenises like labels.Lexer; returns a list of (token, literal)."""
    out = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WHITESPACE:
            i += 1
        if i >= n:
            out.append((_T_EOS, ""))
            return out
        ch = s[i]
        if ch in _SPECIAL:
            buf = ""
            last = None
            while i < n and s[i] in _SPECIAL:
                buf += s[i]
                tok = _STRING_TO_TOKEN.get(buf)
                if tok is not None:
                    last = (tok, buf)
                    i += 1
                elif last is not None:
                    break
                else:
                    i += 1
            if last is None:
                out.append((_T_ERROR, "error expected: keyword found '%s'" % buf))
                out.append((_T_EOS, ""))
                return out
            out.append(last)
        else:
            j = i
            while j < n and s[j] not in _SPECIAL and s[j] not in _WHITESPACE:
                j += 1
            word = s[i:j]
            i = j
            tok = _STRING_TO_TOKEN.get(word)
            if tok in (_T_IN, _T_NOTIN):
                out.append((tok, word))
            else:
                out.append((_T_ID, word))


class _Parser:
    KEY_AND_OPERATOR, VALUES = 0, 1

    def __init__(self, s):
        self.toks = _lex(s)
        self.pos = 0

    def lookahead(self, ctx):
        tok, lit = self.toks[self.pos]
        if ctx == self.VALUES and tok in (_T_IN, _T_NOTIN):
            tok = _T_ID
        return tok, lit

    def consume(self, ctx):
        tok, lit = self.lookahead(ctx)
        if self.pos < len(self.toks) - 1:
            self.pos += 1
        return tok, lit

    def parse(self):
        reqs = []
        while True:
            tok, lit = self.lookahead(self.VALUES)
            if tok in (_T_ID, _T_NOTEXIST):
                try:
                    r = self.parse_requirement()
                except SelectorError as e:
                    raise SelectorError("unable to parse requirement: %s" % e) from None
                reqs.append(r)
                t, l = self.consume(self.VALUES)
                if t == _T_EOS:
                    return reqs
                if t == _T_COMMA:
                    t2, l2 = self.lookahead(self.VALUES)
                    if t2 not in (_T_ID, _T_NOTEXIST):
                        raise SelectorError("found '%s', expected: identifier after ','" % l2)
                else:
                    raise SelectorError("found '%s', expected: ',' or 'end of string'" % l)
            elif tok == _T_EOS:
                return reqs
            else:
                raise SelectorError("found '%s', expected: !, identifier, or 'end of string'" % lit)

    def parse_requirement(self):
        key, op = self.parse_key_and_infer_operator()
        if op in (EXISTS, DOES_NOT_EXIST):
            return Requirement(key, op, [])
        op = self.parse_operator()
        if op in (IN, NOT_IN):
            values = self.parse_values()
        else:
            values = self.parse_exact_value()
        return Requirement(key, op, values)

    def parse_key_and_infer_operator(self):
        op = None
        tok, lit = self.consume(self.VALUES)
        if tok == _T_NOTEXIST:
            op = DOES_NOT_EXIST
            tok, lit = self.consume(self.VALUES)
        if tok != _T_ID:
            raise SelectorError("found '%s', expected: identifier" % lit)
        errs = validate_label_key(lit)
        if errs:
            raise SelectorError("key: Invalid value: %s: %s" % (_quote(lit), "; ".join(errs)))
        t, _ = self.lookahead(self.VALUES)
        if t in (_T_EOS, _T_COMMA):
            if op != DOES_NOT_EXIST:
                op = EXISTS
        # "!key=value": the requirement is "!key" and parse() then fails on the "=".
        return lit, op

    def parse_operator(self):
        tok, lit = self.consume(self.KEY_AND_OPERATOR)
        m = {
            _T_IN: IN,
            _T_EQ: EQUALS,
            _T_DEQ: DOUBLE_EQUALS,
            _T_GT: GREATER_THAN,
            _T_LT: LESS_THAN,
            _T_NOTIN: NOT_IN,
            _T_NEQ: NOT_EQUALS,
        }
        if tok in m:
            return m[tok]
        raise SelectorError("found '%s', expected: %s" % (lit, ", ".join(_BINARY_OPERATORS)))

    def parse_values(self):
        tok, lit = self.consume(self.VALUES)
        if tok != _T_OPENPAR:
            raise SelectorError("found '%s' expected: '('" % lit)
        tok, lit = self.lookahead(self.VALUES)
        if tok in (_T_ID, _T_COMMA):
            s = self.parse_identifiers_list()
            tok, lit2 = self.consume(self.VALUES)
            if tok != _T_CLOSEPAR:
                raise SelectorError("found '%s', expected: ')'" % lit2)
            return s
        if tok == _T_CLOSEPAR:
            self.consume(self.VALUES)
            return [""]
        raise SelectorError("found '%s', expected: ',', ')' or identifier" % lit)

    def parse_identifiers_list(self):
        s = []
        while True:
            tok, lit = self.consume(self.VALUES)
            if tok == _T_ID:
                s.append(lit)
                tok2, lit2 = self.lookahead(self.VALUES)
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSEPAR:
                    return s
                raise SelectorError("found '%s', expected: ',' or ')'" % lit2)
            elif tok == _T_COMMA:
                if not s:
                    s.append("")
                tok2, _ = self.lookahead(self.VALUES)
                if tok2 == _T_CLOSEPAR:
                    s.append("")
                    return s
                if tok2 == _T_COMMA:
                    self.consume(self.VALUES)
                    s.append("")
            else:
                raise SelectorError("found '%s', expected: ',', or identifier" % lit)

    def parse_exact_value(self):
        tok, _ = self.lookahead(self.VALUES)
        if tok in (_T_EOS, _T_COMMA):
            return [""]
        tok, lit = self.consume(self.VALUES)
        if tok == _T_ID:
            return [lit]
        raise SelectorError("found '%s', expected: identifier" % lit)


def parse_label_selector(s):
    """Parses a labelSelector query string.  '' (or None) matches everything."""
    if s is None:
        return LabelSelector()
    if not isinstance(s, str):
        raise SelectorError("label selector must be a string")
    return LabelSelector(_Parser(s).parse())


_OBJ_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def selector_from_label_selector_object(obj):
    """metav1.LabelSelectorAsSelector for {matchLabels, matchExpressions}.

    An empty selector object matches everything.  Kubernetes maps a nil *LabelSelector to
    labels.Nothing(), but the callers here (controllers, API validation) treat an absent
    selector the same as an empty one, so None also yields a match-everything selector.
    """
    if obj is None:
        return LabelSelector()
    if not isinstance(obj, dict):
        raise SelectorError("label selector must be an object")
    reqs = []
    ml = obj.get("matchLabels") or {}
    if not isinstance(ml, dict):
        raise SelectorError("matchLabels must be a map of string to string")
    for k in sorted(ml):
        v = ml[k]
        if not isinstance(v, str):
            raise SelectorError("matchLabels[%s] must be a string" % k)
        reqs.append(Requirement(k, EQUALS, [v]))
    me = obj.get("matchExpressions") or []
    if not isinstance(me, list):
        raise SelectorError("matchExpressions must be a list")
    for expr in me:
        if not isinstance(expr, dict):
            raise SelectorError("matchExpressions entries must be objects")
        opname = expr.get("operator")
        if opname not in _OBJ_OPERATORS:
            raise SelectorError("%s is not a valid label selector operator" % _quote(str(opname)))
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError("matchExpressions values must be a list of strings")
        reqs.append(Requirement(str(expr.get("key", "")), _OBJ_OPERATORS[opname], values))
    return LabelSelector(reqs)


# --------------------------------------------------------------------------------------------
# Field selectors


class FieldSelector:
    """A conjunction of (field, op, value) terms; op is '=' or '!=' ('==' is folded into '=')."""

    def __init__(self, requirements=(), getters=None):
        self.requirements = list(requirements)
        self._getters = getters or {}

    @property
    def empty(self):
        return not self.requirements

    def matches(self, obj):
        for field, op, value in self.requirements:
            have = field_value(obj, field, self._getters)
            if op == "=" and have != value:
                return False
            if op == "!=" and have == value:
                return False
        return True

    def matches_name(self):
        """The name an exact metadata.name=X term pins, or None (for single-object watches)."""
        for field, op, value in self.requirements:
            if field == "metadata.name" and op == "=":
                return value
        return None

    def __str__(self):
        return ",".join(f + op + _escape_field_value(v) for f, op, v in self.requirements)

    def __repr__(self):
        return "FieldSelector(%r)" % str(self)


def _escape_field_value(v):
    return v.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_terms(s):
    """Splits on unescaped commas, keeping escapes intact (fields.splitTerms)."""
    terms = []
    cur = []
    escaped = False
    for ch in s:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return terms


def _split_term(term):
    escaped = False
    for i, ch in enumerate(term):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape_field_value(v):
    if "\\" not in v and "=" not in v and "," not in v:
        return v
    out = []
    i = 0
    while i < len(v):
        ch = v[i]
        if ch == "\\":
            if i + 1 >= len(v) or v[i + 1] not in "\\,=":
                raise SelectorError("invalid escape sequence: %s" % v[i:i + 2])
            out.append(v[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError("invalid selector: unescaped character '%s' in value" % ch)
        out.append(ch)
        i += 1
    return "".join(out)


def parse_field_selector(s, allowed=None, getters=None):
    """Parses a fieldSelector query string.

    allowed: the set of field names supported for the resource (None = no check).  An unknown
    field raises SelectorError('"foo.bar" is not a known field selector: only "a", "b"').
    getters: optional {field: callable(obj) -> str} overriding the dotted-path read.
    """
    if s is None:
        s = ""
    if not isinstance(s, str):
        raise SelectorError("field selector must be a string")
    reqs = []
    for part in sorted(_split_terms(s)):
        if part == "":
            continue
        st = _split_term(part)
        if st is None:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (s, part))
        lhs, op, rhs = st
        lhs = lhs.strip()
        value = _unescape_field_value(rhs)
        if lhs == "":
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (s, part))
        if allowed is not None and lhs not in allowed:
            raise SelectorError(
                "%s is not a known field selector: only %s"
                % (_quote(lhs), ", ".join(_quote(a) for a in _sorted_fields(allowed)))
            )
        reqs.append((lhs, "!=" if op == "!=" else "=", value))
    if getters is None:
        getters = _DEFAULT_GETTERS
    return FieldSelector(reqs, getters)


def _sorted_fields(allowed):
    first = [f for f in ("metadata.name", "metadata.namespace") if f in allowed]
    return first + sorted(f for f in allowed if f not in first)


def _dotted(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _to_field_string(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def field_value(obj, field, getters=None):
    """The string value kube compares a field selector term against ('' when missing)."""
    if getters and field in getters:
        return getters[field](obj)
    g = _DEFAULT_GETTERS.get(field)
    if g is not None:
        return g(obj)
    return _to_field_string(_dotted(obj or {}, field))


def _bool_field(path):
    return lambda o: "true" if _dotted(o, path) is True else "false"


def _int_field(path):
    def get(o):
        v = _dotted(o, path)
        return str(int(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else "0"

    return get


def _pod_ip(o):
    ip = _dotted(o, "status.podIP")
    if ip:
        return str(ip)
    ips = _dotted(o, "status.podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], dict):
        return str(ips[0].get("ip", ""))
    return ""


def _event_source(o):
    v = _dotted(o, "source.component")
    if v:
        return str(v)
    return _to_field_string(o.get("reportingComponent")) if isinstance(o, dict) else ""


# Fields whose value is not a plain string read (booleans/ints printed the Go way, defaults).
_DEFAULT_GETTERS = {
    "spec.unschedulable": _bool_field("spec.unschedulable"),
    "spec.hostNetwork": _bool_field("spec.hostNetwork"),
    "status.podIP": _pod_ip,
    "source": _event_source,
}

_KIND_FIELDS = {
    "pods": {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "events": {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "secrets": {"type"},
    "nodes": {"spec.unschedulable"},
    "namespaces": {"status.phase"},
    "replicasets": {"status.replicas"},
    "replicationcontrollers": {"status.replicas"},
    "services": {"spec.clusterIP", "spec.type"},
    "jobs": {"status.successful"},
    "certificatesigningrequests": {"spec.signerName"},
}

_KIND_ALIASES = {
    "pod": "pods",
    "event": "events",
    "secret": "secrets",
    "node": "nodes",
    "namespace": "namespaces",
    "replicaset": "replicasets",
    "replicationcontroller": "replicationcontrollers",
    "service": "services",
    "job": "jobs",
    "certificatesigningrequest": "certificatesigningrequests",
}


def builtin_field_selectors(kind):
    """Field selector names supported for a built-in kind (Kind or plural resource name)."""
    k = (kind or "").lower()
    k = _KIND_ALIASES.get(k, k)
    out = {"metadata.name", "metadata.namespace"}
    out |= _KIND_FIELDS.get(k, set())
    return out


for _f in ("status.replicas",):
    _DEFAULT_GETTERS[_f] = _int_field(_f)
_DEFAULT_GETTERS["status.successful"] = _int_field("status.succeeded")
