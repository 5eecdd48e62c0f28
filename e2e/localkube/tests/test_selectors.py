"""Tests for lk.selectors (label and field selectors)."""

import unittest

from lk.selectors import (
    LabelSelector,
    SelectorError,
    builtin_field_selectors,
    field_value,
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector_object,
    validate_label_key,
    validate_label_value,
)


class LabelSelectorParseTest(unittest.TestCase):
    ROUND_TRIP = [
        ("", ""),
        ("a=b", "a=b"),
        ("a==b", "a==b"),
        ("a!=b", "a!=b"),
        ("  a  =  b  ", "a=b"),
        ("a", "a"),
        ("!a", "!a"),
        ("! a", "!a"),
        ("a in (x,y)", "a in (x,y)"),
        ("a in (y, x)", "a in (x,y)"),
        ("a in(x)", "a in (x)"),
        ("a notin (x)", "a notin (x)"),
        ("a in (x,x)", "a in (x)"),
        ("a=", "a="),
        ("a in ()", "a in ()"),
        ("a in (,x)", "a in (,x)"),
        ("a>5", "a>5"),
        ("a<3", "a<3"),
        ("a<-3", None),  # kube also validates Gt/Lt values as label values
        # requirements are sorted by key
        ("z=1,a=2", "a=2,z=1"),
        ("env in (prod,qa),tier notin (front),!legacy,app",
         "app,env in (prod,qa),!legacy,tier notin (front)"),
        ("example.com/app=web", "example.com/app=web"),
        ("a.b-c_d=e.f-g_h", "a.b-c_d=e.f-g_h"),
        # keywords are plain identifiers in value position
        ("a=in", "a=in"),
        ("in=notin", "in=notin"),
        ("a in (in,notin)", "a in (in,notin)"),
        ("a=b\t,\nc=d", "a=b,c=d"),
    ]

    def test_round_trip(self):
        for text, want in self.ROUND_TRIP:
            with self.subTest(text=text):
                if want is None:
                    self.assertRaises(SelectorError, parse_label_selector, text)
                    continue
                sel = parse_label_selector(text)
                self.assertEqual(str(sel), want)
                # and the printed form parses back to the same selector
                self.assertEqual(parse_label_selector(str(sel)), sel)

    def test_none_and_empty(self):
        self.assertTrue(parse_label_selector(None).empty)
        self.assertTrue(parse_label_selector("").empty)
        self.assertTrue(parse_label_selector("  ").empty)
        self.assertFalse(parse_label_selector("a").empty)

    MALFORMED = [
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("a=b,,c", "found ',', expected: identifier after ','"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a in a", "unable to parse requirement: found 'a' expected: '('"),
        ("a in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (a b)", "found 'b', expected: ',' or ')'"),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
        ("a in (=)", "found '=', expected: ',', ')' or identifier"),
        ("=b", "found '=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("a>b", "for 'Gt', 'Lt' operators, the value must be an integer"),
        ("a<1.5", "for 'Gt', 'Lt' operators, the value must be an integer"),
        ("a/b/c=1", "a qualified name must consist of alphanumeric characters"),
        ("-a=1", "name part must consist of alphanumeric characters"),
        ("/a=1", "prefix part must be non-empty"),
        ("a/=1", "name part must be non-empty"),
        ("Example.com/a=1", "prefix part a lowercase RFC 1123 subdomain"),
        ("app=-bad", 'values[0][app]: Invalid value: "-bad": a valid label must be an empty '
                     "string or consist of alphanumeric characters, '-', '_' or '.', and must "
                     "start and end with an alphanumeric character (e.g. 'MyValue',  or "
                     "'my_value',  or '12345', regex used for validation is "
                     "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
        ("a in (ok,bad_)", "values[1][a]: Invalid value: \"bad_\""),
        ("a=" + "v" * 64, "must be no more than 63 characters"),
        ("k" * 64 + "=v", "name part must be no more than 63 characters"),
        ("a=b)", "found ')', expected: ',' or 'end of string'"),
        ("a==", None),
    ]

    def test_malformed(self):
        for text, fragment in self.MALFORMED:
            with self.subTest(text=text):
                if fragment is None:
                    # "a==" is valid: empty value
                    self.assertEqual(str(parse_label_selector(text)), "a==")
                    continue
                with self.assertRaises(SelectorError) as cm:
                    parse_label_selector(text)
                self.assertIn(fragment, str(cm.exception))

    def test_non_string(self):
        with self.assertRaises(SelectorError):
            parse_label_selector(5)

    def test_key_limits(self):
        self.assertEqual(validate_label_key("k" * 63), [])
        self.assertNotEqual(validate_label_key("k" * 64), [])
        self.assertEqual(validate_label_key("a" * 63 + "." + "b" * 63 + "/name"), [])
        long_prefix = ".".join(["a" * 63] * 4) + "/n"  # 255 char prefix
        self.assertTrue(any("253" in e for e in validate_label_key(long_prefix)))
        self.assertEqual(validate_label_value(""), [])
        self.assertEqual(validate_label_value("v" * 63), [])
        self.assertEqual(validate_label_value("v" * 64), ["must be no more than 63 characters"])
        self.assertNotEqual(validate_label_value("a b"), [])
        self.assertNotEqual(validate_label_value("_a"), [])


class LabelSelectorMatchTest(unittest.TestCase):
    CASES = [
        # selector, labels, expected
        ("", {}, True),
        ("", None, True),
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a=b", {}, False),
        ("a==b", {"a": "b", "x": "y"}, True),
        ("a!=b", {"a": "c"}, True),
        ("a!=b", {"a": "b"}, False),
        ("a!=b", {}, True),  # != matches objects without the key
        ("a!=b", None, True),
        ("a in (x,y)", {"a": "y"}, True),
        ("a in (x,y)", {"a": "z"}, False),
        ("a in (x,y)", {}, False),
        ("a notin (x,y)", {"a": "z"}, True),
        ("a notin (x,y)", {"a": "x"}, False),
        ("a notin (x,y)", {}, True),  # notin matches objects without the key
        ("a", {"a": ""}, True),
        ("a", {"b": "x"}, False),
        ("!a", {"b": "x"}, True),
        ("!a", {"a": "x"}, False),
        ("a=", {"a": ""}, True),
        ("a=", {}, False),
        ("a>5", {"a": "6"}, True),
        ("a>5", {"a": "5"}, False),
        ("a>5", {"a": "x"}, False),
        ("a>5", {}, False),
        ("a<5", {"a": "-1"}, True),
        ("a=b,c=d", {"a": "b", "c": "d"}, True),
        ("a=b,c=d", {"a": "b", "c": "e"}, False),
        ("a=b,!c", {"a": "b"}, True),
        ("app=web,tier in (front,back),!canary",
         {"app": "web", "tier": "back"}, True),
        ("app=web,tier in (front,back),!canary",
         {"app": "web", "tier": "back", "canary": "1"}, False),
    ]

    def test_matches(self):
        for sel, labels, want in self.CASES:
            with self.subTest(sel=sel, labels=labels):
                self.assertEqual(parse_label_selector(sel).matches(labels), want)

    def test_nothing(self):
        nothing = LabelSelector(nothing=True)
        self.assertFalse(nothing.matches({}))
        self.assertFalse(nothing.empty)


class LabelSelectorObjectTest(unittest.TestCase):
    def test_empty_matches_everything(self):
        for obj in (None, {}, {"matchLabels": {}}, {"matchLabels": None, "matchExpressions": []}):
            with self.subTest(obj=obj):
                sel = selector_from_label_selector_object(obj)
                self.assertTrue(sel.empty)
                self.assertTrue(sel.matches({"x": "y"}))
                self.assertTrue(sel.matches({}))

    def test_match_labels_and_expressions(self):
        sel = selector_from_label_selector_object({
            "matchLabels": {"app": "web", "tier": "front"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "qa"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["z1"]},
                {"key": "team", "operator": "Exists"},
            ],
        })
        self.assertEqual(str(sel),
                         "app=web,env in (prod,qa),!legacy,team,tier=front,zone notin (z1)")
        base = {"app": "web", "tier": "front", "env": "qa", "team": "t"}
        self.assertTrue(sel.matches(base))
        self.assertFalse(sel.matches(dict(base, legacy="1")))
        self.assertFalse(sel.matches(dict(base, zone="z1")))
        self.assertTrue(sel.matches(dict(base, zone="z2")))
        self.assertFalse(sel.matches(dict(base, env="dev")))
        self.assertFalse(sel.matches({k: v for k, v in base.items() if k != "team"}))

    def test_errors(self):
        cases = [
            ({"matchExpressions": [{"key": "a", "operator": "Foo"}]},
             '"Foo" is not a valid label selector operator'),
            ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
             "values set can't be empty"),
            ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
             "values set must be empty for exists and does not exist"),
            ({"matchLabels": {"a": "-x"}}, "a valid label must be an empty string"),
            ({"matchLabels": {"a b": "x"}}, "name part must consist of"),
            ({"matchLabels": ["a"]}, "matchLabels"),
            ({"matchExpressions": {"a": 1}}, "matchExpressions"),
            ("app=x", "label selector must be an object"),
        ]
        for obj, fragment in cases:
            with self.subTest(obj=obj):
                with self.assertRaises(SelectorError) as cm:
                    selector_from_label_selector_object(obj)
                self.assertIn(fragment, str(cm.exception))


class FieldSelectorTest(unittest.TestCase):
    POD = {
        "metadata": {"name": "p1", "namespace": "ns1"},
        "spec": {"nodeName": "node-1", "restartPolicy": "Always"},
        "status": {"phase": "Running", "podIPs": [{"ip": "127.0.1.5"}]},
    }

    def test_parse_and_match(self):
        allowed = builtin_field_selectors("pods")
        cases = [
            ("", True),
            ("metadata.name=p1", True),
            ("metadata.name==p1", True),
            ("metadata.name=p2", False),
            ("metadata.name!=p2", True),
            ("metadata.name!=p1", False),
            ("metadata.namespace=ns1,spec.nodeName=node-1", True),
            ("metadata.namespace=ns1,spec.nodeName=node-2", False),
            ("status.phase=Running", True),
            ("status.phase!=Running", False),
            ("status.podIP=127.0.1.5", True),  # falls back to podIPs[0]
            ("spec.nodeName=", False),
            ("status.nominatedNodeName=", True),  # missing reads as ""
            ("spec.schedulerName!=x", True),
            ("spec.hostNetwork=false", True),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                sel = parse_field_selector(text, allowed)
                self.assertEqual(sel.matches(self.POD), want)

    def test_requirements_and_str(self):
        sel = parse_field_selector("metadata.name==a,status.phase!=Failed", None)
        self.assertEqual(sel.requirements,
                         [("metadata.name", "=", "a"), ("status.phase", "!=", "Failed")])
        self.assertEqual(str(sel), "metadata.name=a,status.phase!=Failed")
        self.assertFalse(sel.empty)
        self.assertTrue(parse_field_selector("", None).empty)
        self.assertTrue(parse_field_selector(None, None).empty)
        self.assertEqual(parse_field_selector("metadata.name=x", None).matches_name(), "x")
        self.assertIsNone(parse_field_selector("metadata.name!=x", None).matches_name())

    def test_escapes(self):
        sel = parse_field_selector(r"metadata.name=a\,b\=c\\d", None)
        self.assertEqual(sel.requirements, [("metadata.name", "=", "a,b=c\\d")])
        self.assertTrue(sel.matches({"metadata": {"name": "a,b=c\\d"}}))
        self.assertEqual(parse_field_selector(str(sel), None).requirements, sel.requirements)

    def test_unknown_field(self):
        with self.assertRaises(SelectorError) as cm:
            parse_field_selector("foo.bar=x", {"metadata.name", "metadata.namespace"})
        self.assertEqual(
            str(cm.exception),
            '"foo.bar" is not a known field selector: only "metadata.name", "metadata.namespace"')
        with self.assertRaises(SelectorError) as cm:
            parse_field_selector("spec.color=red", {"metadata.namespace", "metadata.name",
                                                    "spec.size", "spec.color2"})
        self.assertEqual(
            str(cm.exception),
            '"spec.color" is not a known field selector: only "metadata.name", '
            '"metadata.namespace", "spec.color2", "spec.size"')

    def test_malformed(self):
        for text in ("metadata.name", "a", "=x", "metadata.name=x,bogus",
                     r"metadata.name=a\q", "metadata.name=a=b"):
            with self.subTest(text=text):
                with self.assertRaises(SelectorError):
                    parse_field_selector(text, None)
        with self.assertRaises(SelectorError):
            parse_field_selector(3, None)

    def test_builtin_sets(self):
        base = {"metadata.name", "metadata.namespace"}
        self.assertEqual(builtin_field_selectors("configmaps"), base)
        self.assertEqual(builtin_field_selectors("Deployment"), base)
        pods = builtin_field_selectors("Pod")
        for f in ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                  "spec.serviceAccountName", "status.phase", "status.podIP",
                  "status.nominatedNodeName"):
            self.assertIn(f, pods)
        ev = builtin_field_selectors("events")
        for f in ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                  "involvedObject.uid", "involvedObject.apiVersion",
                  "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                  "source", "type"):
            self.assertIn(f, ev)
        self.assertIn("type", builtin_field_selectors("secrets"))
        self.assertIn("spec.unschedulable", builtin_field_selectors("nodes"))
        self.assertIn("status.phase", builtin_field_selectors("namespaces"))
        self.assertIn("status.replicas", builtin_field_selectors("replicasets"))
        self.assertNotIn("spec.nodeName", builtin_field_selectors("services"))

    def test_typed_fields(self):
        node = {"metadata": {"name": "n"}, "spec": {}}
        self.assertEqual(field_value(node, "spec.unschedulable"), "false")
        node["spec"]["unschedulable"] = True
        self.assertEqual(field_value(node, "spec.unschedulable"), "true")
        rs = {"status": {"replicas": 3}}
        self.assertEqual(field_value(rs, "status.replicas"), "3")
        self.assertEqual(field_value({}, "status.replicas"), "0")
        ev = {"source": {"component": "kubelet"}, "involvedObject": {"kind": "Pod"}}
        self.assertEqual(field_value(ev, "source"), "kubelet")
        self.assertEqual(field_value(ev, "involvedObject.kind"), "Pod")
        self.assertEqual(field_value({"reportingComponent": "x"}, "source"), "x")
        sel = parse_field_selector("spec.unschedulable=true", builtin_field_selectors("nodes"))
        self.assertTrue(sel.matches(node))
        self.assertFalse(sel.matches({"spec": {}}))

    def test_custom_getters(self):
        sel = parse_field_selector("spec.color=red", {"spec.color"},
                                   getters={"spec.color": lambda o: o["c"]})
        self.assertTrue(sel.matches({"c": "red"}))
        self.assertFalse(sel.matches({"c": "blue"}))


if __name__ == "__main__":
    unittest.main()
