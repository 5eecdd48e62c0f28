"""The Kubernetes JSONPath dialect (k8s.io/client-go/util/jsonpath), pure functions.

    evaluate(obj, expr, allow_missing=True) -> list
        Results of every action of a template, flattened, in order.  expr may be a bare path
        (".spec.replicas", as in CRD additionalPrinterColumns) or a template ("{.a.b}").
    render(obj, template, allow_missing=True) -> str
        kubectl -o jsonpath style output: text, {range}/{end}, strings printed raw, other
        values as JSON, several results of one action separated by a space.

Supported: $ @ .field ..field (recursive descent) .* [*] [n] [-n] [a:b:c] [n,m]
['key.with.dots'] ["k"] ['a','b'] [?(@.type=="Ready")] with == != < > <= >= and bare
existence [?(@.x)], literals "text" 'text' numbers true false, comma unions {.a,.b},
{range .items[*]}...{end}.  Errors (syntax, or a missing key when allow_missing is False)
raise ValueError.
"""

import json
import re

__all__ = ["evaluate", "render", "parse", "format_value"]


# --------------------------------------------------------------------------------------------
# Template splitting


def _split_template(tpl):
    """Splits into ('text', s) and ('action', s) parts; braces in quotes don't count."""
    parts = []
    i, n = 0, len(tpl)
    text = []
    while i < n:
        ch = tpl[i]
        if ch == "{":
            if text:
                parts.append(("text", "".join(text)))
                text = []
            j = i + 1
            depth = 1
            quote = None
            while j < n:
                c = tpl[j]
                if quote:
                    if c == "\\" and j + 1 < n:
                        j += 2
                        continue
                    if c == quote:
                        quote = None
                elif c in "\"'":
                    quote = c
                elif c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                raise ValueError("unclosed action")
            parts.append(("action", tpl[i + 1:j]))
            i = j + 1
        elif ch == "}":
            raise ValueError("unexpected right delimiter '}' at position %d" % i)
        else:
            text.append(ch)
            i += 1
    if text:
        parts.append(("text", "".join(text)))
    return parts


# --------------------------------------------------------------------------------------------
# Expression parser

_IDENT_RE = re.compile(r"(?:[A-Za-z0-9_\-/$]|\\.)+")
_NUM_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INT_RE = re.compile(r"^\s*-?[0-9]+\s*$")


class _P:
    def __init__(self, s):
        self.s = s
        self.i = 0

    def eof(self):
        return self.i >= len(self.s)

    def peek(self, k=1):
        return self.s[self.i:self.i + k]

    def skip_ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def err(self, msg):
        raise ValueError("%s at position %d in %r" % (msg, self.i, self.s))


def _parse_string(p):
    q = p.s[p.i]
    p.i += 1
    out = []
    while p.i < len(p.s):
        c = p.s[p.i]
        if c == "\\" and p.i + 1 < len(p.s):
            nxt = p.s[p.i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            p.i += 2
            continue
        if c == q:
            p.i += 1
            return "".join(out)
        out.append(c)
        p.i += 1
    p.err("unclosed quote")


def _parse_path(p, stop):
    """Parses a path (sequence of steps) until a char in stop (or end)."""
    steps = []
    p.skip_ws()
    if p.peek() == "$":
        p.i += 1
        steps.append(("root",))
    elif p.peek() == "@":
        p.i += 1
        steps.append(("current",))
    while not p.eof():
        c = p.peek()
        if c in stop:
            break
        if p.peek(2) == "..":
            p.i += 2
            steps.append(("recursive",))
            if p.peek() == "[":
                continue
            if p.peek() == "*":
                p.i += 1
                steps.append(("wildcard",))
                continue
            m = _IDENT_RE.match(p.s, p.i)
            if not m:
                p.err("expected field name after '..'")
            steps.append(("field", _unescape_ident(m.group(0))))
            p.i = m.end()
        elif c == ".":
            p.i += 1
            if p.peek() == "*":
                p.i += 1
                steps.append(("wildcard",))
                continue
            if p.eof() or p.peek() in stop or p.peek() in " ,":
                # a lone "." (or "{.}") means the current object
                continue
            if p.peek() == "[":
                continue
            m = _IDENT_RE.match(p.s, p.i)
            if not m:
                p.err("invalid character %r in field name" % p.peek())
            steps.append(("field", _unescape_ident(m.group(0))))
            p.i = m.end()
        elif c == "[":
            steps.append(_parse_bracket(p))
        elif c in " \t":
            break
        else:
            p.err("unrecognized character %r" % c)
    return steps


def _unescape_ident(s):
    return re.sub(r"\\(.)", r"\1", s)


def _parse_bracket(p):
    p.i += 1  # [
    p.skip_ws()
    c = p.peek()
    if c == "?":
        p.i += 1
        p.skip_ws()
        if p.peek() != "(":
            p.err("expected '(' after '?'")
        p.i += 1
        node = _parse_filter(p)
        p.skip_ws()
        if p.peek() != ")":
            p.err("expected ')' to close filter")
        p.i += 1
        p.skip_ws()
        if p.peek() != "]":
            p.err("expected ']' to close filter")
        p.i += 1
        return node
    if c == "*":
        p.i += 1
        p.skip_ws()
        if p.peek() != "]":
            p.err("expected ']'")
        p.i += 1
        return ("wildcard",)
    if c in "\"'":
        keys = []
        while True:
            p.skip_ws()
            if p.peek() not in ("'", '"'):
                p.err("expected quoted key")
            keys.append(_parse_string(p))
            p.skip_ws()
            if p.peek() == ",":
                p.i += 1
                continue
            if p.peek() == "]":
                p.i += 1
                return ("keys", keys)
            p.err("expected ',' or ']'")
    # array index / slice / union of indexes
    j = p.s.find("]", p.i)
    if j < 0:
        p.err("unterminated array")
    body = p.s[p.i:j]
    p.i = j + 1
    items = []
    for part in body.split(","):
        part = part.strip()
        if ":" in part:
            fields = part.split(":")
            if len(fields) > 3:
                raise ValueError("invalid array index %r" % part)
            vals = []
            for f in fields:
                f = f.strip()
                if f == "":
                    vals.append(None)
                elif _INT_RE.match(f):
                    vals.append(int(f))
                else:
                    raise ValueError("invalid array index %r" % part)
            while len(vals) < 3:
                vals.append(None)
            if vals[2] == 0:
                raise ValueError("step cannot be zero in %r" % part)
            items.append(("slice", vals[0], vals[1], vals[2]))
        elif _INT_RE.match(part):
            items.append(("idx", int(part)))
        else:
            raise ValueError("invalid array index %r" % part)
    return ("index", items)


_CMP_OPS = ("==", "!=", "<=", ">=", "<", ">")


def _parse_operand(p):
    p.skip_ws()
    c = p.peek()
    if c in ("'", '"'):
        return ("lit", _parse_string(p))
    if c in ("@", "$"):
        return ("path", _parse_path(p, set(")=!<> ")))
    m = _NUM_RE.match(p.s, p.i)
    if m:
        p.i = m.end()
        t = m.group(0)
        return ("lit", float(t) if any(x in t for x in ".eE") else int(t))
    for word, val in (("true", True), ("false", False), ("null", None)):
        if p.s.startswith(word, p.i):
            p.i += len(word)
            return ("lit", val)
    p.err("unrecognized filter operand")


def _parse_filter(p):
    lhs = _parse_operand(p)
    p.skip_ws()
    for op in _CMP_OPS:
        if p.s.startswith(op, p.i):
            p.i += len(op)
            rhs = _parse_operand(p)
            return ("filter", lhs, op, rhs)
    return ("filter", lhs, None, None)


def _parse_expr_list(s):
    """An action body: comma separated expressions (paths or literals)."""
    p = _P(s)
    exprs = []
    while True:
        p.skip_ws()
        if p.eof():
            if not exprs:
                p.err("empty expression")
            p.err("expression expected after ','")
        c = p.peek()
        if c in ("'", '"'):
            exprs.append(("lit", _parse_string(p)))
        elif _NUM_RE.match(p.s, p.i) and not p.peek() == ".":
            m = _NUM_RE.match(p.s, p.i)
            p.i = m.end()
            t = m.group(0)
            exprs.append(("lit", float(t) if any(x in t for x in ".eE") else int(t)))
        elif c in (".", "$", "@", "["):
            exprs.append(("path", _parse_path(p, set(","))))
        else:
            p.err("unrecognized character %r" % c)
        p.skip_ws()
        if p.eof():
            return exprs
        if p.peek() == ",":
            p.i += 1
            continue
        p.err("unexpected %r" % p.peek())


def parse(template):
    """Parses a template into a tree: list of ('text', s) | ('exprs', [...]) | ('range', exprs,
    body).  Raises ValueError on syntax errors."""
    parts = _split_template(template)
    root = []
    stack = [root]
    for kind, s in parts:
        if kind == "text":
            stack[-1].append(("text", s))
            continue
        body = s.strip()
        if body == "end":
            if len(stack) == 1:
                raise ValueError("unexpected {end}")
            stack.pop()
            continue
        if body.startswith("range ") or body.startswith("range\t"):
            exprs = _parse_expr_list(body[6:])
            node = ("range", exprs, [])
            stack[-1].append(node)
            stack.append(node[2])
            continue
        if body == "range":
            raise ValueError("range requires an expression")
        stack[-1].append(("exprs", _parse_expr_list(body)))
    if len(stack) != 1:
        raise ValueError("unclosed {range}: missing {end}")
    return root


# --------------------------------------------------------------------------------------------
# Evaluation


class _Missing(Exception):
    pass


def _descendants(v):
    out = [v]
    if isinstance(v, dict):
        for k in v:
            out.extend(_descendants(v[k]))
    elif isinstance(v, list):
        for x in v:
            out.extend(_descendants(x))
    return out


def _apply_steps(steps, cur, root, allow_missing):
    vals = [cur]
    i = 0
    while i < len(steps):
        st = steps[i]
        kind = st[0]
        out = []
        if kind == "root":
            out = [root]
        elif kind == "current":
            out = vals
        elif kind == "recursive":
            for v in vals:
                out.extend(_descendants(v))
            # the step after ".." applies to each descendant, silently skipping misses
            i += 1
            if i < len(steps):
                nxt = steps[i]
                res = []
                for v in out:
                    try:
                        res.extend(_apply_steps([nxt], v, root, True))
                    except ValueError:
                        pass
                out = res
        elif kind == "field":
            name = st[1]
            for v in vals:
                if isinstance(v, dict):
                    if name in v:
                        out.append(v[name])
                    elif not allow_missing:
                        raise ValueError("%s is not found" % name)
                elif v is None:
                    continue
                elif not allow_missing:
                    raise ValueError("%s is not found" % name)
        elif kind == "keys":
            for v in vals:
                for name in st[1]:
                    if isinstance(v, dict) and name in v:
                        out.append(v[name])
                    elif not allow_missing:
                        raise ValueError("%s is not found" % name)
        elif kind == "wildcard":
            for v in vals:
                if isinstance(v, dict):
                    out.extend(v[k] for k in sorted(v))
                elif isinstance(v, list):
                    out.extend(v)
        elif kind == "index":
            for v in vals:
                if not isinstance(v, list):
                    if allow_missing:
                        continue
                    raise ValueError("object is not a slice")
                n = len(v)
                for it in st[1]:
                    if it[0] == "idx":
                        k = it[1]
                        if k < 0:
                            k += n
                        if 0 <= k < n:
                            out.append(v[k])
                        elif not allow_missing:
                            raise ValueError("array index out of bounds: index %d, length %d"
                                             % (it[1], n))
                    else:
                        _, a, b, c = it
                        out.extend(v[slice(a, b, c)])
        elif kind == "filter":
            _, lhs, op, rhs = st
            for v in vals:
                items = v if isinstance(v, list) else (
                    [v[k] for k in sorted(v)] if isinstance(v, dict) else [])
                for item in items:
                    if _filter_match(item, lhs, op, rhs, root):
                        out.append(item)
        else:  # pragma: no cover - parser never produces others
            raise ValueError("unknown node %r" % (kind,))
        vals = out
        i += 1
    return vals


def _operand_values(operand, item, root):
    if operand[0] == "lit":
        return [operand[1]]
    steps = operand[1]
    if steps and steps[0][0] == "current":
        steps = steps[1:]
        start = item
    else:
        start = item
    return _apply_steps(steps, start, root, True)


def _compare(a, b, op):
    num = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        return False
    if isinstance(a, num) and isinstance(b, num):
        pass
    elif isinstance(a, str) and isinstance(b, str):
        pass
    else:
        if op == "==":
            return False
        if op == "!=":
            return True
        return False
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def _filter_match(item, lhs, op, rhs, root):
    lv = _operand_values(lhs, item, root)
    if op is None:
        return len(lv) > 0 and lv[0] is not None
    rv = _operand_values(rhs, item, root)
    if not lv or not rv:
        return False
    return _compare(lv[0], rv[0], op)


def _eval_exprs(exprs, obj, root, allow_missing):
    out = []
    for e in exprs:
        if e[0] == "lit":
            out.append(e[1])
        else:
            out.extend(_apply_steps(e[1], obj, root, allow_missing))
    return out


def _normalize(expr):
    if "{" in expr:
        return expr
    return "{" + expr + "}"


def evaluate(obj, expr, allow_missing=True):
    """Flattened results of every action in expr (literals included), without text parts."""
    if not isinstance(expr, str):
        raise ValueError("jsonpath expression must be a string")
    tree = parse(_normalize(expr))
    out = []

    def walk(nodes, cur):
        for n in nodes:
            if n[0] == "exprs":
                out.extend(_eval_exprs(n[1], cur, obj, allow_missing))
            elif n[0] == "range":
                for item in _eval_exprs(n[1], cur, obj, allow_missing):
                    walk(n[2], item)

    walk(tree, obj)
    return out


def format_value(v):
    """How kubectl prints one JSONPath result: strings raw, the rest as JSON."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def render(obj, template, allow_missing=True):
    """kubectl -o jsonpath=TEMPLATE output for obj."""
    if not isinstance(template, str):
        raise ValueError("jsonpath template must be a string")
    tree = parse(template)
    buf = []

    def walk(nodes, cur):
        for n in nodes:
            if n[0] == "text":
                buf.append(n[1])
            elif n[0] == "exprs":
                res = _eval_exprs(n[1], cur, obj, allow_missing)
                buf.append(" ".join(format_value(v) for v in res))
            else:
                for item in _eval_exprs(n[1], cur, obj, allow_missing):
                    walk(n[2], item)

    walk(tree, obj)
    return "".join(buf)
