"""REST semantics of the localkube API server (lk.apiserver), driven over HTTP.

One server subprocess for the whole file; every test works in its own namespace.
"""

import http.client
import json
import logging
import os
import signal
import socket
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.lkserver import LocalApiServer  # noqa: E402

AGG_V2 = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
          "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
          "application/json")
AGG_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
TABLE = ("application/json;as=Table;v=v1;g=meta.k8s.io,"
         "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")


def crd_body(group="stable.example.com", plural="crontabs", kind="CronTab", versions=None,
             scope="Namespaced", short=("ct",)):
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "cronSpec": {"type": "string"},
            "image": {"type": "string"},
            "color": {"type": "string", "default": "blue"},
            "replicas": {"type": "integer", "minimum": 0, "maximum": 10}}},
        "status": {"type": "object", "properties": {
            "replicas": {"type": "integer"}, "selector": {"type": "string"},
            "phase": {"type": "string"}}}}}
    if versions is None:
        versions = [{"name": "v1", "served": True, "storage": True,
                     "schema": {"openAPIV3Schema": schema},
                     "subresources": {"status": {}, "scale": {
                         "specReplicasPath": ".spec.replicas",
                         "statusReplicasPath": ".status.replicas",
                         "labelSelectorPath": ".status.selector"}},
                     "additionalPrinterColumns": [{"name": "Spec", "type": "string",
                                                   "jsonPath": ".spec.cronSpec"}],
                     "selectableFields": [{"jsonPath": ".spec.color"}]}]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "%s.%s" % (plural, group)},
            "spec": {"group": group, "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                               "shortNames": list(short), "categories": ["all"]},
                     "versions": versions}}


def cm(name, data=None, labels=None):
    md = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"k": "v"}}


def deployment(name, replicas=1, labels=None):
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "img"}]}}}}


class ApiTestBase(unittest.TestCase):
    srv = None

    @classmethod
    def setUpClass(cls):
        cls.srv = LocalApiServer(bookmark_interval=0.5).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def ns(self):
        name = "t-" + uuid.uuid4().hex[:8]
        code, body, _ = self.srv.post("/api/v1/namespaces", {"metadata": {"name": name}})
        self.assertEqual(code, 201, body)
        return name

    def assertStatus(self, resp, code, reason=None, message=None):
        c, body, _ = resp
        self.assertEqual(c, code, body)
        self.assertIsInstance(body, dict)
        self.assertEqual(body.get("kind"), "Status", body)
        self.assertEqual(body.get("code"), code)
        self.assertEqual(body.get("status"), "Failure")
        if reason:
            self.assertEqual(body.get("reason"), reason, body)
        if message is not None:
            self.assertEqual(body.get("message"), message)
        return body

    def ensure_crd(self, body=None):
        body = body or crd_body()
        name = body["metadata"]["name"]
        code, got, _ = self.srv.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                    + name)
        if code == 200:
            return got
        code, got, _ = self.srv.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                     body)
        self.assertEqual(code, 201, got)
        return got


class TestBasics(ApiTestBase):
    def test_health_and_version(self):
        for p in ("/healthz", "/readyz", "/livez"):
            code, body, _ = self.srv.get(p)
            self.assertEqual((code, body), (200, "ok"))
        code, v, _ = self.srv.get("/version")
        self.assertEqual(code, 200)
        self.assertEqual((v["major"], v["minor"], v["gitVersion"]),
                         ("1", "32", "v1.32.0-localkube"))

    def test_initial_state(self):
        code, lst, _ = self.srv.get("/api/v1/namespaces")
        names = [o["metadata"]["name"] for o in lst["items"]]
        for n in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.assertIn(n, names)
            code, sa, _ = self.srv.get("/api/v1/namespaces/%s/serviceaccounts/default" % n)
            self.assertEqual(code, 200, sa)
        code, ns, _ = self.srv.get("/api/v1/namespaces/default")
        self.assertEqual(ns["status"]["phase"], "Active")
        self.assertEqual(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "default")
        self.assertEqual(ns["kind"], "Namespace")

    def test_unknown_paths(self):
        self.assertStatus(self.srv.get("/api/v1/foos"), 404, "NotFound")
        self.assertStatus(self.srv.get("/apis/nope.example.com/v1"), 404, "NotFound")
        self.assertStatus(self.srv.get("/nope"), 404, "NotFound")
        code, _, _ = self.srv.get("/openapi/v2")
        self.assertEqual(code, 404)


class TestDiscovery(ApiTestBase):
    def test_legacy(self):
        code, api, h = self.srv.get("/api", headers={"Accept": "application/json"})
        self.assertEqual(code, 200)
        self.assertEqual(api["kind"], "APIVersions")
        self.assertEqual(api["versions"], ["v1"])
        self.assertEqual(h["Content-Type"], "application/json")
        code, apis, _ = self.srv.get("/apis")
        self.assertEqual(apis["kind"], "APIGroupList")
        groups = {g["name"]: g for g in apis["groups"]}
        for g in ("apps", "coordination.k8s.io", "rbac.authorization.k8s.io", "autoscaling",
                  "events.k8s.io", "apiextensions.k8s.io"):
            self.assertIn(g, groups)
        self.assertEqual(groups["apps"]["preferredVersion"],
                         {"groupVersion": "apps/v1", "version": "v1"})
        code, rl, _ = self.srv.get("/apis/apps/v1")
        self.assertEqual(rl["kind"], "APIResourceList")
        self.assertEqual(rl["groupVersion"], "apps/v1")
        res = {r["name"]: r for r in rl["resources"]}
        d = res["deployments"]
        self.assertEqual(d["kind"], "Deployment")
        self.assertTrue(d["namespaced"])
        self.assertEqual(d["shortNames"], ["deploy"])
        self.assertIn("all", d["categories"])
        for v in ("create", "delete", "deletecollection", "get", "list", "patch", "update",
                  "watch"):
            self.assertIn(v, d["verbs"])
        self.assertEqual(res["deployments/scale"]["kind"], "Scale")
        self.assertEqual(res["deployments/scale"]["group"], "autoscaling")
        self.assertIn("deployments/status", res)
        code, core, _ = self.srv.get("/api/v1")
        names = {r["name"]: r for r in core["resources"]}
        self.assertFalse(names["namespaces"]["namespaced"])
        self.assertFalse(names["nodes"]["namespaced"])
        self.assertIn("pods/status", names)
        code, g, _ = self.srv.get("/apis/apps")
        self.assertEqual((g["kind"], g["name"]), ("APIGroup", "apps"))

    def test_aggregated_v2(self):
        code, body, h = self.srv.get("/apis", headers={"Accept": AGG_V2})
        self.assertEqual(code, 200)
        self.assertEqual(h["Content-Type"],
                         "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
        self.assertEqual(body["kind"], "APIGroupDiscoveryList")
        self.assertEqual(body["apiVersion"], "apidiscovery.k8s.io/v2")
        groups = {i["metadata"]["name"]: i for i in body["items"]}
        apps = groups["apps"]["versions"][0]
        self.assertEqual(apps["version"], "v1")
        self.assertEqual(apps["freshness"], "Current")
        dep = [r for r in apps["resources"] if r["resource"] == "deployments"][0]
        self.assertEqual(dep["responseKind"], {"group": "apps", "version": "v1",
                                               "kind": "Deployment"})
        self.assertEqual(dep["scope"], "Namespaced")
        self.assertEqual(dep["singularResource"], "deployment")
        subs = {s["subresource"]: s for s in dep["subresources"]}
        self.assertEqual(subs["scale"]["responseKind"]["kind"], "Scale")
        self.assertEqual(subs["status"]["verbs"], ["get", "patch", "update"])
        code, core, h = self.srv.get("/api", headers={"Accept": AGG_V2})
        self.assertEqual(len(core["items"]), 1)
        res = {r["resource"]: r for r in core["items"][0]["versions"][0]["resources"]}
        self.assertEqual(res["namespaces"]["scope"], "Cluster")
        self.assertEqual(res["pods"]["shortNames"], ["po"])

    def test_aggregated_v2beta1(self):
        code, body, h = self.srv.get("/apis", headers={"Accept": AGG_V2BETA1})
        self.assertEqual(code, 200)
        self.assertEqual(h["Content-Type"], "application/json;g=apidiscovery.k8s.io;"
                                            "v=v2beta1;as=APIGroupDiscoveryList")
        self.assertEqual(body["apiVersion"], "apidiscovery.k8s.io/v2beta1")

    def test_crd_appears_and_disappears(self):
        crd = crd_body(group="disc.example.com", plural="widgets", kind="Widget",
                       short=("wd",))
        self.ensure_crd(crd)
        code, body, _ = self.srv.get("/apis", headers={"Accept": AGG_V2})
        groups = {i["metadata"]["name"]: i for i in body["items"]}
        self.assertIn("disc.example.com", groups)
        r = groups["disc.example.com"]["versions"][0]["resources"][0]
        self.assertEqual(r["resource"], "widgets")
        self.assertEqual(r["shortNames"], ["wd"])
        self.assertEqual(r["categories"], ["all"])
        code, rl, _ = self.srv.get("/apis/disc.example.com/v1")
        self.assertEqual(code, 200)
        self.assertIn("widgets/status", [x["name"] for x in rl["resources"]])
        code, _, _ = self.srv.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                     "widgets.disc.example.com")
        self.assertEqual(code, 200)
        deadline = time.time() + 5
        while time.time() < deadline:
            code, _, _ = self.srv.get("/apis/disc.example.com/v1")
            if code == 404:
                break
            time.sleep(0.05)
        self.assertEqual(code, 404)
        code, body, _ = self.srv.get("/apis", headers={"Accept": AGG_V2})
        self.assertNotIn("disc.example.com", [i["metadata"]["name"] for i in body["items"]])

    def test_openapi_v3(self):
        self.ensure_crd()
        code, idx, _ = self.srv.get("/openapi/v3")
        self.assertEqual(code, 200)
        self.assertIn("api/v1", idx["paths"])
        self.assertIn("apis/apps/v1", idx["paths"])
        self.assertIn("apis/stable.example.com/v1", idx["paths"])
        url = idx["paths"]["api/v1"]["serverRelativeURL"]
        self.assertTrue(url.startswith("/openapi/v3/api/v1?hash="))
        code, doc, _ = self.srv.get(url)
        self.assertEqual(code, 200)
        ns_item = doc["paths"]["/api/v1/namespaces/{name}"]
        patch = ns_item["patch"]
        self.assertEqual(patch["x-kubernetes-group-version-kind"],
                         {"group": "", "version": "v1", "kind": "Namespace"})
        self.assertIn({"name": "fieldValidation", "in": "query"},
                      [{"name": p["name"], "in": p["in"]} for p in patch["parameters"]])
        self.assertNotIn("application/strategic-merge-patch+json",
                         patch["requestBody"]["content"])
        url = idx["paths"]["apis/stable.example.com/v1"]["serverRelativeURL"]
        code, doc, _ = self.srv.get(url)
        sch = doc["components"]["schemas"]["com.example.stable.v1.CronTab"]
        self.assertEqual(sch["x-kubernetes-group-version-kind"],
                         [{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
        self.assertEqual(sch["properties"]["spec"]["properties"]["replicas"]["maximum"], 10)
        p = doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
        self.assertEqual(p["patch"]["x-kubernetes-group-version-kind"]["kind"], "CronTab")


class TestCrud(ApiTestBase):
    def test_create_get_list_update_delete(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, obj, _ = self.srv.post(base, cm("a", {"x": "1"}))
        self.assertEqual(code, 201)
        md = obj["metadata"]
        self.assertEqual(md["namespace"], ns)
        self.assertTrue(md["uid"])
        self.assertRegex(md["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertTrue(md["resourceVersion"].isdigit())
        self.assertNotIn("generation", md)
        self.assertEqual(md["managedFields"][0]["operation"], "Update")
        self.assertStatus(self.srv.post(base, cm("a")), 409, "AlreadyExists",
                          'configmaps "a" already exists')
        code, got, _ = self.srv.get(base + "/a")
        self.assertEqual(got["data"], {"x": "1"})
        self.assertEqual(got["kind"], "ConfigMap")
        self.assertEqual(got["apiVersion"], "v1")
        body = self.assertStatus(self.srv.get(base + "/nope"), 404, "NotFound",
                                 'configmaps "nope" not found')
        self.assertEqual(body["details"], {"name": "nope", "kind": "configmaps"})
        # update with the current RV
        got["data"]["x"] = "2"
        code, upd, _ = self.srv.put(base + "/a", got)
        self.assertEqual(code, 200, upd)
        self.assertGreater(int(upd["metadata"]["resourceVersion"]),
                           int(got["metadata"]["resourceVersion"]))
        # stale RV -> 409 Conflict with kube's message
        self.assertStatus(self.srv.put(base + "/a", got), 409, "Conflict",
                          'Operation cannot be fulfilled on configmaps "a": the object has been '
                          'modified; please apply your changes to the latest version and try '
                          'again')
        # unconditional update (no RV) is allowed for built-ins
        got["metadata"].pop("resourceVersion")
        got["data"]["x"] = "3"
        code, upd2, _ = self.srv.put(base + "/a", got)
        self.assertEqual((code, upd2["data"]["x"]), (200, "3"))
        # PUT to a missing configmap -> 404
        self.assertStatus(self.srv.put(base + "/zz", cm("zz")), 404, "NotFound")
        code, lst, _ = self.srv.get(base)
        self.assertEqual(lst["kind"], "ConfigMapList")
        self.assertEqual(lst["apiVersion"], "v1")
        self.assertEqual([o["metadata"]["name"] for o in lst["items"]], ["a"])
        self.assertEqual(lst["items"][0]["kind"], "ConfigMap")
        code, st, _ = self.srv.delete(base + "/a")
        self.assertEqual(code, 200)
        self.assertEqual((st["kind"], st["status"]), ("Status", "Success"))
        self.assertEqual(st["details"]["name"], "a")
        self.assertEqual(st["details"]["kind"], "configmaps")
        self.assertStatus(self.srv.delete(base + "/a"), 404, "NotFound")

    def test_global_resource_version_and_noop(self):
        ns = self.ns()
        code, a, _ = self.srv.post("/api/v1/namespaces/%s/configmaps" % ns, cm("a"))
        code, s, _ = self.srv.post("/api/v1/namespaces/%s/secrets" % ns,
                                   {"metadata": {"name": "s"}, "data": {"k": "dg=="}})
        code, b, _ = self.srv.post("/api/v1/namespaces/%s/configmaps" % ns, cm("b"))
        rvs = [int(o["metadata"]["resourceVersion"]) for o in (a, s, b)]
        self.assertEqual(rvs, sorted(rvs))
        self.assertEqual(len(set(rvs)), 3)
        code, lst, _ = self.srv.get("/api/v1/namespaces/%s/configmaps" % ns)
        self.assertGreaterEqual(int(lst["metadata"]["resourceVersion"]), rvs[-1])
        # a no-op update does not bump the RV
        code, same, _ = self.srv.put("/api/v1/namespaces/%s/configmaps/a" % ns, a)
        self.assertEqual(code, 200)
        self.assertEqual(same["metadata"]["resourceVersion"], a["metadata"]["resourceVersion"])
        code, same, _ = self.srv.patch("/api/v1/namespaces/%s/configmaps/a" % ns,
                                       {"data": {"k": "v"}})
        self.assertEqual(same["metadata"]["resourceVersion"], a["metadata"]["resourceVersion"])

    def test_generate_name(self):
        ns = self.ns()
        names = set()
        for _ in range(3):
            code, o, _ = self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                       {"metadata": {"generateName": "gen-"}, "data": {}})
            self.assertEqual(code, 201, o)
            self.assertRegex(o["metadata"]["name"], r"^gen-[a-z0-9]{5}$")
            names.add(o["metadata"]["name"])
        self.assertEqual(len(names), 3)
        body = self.assertStatus(self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                               {"metadata": {}}), 422, "Invalid")
        self.assertEqual(body["message"], 'ConfigMap "" is invalid: metadata.name: Required '
                                          'value: name or generateName is required')
        body = self.assertStatus(self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                               cm("Bad_Name")), 422, "Invalid")
        self.assertEqual(body["details"]["causes"][0]["field"], "metadata.name")
        self.assertIn("a lowercase RFC 1123 subdomain", body["message"])

    def test_namespace_rules(self):
        body = self.assertStatus(self.srv.post("/api/v1/namespaces/missing-ns/configmaps",
                                               cm("a")), 404, "NotFound",
                                 'namespaces "missing-ns" not found')
        self.assertEqual(body["details"]["kind"], "namespaces")
        self.assertStatus(self.srv.delete("/api/v1/namespaces/default"), 403, "Forbidden",
                          'namespaces "default" is forbidden: this namespace may not be deleted')
        ns = self.ns()
        # a finalizer keeps the namespace terminating while we check the 403
        code, _, _ = self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                   dict(cm("held"), metadata={"name": "held",
                                                              "finalizers": ["test/hold"]}))
        self.assertEqual(code, 201)
        code, nso, _ = self.srv.delete("/api/v1/namespaces/" + ns)
        self.assertEqual(code, 200, nso)
        self.assertEqual(nso["status"]["phase"], "Terminating")
        self.assertTrue(nso["metadata"]["deletionTimestamp"])
        body = self.assertStatus(self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                               cm("b")), 403, "Forbidden")
        self.assertEqual(body["message"], 'configmaps "b" is forbidden: unable to create new '
                                          'content in namespace %s because it is being '
                                          'terminated' % ns)
        self.assertEqual(body["details"]["causes"][0]["reason"], "NamespaceTerminating")
        # release the finalizer: the namespace then goes away
        code, o, _ = self.srv.patch("/api/v1/namespaces/%s/configmaps/held" % ns,
                                    {"metadata": {"finalizers": None}})
        self.assertEqual(code, 200, o)
        deadline = time.time() + 5
        while time.time() < deadline:
            code, _, _ = self.srv.get("/api/v1/namespaces/" + ns)
            if code == 404:
                break
            time.sleep(0.05)
        self.assertEqual(code, 404)

    def test_name_namespace_mismatch_and_bad_bodies(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.assertStatus(self.srv.post(base, dict(cm("a"), metadata={"name": "a",
                                                                      "namespace": "other"})),
                          400, "BadRequest", "the namespace of the provided object does not "
                          "match the namespace sent on the request")
        self.srv.post(base, cm("a"))
        self.assertStatus(self.srv.put(base + "/a", cm("b")), 400, "BadRequest",
                          "the name of the object (b) does not match the name on the URL (a)")
        body = self.assertStatus(self.srv.post(base, '{"metadata": {"name": "x"'), 400,
                                 "BadRequest")
        self.assertIn("json parse error", body["message"])
        self.assertStatus(self.srv.post(base, b"x" * (3 * 1024 * 1024 + 10)), 413,
                          "RequestEntityTooLarge")
        self.assertStatus(self.srv.post(base, {"apiVersion": "apps/v1", "kind": "ConfigMap",
                                               "metadata": {"name": "q"}}), 400, "BadRequest")
        self.assertStatus(self.srv.request("POST", base, body=b"x: 1",
                                           content_type="application/vnd.kubernetes.protobuf"),
                          415, "UnsupportedMediaType")
        self.assertStatus(self.srv.request("PUT", base, cm("a")), 405, "MethodNotAllowed")
        self.assertStatus(self.srv.request("DELETE", "/api/v1/namespaces/%s/pods/x/log" % ns),
                          405, "MethodNotAllowed")
        self.assertStatus(self.srv.request("PUT", "/api/v1/namespaces/%s/pods/x/log" % ns,
                                           {}), 405, "MethodNotAllowed")
        self.assertStatus(self.srv.get(base + "/a/status"), 404, "NotFound")
        # the server survived all of that
        code, _, _ = self.srv.get(base + "/a")
        self.assertEqual(code, 200)

    def test_secret_and_service(self):
        ns = self.ns()
        code, s, _ = self.srv.post("/api/v1/namespaces/%s/secrets" % ns, {
            "metadata": {"name": "s"}, "data": {"a": "YWJj"}, "stringData": {"b": "xyz"}})
        self.assertEqual(code, 201, s)
        self.assertEqual(s["data"], {"a": "YWJj", "b": "eHl6"})
        self.assertNotIn("stringData", s)
        self.assertEqual(s["type"], "Opaque")
        body = self.assertStatus(self.srv.post("/api/v1/namespaces/%s/secrets" % ns, {
            "metadata": {"name": "bad"}, "data": {"a": "!!!"}}), 400, "BadRequest")
        self.assertIn("illegal base64 data at input byte 0", body["message"])
        svc = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
                                                     "ports": [{"port": 80}]}}
        code, a, _ = self.srv.post("/api/v1/namespaces/%s/services" % ns, svc)
        self.assertEqual(code, 201, a)
        ip = a["spec"]["clusterIP"]
        self.assertTrue(ip.startswith("10.96."), ip)
        self.assertEqual(a["spec"]["clusterIPs"], [ip])
        svc["metadata"]["name"] = "web2"
        code, b, _ = self.srv.post("/api/v1/namespaces/%s/services" % ns, svc)
        self.assertNotEqual(b["spec"]["clusterIP"], ip)
        a["spec"]["clusterIP"] = "10.96.200.200"
        a["spec"]["clusterIPs"] = ["10.96.200.200"]
        self.assertStatus(self.srv.put("/api/v1/namespaces/%s/services/web" % ns, a), 422,
                          "Invalid")
        code, k, _ = self.srv.get("/api/v1/namespaces/default/services/kubernetes")
        self.assertEqual(k["spec"]["clusterIP"], "10.96.0.1")

    def test_dry_run(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, o, _ = self.srv.post(base + "?dryRun=All", cm("d"))
        self.assertEqual(code, 201)
        self.assertEqual(o["metadata"]["name"], "d")
        self.assertEqual(self.srv.get(base + "/d")[0], 404)
        self.srv.post(base, cm("d"))
        code, o, _ = self.srv.patch(base + "/d?dryRun=All", {"data": {"k": "changed"}})
        self.assertEqual(o["data"]["k"], "changed")
        self.assertEqual(self.srv.get(base + "/d")[1]["data"]["k"], "v")
        code, o, _ = self.srv.delete(base + "/d?dryRun=All")
        self.assertEqual(code, 200)
        self.assertEqual(self.srv.get(base + "/d")[0], 200)
        self.assertStatus(self.srv.post(base + "?dryRun=Some", cm("e")), 422, "Invalid")

    def test_table_output(self):
        ns = self.ns()
        self.srv.post("/api/v1/namespaces/%s/configmaps" % ns, cm("t1"))
        code, t, h = self.srv.get("/api/v1/namespaces/%s/configmaps" % ns,
                                  headers={"Accept": TABLE})
        self.assertEqual(code, 200)
        self.assertEqual(t["kind"], "Table")
        self.assertEqual(t["apiVersion"], "meta.k8s.io/v1")
        self.assertTrue(t["columnDefinitions"])
        self.assertEqual(len(t["rows"]), 1)
        self.assertEqual(t["rows"][0]["object"]["metadata"]["name"], "t1")
        self.assertTrue(t["metadata"]["resourceVersion"])
        code, t, _ = self.srv.get("/api/v1/namespaces/%s/configmaps/t1?includeObject=Object"
                                  % ns, headers={"Accept": TABLE})
        self.assertEqual(t["kind"], "Table")
        self.assertEqual(t["rows"][0]["object"]["kind"], "ConfigMap")
        code, p, _ = self.srv.get("/api/v1/namespaces/%s/configmaps" % ns, headers={
            "Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"})
        self.assertEqual(p["kind"], "PartialObjectMetadataList")
        self.assertNotIn("data", p["items"][0])
        self.assertStatus(self.srv.get("/api/v1/namespaces/%s/configmaps" % ns, headers={
            "Accept": "application/vnd.kubernetes.protobuf"}), 406, "NotAcceptable")

    def test_preconditions(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, o, _ = self.srv.post(base, cm("p"))
        body = self.assertStatus(self.srv.delete(base + "/p", {
            "kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "wrong"}}),
            409, "Conflict")
        self.assertEqual(body["message"],
                         'Operation cannot be fulfilled on configmaps "p": Precondition failed: '
                         'UID in precondition: wrong, UID in object meta: %s'
                         % o["metadata"]["uid"])
        self.assertStatus(self.srv.delete(base + "/p", {
            "preconditions": {"resourceVersion": "1"}}), 409, "Conflict")
        code, _, _ = self.srv.delete(base + "/p", {"preconditions": {
            "uid": o["metadata"]["uid"], "resourceVersion": o["metadata"]["resourceVersion"]}})
        self.assertEqual(code, 200)


class TestGenerationStatusScale(ApiTestBase):
    def test_deployment_generation_status_scale(self):
        ns = self.ns()
        base = "/apis/apps/v1/namespaces/%s/deployments" % ns
        code, d, _ = self.srv.post(base, dict(deployment("web"), status={"replicas": 9}))
        self.assertEqual(code, 201, d)
        self.assertEqual(d["metadata"]["generation"], 1)
        self.assertNotIn("replicas", d.get("status") or {})
        # metadata-only change: no generation bump
        code, d2, _ = self.srv.patch(base + "/web", {"metadata": {"labels": {"x": "y"}}})
        self.assertEqual(d2["metadata"]["generation"], 1)
        # spec change: +1; status in a main-resource write is ignored
        code, d3, _ = self.srv.patch(base + "/web", {"spec": {"replicas": 2},
                                                     "status": {"replicas": 5}})
        self.assertEqual(d3["metadata"]["generation"], 2)
        self.assertNotIn("replicas", d3.get("status") or {})
        # /status takes only the status
        d3["status"] = {"replicas": 2, "readyReplicas": 1}
        d3["spec"]["replicas"] = 7
        d3["metadata"]["labels"] = {"changed": "yes"}
        code, d4, _ = self.srv.put(base + "/web/status", d3)
        self.assertEqual(code, 200, d4)
        self.assertEqual(d4["status"]["readyReplicas"], 1)
        self.assertEqual(d4["spec"]["replicas"], 2)
        self.assertEqual(d4["metadata"]["labels"], {"x": "y"})
        self.assertEqual(d4["metadata"]["generation"], 2)
        # scale
        code, sc, _ = self.srv.get(base + "/web/scale")
        self.assertEqual(code, 200)
        self.assertEqual((sc["kind"], sc["apiVersion"]), ("Scale", "autoscaling/v1"))
        self.assertEqual(sc["spec"]["replicas"], 2)
        self.assertEqual(sc["status"], {"replicas": 2, "selector": "app=web"})
        code, sc2, _ = self.srv.patch(base + "/web/scale", {"spec": {"replicas": 4}})
        self.assertEqual(code, 200, sc2)
        self.assertEqual(sc2["spec"]["replicas"], 4)
        code, d5, _ = self.srv.get(base + "/web")
        self.assertEqual(d5["spec"]["replicas"], 4)
        self.assertEqual(d5["metadata"]["generation"], 3)
        sc2["spec"]["replicas"] = 1
        sc2["metadata"]["resourceVersion"] = d4["metadata"]["resourceVersion"]
        self.assertStatus(self.srv.put(base + "/web/scale", sc2), 409, "Conflict")
        self.assertStatus(self.srv.patch(base + "/web/scale", {"spec": {"replicas": -1}}),
                          422, "Invalid")

    def test_custom_resource_rules(self):
        self.ensure_crd()
        ns = self.ns()
        base = "/apis/stable.example.com/v1/namespaces/%s/crontabs" % ns
        code, o, _ = self.srv.post(base, {"apiVersion": "stable.example.com/v1",
                                          "kind": "CronTab", "metadata": {"name": "c"},
                                          "spec": {"cronSpec": "x", "replicas": 1,
                                                   "junk": 1},
                                          "status": {"phase": "Set"}})
        self.assertEqual(code, 201, o)
        self.assertEqual(o["metadata"]["generation"], 1)
        self.assertNotIn("status", o)  # dropped on create (status subresource)
        self.assertNotIn("junk", o["spec"])  # pruned
        self.assertEqual(o["spec"]["color"], "blue")  # defaulted
        # PUT without RV -> 422
        body = dict(o)
        body["metadata"] = dict(o["metadata"])
        body["metadata"].pop("resourceVersion")
        b = self.assertStatus(self.srv.put(base + "/c", body), 422, "Invalid")
        self.assertEqual(b["message"], 'CronTab.stable.example.com "c" is invalid: '
                                       'metadata.resourceVersion: Invalid value: 0x0: must be '
                                       'specified for an update')
        # PUT to a missing CR -> 404 (no create on update)
        body["metadata"]["name"] = "missing"
        self.assertStatus(self.srv.put(base + "/missing", body), 404, "NotFound",
                          'crontabs.stable.example.com "missing" not found')
        # validation -> 422 with causes
        b = self.assertStatus(self.srv.patch(base + "/c", {"spec": {"replicas": 15}}), 422,
                              "Invalid")
        self.assertEqual(b["message"], 'CronTab.stable.example.com "c" is invalid: '
                                       'spec.replicas: Invalid value: 15: spec.replicas in body '
                                       'should be less than or equal to 10')
        self.assertEqual(b["details"]["causes"][0]["field"], "spec.replicas")
        self.assertEqual(b["details"]["group"], "stable.example.com")
        self.assertEqual(b["details"]["kind"], "CronTab")
        # strategic merge patch on a CR -> 415 with kube's message
        self.assertStatus(self.srv.patch(base + "/c", {"spec": {}}, ptype="strategic"), 415,
                          "UnsupportedMediaType",
                          "the body of the request was in an unknown format - accepted media "
                          "types include: application/json-patch+json, "
                          "application/merge-patch+json, application/apply-patch+yaml")
        # spec change bumps generation; metadata change does not
        code, o2, _ = self.srv.patch(base + "/c", {"spec": {"image": "i2"}})
        self.assertEqual(o2["metadata"]["generation"], 2)
        code, o3, _ = self.srv.patch(base + "/c", {"metadata": {"labels": {"a": "b"}}})
        self.assertEqual(o3["metadata"]["generation"], 2)
        # status subresource: only status is taken, generation unchanged
        code, o4, _ = self.srv.patch(base + "/c/status", {"status": {"replicas": 1,
                                                                     "selector": "a=b"},
                                                          "spec": {"image": "ignored"},
                                                          "metadata": {"labels": {"a": "c"}}})
        self.assertEqual(code, 200, o4)
        self.assertEqual(o4["status"]["replicas"], 1)
        self.assertEqual(o4["spec"]["image"], "i2")
        self.assertEqual(o4["metadata"]["labels"], {"a": "b"})
        self.assertEqual(o4["metadata"]["generation"], 2)
        # main resource ignores status
        code, o5, _ = self.srv.patch(base + "/c", {"status": {"replicas": 3}})
        self.assertEqual(o5["status"]["replicas"], 1)
        # scale subresource via the configured paths
        code, sc, _ = self.srv.get(base + "/c/scale")
        self.assertEqual(sc["spec"]["replicas"], 1)
        self.assertEqual(sc["status"], {"replicas": 1, "selector": "a=b"})
        code, sc, _ = self.srv.patch(base + "/c/scale", {"spec": {"replicas": 3}})
        self.assertEqual(code, 200, sc)
        self.assertEqual(self.srv.get(base + "/c")[1]["spec"]["replicas"], 3)

    def test_crd_validation(self):
        bad = crd_body(group="bad.example.com", plural="things", kind="Thing")
        bad["metadata"]["name"] = "wrong.bad.example.com"
        b = self.assertStatus(self.srv.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad), 422, "Invalid")
        self.assertIn('metadata.name: Invalid value: "wrong.bad.example.com": must be '
                      'spec.names.plural+"."+spec.group', b["message"])
        bad = crd_body(group="bad.example.com", plural="things", kind="Thing")
        bad["spec"]["versions"][0]["storage"] = False
        b = self.assertStatus(self.srv.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad), 422, "Invalid")
        self.assertIn("must have exactly one version marked as storage version", b["message"])
        bad = crd_body(group="bad.example.com", plural="things", kind="Thing")
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = \
            {"properties": {"x": {"type": "string"}}}
        b = self.assertStatus(self.srv.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad), 422, "Invalid")
        self.assertIn("spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
                      b["message"])
        good = self.ensure_crd()
        conds = {c["type"]: c["status"] for c in good["status"]["conditions"]}
        self.assertEqual(conds.get("Established"), "True")
        self.assertEqual(conds.get("NamesAccepted"), "True")
        self.assertEqual(good["status"]["storedVersions"], ["v1"])
        self.assertEqual(good["status"]["acceptedNames"]["kind"], "CronTab")

    def test_multi_version_crd(self):
        schema = {"type": "object", "properties": {"spec": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
        crd = crd_body(group="mv.example.com", plural="gadgets", kind="Gadget", short=(),
                       versions=[
                           {"name": "v1alpha1", "served": True, "storage": False,
                            "schema": {"openAPIV3Schema": schema}},
                           {"name": "v1", "served": True, "storage": True,
                            "schema": {"openAPIV3Schema": schema}}])
        self.ensure_crd(crd)
        ns = self.ns()
        code, o, _ = self.srv.post("/apis/mv.example.com/v1alpha1/namespaces/%s/gadgets" % ns,
                                   {"apiVersion": "mv.example.com/v1alpha1", "kind": "Gadget",
                                    "metadata": {"name": "g"}, "spec": {"a": 1}})
        self.assertEqual(code, 201, o)
        self.assertEqual(o["apiVersion"], "mv.example.com/v1alpha1")
        code, o1, _ = self.srv.get("/apis/mv.example.com/v1/namespaces/%s/gadgets/g" % ns)
        self.assertEqual(o1["apiVersion"], "mv.example.com/v1")
        self.assertEqual(o1["spec"], {"a": 1})
        code, g, _ = self.srv.get("/apis/mv.example.com")
        self.assertEqual(g["preferredVersion"]["version"], "v1")


class TestPatch(ApiTestBase):
    def test_patch_types(self):
        ns = self.ns()
        base = "/apis/apps/v1/namespaces/%s/deployments" % ns
        d = deployment("p")
        d["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s"})
        self.srv.post(base, d)
        # strategic merge: containers merge by name
        code, o, _ = self.srv.patch(base + "/p", {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "img2"}]}}}}, ptype="strategic")
        self.assertEqual(code, 200, o)
        cs = {c["name"]: c["image"] for c in o["spec"]["template"]["spec"]["containers"]}
        self.assertEqual(cs, {"c": "img2", "side": "s"})
        # merge patch: lists replaced whole
        code, o, _ = self.srv.patch(base + "/p", {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "img3"}]}}}})
        self.assertEqual([c["name"] for c in o["spec"]["template"]["spec"]["containers"]],
                         ["c"])
        # json patch incl. a failing test op
        code, o, _ = self.srv.patch(base + "/p", [
            {"op": "replace", "path": "/spec/replicas", "value": 3}], ptype="json")
        self.assertEqual(o["spec"]["replicas"], 3)
        c, b, _ = self.srv.patch(base + "/p", [
            {"op": "test", "path": "/spec/replicas", "value": 99}], ptype="json")
        self.assertEqual(c, 422, b)
        # patch with a stale resourceVersion -> 409
        self.assertStatus(self.srv.patch(base + "/p", {"metadata": {"resourceVersion": "1"},
                                                       "spec": {"replicas": 1}}),
                          409, "Conflict")
        # unknown patch content type -> 415 listing the accepted types
        b = self.assertStatus(self.srv.request("PATCH", base + "/p", body=b"{}",
                                               content_type="text/plain"), 415,
                              "UnsupportedMediaType")
        self.assertIn("application/strategic-merge-patch+json", b["message"])
        self.assertStatus(self.srv.patch(base + "/missing", {"spec": {}}), 404, "NotFound")

    def test_server_side_apply(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        b = self.assertStatus(self.srv.patch(base + "/ssa", cm("ssa"), ptype="apply"), 422,
                              "Invalid")
        self.assertEqual(b["message"], 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                                       'Required value: is required for apply patch')
        code, o, _ = self.srv.patch(base + "/ssa?fieldManager=alice", cm("ssa", {"a": "1"}),
                                    ptype="apply")
        self.assertEqual(code, 201, o)
        mf = o["metadata"]["managedFields"]
        self.assertEqual([(m["manager"], m["operation"]) for m in mf], [("alice", "Apply")])
        # YAML apply body
        yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  b: '2'\n"
        code, o, _ = self.srv.request("PATCH", base + "/ssa?fieldManager=bob", body=yaml_body,
                                      content_type="application/apply-patch+yaml")
        self.assertEqual(code, 200, o)
        self.assertEqual(o["data"], {"a": "1", "b": "2"})
        # conflict, then force
        b = self.assertStatus(self.srv.patch(base + "/ssa?fieldManager=bob",
                                             cm("ssa", {"a": "x"}), ptype="apply"),
                              409, "Conflict")
        self.assertIn("conflict", b["message"])
        code, o, _ = self.srv.patch(base + "/ssa?fieldManager=bob&force=true",
                                    cm("ssa", {"a": "x"}), ptype="apply")
        self.assertEqual((code, o["data"]["a"]), (200, "x"))
        self.assertStatus(self.srv.patch(base + "/ssa?force=true", {"data": {}}), 422,
                          "Invalid")

    def test_field_validation(self):
        self.ensure_crd()
        ns = self.ns()
        base = "/apis/stable.example.com/v1/namespaces/%s/crontabs" % ns
        obj = {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
               "metadata": {"name": "fv"}, "spec": {"cronSpec": "x", "foo": 1}}
        self.assertStatus(self.srv.post(base + "?fieldValidation=Strict", obj), 400,
                          "BadRequest", 'strict decoding error: unknown field "spec.foo"')
        code, o, h = self.srv.post(base + "?fieldValidation=Warn", obj)
        self.assertEqual(code, 201, o)
        self.assertIn('299 - "unknown field \\"spec.foo\\""', h.get_all("Warning"))
        self.assertNotIn("foo", o["spec"])
        obj["metadata"]["name"] = "fv2"
        code, o, h = self.srv.post(base + "?fieldValidation=Ignore", obj)
        self.assertEqual(code, 201)
        self.assertIsNone(h.get("Warning"))
        # built-in kinds
        cbase = "/api/v1/namespaces/%s/configmaps" % ns
        body = dict(cm("strict"), bogus=1)
        self.assertStatus(self.srv.post(cbase + "?fieldValidation=Strict", body), 400,
                          "BadRequest", 'strict decoding error: unknown field "bogus"')
        code, o, h = self.srv.post(cbase, body)
        self.assertEqual(code, 201)
        self.assertNotIn("bogus", o)
        self.assertIn('299 - "unknown field \\"bogus\\""', h.get_all("Warning"))
        self.assertStatus(self.srv.post(cbase + "?fieldValidation=Loud", cm("x")), 422,
                          "Invalid")


class TestListPaging(ApiTestBase):
    def test_paging_selectors(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        for i in range(7):
            self.srv.post(base, cm("c%d" % i, labels={"i": str(i), "even": str(i % 2 == 0)}))
        code, p1, _ = self.srv.get(base + "?limit=3")
        self.assertEqual([o["metadata"]["name"] for o in p1["items"]], ["c0", "c1", "c2"])
        self.assertEqual(p1["metadata"]["remainingItemCount"], 4)
        tok = p1["metadata"]["continue"]
        rv = p1["metadata"]["resourceVersion"]
        # a change between pages does not show up: consistent snapshot
        self.srv.delete(base + "/c4")
        self.srv.post(base, cm("c35"))
        code, p2, _ = self.srv.get(base + "?limit=3&continue=" + tok)
        self.assertEqual(code, 200, p2)
        self.assertEqual([o["metadata"]["name"] for o in p2["items"]], ["c3", "c4", "c5"])
        self.assertEqual(p2["metadata"]["resourceVersion"], rv)
        code, p3, _ = self.srv.get(base + "?limit=3&continue=" + p2["metadata"]["continue"])
        self.assertEqual([o["metadata"]["name"] for o in p3["items"]], ["c6"])
        self.assertNotIn("continue", p3["metadata"])
        self.assertNotIn("remainingItemCount", p3["metadata"])
        # continue + resourceVersion -> 400; garbage token -> 400
        self.assertStatus(self.srv.get(base + "?limit=3&resourceVersion=5&continue=" + tok),
                          400, "BadRequest")
        self.assertStatus(self.srv.get(base + "?continue=garbage"), 400, "BadRequest")
        # label selectors
        code, l, _ = self.srv.get(base + "?labelSelector=even%3DTrue")
        self.assertEqual([o["metadata"]["name"] for o in l["items"]], ["c0", "c2", "c6"])
        code, l, _ = self.srv.get(base + "?labelSelector=i+in+(1,3),even!%3DTrue")
        self.assertEqual([o["metadata"]["name"] for o in l["items"]], ["c1", "c3"])
        code, l, _ = self.srv.get(base + "?labelSelector=even%3DTrue&limit=2")
        self.assertNotIn("remainingItemCount", l["metadata"])
        self.assertIn("continue", l["metadata"])
        self.assertStatus(self.srv.get(base + "?labelSelector=a%3D%3D%3Db"), 400, "BadRequest")
        # field selectors
        code, l, _ = self.srv.get(base + "?fieldSelector=metadata.name%3Dc2")
        self.assertEqual([o["metadata"]["name"] for o in l["items"]], ["c2"])
        code, l, _ = self.srv.get("/api/v1/configmaps?fieldSelector=metadata.namespace%3D" + ns)
        self.assertEqual(len(l["items"]), 7)
        self.assertStatus(self.srv.get(base + "?fieldSelector=foo.bar%3Dx"), 400, "BadRequest",
                          '"foo.bar" is not a known field selector: only "metadata.name", '
                          '"metadata.namespace"')
        # exact RV list of an earlier state
        code, old, _ = self.srv.get(base + "?resourceVersion=%s&resourceVersionMatch=Exact" % rv)
        self.assertEqual(code, 200, old)
        self.assertIn("c4", [o["metadata"]["name"] for o in old["items"]])
        self.assertNotIn("c35", [o["metadata"]["name"] for o in old["items"]])
        self.assertStatus(self.srv.get(base + "?resourceVersionMatch=Exact"), 422, "Invalid")
        # an expired continue token -> 410 Expired
        code, p1, _ = self.srv.get(base + "?limit=2")
        code, _, _ = self.srv.post("/localkube/faults", {"type": "expire"})
        self.assertEqual(code, 200)
        self.assertStatus(self.srv.get(base + "?limit=2&continue=" + p1["metadata"]["continue"]),
                          410, "Expired")

    def test_cr_selectable_fields_and_delete_collection(self):
        self.ensure_crd()
        ns = self.ns()
        base = "/apis/stable.example.com/v1/namespaces/%s/crontabs" % ns
        for name, color in (("r", "red"), ("g", "green"), ("b", None)):
            spec = {"cronSpec": "x"}
            if color:
                spec["color"] = color
            self.srv.post(base, {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                                 "metadata": {"name": name, "labels": {"c": color or "none"}},
                                 "spec": spec})
        code, l, _ = self.srv.get(base + "?fieldSelector=spec.color%3Dblue")
        self.assertEqual([o["metadata"]["name"] for o in l["items"]], ["b"])
        self.assertStatus(self.srv.get(base + "?fieldSelector=spec.image%3Dx"), 400,
                          "BadRequest")
        code, res, _ = self.srv.delete(base + "?labelSelector=c+in+(red,green)")
        self.assertEqual(code, 200, res)
        self.assertEqual(sorted(o["metadata"]["name"] for o in res["items"]), ["g", "r"])
        code, l, _ = self.srv.get(base)
        self.assertEqual([o["metadata"]["name"] for o in l["items"]], ["b"])


class TestDeletion(ApiTestBase):
    def test_finalizers(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        body = cm("f")
        body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
        self.srv.post(base, body)
        code, o, _ = self.srv.delete(base + "/f")
        self.assertEqual(code, 200)
        self.assertEqual(o["kind"], "ConfigMap")
        self.assertTrue(o["metadata"]["deletionTimestamp"])
        self.assertEqual(o["metadata"]["deletionGracePeriodSeconds"], 0)
        # adding a finalizer now is forbidden
        b = self.assertStatus(self.srv.patch(base + "/f", {"metadata": {"finalizers": [
            "example.com/a", "example.com/b", "example.com/c"]}}), 422, "Invalid")
        self.assertIn("no new finalizers can be added if the object is being deleted",
                      b["message"])
        code, o, _ = self.srv.patch(base + "/f", {"metadata": {"finalizers": ["example.com/b"]}})
        self.assertEqual(code, 200)
        self.assertEqual(self.srv.get(base + "/f")[0], 200)
        code, o, _ = self.srv.patch(base + "/f", {"metadata": {"finalizers": []}})
        self.assertEqual(code, 200)
        self.assertEqual(self.srv.get(base + "/f")[0], 404)

    def test_cr_finalizer_generation(self):
        self.ensure_crd()
        ns = self.ns()
        base = "/apis/stable.example.com/v1/namespaces/%s/crontabs" % ns
        self.srv.post(base, {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                             "metadata": {"name": "x", "finalizers": ["keep"]},
                             "spec": {"cronSpec": "x"}})
        code, o, _ = self.srv.delete(base + "/x")
        self.assertEqual(code, 200)
        self.assertEqual(o["metadata"]["generation"], 2)
        code, o2, _ = self.srv.delete(base + "/x")
        self.assertEqual(o2["metadata"]["generation"], 2)

    def test_graceful_pod_deletion(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/pods" % ns
        pod = {"metadata": {"name": "bound"},
               "spec": {"nodeName": "localkube-node-1", "terminationGracePeriodSeconds": 20,
                        "containers": [{"name": "c", "image": "img"}]}}
        code, p, _ = self.srv.post(base, pod)
        self.assertEqual(code, 201, p)
        self.assertEqual(p["status"]["phase"], "Pending")
        code, p, _ = self.srv.delete(base + "/bound")
        self.assertEqual(code, 200)
        self.assertEqual(p["metadata"]["deletionGracePeriodSeconds"], 20)
        self.assertTrue(p["metadata"]["deletionTimestamp"])
        self.assertEqual(self.srv.get(base + "/bound")[0], 200)
        code, p, _ = self.srv.delete(base + "/bound", {"gracePeriodSeconds": 0})
        self.assertEqual(code, 200)
        self.assertEqual(self.srv.get(base + "/bound")[0], 404)
        # unbound pods go at once
        pod["metadata"]["name"] = "free"
        del pod["spec"]["nodeName"]
        self.srv.post(base, pod)
        code, p, _ = self.srv.delete(base + "/free")
        self.assertEqual(code, 200)
        self.assertEqual(p["kind"], "Pod")
        self.assertEqual(self.srv.get(base + "/free")[0], 404)

    def test_pod_binding_and_log_follow(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/pods" % ns
        self.srv.post(base, {"metadata": {"name": "p"},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}})
        code, st, _ = self.srv.post(base + "/p/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "localkube-node-1"}})
        self.assertEqual((code, st["status"]), (201, "Success"))
        self.assertEqual(self.srv.get(base + "/p")[1]["spec"]["nodeName"], "localkube-node-1")
        self.assertStatus(self.srv.post(base + "/p/binding", {
            "target": {"kind": "Node", "name": "other"}}), 409, "Conflict")
        logdir = os.path.join(self.srv.dir, "pods", "%s_p" % ns)
        os.makedirs(logdir)
        with open(os.path.join(logdir, "c.log"), "w") as f:
            f.write("a\nb\n")
        code, text, h = self.srv.get(base + "/p/log")
        self.assertEqual((code, text), (200, "a\nb\n"))
        self.assertTrue(h["Content-Type"].startswith("text/plain"))
        self.assertEqual(self.srv.get(base + "/p/log?tailLines=1")[1], "b\n")
        self.assertStatus(self.srv.get(base + "/p/log?container=nope"), 400, "BadRequest")
        # follow: streams appended lines until the pod is gone
        got = []
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        conn.request("GET", base + "/p/log?follow=true")
        resp = conn.getresponse()
        got.append(resp.readline())
        with open(os.path.join(logdir, "c.log"), "a") as f:
            f.write("c\n")
        got.append(resp.readline())
        got.append(resp.readline())
        self.srv.delete(base + "/p", {"gracePeriodSeconds": 0})
        t0 = time.time()
        rest = resp.read()
        self.assertLess(time.time() - t0, 5)
        conn.close()
        self.assertEqual(got, [b"a\n", b"b\n", b"c\n"])
        self.assertEqual(rest, b"")

    def test_crd_deletion_removes_objects(self):
        crd = crd_body(group="gone.example.com", plural="bits", kind="Bit", short=())
        self.ensure_crd(crd)
        ns = self.ns()
        base = "/apis/gone.example.com/v1/namespaces/%s/bits" % ns
        for n in ("a", "b"):
            code, _, _ = self.srv.post(base, {"apiVersion": "gone.example.com/v1", "kind": "Bit",
                                              "metadata": {"name": n}, "spec": {}})
            self.assertEqual(code, 201)
        code, o, _ = self.srv.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                     "bits.gone.example.com")
        self.assertEqual(code, 200)
        deadline = time.time() + 5
        while time.time() < deadline:
            code, _, _ = self.srv.get("/apis/apiextensions.k8s.io/v1/"
                                      "customresourcedefinitions/bits.gone.example.com")
            if code == 404:
                break
            time.sleep(0.05)
        self.assertEqual(code, 404)
        self.assertEqual(self.srv.get(base)[0], 404)
        # re-creating the CRD starts empty
        self.ensure_crd(crd)
        code, l, _ = self.srv.get(base)
        self.assertEqual((code, l["items"]), (200, []))


class TestServerProcess(unittest.TestCase):
    def test_sigterm_pid_and_port_files(self):
        srv = LocalApiServer().start()
        try:
            with open(os.path.join(srv.dir, "apiserver.pid")) as f:
                self.assertEqual(int(f.read()), srv.proc.pid)
            with open(os.path.join(srv.dir, "apiserver.port")) as f:
                self.assertEqual(int(f.read()), srv.port)
            # an open watch must not hold up shutdown
            sock = socket.create_connection(("127.0.0.1", srv.port))
            sock.sendall(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.2)
            t0 = time.time()
            srv.proc.send_signal(signal.SIGTERM)
            rc = srv.proc.wait(10)
            self.assertEqual(rc, 0)
            self.assertLess(time.time() - t0, 5)
            self.assertFalse(os.path.exists(os.path.join(srv.dir, "apiserver.pid")))
            self.assertFalse(os.path.exists(os.path.join(srv.dir, "apiserver.port")))
            self.assertIn("listening on http://127.0.0.1:%d" % srv.port, srv.log_text())
            sock.close()
        finally:
            srv.stop()

    def test_keepalive_chunked_body_and_internal_errors(self):
        srv = LocalApiServer(in_process=True).start()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
            conn.request("GET", "/version")
            conn.getresponse().read()
            sock = conn.sock
            conn.request("HEAD", "/api/v1/namespaces")
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            body = json.dumps(cm("chunky")).encode()
            conn.putrequest("POST", "/api/v1/namespaces/default/configmaps")
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for i in range(0, len(body), 10):
                part = body[i:i + 10]
                conn.send(b"%x\r\n%s\r\n" % (len(part), part))
            conn.send(b"0\r\n\r\n")
            r = conn.getresponse()
            self.assertEqual(r.status, 201, r.read())
            r.read()
            self.assertIs(conn.sock, sock)  # one connection for all requests
            # a handler bug becomes a 500 Status; the server keeps serving
            orig = srv.api.store.get

            def broken(*a, **kw):
                raise RuntimeError("boom")
            srv.api.store.get = broken
            quiet = logging.getLogger("localkube")
            level = quiet.level
            quiet.setLevel(logging.CRITICAL)
            try:
                code, st, _ = srv.get("/api/v1/namespaces/default/configmaps/chunky")
            finally:
                srv.api.store.get = orig
                quiet.setLevel(level)
            self.assertEqual((code, st["kind"], st["reason"]), (500, "Status", "InternalError"))
            self.assertIn("boom", st["message"])
            self.assertEqual(srv.get("/api/v1/namespaces/default/configmaps/chunky")[0], 200)
            conn.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
