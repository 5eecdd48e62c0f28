"""Garbage collection (ownerReferences, propagation policies), namespace cascade and the fault
injection API of the localkube API server."""

import os
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.lkserver import LocalApiServer  # noqa: E402


def cm(name, owners=(), finalizers=None):
    md = {"name": name}
    if owners:
        md["ownerReferences"] = list(owners)
    if finalizers:
        md["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {"k": "v"}}


def ref(obj, block=None, kind=None, api_version=None):
    r = {"apiVersion": api_version or obj["apiVersion"], "kind": kind or obj["kind"],
         "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
    if block is not None:
        r["blockOwnerDeletion"] = block
    return r


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = LocalApiServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def ns(self):
        name = "g-" + uuid.uuid4().hex[:8]
        code, body, _ = self.srv.post("/api/v1/namespaces", {"metadata": {"name": name}})
        self.assertEqual(code, 201, body)
        return name

    def wait_gone(self, path, timeout=2.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            code, _, _ = self.srv.get(path)
            if code == 404:
                return True
            time.sleep(0.02)
        return False

    def wait_until(self, fn, timeout=2.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = fn()
            if v:
                return v
            time.sleep(0.02)
        return fn()


class TestGC(Base):
    def test_background(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, owner, _ = self.srv.post(base, cm("owner"))
        for i in range(3):
            self.srv.post(base, cm("dep%d" % i, [ref(owner)]))
        self.srv.post(base, cm("bystander"))
        t0 = time.time()
        code, st, _ = self.srv.delete(base + "/owner", {"propagationPolicy": "Background"})
        self.assertEqual(code, 200)
        for i in range(3):
            self.assertTrue(self.wait_gone(base + "/dep%d" % i), "dep%d not collected" % i)
        self.assertLess(time.time() - t0, 1.5)
        self.assertEqual(self.srv.get(base + "/bystander")[0], 200)

    def test_dangling_and_unresolvable_refs(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, owner, _ = self.srv.post(base, cm("owner"))
        bogus = dict(ref(owner), uid=str(uuid.uuid4()))
        self.srv.post(base, cm("dangling", [bogus]))
        self.assertTrue(self.wait_gone(base + "/dangling"))
        unknown = {"apiVersion": "nowhere.example.com/v1", "kind": "Ghost", "name": "g",
                   "uid": str(uuid.uuid4())}
        self.srv.post(base, cm("unresolvable", [unknown]))
        time.sleep(0.5)
        self.assertEqual(self.srv.get(base + "/unresolvable")[0], 200)
        # an owner in another namespace is treated as absent
        other = self.ns()
        self.srv.post("/api/v1/namespaces/%s/configmaps" % other, cm("x", [ref(owner)]))
        self.assertTrue(self.wait_gone("/api/v1/namespaces/%s/configmaps/x" % other))
        # cluster-scoped owners are fine for namespaced dependents
        code, nso, _ = self.srv.get("/api/v1/namespaces/" + other)
        self.srv.post("/api/v1/namespaces/%s/configmaps" % other, cm("y", [ref(nso)]))
        time.sleep(0.5)
        self.assertEqual(self.srv.get("/api/v1/namespaces/%s/configmaps/y" % other)[0], 200)

    def test_solid_owner_keeps_dependent(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, a, _ = self.srv.post(base, cm("a"))
        code, b, _ = self.srv.post(base, cm("b"))
        self.srv.post(base, cm("dep", [ref(a), ref(b)]))
        self.srv.delete(base + "/a")

        def refs():
            code, d, _ = self.srv.get(base + "/dep")
            self.assertEqual(code, 200)
            r = [x["name"] for x in d["metadata"].get("ownerReferences", [])]
            return r if r == ["b"] else None
        self.assertEqual(self.wait_until(refs), ["b"])

    def test_foreground(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, owner, _ = self.srv.post(base, cm("owner"))
        self.srv.post(base, cm("blocker", [ref(owner, block=True)], finalizers=["test/hold"]))
        self.srv.post(base, cm("plain", [ref(owner, block=True)]))
        code, o, _ = self.srv.delete(base + "/owner", {"propagationPolicy": "Foreground"})
        self.assertEqual(code, 200)
        self.assertIn("foregroundDeletion", o["metadata"]["finalizers"])
        self.assertTrue(o["metadata"]["deletionTimestamp"])
        self.assertTrue(self.wait_gone(base + "/plain"))
        code, blk, _ = self.srv.get(base + "/blocker")
        self.assertEqual(code, 200)
        self.assertTrue(blk["metadata"].get("deletionTimestamp"))  # being deleted
        time.sleep(0.3)
        code, o, _ = self.srv.get(base + "/owner")
        self.assertEqual(code, 200)  # still waiting for the blocking dependent
        self.srv.patch(base + "/blocker", {"metadata": {"finalizers": None}})
        self.assertTrue(self.wait_gone(base + "/blocker"))
        self.assertTrue(self.wait_gone(base + "/owner"))

    def test_orphan(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, owner, _ = self.srv.post(base, cm("owner"))
        self.srv.post(base, cm("kid", [ref(owner)]))
        code, o, _ = self.srv.delete(base + "/owner", {"propagationPolicy": "Orphan"})
        self.assertEqual(code, 200)
        self.assertIn("orphan", o["metadata"]["finalizers"])
        self.assertTrue(self.wait_gone(base + "/owner"))
        code, kid, _ = self.srv.get(base + "/kid")
        self.assertEqual(code, 200)
        self.assertNotIn("ownerReferences", kid["metadata"])
        # orphanDependents=true (deprecated form) behaves the same
        code, owner, _ = self.srv.post(base, cm("owner2"))
        self.srv.post(base, cm("kid2", [ref(owner)]))
        code, o, _ = self.srv.delete(base + "/owner2?orphanDependents=true")
        self.assertTrue(self.wait_gone(base + "/owner2"))
        self.assertEqual(self.srv.get(base + "/kid2")[0], 200)

    def test_deployment_chain_foreground(self):
        ns = self.ns()
        labels = {"app": "chain"}
        code, dep, _ = self.srv.post("/apis/apps/v1/namespaces/%s/deployments" % ns, {
            "metadata": {"name": "chain"},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        self.assertEqual(code, 201, dep)
        code, rs, _ = self.srv.post("/apis/apps/v1/namespaces/%s/replicasets" % ns, {
            "metadata": {"name": "chain-1", "ownerReferences": [
                dict(ref(dep, block=True), controller=True)]},
            "spec": {"selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        self.assertEqual(code, 201, rs)
        code, pod, _ = self.srv.post("/api/v1/namespaces/%s/pods" % ns, {
            "metadata": {"name": "chain-1-x", "labels": labels, "ownerReferences": [
                dict(ref(rs, block=True), controller=True)]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}})
        self.assertEqual(code, 201, pod)
        code, _, _ = self.srv.delete("/apis/apps/v1/namespaces/%s/deployments/chain" % ns,
                                     {"propagationPolicy": "Foreground"})
        self.assertEqual(code, 200)
        for p in ("/api/v1/namespaces/%s/pods/chain-1-x" % ns,
                  "/apis/apps/v1/namespaces/%s/replicasets/chain-1" % ns,
                  "/apis/apps/v1/namespaces/%s/deployments/chain" % ns):
            self.assertTrue(self.wait_gone(p), p)

    def test_namespace_cascade(self):
        ns = self.ns()
        self.srv.post("/api/v1/namespaces/%s/configmaps" % ns, cm("a"))
        self.srv.post("/api/v1/namespaces/%s/secrets" % ns, {"metadata": {"name": "s"}})
        self.srv.post("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns,
                      {"metadata": {"name": "l"}, "spec": {"holderIdentity": "x"}})
        code, o, _ = self.srv.delete("/api/v1/namespaces/" + ns)
        self.assertEqual(code, 200)
        self.assertTrue(self.wait_gone("/api/v1/namespaces/" + ns))
        code, lst, _ = self.srv.get("/api/v1/configmaps?fieldSelector=metadata.namespace%3D"
                                    + ns)
        self.assertEqual(lst["items"], [])


class TestFaults(Base):
    def tearDown(self):
        self.srv.delete("/localkube/faults")

    def test_fail_counts_and_reasons(self):
        path = "/api/v1/namespaces/default/configmaps"
        code, res, _ = self.srv.post("/localkube/faults", {"type": "fail", "verb": "list",
                                                           "resource": "configmaps",
                                                           "code": 500, "count": 2})
        self.assertEqual(code, 200, res)
        self.assertTrue(res["ok"])
        for _ in range(2):
            c, b, _ = self.srv.get(path)
            self.assertEqual((c, b["kind"], b["reason"], b["code"]),
                             (500, "Status", "InternalError", 500))
        self.assertEqual(self.srv.get(path)[0], 200)
        self.assertEqual(self.srv.get(path + "/nope")[0], 404)  # get: not affected
        expect = {429: "TooManyRequests", 503: "ServiceUnavailable", 504: "Timeout",
                  409: "Conflict", 410: "Expired", 403: "Forbidden"}
        for code_, reason in expect.items():
            self.srv.post("/localkube/faults", {"type": "fail", "verb": "*",
                                                "resource": "configmaps", "code": code_,
                                                "retryAfter": 3})
            c, b, h = self.srv.post(path, cm("f%d" % code_))
            self.assertEqual((c, b["reason"], b["code"]), (code_, reason, code_), b)
            if code_ == 429:
                self.assertEqual(h["Retry-After"], "3")
                self.assertEqual(b["details"]["retryAfterSeconds"], 3)

    def test_latency_and_internal_exemption(self):
        path = "/api/v1/namespaces/default/configmaps"
        self.srv.post("/localkube/faults", {"type": "latency", "ms": 600, "verb": "list",
                                            "resource": "*", "count": 2})
        t0 = time.time()
        self.srv.get(path, headers={"User-Agent": "localkube/controllers"})
        self.assertLess(time.time() - t0, 0.5)  # internal clients are exempt
        t0 = time.time()
        self.srv.get(path)
        self.assertGreaterEqual(time.time() - t0, 0.6)
        code, lst, _ = self.srv.get("/localkube/faults")
        self.assertEqual(len(lst["faults"]), 1)
        self.assertEqual(lst["faults"][0]["remaining"], 1)
        self.srv.post("/localkube/faults", {"type": "fail", "verb": "get",
                                            "resource": "configmaps", "code": 500,
                                            "internal": True})
        c, _, _ = self.srv.get(path + "/x", headers={"User-Agent": "localkube/kubelet"})
        self.assertEqual(c, 500)
        code, res, _ = self.srv.delete("/localkube/faults")
        self.assertEqual((code, res["ok"]), (200, True))
        self.assertEqual(self.srv.get("/localkube/faults")[1]["faults"], [])

    def test_bad_fault_specs(self):
        for spec, field in (({"type": "boom"}, "type"),
                            ({"type": "fail", "code": 99}, "code"),
                            ({"type": "fail", "verb": "frobnicate"}, "verb"),
                            ({"type": "latency"}, "ms"),
                            ({"type": "fail", "count": -1}, "count"),
                            ({"type": "fail", "bogus": 1}, "bogus")):
            c, b, _ = self.srv.post("/localkube/faults", spec)
            self.assertEqual(c, 400, spec)
            self.assertEqual((b["kind"], b["reason"]), ("Status", "BadRequest"))
            self.assertIn('"%s"' % field, b["message"])
        c, b, _ = self.srv.post("/localkube/faults", "{not json")
        self.assertEqual(c, 400)


if __name__ == "__main__":
    unittest.main()
