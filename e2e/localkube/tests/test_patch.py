"""Tests for lk.patch: JSON patch, merge patch, strategic merge patch, server-side apply."""

import copy
import json
import unittest

from lk.patch import (
    LAST_APPLIED,
    PatchError,
    apply_patch,
    build_last_applied,
    json_equal,
    json_patch,
    last_applied_allowed_conflicts,
    merge_patch,
    print_manager,
    smp_list_strategy,
    strategic_merge_patch,
    update_managed_fields,
)


class JsonPatchRFC6902Test(unittest.TestCase):
    """The examples of RFC 6902 appendix A."""

    OK = [
        ("A.1", {"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
         {"baz": "qux", "foo": "bar"}),
        ("A.2", {"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
         {"foo": ["bar", "qux", "baz"]}),
        ("A.3", {"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}],
         {"foo": "bar"}),
        ("A.4", {"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
         {"foo": ["bar", "baz"]}),
        ("A.5", {"baz": "qux", "foo": "bar"},
         [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
        ("A.6", {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
         [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
         {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ("A.7", {"foo": ["all", "grass", "cows", "eat"]},
         [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
         {"foo": ["all", "cows", "eat", "grass"]}),
        ("A.8", {"baz": "qux", "foo": ["a", 2, "c"]},
         [{"op": "test", "path": "/baz", "value": "qux"},
          {"op": "test", "path": "/foo/1", "value": 2}],
         {"baz": "qux", "foo": ["a", 2, "c"]}),
        ("A.10", {"foo": "bar"},
         [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
         {"foo": "bar", "child": {"grandchild": {}}}),
        ("A.11", {"foo": "bar"},
         [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
         {"foo": "bar", "baz": "qux"}),
        ("A.14", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}],
         {"/": 9, "~1": 10}),
        ("A.16", {"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
         {"foo": ["bar", ["abc", "def"]]}),
        # more
        ("root replace", {"a": 1}, [{"op": "replace", "path": "", "value": [1]}], [1]),
        ("root add", {"a": 1}, [{"op": "add", "path": "", "value": {"b": 2}}], {"b": 2}),
        ("empty key", {}, [{"op": "add", "path": "/", "value": 1}], {"": 1}),
        ("slash key", {"a/b": 1}, [{"op": "replace", "path": "/a~1b", "value": 2}], {"a/b": 2}),
        ("tilde key", {"a~b": 1}, [{"op": "remove", "path": "/a~0b"}], {}),
        ("copy", {"a": {"x": [1]}}, [{"op": "copy", "from": "/a", "path": "/b"}],
         {"a": {"x": [1]}, "b": {"x": [1]}}),
        ("copy then modify is deep", {"a": {"x": 1}},
         [{"op": "copy", "from": "/a", "path": "/b"},
          {"op": "replace", "path": "/b/x", "value": 2}],
         {"a": {"x": 1}, "b": {"x": 2}}),
        ("append", {"a": [1]}, [{"op": "add", "path": "/a/1", "value": 2}], {"a": [1, 2]}),
        ("negative index", {"a": [1, 2, 3]}, [{"op": "remove", "path": "/a/-1"}],
         {"a": [1, 2]}),
        ("test number equality", {"a": 1}, [{"op": "test", "path": "/a", "value": 1.0}],
         {"a": 1}),
        ("test deep", {"a": {"b": [1, {"c": None}]}},
         [{"op": "test", "path": "/a", "value": {"b": [1, {"c": None}]}}],
         {"a": {"b": [1, {"c": None}]}}),
        ("k8s label with slash", {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}},
         [{"op": "replace", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "y"}],
         {"metadata": {"labels": {"app.kubernetes.io/name": "y"}}}),
        ("no ops", {"a": 1}, [], {"a": 1}),
    ]

    def test_ok(self):
        for name, doc, ops, want in self.OK:
            with self.subTest(name=name):
                before = copy.deepcopy(doc)
                self.assertEqual(json_patch(doc, ops), want)
                self.assertEqual(doc, before, "input mutated")

    FAIL_422 = [
        ("A.9", {"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}],
         "testing value /baz failed"),
        ("A.12", {"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}],
         "add operation does not apply: doc is missing path"),
        ("A.15", {"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}],
         "test failed"),
        ("remove missing", {"a": 1}, [{"op": "remove", "path": "/b"}],
         "Unable to remove nonexistent key: b"),
        ("replace missing", {"a": 1}, [{"op": "replace", "path": "/b", "value": 1}],
         "replace operation does not apply: doc is missing key: /b"),
        ("move missing", {"a": 1}, [{"op": "move", "from": "/b", "path": "/c"}],
         "move operation does not apply"),
        ("copy missing", {"a": 1}, [{"op": "copy", "from": "/b", "path": "/c"}],
         "copy operation does not apply"),
        ("index out of range", {"a": [1]}, [{"op": "add", "path": "/a/5", "value": 1}],
         "invalid index"),
        ("bad index", {"a": [1]}, [{"op": "replace", "path": "/a/x", "value": 1}],
         "doc is missing path"),
        ("leading zero", {"a": [1, 2]}, [{"op": "remove", "path": "/a/01"}],
         "doc is missing path"),
        ("move into child", {"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}],
         "prefix"),
        ("pointer without slash", {"a": 1}, [{"op": "remove", "path": "a"}], "JSON pointer"),
        ("bad escape", {"a": 1}, [{"op": "remove", "path": "/a~2"}], "escape"),
        ("test bool vs int", {"a": True}, [{"op": "test", "path": "/a", "value": 1}],
         "test failed"),
        ("through scalar", {"a": 1}, [{"op": "add", "path": "/a/b", "value": 1}],
         "doc is missing path"),
        ("atomic: later op fails", {"a": 1},
         [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 5}],
         "test failed"),
    ]

    def test_unprocessable(self):
        for name, doc, ops, fragment in self.FAIL_422:
            with self.subTest(name=name):
                before = copy.deepcopy(doc)
                with self.assertRaises(PatchError) as cm:
                    json_patch(doc, ops)
                e = cm.exception
                self.assertEqual(e.code, 422)
                self.assertEqual(e.reason, "Invalid")
                self.assertEqual(str(e),
                                 "the server rejected our request due to an error in our request")
                self.assertIn(fragment, e.detail)
                self.assertEqual(e.causes[0]["message"], e.detail)
                self.assertEqual(doc, before)

    FAIL_400 = [
        ("not a list", {"op": "add", "path": "/a", "value": 1}),
        ("op not object", ["add"]),
        ("unknown op", [{"op": "frobnicate", "path": "/a"}]),
        ("missing op", [{"path": "/a", "value": 1}]),
        ("missing path", [{"op": "add", "value": 1}]),
        ("path not string", [{"op": "add", "path": 5, "value": 1}]),
        ("missing value", [{"op": "add", "path": "/a"}]),
        ("replace missing value", [{"op": "replace", "path": "/a"}]),
        ("test missing value", [{"op": "test", "path": "/a"}]),
        ("move missing from", [{"op": "move", "path": "/a"}]),
        ("copy bad from", [{"op": "copy", "path": "/a", "from": 1}]),
    ]

    def test_malformed(self):
        for name, ops in self.FAIL_400:
            with self.subTest(name=name):
                with self.assertRaises(PatchError) as cm:
                    json_patch({"a": 1}, ops)
                self.assertEqual(cm.exception.code, 400)
                self.assertEqual(cm.exception.reason, "BadRequest")


class MergePatchRFC7386Test(unittest.TestCase):
    CASES = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # kube usage
        ({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}},
         {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"replicas": 4}},
         {"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"replicas": 4}}),
        ({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}},
         {"spec": {"containers": [{"name": "c"}]}},
         {"spec": {"containers": [{"name": "c"}]}}),
    ]

    def test_cases(self):
        for doc, patch, want in self.CASES:
            with self.subTest(doc=doc, patch=patch):
                before, pbefore = copy.deepcopy(doc), copy.deepcopy(patch)
                self.assertEqual(merge_patch(doc, patch), want)
                self.assertEqual(doc, before)
                self.assertEqual(patch, pbefore)

    def test_result_is_independent(self):
        patch = {"a": {"b": [1]}}
        out = merge_patch({}, patch)
        out["a"]["b"].append(2)
        self.assertEqual(patch, {"a": {"b": [1]}})


def _deployment():
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "patch-demo", "labels": {"app": "nginx"},
                     "finalizers": ["a.example.com/f", "b.example.com/f"]},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "nginx"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {
                    "containers": [{
                        "name": "patch-demo-ctr",
                        "image": "nginx",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    }],
                    "tolerations": [{"effect": "NoSchedule", "key": "dedicated",
                                     "value": "test-team"}],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }


def _containers(d):
    return d["spec"]["template"]["spec"]["containers"]


class StrategicMergePatchTest(unittest.TestCase):
    def test_doc_example_containers_merge(self):
        # update-api-object-kubectl-patch: the new container is merged in by name, first
        d = _deployment()
        before = copy.deepcopy(d)
        p = {"spec": {"template": {"spec": {"containers": [
            {"name": "patch-demo-ctr-2", "image": "redis"}]}}}}
        out = strategic_merge_patch(d, p, "Deployment")
        self.assertEqual([c["name"] for c in _containers(out)],
                         ["patch-demo-ctr-2", "patch-demo-ctr"])
        self.assertEqual(_containers(out)[0], {"name": "patch-demo-ctr-2", "image": "redis"})
        self.assertEqual(d, before, "input mutated")
        # the same patch as a JSON merge patch replaces the list
        out2 = merge_patch(d, p)
        self.assertEqual([c["name"] for c in _containers(out2)], ["patch-demo-ctr-2"])

    def test_doc_example_tolerations_replaced(self):
        p = {"spec": {"template": {"spec": {"tolerations": [
            {"effect": "NoSchedule", "key": "disktype", "value": "ssd"}]}}}}
        out = strategic_merge_patch(_deployment(), p, "deployments")
        self.assertEqual(out["spec"]["template"]["spec"]["tolerations"],
                         [{"effect": "NoSchedule", "key": "disktype", "value": "ssd"}])

    def test_doc_example_retain_keys(self):
        p = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
        out = strategic_merge_patch(_deployment(), p, "Deployment")
        self.assertEqual(out["spec"]["strategy"], {"type": "Recreate"})
        # without $retainKeys the rollingUpdate stays
        out = strategic_merge_patch(_deployment(), {"spec": {"strategy": {"type": "Recreate"}}},
                                    "Deployment")
        self.assertIn("rollingUpdate", out["spec"]["strategy"])

    def test_merge_inside_container(self):
        p = {"spec": {"template": {"spec": {"containers": [{
            "name": "patch-demo-ctr",
            "image": "nginx:1.27",
            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
            "ports": [{"containerPort": 8080}],
        }]}}}}
        c = _containers(strategic_merge_patch(_deployment(), p, "Deployment"))[0]
        self.assertEqual(c["image"], "nginx:1.27")
        self.assertEqual(c["env"], [{"name": "A", "value": "1"}, {"name": "B", "value": "20"},
                                    {"name": "C", "value": "3"}])
        self.assertEqual(c["ports"], [{"containerPort": 8080},
                                      {"containerPort": 80, "protocol": "TCP"}])

    def test_delete_directive_in_list(self):
        p = {"spec": {"template": {"spec": {"containers": [{
            "name": "patch-demo-ctr",
            "env": [{"name": "A", "$patch": "delete"}],
        }]}}}}
        c = _containers(strategic_merge_patch(_deployment(), p, "Deployment"))[0]
        self.assertEqual(c["env"], [{"name": "B", "value": "2"}])
        p = {"spec": {"template": {"spec": {"containers": [
            {"name": "patch-demo-ctr", "$patch": "delete"}]}}}}
        self.assertEqual(_containers(strategic_merge_patch(_deployment(), p, "Deployment")), [])

    def test_replace_directive_in_list(self):
        p = {"spec": {"template": {"spec": {"containers": [
            {"name": "only", "image": "busybox"}, {"$patch": "replace"}]}}}}
        self.assertEqual(_containers(strategic_merge_patch(_deployment(), p, "Deployment")),
                         [{"name": "only", "image": "busybox"}])

    def test_map_directives(self):
        d = _deployment()
        p = {"spec": {"selector": {"$patch": "replace", "matchLabels": {"x": "y"}}}}
        out = strategic_merge_patch(d, p, "Deployment")
        self.assertEqual(out["spec"]["selector"], {"matchLabels": {"x": "y"}})
        p = {"spec": {"strategy": {"$patch": "delete"}}}
        self.assertEqual(strategic_merge_patch(d, p, "Deployment")["spec"]["strategy"], {})
        p = {"metadata": {"labels": {"$patch": "merge", "b": "2"}}}
        self.assertEqual(strategic_merge_patch(d, p, "Deployment")["metadata"]["labels"],
                         {"app": "nginx", "b": "2"})
        self.assertEqual(strategic_merge_patch(d, {"$patch": "delete"}, "Deployment"), {})

    def test_null_deletes(self):
        p = {"metadata": {"labels": {"app": None}}, "spec": {"strategy": None}}
        out = strategic_merge_patch(_deployment(), p, "Deployment")
        self.assertEqual(out["metadata"]["labels"], {})
        self.assertNotIn("strategy", out["spec"])

    def test_primitive_merge_list(self):
        d = _deployment()
        out = strategic_merge_patch(d, {"metadata": {"finalizers": ["c.example.com/f",
                                                                    "a.example.com/f"]}},
                                    "Deployment")
        self.assertEqual(out["metadata"]["finalizers"],
                         ["c.example.com/f", "a.example.com/f", "b.example.com/f"])
        out = strategic_merge_patch(
            d, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"]}},
            "Deployment")
        self.assertEqual(out["metadata"]["finalizers"], ["b.example.com/f"])

    def test_set_element_order(self):
        d = _deployment()
        # what kubectl apply sends when a second container is added before the first
        p = {"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "side"}, {"name": "patch-demo-ctr"}],
            "containers": [{"name": "side", "image": "envoy"}],
        }}}}
        out = strategic_merge_patch(d, p, "Deployment")
        self.assertEqual([c["name"] for c in _containers(out)], ["side", "patch-demo-ctr"])
        # pure reorder of env
        p = {"spec": {"template": {"spec": {"containers": [{
            "name": "patch-demo-ctr",
            "$setElementOrder/env": [{"name": "B"}, {"name": "A"}]}]}}}}
        c = _containers(strategic_merge_patch(d, p, "Deployment"))[0]
        self.assertEqual([e["name"] for e in c["env"]], ["B", "A"])
        # primitive list with order + deletion
        p = {"metadata": {"$setElementOrder/finalizers": ["b.example.com/f", "z"],
                          "$deleteFromPrimitiveList/finalizers": ["a.example.com/f"],
                          "finalizers": ["z"]}}
        self.assertEqual(strategic_merge_patch(d, p, "Deployment")["metadata"]["finalizers"],
                         ["b.example.com/f", "z"])

    def test_kubectl_apply_service_patch(self):
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
               "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.5",
                        "ports": [{"name": "http", "port": 80, "protocol": "TCP",
                                   "targetPort": 8080},
                                  {"name": "https", "port": 443, "protocol": "TCP",
                                   "targetPort": 8443}],
                        "selector": {"app": "web"}}}
        p = {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                          "{}"}},
             "spec": {"$setElementOrder/ports": [{"port": 80}, {"port": 9090}],
                      "ports": [{"port": 80, "targetPort": 8081},
                                {"name": "metrics", "port": 9090},
                                {"$patch": "delete", "port": 443}],
                      "selector": {"app": "web2"}}}
        out = strategic_merge_patch(svc, p, "Service")
        self.assertEqual(out["spec"]["ports"], [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8081},
            {"name": "metrics", "port": 9090}])
        self.assertEqual(out["spec"]["clusterIP"], "10.0.0.5")
        self.assertEqual(out["spec"]["selector"], {"app": "web2"})
        self.assertIn("kubectl.kubernetes.io/last-applied-configuration",
                      out["metadata"]["annotations"])

    def test_configmap_and_namespace(self):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
              "data": {"k1": "v1", "k2": "v2"}}
        out = strategic_merge_patch(cm, {"data": {"k2": None, "k3": "v3"}}, "ConfigMap")
        self.assertEqual(out["data"], {"k1": "v1", "k3": "v3"})
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"},
              "spec": {"finalizers": ["kubernetes"]}}
        out = strategic_merge_patch(ns, {"metadata": {"labels": {"team": "x"}}}, "namespaces")
        self.assertEqual(out["metadata"]["labels"], {"team": "x"})
        self.assertEqual(out["spec"], {"finalizers": ["kubernetes"]})

    def test_pod_status_conditions_by_type(self):
        pod = {"status": {"conditions": [{"type": "Ready", "status": "False"},
                                         {"type": "PodScheduled", "status": "True"}]}}
        out = strategic_merge_patch(pod, {"status": {"conditions": [
            {"type": "Ready", "status": "True"}]}}, "Pod")
        self.assertEqual(out["status"]["conditions"],
                         [{"type": "Ready", "status": "True"},
                          {"type": "PodScheduled", "status": "True"}])

    def test_owner_references_by_uid(self):
        obj = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}}
        out = strategic_merge_patch(obj, {"metadata": {"ownerReferences": [
            {"uid": "2", "name": "b"}, {"uid": "1", "name": "a2"}]}}, "ConfigMap")
        self.assertEqual(out["metadata"]["ownerReferences"],
                         [{"uid": "2", "name": "b"}, {"uid": "1", "name": "a2"}])

    def test_new_subtree_is_processed(self):
        d = {"metadata": {"name": "x"}}
        p = {"spec": {"template": {"spec": {"containers": [
            {"name": "a", "env": [{"name": "X", "$patch": "delete"}, {"name": "Y", "value": None}]}
        ]}}}}
        out = strategic_merge_patch(d, p, "Deployment")
        self.assertEqual(_containers(out), [{"name": "a", "env": [{"name": "Y"}]}])

    def test_unknown_fields_merge_generically(self):
        out = strategic_merge_patch({"spec": {"x": {"a": 1}, "l": [1, 2]}},
                                    {"spec": {"x": {"b": 2}, "l": [3]}}, "Deployment")
        self.assertEqual(out["spec"], {"x": {"a": 1, "b": 2}, "l": [3]})

    def test_errors(self):
        d = _deployment()
        cases = [
            ("not an object", ["x"]),
            ("missing merge key", {"spec": {"template": {"spec": {"containers": [
                {"image": "x"}]}}}}),
            ("delete without key", {"spec": {"template": {"spec": {"containers": [
                {"$patch": "delete"}]}}}}),
            ("merge directive in list", {"spec": {"template": {"spec": {"containers": [
                {"$patch": "merge"}]}}}}),
            ("bad list directive", {"spec": {"template": {"spec": {"containers": [
                {"name": "x", "$patch": "frob"}]}}}}),
            ("bad map directive", {"spec": {"$patch": "frob"}}),
            ("bad retainKeys", {"spec": {"strategy": {"$retainKeys": "type"}}}),
            ("bad setElementOrder", {"spec": {"template": {"spec": {
                "$setElementOrder/containers": "x"}}}}),
            ("bad deleteFromPrimitiveList", {"metadata": {
                "$deleteFromPrimitiveList/finalizers": "a"}}),
            ("unknown directive", {"spec": {"$frob": 1}}),
            ("mixed list", {"spec": {"template": {"spec": {"containers": [
                {"name": "x"}, "y"]}}}}),
        ]
        for name, p in cases:
            with self.subTest(name=name):
                with self.assertRaises(PatchError) as cm:
                    strategic_merge_patch(d, p, "Deployment")
                self.assertEqual(cm.exception.code, 400)

    def test_strategy_table(self):
        self.assertEqual(smp_list_strategy("Deployment", "spec.template.spec.containers"),
                         ("merge", "name"))
        self.assertEqual(smp_list_strategy("pods", "spec.containers"), ("merge", "name"))
        self.assertEqual(smp_list_strategy("Pod", "spec.volumes"), ("merge,retainKeys", "name"))
        self.assertEqual(smp_list_strategy("Pod", "spec.imagePullSecrets"), ("merge", "name"))
        self.assertEqual(smp_list_strategy("Pod", "spec.hostAliases"), ("merge", "ip"))
        self.assertEqual(smp_list_strategy("Pod", "spec.tolerations"), ("", None))
        self.assertEqual(smp_list_strategy("DaemonSet",
                                           "spec.template.spec.initContainers"), ("merge", "name"))
        self.assertEqual(smp_list_strategy("ReplicaSet",
                                           "spec.template.spec.containers.ports"),
                         ("merge", "containerPort"))
        self.assertEqual(smp_list_strategy("Pod", "spec.containers.env"), ("merge", "name"))
        self.assertEqual(smp_list_strategy("Pod", "spec.containers.volumeMounts"),
                         ("merge", "mountPath"))
        self.assertEqual(smp_list_strategy("Service", "spec.ports"), ("merge", "port"))
        self.assertEqual(smp_list_strategy("Node", "status.addresses"), ("merge", "type"))
        self.assertEqual(smp_list_strategy("Endpoints", "subsets"), ("", None))
        self.assertEqual(smp_list_strategy("ConfigMap", "metadata.ownerReferences"),
                         ("merge", "uid"))
        self.assertEqual(smp_list_strategy("ConfigMap", "metadata.finalizers"), ("merge", None))


T0 = "2024-01-01T00:00:00Z"
T1 = "2024-01-01T00:01:00Z"


def _cm(data, labels=None):
    o = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"},
         "data": data}
    if labels is not None:
        o["metadata"]["labels"] = labels
    return o


class ApplyTest(unittest.TestCase):
    def test_create(self):
        applied = _cm({"k": "v"}, {"app": "x"})
        out = apply_patch(None, applied, "kubectl", False, now=T0)
        self.assertEqual(out["data"], {"k": "v"})
        mf = out["metadata"]["managedFields"]
        self.assertEqual(len(mf), 1)
        self.assertEqual(mf[0], {
            "manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
        })
        self.assertNotIn("managedFields", applied["metadata"], "input mutated")

    def test_merge_into_existing(self):
        existing = _cm({"a": "1", "b": "2"})
        existing["metadata"]["uid"] = "u1"
        out = apply_patch(existing, _cm({"b": "3", "c": "4"}), "mgr", False, now=T0)
        self.assertEqual(out["data"], {"a": "1", "b": "3", "c": "4"})
        self.assertEqual(out["metadata"]["uid"], "u1")
        self.assertNotIn("managedFields", existing["metadata"])

    def test_conflict_and_force(self):
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"replicas": 3}}
        first = apply_patch(None, dep, "other", False, now=T0)
        mine = copy.deepcopy(dep)
        mine["spec"]["replicas"] = 5
        with self.assertRaises(PatchError) as cm:
            apply_patch(first, mine, "me", False, now=T1)
        e = cm.exception
        self.assertEqual(e.code, 409)
        self.assertEqual(e.reason, "Conflict")
        self.assertEqual(str(e),
                         'Apply failed with 1 conflict: conflict with "other": .spec.replicas')
        self.assertEqual(e.causes, [{"reason": "FieldManagerConflict",
                                     "message": 'conflict with "other"',
                                     "field": ".spec.replicas"}])
        forced = apply_patch(first, mine, "me", True, now=T1)
        self.assertEqual(forced["spec"]["replicas"], 5)
        managers = {m["manager"]: m for m in forced["metadata"]["managedFields"]}
        self.assertEqual(managers["me"]["fieldsV1"], {"f:spec": {"f:replicas": {}}})
        self.assertNotIn("other", managers)  # it owned nothing else
        # the same value is shared ownership, not a conflict
        same = apply_patch(first, dep, "me", False, now=T1)
        self.assertEqual({m["manager"] for m in same["metadata"]["managedFields"]},
                         {"other", "me"})

    def test_multiple_conflicts_message(self):
        base = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                "data": {"a": "1", "b": "2"}}
        obj = apply_patch(None, base, "alpha", False, now=T0)
        obj = apply_patch(obj, {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "c"}, "data": {"c": "3"}}, "beta", False)
        with self.assertRaises(PatchError) as cm:
            apply_patch(obj, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                              "data": {"a": "x", "b": "y", "c": "z"}}, "gamma", False)
        self.assertEqual(str(cm.exception),
                         "Apply failed with 3 conflicts: conflicts with \"alpha\":\n"
                         "- .data.a\n- .data.b\nconflicts with \"beta\":\n- .data.c")
        self.assertEqual(len(cm.exception.causes), 3)

    def test_update_managers_do_not_conflict_by_default(self):
        existing = _cm({"a": "1"})
        existing["metadata"]["managedFields"] = [{
            "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
            "time": T0, "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]
        out = apply_patch(existing, _cm({"a": "2"}), "kubectl", False, now=T1)
        self.assertEqual(out["data"]["a"], "2")
        # the Update manager lost the field it no longer determines
        self.assertEqual([m["manager"] for m in out["metadata"]["managedFields"]], ["kubectl"])
        with self.assertRaises(PatchError) as cm:
            apply_patch(existing, _cm({"a": "2"}), "kubectl", False,
                        conflict_operations=("Apply", "Update"))
        self.assertIn('conflict with "kubectl-client-side-apply"', str(cm.exception))

    def test_removed_fields_are_deleted_unless_shared(self):
        obj = apply_patch(None, _cm({"a": "1", "b": "2"}, {"x": "1", "y": "2"}), "m1", False)
        obj = apply_patch(obj, _cm({"a": "1"}, {"x": "1"}), "m1", False)
        self.assertEqual(obj["data"], {"a": "1"})
        self.assertEqual(obj["metadata"]["labels"], {"x": "1"})
        # a field also owned by another manager survives
        obj = apply_patch(obj, _cm({"a": "1"}), "m2", False)
        obj = apply_patch(obj, _cm({}), "m1", False)
        self.assertEqual(obj["data"], {"a": "1"})

    def test_keyed_lists_merge(self):
        d1 = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
              "spec": {"template": {"spec": {"containers": [
                  {"name": "a", "image": "img-a", "ports": [{"containerPort": 80}]}]}}}}
        d2 = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
              "spec": {"template": {"spec": {"containers": [{"name": "b", "image": "img-b"}]}}}}
        obj = apply_patch(None, d1, "m1", False)
        obj = apply_patch(obj, d2, "m2", False)
        self.assertEqual([c["name"] for c in _containers(obj)], ["a", "b"])
        fields = {m["manager"]: m["fieldsV1"] for m in obj["metadata"]["managedFields"]}
        ctr = fields["m1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
        self.assertIn('k:{"name":"a"}', ctr)
        self.assertEqual(ctr['k:{"name":"a"}']["."], {})
        self.assertIn('k:{"containerPort":80}', ctr['k:{"name":"a"}']["f:ports"])
        # m1 stops applying its container: it is removed; m2's stays
        d1b = copy.deepcopy(d1)
        d1b["spec"]["template"]["spec"]["containers"] = []
        obj = apply_patch(obj, d1b, "m1", False)
        self.assertEqual([c["name"] for c in _containers(obj)], ["b"])
        # conflict path format for keyed items
        d2c = copy.deepcopy(d2)
        _containers(d2c)[0]["image"] = "img-c"
        with self.assertRaises(PatchError) as cm:
            apply_patch(obj, d2c, "m3", False)
        self.assertEqual(str(cm.exception),
                         'Apply failed with 1 conflict: conflict with "m2": '
                         '.spec.template.spec.containers[name="b"].image')

    def test_crd_schema_list_map(self):
        schema = {"type": "object", "properties": {"status": {"type": "object", "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["type"],
                           "items": {"type": "object", "properties": {
                               "type": {"type": "string"}, "status": {"type": "string"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set",
                     "items": {"type": "string"}},
            "other": {"type": "array", "items": {"type": "string"}},
        }}}}
        base = {"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"},
                "status": {"conditions": [{"type": "A", "status": "True"}], "tags": ["x"],
                           "other": ["1"]}}
        obj = apply_patch(None, base, "m1", False, schema=schema)
        upd = {"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"name": "t"},
               "status": {"conditions": [{"type": "B", "status": "False"}], "tags": ["y"]}}
        out = apply_patch(obj, upd, "m2", False, schema=schema)
        self.assertEqual(out["status"]["conditions"],
                         [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}])
        self.assertEqual(out["status"]["tags"], ["x", "y"])
        self.assertEqual(out["status"]["other"], ["1"])
        # an atomic list owned by m1 with another value conflicts as a whole
        atomic = copy.deepcopy(upd)
        atomic["status"] = {"other": ["2"]}
        with self.assertRaises(PatchError) as cm:
            apply_patch(obj, atomic, "m2", False, schema=schema)
        self.assertIn(".status.other", str(cm.exception))
        # the same condition type updated by another manager conflicts on its field only
        cond = copy.deepcopy(upd)
        cond["status"] = {"conditions": [{"type": "A", "status": "False"}]}
        with self.assertRaises(PatchError) as cm:
            apply_patch(obj, cond, "m2", False, schema=schema)
        self.assertEqual(str(cm.exception), 'Apply failed with 1 conflict: conflict with "m1": '
                                            '.status.conditions[type="A"].status')

    def test_bad_requests(self):
        with self.assertRaises(PatchError) as cm:
            apply_patch(None, ["x"], "m", False)
        self.assertEqual(cm.exception.code, 400)
        with self.assertRaises(PatchError) as cm:
            apply_patch(None, _cm({}), "", False)
        self.assertEqual(cm.exception.code, 400)
        bad = _cm({})
        bad["metadata"]["managedFields"] = [{"manager": "x"}]
        with self.assertRaises(PatchError) as cm:
            apply_patch(None, bad, "m", False)
        self.assertEqual(cm.exception.code, 400)
        self.assertIn("managedFields must be nil", str(cm.exception))

    def test_idempotent(self):
        obj = apply_patch(None, _cm({"a": "1"}), "m", False, now=T0)
        again = apply_patch(obj, _cm({"a": "1"}), "m", False, now=T1)
        self.assertEqual(again, obj)  # a no-op apply keeps the old timestamp
        changed = apply_patch(obj, _cm({"a": "2"}), "m", False, now=T1)
        self.assertEqual(changed["metadata"]["managedFields"][0]["time"], T1)


class UpdateManagedFieldsTest(unittest.TestCase):
    """managedFields of Update operations and kubectl's client-side -> server-side upgrade."""

    def test_create_update_remove(self):
        obj = _cm({"a": "1", "b": "2"}, {"x": "1"})
        mf = update_managed_fields(None, obj, None, "mk", "v1", now=T0)
        self.assertEqual(mf, [{"manager": "mk", "operation": "Update", "apiVersion": "v1",
                               "time": T0, "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}},
                                            "f:metadata": {"f:labels": {"f:x": {}}}}}])
        obj["metadata"]["managedFields"] = mf
        new = copy.deepcopy(obj)
        new["data"] = {"a": "1", "b": "3", "c": "4"}
        mf = update_managed_fields(obj, new, mf, "ed", "v1", now=T1)
        by = {e["manager"]: e for e in mf}
        self.assertEqual(by["mk"]["fieldsV1"], {"f:data": {"f:a": {}},
                                                "f:metadata": {"f:labels": {"f:x": {}}}})
        self.assertEqual(by["ed"]["fieldsV1"], {"f:data": {"f:b": {}, "f:c": {}}})
        self.assertEqual(by["mk"]["time"], T0)  # untouched entries keep their time
        # removing a field takes it from every owner; an owner of nothing disappears
        new2 = copy.deepcopy(new)
        new2["data"] = {"b": "3", "c": "4"}
        new2["metadata"].pop("labels")
        mf = update_managed_fields(new, new2, mf, "rm", "v1", now=T1)
        self.assertEqual([e["manager"] for e in mf], ["ed"])
        # a second write by the same manager adds to its entry
        new3 = copy.deepcopy(new2)
        new3["data"]["d"] = "5"
        mf = update_managed_fields(new2, new3, mf, "ed", "v1", now=T1)
        self.assertEqual(mf[0]["fieldsV1"], {"f:data": {"f:b": {}, "f:c": {}, "f:d": {}}})

    def test_scopes_lists_and_sorting(self):
        old = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}},
               "status": {"replicas": 1}}
        new = copy.deepcopy(old)
        new["spec"]["template"]["spec"]["containers"][0]["image"] = "b"
        new["status"]["replicas"] = 2
        mf = update_managed_fields(old, new, [{"manager": "ap", "operation": "Apply",
                                               "apiVersion": "apps/v1", "time": T1,
                                               "fieldsType": "FieldsV1",
                                               "fieldsV1": {"f:spec": {"f:paused": {}}}}],
                                   "ed", "apps/v1", now=T0, scope="nostatus")
        self.assertEqual([e["operation"] for e in mf], ["Apply", "Update"])
        self.assertEqual(mf[1]["fieldsV1"], {"f:spec": {"f:template": {"f:spec": {
            "f:containers": {'k:{"name":"c"}': {"f:image": {}}}}}}})
        mf = update_managed_fields(old, new, None, "st", "apps/v1", now=T0, scope="status",
                                   subresource="status")
        self.assertEqual((mf[0]["subresource"], mf[0]["fieldsV1"]),
                         ("status", {"f:status": {"f:replicas": {}}}))

    def test_print_manager_and_subresource_conflicts(self):
        self.assertEqual(print_manager({"manager": "m", "operation": "Apply"}), '"m"')
        self.assertEqual(print_manager({"manager": "m", "operation": "Update",
                                        "apiVersion": "apps/v1", "subresource": "scale"}),
                         '"m" with subresource "scale" using apps/v1')
        existing = _cm({"a": "1"})
        existing["metadata"]["managedFields"] = [{
            "manager": "scaler", "operation": "Update", "apiVersion": "v1", "time": T0,
            "subresource": "status", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}}}]
        # by default a manager of another subresource is not a conflict
        apply_patch(existing, _cm({"a": "2"}), "me", False,
                    conflict_operations=("Apply", "Update"))
        with self.assertRaises(PatchError) as cm:
            apply_patch(existing, _cm({"a": "2"}), "me", False,
                        conflict_operations=("Apply", "Update"), subresource_conflicts=True)
        self.assertEqual(str(cm.exception), 'Apply failed with 1 conflict: conflict with '
                                            '"scaler" with subresource "status" using v1: .data.a')

    def test_last_applied(self):
        last = _cm({"a": "1", "b": "2"})
        live = _cm({"a": "1", "b": "changed", "c": "3"})
        live["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(last)}
        # b changed since it was applied, c was never applied: only a may be taken over
        self.assertEqual(last_applied_allowed_conflicts(live), {".data.a"})
        self.assertEqual(last_applied_allowed_conflicts(_cm({"a": "1"})), set())
        applied = _cm({"a": "1"})
        applied["metadata"]["annotations"] = {LAST_APPLIED: "old", "keep": "me"}
        self.assertEqual(json.loads(build_last_applied(applied))["metadata"]["annotations"],
                         {"keep": "me"})
        applied["metadata"]["annotations"] = {LAST_APPLIED: "old"}
        out = build_last_applied(applied)
        self.assertNotIn("annotations", json.loads(out)["metadata"])
        self.assertEqual(out, json.dumps(json.loads(out), sort_keys=True,
                                         separators=(",", ":")))


class JsonEqualTest(unittest.TestCase):
    def test_cases(self):
        self.assertTrue(json_equal(1, 1.0))
        self.assertFalse(json_equal(True, 1))
        self.assertFalse(json_equal("1", 1))
        self.assertTrue(json_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]}))
        self.assertFalse(json_equal({"a": 1}, {"a": 1, "b": 2}))
        self.assertFalse(json_equal([1], [1, 1]))
        self.assertTrue(json.loads("[]") == [] and json_equal([], []))


if __name__ == "__main__":
    unittest.main()
