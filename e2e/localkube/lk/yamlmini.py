"""A small YAML reader for request bodies (application/apply-patch+yaml, kubectl-style manifests).

Pure functions, Python standard library only.

    loads(text, duplicate_keys="last") -> object     first document ('---' separated)
    loads_all(text, duplicate_keys="last") -> list   every document
    dumps(obj) -> str                                 block-style YAML writer (for output)

Supported subset of YAML 1.2: block mappings and sequences (including "- key: v" compact
mappings and sequences at the same indentation as their parent key), flow collections [..] and
{..} across lines, plain / 'single' / "double" quoted scalars (all YAML escapes, line folding),
literal | and folded > block scalars with chomping (+ -) and indentation indicators, comments,
documents (--- / ...), %directives, anchors & aliases, << merge keys, the !!str !!int !!float
!!bool !!null !!map !!seq !!binary tags (other tags are ignored).  Plain scalars resolve with the
YAML 1.2 core schema (null ~ true/false ints incl. 0x/0o, floats, .inf, .nan).  Mapping keys
that resolve to non-strings become strings ("1", "true", "null"), as sigs.k8s.io/yaml does when
converting to JSON.  Not supported: complex "? " keys, flow keys, multi-line implicit keys.

Every error is a ValueError whose message starts "yaml: line N: ".
duplicate_keys: "last" (later value wins, like JSON decoders) or "error".
"""

import base64
import bisect
import copy
import math
import re

__all__ = ["loads", "loads_all", "dumps", "YAMLError"]


class YAMLError(ValueError):
    def __init__(self, line, msg):
        super().__init__("yaml: line %d: %s" % (line, msg))
        self.line = line
        self.msg = msg


_NULL_RE = re.compile(r"^(?:~|null|Null|NULL|)$")
_BOOL_TRUE = {"true", "True", "TRUE"}
_BOOL_FALSE = {"false", "False", "FALSE"}
_INT_RE = re.compile(r"^[-+]?[0-9]+$")
_OCT_RE = re.compile(r"^0o[0-7]+$")
_HEX_RE = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT_RE = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF_RE = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN_RE = re.compile(r"^\.(?:nan|NaN|NAN)$")


def _resolve_plain(s):
    if _NULL_RE.match(s):
        return None
    if s in _BOOL_TRUE:
        return True
    if s in _BOOL_FALSE:
        return False
    if _INT_RE.match(s):
        return int(s)
    if _OCT_RE.match(s):
        return int(s[2:], 8)
    if _HEX_RE.match(s):
        return int(s[2:], 16)
    if _FLOAT_RE.match(s):
        return float(s)
    if _INF_RE.match(s):
        return -math.inf if s.startswith("-") else math.inf
    if _NAN_RE.match(s):
        return math.nan
    return s


_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}

_FLOW_INDICATORS = ",[]{}"


class _Parser:
    def __init__(self, text, duplicate_keys):
        if not isinstance(text, str):
            if isinstance(text, (bytes, bytearray)):
                try:
                    text = bytes(text).decode("utf-8")
                except UnicodeDecodeError:
                    raise YAMLError(1, "invalid UTF-8 in input") from None
            else:
                raise ValueError("yaml: input must be a string")
        if text.startswith("\ufeff"):
            text = text[1:]
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        self.s = text
        self.n = len(text)
        self.i = 0
        self.nl = [k for k, ch in enumerate(text) if ch == "\n"]
        self.anchors = {}
        self.dup = duplicate_keys

    # ---- position helpers ---------------------------------------------------------------
    def line(self, pos=None):
        pos = self.i if pos is None else pos
        return bisect.bisect_left(self.nl, pos) + 1

    def err(self, msg, pos=None):
        raise YAMLError(self.line(pos), msg)

    def col(self, pos=None):
        pos = self.i if pos is None else pos
        return pos - (self.s.rfind("\n", 0, pos) + 1)

    def eof(self):
        return self.i >= self.n

    def ch(self, k=0):
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def skip_space(self):
        while self.i < self.n and self.s[self.i] in " \t":
            self.i += 1

    def skip_comment(self):
        if self.ch() == "#":
            j = self.s.find("\n", self.i)
            self.i = self.n if j < 0 else j

    def skip_ws_comments(self):
        """Skips spaces, tabs, comments and line breaks."""
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\n":
                self.i += 1
            elif c == "#" and (self.i == 0 or self.s[self.i - 1] in " \t\n"):
                self.skip_comment()
            else:
                break

    def at_doc_marker(self, pos=None):
        pos = self.i if pos is None else pos
        if self.col(pos) != 0:
            return False
        for m in ("---", "..."):
            if self.s.startswith(m, pos):
                after = self.s[pos + 3:pos + 4]
                if after in ("", " ", "\t", "\n"):
                    return True
        return False

    def is_seq_entry(self):
        return self.ch() == "-" and self.ch(1) in ("", " ", "\t", "\n")

    def check_indent_tabs(self):
        start = self.s.rfind("\n", 0, self.i) + 1
        if "\t" in self.s[start:self.i] and self.s[start:self.i].strip(" \t") == "":
            self.err("found a tab character that violates indentation")

    def expect_eol(self):
        self.skip_space()
        if self.ch() == "#":
            self.skip_comment()
        if not self.eof() and self.ch() != "\n":
            self.err("did not find expected key or end of line (found %r)" % self.ch())

    # ---- documents ------------------------------------------------------------------------
    def documents(self):
        docs = []
        first = True
        while True:
            self.skip_ws_comments()
            # directives
            while not self.eof() and self.col() == 0 and self.ch() == "%":
                j = self.s.find("\n", self.i)
                self.i = self.n if j < 0 else j
                self.skip_ws_comments()
            explicit = False
            if self.at_doc_marker() and self.s.startswith("---", self.i):
                self.i += 3
                explicit = True
                self.skip_space()
            elif self.at_doc_marker() and self.s.startswith("...", self.i):
                self.i += 3
                continue
            if self.eof():
                if explicit or first:
                    docs.append(None)
                return docs
            self.skip_space()
            if self.ch() in ("", "\n", "#"):
                node = self.parse_block_node(-1)
            else:
                node = self.parse_node_at(self.col(), -1, inline_value=explicit)
            docs.append(node)
            first = False
            self.skip_ws_comments()
            if self.eof():
                return docs
            if self.at_doc_marker():
                if self.s.startswith("...", self.i):
                    self.i += 3
                    self.expect_eol()
                    self.skip_ws_comments()
                    if self.eof():
                        return docs
                    if not (self.at_doc_marker() and self.s.startswith("---", self.i)):
                        if self.ch() != "%":
                            self.err("did not find expected <document start>")
                continue
            self.err("did not find expected <document start>")

    # ---- block structure ---------------------------------------------------------------------
    def parse_block_node(self, parent_indent, seq_same_indent=False):
        self.skip_ws_comments()
        if self.eof() or self.at_doc_marker():
            return None
        c = self.col()
        if c <= parent_indent:
            if not (seq_same_indent and c == parent_indent and self.is_seq_entry()):
                return None
        self.check_indent_tabs()
        return self.parse_node_at(c, parent_indent, seq_same_indent=seq_same_indent)

    def parse_properties(self):
        tag = anchor = None
        while True:
            c = self.ch()
            if c == "!" and tag is None:
                j = self.i
                while j < self.n and self.s[j] not in " \t\n" + _FLOW_INDICATORS:
                    j += 1
                tag = self.s[self.i:j]
                self.i = j
                self.skip_space()
            elif c == "&" and anchor is None:
                j = self.i + 1
                while j < self.n and self.s[j] not in " \t\n" + _FLOW_INDICATORS:
                    j += 1
                anchor = self.s[self.i + 1:j]
                if not anchor:
                    self.err("did not find expected alphabetic or numeric character")
                self.i = j
                self.skip_space()
            else:
                return tag, anchor

    def parse_node_at(self, col, parent_indent, inline_value=False, seq_same_indent=False):
        """Parses the node whose first character is at the current position (column col)."""
        start = self.i
        tag, anchor = self.parse_properties()
        if tag is not None or anchor is not None:
            if self.ch() in ("", "\n", "#"):
                self.skip_comment()
                node = self.parse_block_node(parent_indent, seq_same_indent)
                return self.finish_node(node, tag, anchor, start)
            col = self.col()
        if self.ch() == "*":
            node = self.parse_alias()
            if not inline_value and self.looks_like_key():
                self.err("alias keys are not supported")
            return node
        if self.is_seq_entry():
            if inline_value:
                self.err("block sequence entries are not allowed in this context")
            node = self.parse_block_sequence(col)
        elif self.ch() == "?" and self.ch(1) in ("", " ", "\t", "\n"):
            self.err("complex mapping keys are not supported")
        elif not inline_value and self.looks_like_key():
            node = self.parse_block_mapping(col)
        else:
            node = self.parse_scalar_or_flow(parent_indent, block=True)
        return self.finish_node(node, tag, anchor, start)

    def finish_node(self, node, tag, anchor, pos):
        if tag is not None:
            node = self.apply_tag(node, tag, pos)
        if anchor is not None:
            self.anchors[anchor] = node
        return node

    def apply_tag(self, node, tag, pos):
        t = tag
        if t.startswith("!<") and t.endswith(">"):
            t = t[2:-1]
        if t.startswith("tag:yaml.org,2002:"):
            t = "!!" + t[len("tag:yaml.org,2002:"):]
        raw = node if not isinstance(node, _Plain) else node.text
        if isinstance(node, _Plain):
            node = node.value
        if t == "!!str" or t == "!":
            if isinstance(raw, (dict, list)):
                self.err("cannot use !!str on a collection", pos)
            return raw if isinstance(raw, str) else _scalar_text(raw)
        if t == "!!int":
            s = raw if isinstance(raw, str) else _scalar_text(raw)
            v = _resolve_plain(s) if isinstance(s, str) else None
            if not isinstance(v, int) or isinstance(v, bool):
                self.err("cannot decode %r as a !!int" % (s,), pos)
            return v
        if t == "!!float":
            s = raw if isinstance(raw, str) else _scalar_text(raw)
            v = _resolve_plain(s)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                self.err("cannot decode %r as a !!float" % (s,), pos)
            return float(v)
        if t == "!!bool":
            v = _resolve_plain(raw) if isinstance(raw, str) else raw
            if not isinstance(v, bool):
                self.err("cannot decode %r as a !!bool" % (raw,), pos)
            return v
        if t == "!!null":
            return None
        if t == "!!map":
            if node is None:
                return {}
            if not isinstance(node, dict):
                self.err("cannot decode a non-mapping as !!map", pos)
            return node
        if t == "!!seq":
            if node is None:
                return []
            if not isinstance(node, list):
                self.err("cannot decode a non-sequence as !!seq", pos)
            return node
        if t == "!!binary":
            if not isinstance(raw, str):
                self.err("!!binary value must be a string", pos)
            try:
                base64.b64decode("".join(raw.split()), validate=True)
            except ValueError:
                self.err("!!binary value is not valid base64", pos)
            return "".join(raw.split())
        return node

    def parse_alias(self):
        pos = self.i
        j = self.i + 1
        while j < self.n and self.s[j] not in " \t\n" + _FLOW_INDICATORS:
            j += 1
        name = self.s[self.i + 1:j]
        self.i = j
        if name not in self.anchors:
            self.err("unknown anchor '%s' referenced" % name, pos)
        return copy.deepcopy(self.anchors[name])

    def looks_like_key(self):
        """True when the current line holds "key: ..." (a block mapping entry)."""
        j = self.i
        s = self.s
        if j < self.n and s[j] in "\"'":
            q = s[j]
            j += 1
            while j < self.n:
                if s[j] == "\\" and q == '"':
                    j += 2
                    continue
                if s[j] == q:
                    if q == "'" and s[j + 1:j + 2] == "'":
                        j += 2
                        continue
                    break
                j += 1
            j += 1
            while j < self.n and s[j] in " \t":
                j += 1
            return j < self.n and s[j] == ":" and s[j + 1:j + 2] in ("", " ", "\t", "\n")
        if j < self.n and s[j] in "[{":
            return False
        while j < self.n and s[j] != "\n":
            if s[j] == "#" and j > self.i and s[j - 1] in " \t":
                return False
            if s[j] == ":" and s[j + 1:j + 2] in ("", " ", "\t", "\n"):
                return True
            j += 1
        return False

    def parse_block_sequence(self, indent):
        items = []
        while True:
            self.i += 1  # '-'
            self.skip_space()
            if self.ch() in ("", "\n", "#"):
                self.skip_comment()
                item = self.parse_block_node(indent)
            else:
                item = self.parse_node_at(self.col(), indent)
            items.append(_value(item))
            self.skip_ws_comments()
            if self.eof() or self.at_doc_marker():
                break
            c = self.col()
            if c < indent:
                break
            if c > indent:
                self.err("bad indentation of a sequence entry")
            if not self.is_seq_entry():
                if self.looks_like_key():
                    # "- a\nb: c" at the same indentation: the enclosing mapping continues
                    break
                self.err("did not find expected '-' indicator")
        return items

    def parse_block_mapping(self, indent):
        out = {}
        merges = []
        while True:
            kpos = self.i
            key, plain_merge = self.parse_key()
            self.skip_space()
            if self.ch() != ":":
                self.err("could not find expected ':'")
            self.i += 1
            self.skip_space()
            if self.ch() in ("", "\n", "#"):
                self.skip_comment()
                val = self.parse_block_node(indent, seq_same_indent=True)
            else:
                val = self.parse_node_at(self.col(), indent, inline_value=True)
            val = _value(val)
            if plain_merge:
                if isinstance(val, dict):
                    merges.append(val)
                elif isinstance(val, list) and all(isinstance(v, dict) for v in val):
                    merges.extend(val)
                else:
                    self.err("map merge requires map or sequence of maps as the value", kpos)
            else:
                if key in out and self.dup == "error":
                    self.err('mapping key "%s" already defined' % key, kpos)
                out[key] = val
            self.skip_ws_comments()
            if self.eof() or self.at_doc_marker():
                break
            c = self.col()
            if c < indent:
                break
            if c > indent:
                if self.is_seq_entry():
                    self.err("bad indentation of a sequence entry")
                self.err("mapping values are not allowed in this context")
            self.check_indent_tabs()
            if self.is_seq_entry():
                self.err("did not find expected key")
            if not self.looks_like_key():
                self.err("could not find expected ':'")
        return _merge(out, merges)

    def parse_key(self):
        """Returns (key string, is_plain_merge_key)."""
        c = self.ch()
        if c == '"':
            return self.parse_double_quoted(), False
        if c == "'":
            return self.parse_single_quoted(), False
        j = self.i
        s = self.s
        while j < self.n and s[j] != "\n":
            if s[j] == ":" and s[j + 1:j + 2] in ("", " ", "\t", "\n"):
                break
            j += 1
        text = s[self.i:j].rstrip(" \t")
        if not text:
            self.err("empty mapping keys are not supported")
        if text[0] in "&*!|>%@`":
            self.err("unsupported mapping key %r" % text)
        self.i = self.i + len(text)
        if text == "<<":
            return text, True
        return _key_string(_resolve_plain(text)), False

    # ---- scalars & flow ------------------------------------------------------------------------
    def parse_scalar_or_flow(self, parent_indent, block):
        c = self.ch()
        if c == "":
            return _Plain("")
        if c in "[{":
            node = self.parse_flow_collection()
            if block:
                self.expect_eol()
            return node
        if c == '"':
            v = self.parse_double_quoted()
            if block:
                self.expect_eol()
            return v
        if c == "'":
            v = self.parse_single_quoted()
            if block:
                self.expect_eol()
            return v
        if c in "|>" and block:
            return self.parse_block_scalar(parent_indent)
        if c in "@`":
            self.err("found character that cannot start any token")
        if c in "]}," and block:
            self.err("did not find expected node content")
        return self.parse_plain(parent_indent, block)

    def parse_plain(self, parent_indent, block):
        s = self.s
        start = self.i
        j = self.i
        stop_flow = not block
        while j < self.n and s[j] != "\n":
            ch = s[j]
            if ch == "#" and j > start and s[j - 1] in " \t":
                break
            if ch == ":" and (
                s[j + 1:j + 2] in ("", " ", "\t", "\n")
                or (stop_flow and s[j + 1:j + 2] in _FLOW_INDICATORS)
            ):
                if block:
                    self.err("mapping values are not allowed in this context", j)
                break
            if stop_flow and ch in _FLOW_INDICATORS:
                break
            j += 1
        first = s[start:j].rstrip(" \t")
        self.i = start + len(first)
        if not block:
            return _Plain(first)
        parts = [first]
        # multi-line plain scalar: continuation lines indented deeper than the parent
        while True:
            k = self.i
            while k < self.n and s[k] in " \t":
                k += 1
            if k < self.n and s[k] == "#":
                break
            if k >= self.n or s[k] != "\n":
                break
            breaks = 0
            m = k
            nxt = None
            while m < self.n and s[m] == "\n":
                breaks += 1
                line_start = m + 1
                p = line_start
                while p < self.n and s[p] in " \t":
                    p += 1
                if p < self.n and s[p] == "\n":
                    m = p
                    continue
                nxt = (line_start, p)
                break
            if nxt is None:
                break
            line_start, p = nxt
            indent = p - line_start
            if (p >= self.n or indent <= parent_indent or s[p] == "#"
                    or self.at_doc_marker(line_start)):
                break
            e = p
            while e < self.n and s[e] != "\n":
                if s[e] == "#" and s[e - 1] in " \t":
                    break
                if s[e] == ":" and s[e + 1:e + 2] in ("", " ", "\t", "\n"):
                    self.err("mapping values are not allowed in this context", e)
                e += 1
            text = s[p:e].rstrip(" \t")
            parts.append("\n" * (breaks - 1) if breaks > 1 else " ")
            parts.append(text)
            self.i = p + len(text)
        text = "".join(parts)
        return _Plain(text)

    def parse_block_scalar(self, parent_indent):
        pos = self.i
        folded = self.ch() == ">"
        self.i += 1
        chomp = "clip"
        increment = None
        for _ in range(2):
            c = self.ch()
            if c == "":
                break
            if c in "+-" and chomp == "clip":
                chomp = "keep" if c == "+" else "strip"
                self.i += 1
            elif c in "123456789" and increment is None:
                increment = int(c)
                self.i += 1
            elif c == "0":
                self.err("found an indentation indicator equal to 0")
        c = self.ch()
        if c not in ("", " ", "\t", "\n"):
            self.err("did not find expected comment or line break", pos)
        self.skip_space()
        self.skip_comment()
        if self.ch() == "\n":
            self.i += 1
        s = self.s
        header_end = self.i
        if increment is not None:
            indent = (max(parent_indent, 0) + increment) if parent_indent >= 0 else increment
        else:
            indent = None
            k = self.i
            while k < self.n:
                e = s.find("\n", k)
                e = self.n if e < 0 else e
                raw = s[k:e]
                if raw.strip(" ") != "":
                    indent = len(raw) - len(raw.lstrip(" "))
                    break
                k = e + 1
            if indent is None or indent <= parent_indent:
                indent = None
        content = []  # '' for blank lines
        end_pos = header_end
        trailing = 0
        k = self.i
        while indent is not None and k < self.n:
            e = s.find("\n", k)
            e = self.n if e < 0 else e
            raw = s[k:e]
            if raw.strip(" ") == "":
                if raw.strip(" \t") != "" and len(raw) - len(raw.lstrip(" ")) < indent:
                    break
                content.append("")
                trailing += 1
                k = e + 1
                continue
            lead = len(raw) - len(raw.lstrip(" "))
            if lead < indent or self.at_doc_marker(k):
                break
            content.append(raw[indent:])
            trailing = 0
            end_pos = e
            k = e + 1
        if indent is None:
            # no content: count the blank lines for keep chomping
            k = self.i
            while k < self.n:
                e = s.find("\n", k)
                e = self.n if e < 0 else e
                if s[k:e].strip(" ") != "":
                    break
                trailing += 1
                k = e + 1
        if trailing and content:
            content = content[: len(content) - trailing]
        self.i = end_pos
        if not content:
            return "\n" * trailing if chomp == "keep" else ""
        body = _fold_fix(content) if folded else "\n".join(content)
        if chomp == "strip":
            return body
        if chomp == "clip":
            return body + "\n"
        return body + "\n" + "\n" * trailing

    def parse_flow_collection(self):
        self.flow_depth = getattr(self, "flow_depth", 0) + 1
        if self.flow_depth > 200:
            self.err("exceeded max depth of nested flow collections")
        try:
            if self.ch() == "[":
                return self.parse_flow_seq()
            return self.parse_flow_map()
        finally:
            self.flow_depth -= 1

    def skip_flow_ws(self):
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\n":
                self.i += 1
            elif c == "#" and self.s[self.i - 1] in " \t\n":
                self.skip_comment()
            else:
                break
        if self.eof():
            self.err("did not find expected ',' or ']' / '}' (unterminated flow collection)")

    def parse_flow_node(self):
        self.skip_flow_ws()
        start = self.i
        tag, anchor = self.parse_properties()
        self.skip_flow_ws()
        c = self.ch()
        if c in "[{":
            node = self.parse_flow_collection()
        elif c == '"':
            node = self.parse_double_quoted()
        elif c == "'":
            node = self.parse_single_quoted()
        elif c == "*":
            node = self.parse_alias()
        elif c in ",]}" and (tag is not None or anchor is not None):
            node = None
        elif c in ",]}" or (c == ":" and self.ch(1) in ("", " ", "\t", "\n", ",", "]", "}")):
            self.err("did not find expected node content")
        else:
            node = self.parse_plain_flow()
        return self.finish_node(node, tag, anchor, start)

    def parse_plain_flow(self):
        parts = []
        while True:
            p = self.parse_plain(-1, block=False)
            text = p.text
            if not text:
                self.err("did not find expected node content")
            parts.append(text)
            # multi-line plain scalar inside a flow collection
            k = self.i
            while k < self.n and self.s[k] in " \t":
                k += 1
            if k < self.n and self.s[k] == "\n":
                m = k
                breaks = 0
                while m < self.n and self.s[m] in " \t\n":
                    if self.s[m] == "\n":
                        breaks += 1
                    m += 1
                if m < self.n and self.s[m] not in ",]}:#":
                    parts.append("\n" * (breaks - 1) if breaks > 1 else " ")
                    self.i = m
                    continue
            break
        return _Plain("".join(parts))

    def parse_flow_seq(self):
        self.i += 1
        items = []
        while True:
            self.skip_flow_ws()
            if self.ch() == "]":
                self.i += 1
                return items
            item = _value(self.parse_flow_node())
            self.skip_flow_ws()
            if self.ch() == ":":
                # single-pair mapping inside a sequence: [a: b]
                self.i += 1
                self.skip_flow_ws()
                if self.ch() in ",]":
                    v = None
                else:
                    v = _value(self.parse_flow_node())
                item = {_key_string(item): v}
                self.skip_flow_ws()
            items.append(item)
            if self.ch() == ",":
                self.i += 1
                continue
            if self.ch() == "]":
                self.i += 1
                return items
            self.err("did not find expected ',' or ']'")

    def parse_flow_map(self):
        self.i += 1
        out = {}
        merges = []
        while True:
            self.skip_flow_ws()
            if self.ch() == "}":
                self.i += 1
                return _merge(out, merges)
            kpos = self.i
            if self.ch() in "[{":
                self.err("flow collection keys are not supported")
            raw_key = self.parse_flow_node()
            is_merge = isinstance(raw_key, _Plain) and raw_key.text == "<<"
            key = _key_string(_value(raw_key))
            self.skip_flow_ws()
            if self.ch() == ":":
                self.i += 1
                self.skip_flow_ws()
                if self.ch() in ",}":
                    v = None
                else:
                    v = _value(self.parse_flow_node())
            else:
                v = None
            if is_merge:
                if isinstance(v, dict):
                    merges.append(v)
                elif isinstance(v, list) and all(isinstance(x, dict) for x in v):
                    merges.extend(v)
                else:
                    self.err("map merge requires map or sequence of maps as the value", kpos)
            else:
                if key in out and self.dup == "error":
                    self.err('mapping key "%s" already defined' % key, kpos)
                out[key] = v
            self.skip_flow_ws()
            if self.ch() == ",":
                self.i += 1
                continue
            if self.ch() == "}":
                self.i += 1
                return _merge(out, merges)
            self.err("did not find expected ',' or '}'")

    def _fold_break(self, out):
        """At a line break inside a quoted scalar: fold it (and following blank lines)."""
        # drop trailing unescaped whitespace already emitted for this line
        while out and out[-1] in (" ", "\t") and not isinstance(out[-1], _Esc):
            out.pop()
        breaks = 0
        while self.i < self.n and self.s[self.i] in " \t\n":
            if self.s[self.i] == "\n":
                breaks += 1
                if self.at_doc_marker(self.i + 1):
                    self.err("found unexpected document indicator in quoted scalar", self.i + 1)
            self.i += 1
        out.append(" " if breaks == 1 else "\n" * (breaks - 1))

    def parse_double_quoted(self):
        start = self.i
        self.i += 1
        out = []
        s = self.s
        while True:
            if self.i >= self.n:
                self.err("found unexpected end of stream while scanning a quoted scalar", start)
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\":
                nx = s[self.i + 1:self.i + 2]
                if nx == "\n":
                    self.i += 2
                    while self.i < self.n and s[self.i] in " \t":
                        self.i += 1
                    # blank lines after an escaped break still produce newlines
                    while self.i < self.n and s[self.i] == "\n":
                        out.append("\n")
                        self.i += 1
                        while self.i < self.n and s[self.i] in " \t":
                            self.i += 1
                    continue
                if nx in _ESCAPES:
                    out.append(_Esc(_ESCAPES[nx]))
                    self.i += 2
                    continue
                if nx in _HEX_ESCAPES:
                    k = _HEX_ESCAPES[nx]
                    h = s[self.i + 2:self.i + 2 + k]
                    if len(h) != k or not re.match(r"^[0-9a-fA-F]+$", h):
                        self.err("did not find expected hexdecimal number")
                    cp = int(h, 16)
                    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                        self.err("found invalid Unicode character escape code")
                    out.append(_Esc(chr(cp)))
                    self.i += 2 + k
                    continue
                self.err("found unknown escape character while parsing a quoted scalar")
            if c == "\n":
                self._fold_break(out)
                continue
            out.append(c)
            self.i += 1
        return "".join(str(x) for x in out)

    def parse_single_quoted(self):
        start = self.i
        self.i += 1
        out = []
        s = self.s
        while True:
            if self.i >= self.n:
                self.err("found unexpected end of stream while scanning a quoted scalar", start)
            c = s[self.i]
            if c == "'":
                if s[self.i + 1:self.i + 2] == "'":
                    out.append(_Esc("'"))
                    self.i += 2
                    continue
                self.i += 1
                break
            if c == "\n":
                self._fold_break(out)
                continue
            out.append(c)
            self.i += 1
        return "".join(str(x) for x in out)


class _Esc(str):
    """A character produced by an escape: never stripped by line folding."""


class _Plain:
    """A plain scalar before resolution (tags need the raw text)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    @property
    def value(self):
        return _resolve_plain(self.text)


def _value(node):
    return node.value if isinstance(node, _Plain) else node


def _fold_fix(lines):
    """Folded (>) block scalar body from its content lines ('' = blank)."""
    out = []
    prev = None  # previous non-blank line
    blanks = 0
    for ln in lines:
        if ln == "":
            blanks += 1
            continue
        if prev is None:
            out.append("\n" * blanks)
        else:
            more = ln[0] in " \t" or prev[0] in " \t"
            if more:
                out.append("\n" + "\n" * blanks)
            elif blanks:
                out.append("\n" * blanks)
            else:
                out.append(" ")
        out.append(ln)
        prev = ln
        blanks = 0
    return "".join(out)


def _scalar_text(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


def _key_string(k):
    if isinstance(k, str):
        return k
    if isinstance(k, (dict, list)):
        raise YAMLError(0, "mapping keys must be scalars")
    if isinstance(k, float):
        if k.is_integer():
            return str(int(k))
        return repr(k)
    return _scalar_text(k)


def _merge(out, merges):
    if not merges:
        return out
    merged = {}
    for m in merges:
        for k, v in m.items():
            merged.setdefault(k, v)
    for k, v in out.items():
        merged[k] = v
    return merged


def loads_all(text, duplicate_keys="last"):
    """Every document of a YAML stream, as Python objects."""
    if duplicate_keys not in ("last", "error"):
        raise ValueError("duplicate_keys must be 'last' or 'error'")
    p = _Parser(text, duplicate_keys)
    try:
        return [_value(d) for d in p.documents()]
    except RecursionError:
        raise YAMLError(p.line(), "exceeded max depth") from None


def loads(text, duplicate_keys="last"):
    """The first document of a YAML stream (None for an empty stream)."""
    docs = loads_all(text, duplicate_keys)
    return docs[0] if docs else None


# --------------------------------------------------------------------------------------------
# Writer

_NEEDS_QUOTE_RE = re.compile(r"^[\-?:,\[\]{}#&*!|>'\"%@`]|: | #|^\s|\s$|[\x00-\x1f\x7f]")


def _dump_scalar(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    s = str(v)
    if (s == "" or _NEEDS_QUOTE_RE.search(s) or not isinstance(_resolve_plain(s), str)
            or s.endswith(":")):
        import json

        return json.dumps(s)
    return s


def dumps(obj, indent=0):
    """Block-style YAML for JSON-like data (mappings keep insertion order)."""
    lines = []
    _dump(obj, 0, lines)
    return "\n".join(lines) + "\n"


def _dump(obj, ind, lines):
    pad = " " * ind
    if isinstance(obj, dict):
        if not obj:
            lines.append(pad + "{}")
            return
        for k, v in obj.items():
            key = _dump_scalar(str(k))
            if isinstance(v, dict) and v:
                lines.append(pad + key + ":")
                _dump(v, ind + 2, lines)
            elif isinstance(v, list) and v:
                lines.append(pad + key + ":")
                _dump(v, ind, lines)
            else:
                lines.append(pad + key + ": " + _inline(v))
    elif isinstance(obj, list):
        if not obj:
            lines.append(pad + "[]")
            return
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                sub = []
                _dump(v, ind + 2, sub)
                first = sub[0][ind + 2:]
                lines.append(pad + "- " + first)
                lines.extend(sub[1:])
            else:
                lines.append(pad + "- " + _inline(v))
    else:
        lines.append(pad + _inline(obj))


def _inline(v):
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _dump_scalar(v)
