"""More kube-apiserver semantics of lk.apiserver, driven over HTTP: duplicate fields under
fieldValidation, managedFields of Update operations and apply conflicts with them, the kubectl
client-side -> server-side apply upgrade, generateName validation, typed time fields, the shared
core/v1 + events.k8s.io/v1 Event store, the all-namespaces collection's verbs, OpenAPI schemas of
built-in kinds, and the hold on fast answers to proxied request bodies.
"""

import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.test_apiserver import ApiTestBase, cm  # noqa: E402

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def managers(obj):
    return {(m["manager"], m["operation"]): m for m in obj["metadata"].get("managedFields", [])}


class TestDuplicateFields(ApiTestBase):
    def test_custom_resource(self):
        self.ensure_crd()
        ns = self.ns()
        base = "/apis/stable.example.com/v1/namespaces/%s/crontabs" % ns
        raw = ('{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"%s"},'
               '"spec":{"cronSpec":"a","cronSpec":"b","bogus":1}}')
        b = self.assertStatus(self.srv.post(base + "?fieldValidation=Strict", raw % "d1"), 400,
                              "BadRequest")
        self.assertEqual(b["message"], 'strict decoding error: duplicate field "spec.cronSpec", '
                                       'unknown field "spec.bogus"')
        self.assertEqual(self.srv.get(base + "/d1")[0], 404)
        code, o, h = self.srv.post(base, raw % "d2")  # default: Warn
        self.assertEqual(code, 201, o)
        self.assertEqual(o["spec"]["cronSpec"], "b")  # the last value wins, as in Go
        self.assertEqual(h.get_all("Warning"), ['299 - "duplicate field \\"spec.cronSpec\\""',
                                                '299 - "unknown field \\"spec.bogus\\""'])
        code, o, h = self.srv.post(base + "?fieldValidation=Ignore", raw % "d3")
        self.assertEqual(code, 201, o)
        self.assertIsNone(h.get("Warning"))

    def test_builtin_nested_list_and_patch(self):
        ns = self.ns()
        base = "/apis/apps/v1/namespaces/%s/deployments" % ns
        raw = ('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{'
               '"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},'
               '"spec":{"containers":[{"name":"c","image":"x","image":"y"}]}}}}')
        b = self.assertStatus(self.srv.post(base + "?fieldValidation=Strict", raw), 400,
                              "BadRequest")
        self.assertIn('duplicate field "spec.template.spec.containers[0].image"', b["message"])
        cbase = "/api/v1/namespaces/%s/configmaps" % ns
        self.assertEqual(self.srv.post(cbase, cm("p"))[0], 201)
        b = self.assertStatus(self.srv.request(
            "PATCH", cbase + "/p?fieldValidation=Strict", body='{"data":{"k":"1","k":"2"}}',
            content_type="application/merge-patch+json"), 400, "BadRequest")
        self.assertEqual(b["message"], 'strict decoding error: duplicate field "data.k"')
        # YAML bodies: sigs.k8s.io/yaml's strict message
        yaml_body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  a: '1'\n  a: '2'\n"
        b = self.assertStatus(self.srv.request("POST", cbase + "?fieldValidation=Strict",
                                               body=yaml_body, content_type="application/yaml"),
                              400, "BadRequest")
        self.assertIn('key "a" already set in map', b["message"])


class TestManagedFields(ApiTestBase):
    def test_update_ownership_and_apply_conflicts(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, o, _ = self.srv.post(base + "?fieldManager=creator", cm("m", {"a": "1", "b": "2"}))
        self.assertEqual(code, 201, o)
        e = managers(o)[("creator", "Update")]
        self.assertEqual(e["fieldsV1"], {"f:data": {"f:a": {}, "f:b": {}}})
        self.assertEqual((e["apiVersion"], e["fieldsType"]), ("v1", "FieldsV1"))
        # without fieldManager the manager is the User-Agent up to the first '/'
        code, o, _ = self.srv.patch(base + "/m", {"data": {"b": "3", "c": "4"}},
                                    headers={"User-Agent": "editor/1.0 (linux)"})
        self.assertEqual(code, 200, o)
        ms = managers(o)
        self.assertEqual(ms[("editor", "Update")]["fieldsV1"], {"f:data": {"f:b": {}, "f:c": {}}})
        self.assertEqual(ms[("creator", "Update")]["fieldsV1"], {"f:data": {"f:a": {}}})
        # a PUT that removes a field takes it away from its owner
        o["data"].pop("a")
        code, o, _ = self.srv.put(base + "/m?fieldManager=putter", o)
        self.assertEqual(code, 200, o)
        self.assertNotIn(("creator", "Update"), managers(o))  # owned nothing else
        # apply over a field an Update manager owns: 409 naming it the way kube does
        b = self.assertStatus(self.srv.patch(base + "/m?fieldManager=app",
                                             cm("m", {"b": "9"}), ptype="apply"), 409, "Conflict")
        self.assertEqual(b["message"], 'Apply failed with 1 conflict: conflict with "editor" '
                                       'using v1: .data.b')
        self.assertEqual(b["details"]["causes"], [{"reason": "FieldManagerConflict",
                                                   "message": 'conflict with "editor" using v1',
                                                   "field": ".data.b"}])
        # the same value is shared ownership, not a conflict
        code, o, _ = self.srv.patch(base + "/m?fieldManager=app", cm("m", {"b": "3"}),
                                    ptype="apply")
        self.assertEqual(code, 200, o)
        # force moves the field
        code, o, _ = self.srv.patch(base + "/m?fieldManager=app&force=true",
                                    cm("m", {"b": "9"}), ptype="apply")
        self.assertEqual((code, o["data"]["b"]), (200, "9"))
        ms = managers(o)
        self.assertEqual(ms[("editor", "Update")]["fieldsV1"], {"f:data": {"f:c": {}}})
        self.assertEqual(ms[("app", "Apply")]["fieldsV1"], {"f:data": {"f:b": {}}})
        # Apply entries sort before Update entries, as kube writes them
        self.assertEqual(o["metadata"]["managedFields"][0]["operation"], "Apply")

    def test_status_subresource_entry(self):
        ns = self.ns()
        base = "/apis/apps/v1/namespaces/%s/deployments" % ns
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "s"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                                     "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
        code, o, _ = self.srv.post(base + "?fieldManager=mk", dep)
        self.assertEqual(code, 201, o)
        self.assertNotIn("f:status", managers(o)[("mk", "Update")]["fieldsV1"])
        code, o, _ = self.srv.patch(base + "/s/status?fieldManager=ctl",
                                    {"status": {"replicas": 1}})
        self.assertEqual(code, 200, o)
        e = managers(o)[("ctl", "Update")]
        self.assertEqual((e["subresource"], e["fieldsV1"]),
                         ("status", {"f:status": {"f:replicas": {}}}))

    def test_kubectl_client_side_to_server_side_upgrade(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        applied = cm("u", {"a": "1", "b": "2"})
        body = json.loads(json.dumps(applied))
        body["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(applied)}
        code, o, _ = self.srv.post(base + "?fieldManager=kubectl-client-side-apply", body)
        self.assertEqual(code, 201, o)
        # someone else changes b; kubectl later applies server-side with new values
        self.assertEqual(self.srv.patch(base + "/u?fieldManager=other",
                                        {"data": {"b": "x"}})[0], 200)
        new = cm("u", {"a": "10", "b": "20"})
        # a manager other than "kubectl" gets the conflicts
        self.assertStatus(self.srv.patch(base + "/u?fieldManager=someone", new, ptype="apply"),
                          409, "Conflict")
        # "kubectl" may take a over (last applied, unchanged), but not b (changed by other)
        b = self.assertStatus(self.srv.patch(base + "/u?fieldManager=kubectl", new,
                                             ptype="apply"), 409, "Conflict")
        self.assertEqual(b["message"], 'Apply failed with 1 conflict: conflict with "other" '
                                       'using v1: .data.b')
        new["data"]["b"] = "x"
        code, o, _ = self.srv.patch(base + "/u?fieldManager=kubectl", new, ptype="apply")
        self.assertEqual(code, 200, o)
        self.assertEqual(o["data"], {"a": "10", "b": "x"})
        ms = managers(o)
        self.assertEqual(ms[("kubectl", "Apply")]["fieldsV1"]["f:data"], {"f:a": {}, "f:b": {}})
        # the last-applied annotation follows the server-side apply
        self.assertEqual(json.loads(o["metadata"]["annotations"][LAST_APPLIED]), new)


class TestNamesTimesAndVerbs(ApiTestBase):
    def test_generate_name_validation(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        b = self.assertStatus(self.srv.post(base, {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"generateName": "Bad_Prefix-"}}),
                              422, "Invalid")
        fields = [c["field"] for c in b["details"]["causes"]]
        self.assertEqual(fields, ["metadata.generateName", "metadata.name"])
        self.assertIn('metadata.generateName: Invalid value: "Bad_Prefix-": a lowercase RFC 1123 '
                      'subdomain', b["message"])
        self.assertTrue(b["details"]["name"].startswith("Bad_Prefix-"))

    def test_lease_and_event_times(self):
        ns = self.ns()
        base = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "l"},
                 "spec": {"holderIdentity": "a", "renewTime": "not-a-time"}}
        b = self.assertStatus(self.srv.post(base, lease), 400, "BadRequest")
        self.assertEqual(b["message"], 'Lease in version "v1" cannot be handled as a Lease: '
                                       'parsing time "not-a-time" as '
                                       '"2006-01-02T15:04:05.000000Z07:00": cannot parse '
                                       '"not-a-time" as "2006"')
        # a MicroTime needs its six fractional digits
        lease["spec"]["renewTime"] = "2024-01-02T03:04:05Z"
        self.assertStatus(self.srv.post(base, lease), 400, "BadRequest")
        lease["spec"]["renewTime"] = "2024-01-02T03:04:05.000001Z"
        code, o, _ = self.srv.post(base, lease)
        self.assertEqual((code, o["spec"]["renewTime"]), (201, "2024-01-02T03:04:05.000001Z"))
        # a merge patch that leaves an unparsable time: 422 on "patch", as kube's patcher says
        b = self.assertStatus(self.srv.patch(base + "/l", {"spec": {"acquireTime": "soon"}}),
                              422, "Invalid")
        self.assertEqual(b["details"]["causes"][0]["field"], "patch")
        self.assertIn('parsing time "soon"', b["message"])
        # metav1.Time fields of other kinds
        ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
              "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
              "firstTimestamp": "yesterday"}
        b = self.assertStatus(self.srv.post("/api/v1/namespaces/%s/events" % ns, ev), 400,
                              "BadRequest")
        self.assertIn('"2006-01-02T15:04:05Z07:00"', b["message"])

    def test_all_namespaces_collection_serves_list_and_watch_only(self):
        ns = self.ns()
        self.assertEqual(self.srv.post("/api/v1/namespaces/%s/configmaps" % ns,
                                       cm("x", labels={"t": ns}))[0], 201)
        code, lst, _ = self.srv.get("/api/v1/configmaps?labelSelector=t%3D" + ns)
        self.assertEqual((code, len(lst["items"])), (200, 1))
        for method in ("POST", "DELETE", "PUT", "PATCH"):
            body = dict(cm("y"), metadata={"name": "y", "namespace": ns})
            self.assertStatus(self.srv.request(method, "/api/v1/configmaps", body=body,
                                               content_type="application/merge-patch+json"
                                               if method == "PATCH" else None),
                              405, "MethodNotAllowed")
        self.assertEqual(self.srv.get("/api/v1/namespaces/%s/configmaps/x" % ns)[0], 200)
        self.assertEqual(self.srv.get("/api/v1/namespaces/%s/configmaps/y" % ns)[0], 404)


class TestEvents(ApiTestBase):
    def test_one_store_two_apis(self):
        ns = self.ns()
        core = "/api/v1/namespaces/%s/events" % ns
        v1 = "/apis/events.k8s.io/v1/namespaces/%s/events" % ns
        got = []
        t = threading.Thread(target=lambda: got.extend(self.srv.watch(
            v1 + "?watch=1&resourceVersion=1", max_events=2, timeout=5)))
        t.start()
        time.sleep(0.3)
        ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "old"},
              "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                                 "namespace": ns, "uid": "u1"},
              "reason": "Tested", "message": "hello", "type": "Warning",
              "source": {"component": "lkc", "host": "h"},
              "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:05Z",
              "count": 3}
        code, o, _ = self.srv.post(core, ev)
        self.assertEqual(code, 201, o)
        self.assertEqual((o["reportingComponent"], o["eventTime"]), ("", None))
        code, o, _ = self.srv.get(v1 + "/old")
        self.assertEqual(code, 200, o)
        self.assertEqual(o["apiVersion"], "events.k8s.io/v1")
        self.assertEqual((o["note"], o["reason"], o["type"]), ("hello", "Tested", "Warning"))
        self.assertEqual(o["regarding"]["name"], "c")
        self.assertEqual(o["deprecatedSource"], {"component": "lkc", "host": "h"})
        self.assertEqual((o["deprecatedFirstTimestamp"], o["deprecatedLastTimestamp"],
                          o["deprecatedCount"]),
                         ("2024-01-01T00:00:00Z", "2024-01-01T00:00:05Z", 3))
        # a new-style event through events.k8s.io/v1, seen through core/v1
        new = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "new"},
               "eventTime": "2024-01-01T00:00:00.123456Z", "reportingController": "lk/ctl",
               "reportingInstance": "i-1", "action": "Scale", "reason": "Scaled",
               "regarding": {"kind": "Deployment", "name": "d", "namespace": ns},
               "note": "scaled up", "type": "Normal"}
        code, o, _ = self.srv.post(v1, new)
        self.assertEqual(code, 201, o)
        self.assertEqual((o["apiVersion"], o["note"]), ("events.k8s.io/v1", "scaled up"))
        code, o, _ = self.srv.get(core + "/new")
        self.assertEqual(code, 200, o)
        self.assertEqual((o["message"], o["reportingComponent"], o["involvedObject"]["kind"],
                          o["action"], o["eventTime"]),
                         ("scaled up", "lk/ctl", "Deployment", "Scale",
                          "2024-01-01T00:00:00.123456Z"))
        self.assertEqual(o["source"], {})
        # lists and field selectors of both APIs
        code, lst, _ = self.srv.get(core)
        self.assertEqual(sorted(i["metadata"]["name"] for i in lst["items"]), ["new", "old"])
        code, lst, _ = self.srv.get(v1 + "?fieldSelector=regarding.kind%3DDeployment")
        self.assertEqual((code, [i["metadata"]["name"] for i in lst["items"]]), (200, ["new"]),
                         lst)
        self.assertEqual(lst["apiVersion"], "events.k8s.io/v1")
        code, lst, _ = self.srv.get(v1 + "?fieldSelector=reportingController%3Dlk%2Fctl")
        self.assertEqual([i["metadata"]["name"] for i in lst["items"]], ["new"])
        self.assertStatus(self.srv.get(v1 + "?fieldSelector=involvedObject.kind%3DPod"), 400,
                          "BadRequest")
        # events.k8s.io/v1 creates are strictly validated
        bad = dict(new, metadata={"name": "bad"}, type="Odd")
        del bad["eventTime"]
        b = self.assertStatus(self.srv.post(v1, bad), 422, "Invalid")
        self.assertEqual(sorted(c["field"] for c in b["details"]["causes"]),
                         ["eventTime", "type"])
        # the watch through events.k8s.io/v1 saw both, converted
        t.join(10)
        self.assertEqual([(e["type"], e["object"]["apiVersion"], e["object"]["metadata"]["name"])
                          for e in got],
                         [("ADDED", "events.k8s.io/v1", "old"), ("ADDED", "events.k8s.io/v1",
                                                                 "new")])
        # one object: deleting it through one API removes it from the other
        self.assertEqual(self.srv.delete(v1 + "/old")[0], 200)
        self.assertEqual(self.srv.get(core + "/old")[0], 404)


class TestOpenAPIBuiltins(ApiTestBase):
    def test_builtin_schemas(self):
        code, idx, _ = self.srv.get("/openapi/v3")
        self.assertEqual(code, 200)
        code, doc, _ = self.srv.get(idx["paths"]["apis/apps/v1"]["serverRelativeURL"])
        self.assertEqual(code, 200)
        schemas = doc["components"]["schemas"]
        spec = schemas["io.k8s.api.apps.v1.DeploymentSpec"]
        self.assertEqual(spec["properties"]["replicas"]["type"], "integer")
        ref = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["items"]
        self.assertEqual(ref["allOf"][0]["$ref"],
                         "#/components/schemas/io.k8s.api.core.v1.Container")
        for r in json.dumps(doc).split('"$ref": "#/components/schemas/')[1:]:
            self.assertIn(r.split('"')[0], schemas)  # every reference resolves
        code, doc, _ = self.srv.get(idx["paths"]["api/v1"]["serverRelativeURL"])
        props = doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["properties"]
        self.assertEqual(props["data"]["additionalProperties"]["type"], "string")
        self.assertIn("immutable", props)
        # PATCH operations still leave strategic merge patch out (kubectl computes it from its
        # compiled-in types) and announce fieldValidation (server-side validation)
        op = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
        self.assertNotIn("application/strategic-merge-patch+json",
                         op["requestBody"]["content"])
        self.assertIn("fieldValidation", [p["name"] for p in op["parameters"]])


class TestProxiedBodyHold(ApiTestBase):
    def test_hold(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        big = cm("big", {"blob": "x" * 8192})
        t0 = time.monotonic()
        self.assertEqual(self.srv.post(base, big, headers={"X-Forwarded-For": "127.0.0.1"})[0],
                         201)
        self.assertGreaterEqual(time.monotonic() - t0, 0.05)
        # not proxied, or small: answered at once
        t0 = time.monotonic()
        big["metadata"]["name"] = "big2"
        self.assertEqual(self.srv.post(base, big)[0], 201)
        self.assertEqual(self.srv.post(base, cm("small"),
                                       headers={"X-Forwarded-For": "127.0.0.1"})[0], 201)
        self.assertLess(time.monotonic() - t0, 0.05)


if __name__ == "__main__":
    unittest.main()
