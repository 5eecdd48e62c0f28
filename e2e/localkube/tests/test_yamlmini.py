"""Tests for lk.yamlmini (YAML subset reader)."""

import json
import math
import unittest

from lk.yamlmini import YAMLError, dumps, loads, loads_all

DEPLOYMENT = """\
# a typical manifest
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web            # trailing comment
  namespace: "default"
  labels: {app: web, tier: "front end"}
  annotations:
    example.com/note: 'it''s here'
spec:
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: main
          image: nginx:1.25
          args: ["--port", "8080", --verbose]
          ports:
          - containerPort: 8080
            protocol: TCP
          env:
            - name: EMPTY
            - name: QUOTED
              value: "yes"
          command:
            - /bin/sh
            - -c
            - |
              echo hello
              exec sleep 3600
      terminationGracePeriodSeconds: 5
"""


class LoadsTest(unittest.TestCase):
    def test_manifest(self):
        got = loads(DEPLOYMENT)
        self.assertEqual(got["apiVersion"], "apps/v1")
        self.assertEqual(got["metadata"], {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "front end"},
            "annotations": {"example.com/note": "it's here"},
        })
        c = got["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["args"], ["--port", "8080", "--verbose"])
        self.assertEqual(c["ports"], [{"containerPort": 8080, "protocol": "TCP"}])
        self.assertEqual(c["env"], [{"name": "EMPTY"}, {"name": "QUOTED", "value": "yes"}])
        self.assertEqual(c["command"], ["/bin/sh", "-c", "echo hello\nexec sleep 3600\n"])
        self.assertEqual(got["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 5)
        self.assertEqual(got["spec"]["replicas"], 3)

    CASES = [
        ("a: 1", {"a": 1}),
        ("a: 1\nb: two\n", {"a": 1, "b": "two"}),
        ("- a\n- b", ["a", "b"]),
        ("- - a\n  - b\n- c", [["a", "b"], "c"]),
        ("- a: 1\n  b: 2\n- c: 3", [{"a": 1, "b": 2}, {"c": 3}]),
        ("a:\n- 1\n- 2\nb: 3", {"a": [1, 2], "b": 3}),
        ("a:\n  - 1\n  - 2", {"a": [1, 2]}),
        ("a:\n  b:\n    c: d\n  e: f", {"a": {"b": {"c": "d"}, "e": "f"}}),
        ("a:", {"a": None}),
        ("a:\nb: 1", {"a": None, "b": 1}),
        ("a: []\nb: {}", {"a": [], "b": {}}),
        ("[1, [2, 3], {a: b}]", [1, [2, 3], {"a": "b"}]),
        ("{a: 1, b: [x, y], c: {d: e}}", {"a": 1, "b": ["x", "y"], "c": {"d": "e"}}),
        ("{a: 1,\n b: 2,\n}", {"a": 1, "b": 2}),
        ("[1 2]", ["1 2"]),  # a plain scalar may contain spaces, even in flow context
        ("{x: 1 y}", {"x": "1 y"}),
        ("- a\n  - b", ["a - b"]),
        ("[a,\n  b, # comment\n  c]", ["a", "b", "c"]),
        ('{"a":1,"b":[true,null]}', {"a": 1, "b": [True, None]}),
        ("{a, b: 1}", {"a": None, "b": 1}),
        ("[a: 1, b]", [{"a": 1}, "b"]),
        # scalars, core schema
        ("- null\n- Null\n- NULL\n- ~\n-", [None] * 5),
        ("- true\n- True\n- TRUE\n- false\n- FALSE", [True, True, True, False, False]),
        ("- yes\n- no\n- on\n- off", ["yes", "no", "on", "off"]),
        ("- 0\n- -12\n- +7\n- 0x1F\n- 0o17\n- 012", [0, -12, 7, 31, 15, 12]),
        ("- 1.5\n- -0.5\n- 1e3\n- .5\n- 2.", [1.5, -0.5, 1000.0, 0.5, 2.0]),
        ("- 1.2.3\n- 0x\n- 1_000\n- v1", ["1.2.3", "0x", "1_000", "v1"]),
        ('- "1"\n- \'true\'\n- "null"', ["1", "true", "null"]),
        ("a: http://x.y:80/p?q=1#frag", {"a": "http://x.y:80/p?q=1#frag"}),
        ("a: b#c", {"a": "b#c"}),
        ("a: b # c", {"a": "b"}),
        ("a: 'x # y'", {"a": "x # y"}),
        ("a: -1\nb: - x", None),  # second entry is invalid, checked in MALFORMED
        ("key with spaces: v", {"key with spaces": "v"}),
        ("'quoted key': v\n\"dq\": w", {"quoted key": "v", "dq": "w"}),
        ("1: a\ntrue: b\nnull: c", {"1": "a", "true": "b", "null": "c"}),
        ("a:    spaced   ", {"a": "spaced"}),
        ("a: x:y", {"a": "x:y"}),
        ("a: [x:y]", {"a": ["x:y"]}),
        # double-quoted escapes
        (r'a: "tab\tnl\nq\"bs\\u\u00e9x\x41U\U0001F600"',
         {"a": "tab\tnl\nq\"bs\\u\u00e9xAU\U0001F600"}),
        ('a: "one\n  two\n\n  three"', {"a": "one two\nthree"}),
        ('a: "join\\\n   ed"', {"a": "joined"}),
        ("a: 'one\n  two'", {"a": "one two"}),
        # multi-line plain scalars
        ("a: one\n  two\n\n  three\nb: 1", {"a": "one two\nthree", "b": 1}),
        ("- one\n  two", ["one two"]),
        # block scalars
        ("a: |\n  x\n   y\n\n  z\nb: 1", {"a": "x\n y\n\nz\n", "b": 1}),
        ("a: |-\n  x\n  y\n", {"a": "x\ny"}),
        ("a: |+\n  x\n\n\nb: 1", {"a": "x\n\n\n", "b": 1}),
        ("a: >\n  one\n  two\n\n  three\n   more\n  back\n",
         {"a": "one two\nthree\n more\nback\n"}),
        ("a: >-\n  folded\n  text\n", {"a": "folded text"}),
        ("a: |2\n   lead\n  x\n", {"a": " lead\nx\n"}),
        ("a: |\nb: 1", {"a": "", "b": 1}),
        ("a: | # comment\n  text\n", {"a": "text\n"}),
        ("- |\n  item\n- next", ["item\n", "next"]),
        ("|\n  top\n", "top\n"),
        ("a: |", {"a": ""}),
        ("a: |+", {"a": ""}),
        ("- |-", [""]),
        ("a: |\n\n  x\n", {"a": "\nx\n"}),
        ("a: |+\n\n  x\n\n", {"a": "\nx\n\n"}),
        ("a: >\n\n  x\n  y\n", {"a": "\nx y\n"}),
        ("a: &x", {"a": None}),
        ("a:\n  # comment between\n  b: 1\n# outdented comment\n  c: 2",
         {"a": {"b": 1, "c": 2}}),
        # anchors, aliases, merge keys
        ("a: &x {k: v}\nb: *x", {"a": {"k": "v"}, "b": {"k": "v"}}),
        ("base: &b\n  x: 1\n  y: 2\nderived:\n  <<: *b\n  y: 3",
         {"base": {"x": 1, "y": 2}, "derived": {"x": 1, "y": 3}}),
        ("a: &s hello\nb: [*s, *s]", {"a": "hello", "b": ["hello", "hello"]}),
        # tags
        ("a: !!str 123\nb: !!int '42'\nc: !!float 1\nd: !!bool 'true'\ne: !!null x",
         {"a": "123", "b": 42, "c": 1.0, "d": True, "e": None}),
        ("a: !custom value", {"a": "value"}),
        ("a: !!map\n  b: 1", {"a": {"b": 1}}),
        ("a: !!binary aGVsbG8=", {"a": "aGVsbG8="}),
        # documents and comments
        ("# c\n\n---\na: 1\n", {"a": 1}),
        ("--- |\n  text\n", "text\n"),
        ("%YAML 1.2\n---\na: 1", {"a": 1}),
        ("", None),
        ("# nothing", None),
        ("---\n", None),
        ("a: 1\n...\n", {"a": 1}),
        ("a: 1\r\nb: 2\r\n", {"a": 1, "b": 2}),
        ("\ufeffa: 1", {"a": 1}),
        ("plain scalar", "plain scalar"),
        ("  a: 1\n  b: 2", {"a": 1, "b": 2}),
    ]

    def test_cases(self):
        for text, want in self.CASES:
            if want is None and text not in ("", "# nothing", "---\n"):
                continue
            with self.subTest(text=text):
                self.assertEqual(loads(text), want)

    def test_special_floats(self):
        got = loads("- .inf\n- -.Inf\n- .NaN")
        self.assertEqual(got[0], math.inf)
        self.assertEqual(got[1], -math.inf)
        self.assertTrue(math.isnan(got[2]))

    def test_json_is_yaml(self):
        docs = [
            {"a": [1, 2.5, "x", None, True, False, {"b": {}}], "c": "multi\nline \"q\""},
            [],
            {},
            ["", " lead", "trail ", "a: b", "#x", "- y", "\u00e9\t"],
        ]
        for d in docs:
            for text in (json.dumps(d), json.dumps(d, indent=2)):
                with self.subTest(text=text):
                    self.assertEqual(loads(text), d)

    def test_loads_all(self):
        self.assertEqual(loads_all("a: 1\n---\nb: 2\n---\n- 3\n"), [{"a": 1}, {"b": 2}, [3]])
        self.assertEqual(loads_all("---\na: 1\n---\n"), [{"a": 1}, None])
        self.assertEqual(loads_all(""), [None])
        self.assertEqual(loads("a: 1\n---\nb: 2"), {"a": 1})

    def test_duplicate_keys(self):
        self.assertEqual(loads("a: 1\na: 2"), {"a": 2})
        with self.assertRaises(ValueError) as cm:
            loads("a: 1\nb: 0\na: 2", duplicate_keys="error")
        self.assertIn("line 3", str(cm.exception))
        self.assertIn('"a" already defined', str(cm.exception))
        with self.assertRaises(ValueError):
            loads("{a: 1, a: 2}", duplicate_keys="error")
        with self.assertRaises(ValueError):
            loads("a: 1", duplicate_keys="bogus")

    def test_bytes(self):
        self.assertEqual(loads(b"a: \xc3\xa9"), {"a": "\u00e9"})
        with self.assertRaises(ValueError):
            loads(b"a: \xff")
        with self.assertRaises(ValueError):
            loads(42)

    MALFORMED = [
        # text, line number in the message
        ("a: 1\nb: - x", 2),
        ("a: 1\n  b: 2", 2),
        ("a:\n  b: 1\n c: 2", 3),
        ("- a\nb", 2),
        ("a: [1, 2", 1),
        ("a: {x: 1", 1),
        ("a: [1] x", 1),
        ("a: {x: 1} y", 1),
        ('a: "unterminated', 1),
        ("a: 'unterminated\nb: 1", 1),
        (r'a: "\q"', 1),
        (r'a: "\x4"', 1),
        ("a: *nope", 1),
        ("a: b: c", 1),
        ("a:\n\tb: 1", 2),
        ("a: 1\n- b", 2),
        ("a:\n  - b\n - c", 3),
        ("a: |\n  x\n y: 2", 3),
        ("a: |0\n  x", 1),
        ("a: |x\n  y", 1),
        ("? complex\n: v", 1),
        ("a: @x", 1),
        ("a: `x", 1),
        ("]", 1),
        ("a: !!int abc", 1),
        ("a: !!bool maybe", 1),
        ("a: !!float x", 1),
        ("x: 1\ny: [a, b]]", 2),
        ("a: 1\nb\nc: 2", 2),
        ("<<: 5", 1),
        ("a: \"x\" y", 1),
    ]

    def test_malformed(self):
        for text, line in self.MALFORMED:
            with self.subTest(text=text):
                with self.assertRaises(ValueError) as cm:
                    loads(text)
                self.assertIsInstance(cm.exception, YAMLError)
                self.assertTrue(str(cm.exception).startswith("yaml: line %d: " % line),
                                str(cm.exception))

    def test_deep_nesting_is_an_error_not_a_crash(self):
        with self.assertRaises(ValueError):
            loads("[" * 5000 + "]" * 5000)


class DumpsTest(unittest.TestCase):
    def test_round_trip(self):
        docs = [
            {"a": 1, "b": [1, 2, {"c": "d", "e": [None, True, False]}], "f": {}, "g": []},
            {"s": ["", "1", "true", "null", "a: b", "- x", "#c", " lead", "x\ny", "é", "~"]},
            [[1, [2, [3]]], {"k": {"k2": {"k3": 1.5}}}],
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v:"}},
            "scalar",
            7,
        ]
        for d in docs:
            with self.subTest(d=d):
                text = dumps(d)
                self.assertEqual(loads(text), d, text)


if __name__ == "__main__":
    unittest.main()
