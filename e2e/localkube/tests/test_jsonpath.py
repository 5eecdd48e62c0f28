"""Tests for lk.jsonpath (the Kubernetes JSONPath dialect)."""

import unittest

from lk.jsonpath import evaluate, format_value, parse, render

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "labels": {"app": "web", "app.kubernetes.io/name": "frontend"},
        "annotations": {"a/b": "c"},
    },
    "spec": {
        "containers": [
            {"name": "main", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "envoy:1", "ports": [{"containerPort": 9901},
                                                          {"containerPort": 15000}]},
        ],
        "replicas": 3,
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "PodScheduled", "status": "True"},
        ],
        "score": 2.5,
        "ok": True,
    },
}

LIST = {"kind": "List", "items": [
    {"metadata": {"name": "a"}, "spec": {"replicas": 1}},
    {"metadata": {"name": "b"}, "spec": {"replicas": 3}},
    {"metadata": {"name": "c"}, "spec": {"replicas": 5}},
]}


class EvaluateTest(unittest.TestCase):
    CASES = [
        (POD, ".metadata.name", ["web-1"]),
        (POD, "{.metadata.name}", ["web-1"]),
        (POD, "$.metadata.name", ["web-1"]),
        (POD, "{$.kind}", ["Pod"]),
        (POD, ".spec.replicas", [3]),
        (POD, ".status.score", [2.5]),
        (POD, ".status.ok", [True]),
        (POD, ".spec.containers[0].image", ["nginx:1.25"]),
        (POD, ".spec.containers[-1].name", ["side"]),
        (POD, ".spec.containers[*].name", ["main", "side"]),
        (POD, ".spec.containers[*].ports[*].containerPort", [80, 9901, 15000]),
        (POD, ".spec.containers[0:1].name", ["main"]),
        (POD, ".spec.containers[0,1].name", ["main", "side"]),
        (POD, ".spec.containers[::-1].name", ["side", "main"]),
        (POD, ".spec.containers[5].name", []),
        (POD, ".metadata.labels['app.kubernetes.io/name']", ["frontend"]),
        (POD, '.metadata.labels["app"]', ["web"]),
        (POD, r".metadata.labels.app\.kubernetes\.io/name", ["frontend"]),
        (POD, ".metadata.annotations.a/b", ["c"]),
        (POD, ".metadata.labels['app','missing']", ["web"]),
        (POD, '.status.conditions[?(@.type=="Ready")].status', ["False"]),
        (POD, ".status.conditions[?(@.type=='Ready')].reason", ["ContainersNotReady"]),
        (POD, '.status.conditions[?(@.status!="True")].type', ["Ready"]),
        (POD, ".status.conditions[?(@.reason)].type", ["Ready"]),
        (POD, '.status.conditions[?(@.type=="Nope")].status', []),
        (POD, ".spec.containers[?(@.ports[0].containerPort > 100)].name", ["side"]),
        (POD, ".spec.containers[?(@.ports[0].containerPort <= 80)].name", ["main"]),
        (POD, "..containerPort", [80, 9901, 15000]),
        (POD, "{.metadata.name}{.kind}", ["web-1", "Pod"]),
        (POD, "{.metadata.name,.kind}", ["web-1", "Pod"]),
        (POD, '{"x"}', ["x"]),
        (POD, ".missing", []),
        (POD, ".missing.deeper[0]", []),
        (POD, ".metadata.name.deeper", []),
        (POD, ".metadata.labels.*", ["web", "frontend"]),
        (LIST, ".items[*].metadata.name", ["a", "b", "c"]),
        (LIST, ".items[?(@.spec.replicas>=3)].metadata.name", ["b", "c"]),
        (LIST, ".items[?(@.spec.replicas<3)].metadata.name", ["a"]),
        (LIST, ".items[?(@.spec.replicas==5)].metadata.name", ["c"]),
        (LIST, ".items[1:].metadata.name", ["b", "c"]),
        (LIST, "{range .items[*]}{.metadata.name}{end}", ["a", "b", "c"]),
        ({"a": None}, ".a", [None]),
        ({"a": [[1, 2], [3]]}, ".a[*][0]", [1, 3]),
    ]

    def test_cases(self):
        for obj, expr, want in self.CASES:
            with self.subTest(expr=expr):
                self.assertEqual(evaluate(obj, expr), want)

    MALFORMED = [
        "{.a", "{.a}}", "}", ".a[", ".a[x]", ".a[1:2:3:4]", ".a[::0]", ".a[?(@.x==)]",
        ".a[?(@.x==1]", ".a[?@.x]", ".a b", "{range .items[*]}{.x}", "{end}", "{range}",
        ".a.%", "{}", ".a[*", ".a['x]", "{.a,}",
    ]

    def test_malformed(self):
        for expr in self.MALFORMED:
            with self.subTest(expr=expr):
                with self.assertRaises(ValueError):
                    evaluate(POD, expr)
        with self.assertRaises(ValueError):
            evaluate(POD, None)

    def test_strict_missing(self):
        with self.assertRaises(ValueError) as cm:
            evaluate(POD, ".metadata.nope", allow_missing=False)
        self.assertIn("nope is not found", str(cm.exception))
        with self.assertRaises(ValueError):
            evaluate(POD, ".spec.containers[7]", allow_missing=False)
        self.assertEqual(evaluate(POD, ".metadata.name", allow_missing=False), ["web-1"])

    def test_parse_tree(self):
        tree = parse("x{.a}y")
        self.assertEqual([n[0] for n in tree], ["text", "exprs", "text"])

    def test_does_not_mutate(self):
        import copy
        before = copy.deepcopy(POD)
        evaluate(POD, "..name")
        render(POD, "{range .spec.containers[*]}{.name}{end}")
        self.assertEqual(POD, before)


class RenderTest(unittest.TestCase):
    CASES = [
        (POD, "{.metadata.name}", "web-1"),
        (POD, "name={.metadata.name} kind={.kind}", "name=web-1 kind=Pod"),
        (POD, "{.spec.containers[*].name}", "main side"),
        (POD, '{range .spec.containers[*]}{.name}{"\\n"}{end}', "main\nside\n"),
        (POD, '{range .spec.containers[*]}{.name}:{.image}{"\\t"}{end}',
         "main:nginx:1.25\tside:envoy:1\t"),
        (POD, "{.spec.replicas}", "3"),
        (POD, "{.status.ok}", "true"),
        (POD, "{.status.score}", "2.5"),
        (POD, "{.metadata.labels}", '{"app":"web","app.kubernetes.io/name":"frontend"}'),
        (POD, "{.spec.containers[0].ports}", '[{"containerPort":80}]'),
        (POD, "{.missing}", ""),
        (LIST, "{range .items[*]}{.metadata.name}={.spec.replicas},{end}", "a=1,b=3,c=5,"),
        (LIST, "{range .items[?(@.spec.replicas>1)]}[{.metadata.name}]{end}", "[b][c]"),
        (POD, "{ .metadata.name }", "web-1"),
    ]

    def test_cases(self):
        for obj, tpl, want in self.CASES:
            with self.subTest(tpl=tpl):
                self.assertEqual(render(obj, tpl), want)

    def test_format_value(self):
        self.assertEqual(format_value("s"), "s")
        self.assertEqual(format_value(1.0), "1")
        self.assertEqual(format_value(False), "false")
        self.assertEqual(format_value(None), "")
        self.assertEqual(format_value({"b": 1, "a": [1]}), '{"a":[1],"b":1}')


if __name__ == "__main__":
    unittest.main()
