"""More controllers end to end: DaemonSet (one pod per node, rolling update, `kubectl rollout
status daemonset`), the scheduler (nodeSelector, resources, Unschedulable), ReplicaSet adoption
and pod replacement, Node/Lease heartbeats, and resilience to injected API faults (expired
history, dropped watches, 5xx on the controllers' own requests)."""

import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from lk import client as kc  # noqa: E402
from lk import scheduler as sched  # noqa: E402
from tests import test_controllers as tc  # noqa: E402

wait_for = tc.wait_for


def sleeper_template(labels, **spec):
    s = {"terminationGracePeriodSeconds": 1, "containers": [{
        "name": "c", "image": tc.BUSYBOX, "command": ["sleep", "600"],
        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}]}
    s.update(spec)
    return {"metadata": {"labels": labels}, "spec": s}


class MoreControllersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = tc.Cluster(nodes=3, extra=["--node-cpu", "2", "--node-memory", "4Gi"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.k.stop()

    def test_nodes_and_leases(self):
        c = self.k.c
        nodes = sorted(c.list(kc.NODES)["items"], key=lambda n: n["metadata"]["name"])
        self.assertEqual([n["metadata"]["name"] for n in nodes],
                         ["localkube-node-1", "localkube-node-2", "localkube-node-3"])
        n = nodes[0]
        self.assertEqual(n["metadata"]["labels"]["kubernetes.io/hostname"], "localkube-node-1")
        self.assertEqual(n["metadata"]["labels"]["kubernetes.io/os"], "linux")
        self.assertEqual(n["status"]["allocatable"]["cpu"], "2")
        self.assertEqual(n["status"]["capacity"]["memory"], "4Gi")
        self.assertIn({"type": "InternalIP", "address": "127.0.0.1"}, n["status"]["addresses"])
        ready = kc.get_condition(n["status"], "Ready")
        self.assertEqual((ready["status"], ready["reason"]), ("True", "KubeletReady"))
        lease = c.get(kc.LEASES, "localkube-node-1", "kube-node-lease")
        self.assertEqual(lease["spec"]["holderIdentity"], "localkube-node-1")
        # owned by its Node, as the kubelet's node lease controller does it
        self.assertEqual(lease["metadata"]["ownerReferences"], [{
            "apiVersion": "v1", "kind": "Node", "name": "localkube-node-1",
            "uid": n["metadata"]["uid"]}])
        t1 = lease["spec"]["renewTime"]
        wait_for(lambda: c.get(kc.LEASES, "localkube-node-1", "kube-node-lease")["spec"][
            "renewTime"] != t1, 15, "lease renewal")

    def test_daemonset_one_pod_per_node_and_rolling_update(self):
        k = self.k
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "updateStrategy": {"type": "RollingUpdate",
                                          "rollingUpdate": {"maxUnavailable": 1}},
                       "template": sleeper_template({"app": "agent"})}}
        k.create(kc.DAEMONSETS, ds)

        def settled():
            d = k.c.get(kc.DAEMONSETS, "agent", "default")
            st = d.get("status") or {}
            return st.get("numberReady") == 3 and st.get("updatedNumberScheduled") == 3 and \
                st.get("observedGeneration") == d["metadata"]["generation"] and d
        d = wait_for(settled, 30, "daemonset ready")
        st = d["status"]
        self.assertEqual((st["desiredNumberScheduled"], st["currentNumberScheduled"],
                          st["numberAvailable"], st.get("numberMisscheduled", 0)), (3, 3, 3, 0))
        pods = k.pods(selector="app=agent")
        self.assertEqual(sorted(p["spec"]["nodeName"] for p in pods),
                         ["localkube-node-1", "localkube-node-2", "localkube-node-3"])
        for p in pods:
            self.assertEqual(kc.controller_ref(p)["kind"], "DaemonSet")
            self.assertTrue(p["metadata"]["name"].startswith("agent-"))
        old_hash = pods[0]["metadata"]["labels"]["controller-revision-hash"]
        r = k.kubectl("rollout", "status", "daemonset/agent", "--timeout=30s", timeout=40)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn('daemon set "agent" successfully rolled out', r.stdout)
        # rolling update: never more than maxUnavailable=1 node without a ready pod
        k.c.patch(kc.DAEMONSETS, "agent", {"spec": {"template": {"metadata": {
            "annotations": {"v": "2"}}}}}, "default")
        worst = 3
        deadline = time.time() + 40
        while time.time() < deadline:
            ps = k.pods(selector="app=agent")
            worst = min(worst, len({p["spec"]["nodeName"] for p in ps if kc.is_pod_ready(p)}))
            if len(ps) == 3 and all(p["metadata"]["labels"]["controller-revision-hash"] !=
                                    old_hash and kc.is_pod_ready(p) for p in ps):
                break
            time.sleep(0.05)
        else:
            self.fail("daemonset rolling update did not finish")
        self.assertGreaterEqual(worst, 2)
        r = k.kubectl("rollout", "status", "daemonset/agent", "--timeout=30s", timeout=40)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # nodeSelector limits the nodes
        k.c.patch(kc.DAEMONSETS, "agent", {"spec": {"template": {"spec": {"nodeSelector": {
            "kubernetes.io/hostname": "localkube-node-2"}}}}}, "default")
        wait_for(lambda: [p["spec"]["nodeName"] for p in
                          k.pods("default", "app=agent", active=False)] == ["localkube-node-2"],
                 40, "one pod on node-2")
        wait_for(lambda: k.c.get(kc.DAEMONSETS, "agent", "default")["status"].get(
            "desiredNumberScheduled") == 1, 10, "desired 1")
        k.c.delete(kc.DAEMONSETS, "agent", "default")

    def test_scheduler_selector_resources_unschedulable(self):
        k = self.k
        # nodeSelector
        k.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pinned"},
                           "spec": sleeper_template({}, nodeSelector={
                               "kubernetes.io/hostname": "localkube-node-3"})["spec"]})
        wait_for(lambda: (k.pod("pinned")["spec"].get("nodeName") == "localkube-node-3"), 20,
                 "pinned scheduled")
        # impossible selector -> Unschedulable with kube's message
        k.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nowhere"},
                           "spec": sleeper_template({}, nodeSelector={"disk": "ssd"})["spec"]})

        def unsched(name):
            c = kc.get_condition(k.pod(name).get("status"), "PodScheduled")
            return c if c and c["status"] == "False" else None
        c = wait_for(lambda: unsched("nowhere"), 20, "Unschedulable")
        self.assertEqual(c["reason"], "Unschedulable")
        self.assertEqual(c["message"], "0/3 nodes are available: 3 node(s) didn't match Pod's "
                                       "node affinity/selector.")
        self.assertEqual(k.pod("nowhere")["status"]["phase"], "Pending")
        # labelling a node makes it schedulable (retried on node changes)
        k.c.patch(kc.NODES, "localkube-node-1", {"metadata": {"labels": {"disk": "ssd"}}})
        wait_for(lambda: k.pod("nowhere")["spec"].get("nodeName") == "localkube-node-1", 20,
                 "scheduled after label")
        wait_for(lambda: kc.is_pod_ready(k.pod("nowhere")), 20, "ready")
        # resources: 2 cpus per node; three 1500m pods fit one per node, a fourth does not
        for i in range(4):
            spec = sleeper_template({})["spec"]
            spec["containers"][0]["resources"] = {"requests": {"cpu": "1500m",
                                                               "memory": "100Mi"}}
            k.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "big%d" % i}, "spec": spec})
        wait_for(lambda: sum(1 for i in range(4) if k.pod("big%d" % i)["spec"].get(
            "nodeName")) == 3, 20, "three big pods bound")
        left = [i for i in range(4) if not k.pod("big%d" % i)["spec"].get("nodeName")][0]
        c = wait_for(lambda: unsched("big%d" % left), 20, "big unschedulable")
        self.assertEqual(c["message"], "0/3 nodes are available: 3 Insufficient cpu.")
        nodes = {k.pod("big%d" % i)["spec"]["nodeName"] for i in range(4) if i != left}
        self.assertEqual(len(nodes), 3)
        # freeing one makes room
        k.c.delete(kc.PODS, "big%d" % ((left + 1) % 4), "default")
        wait_for(lambda: k.pod("big%d" % left)["spec"].get("nodeName"), 30, "rescheduled")
        for n in ["pinned", "nowhere"] + ["big%d" % i for i in range(4)]:
            try:
                k.c.delete(kc.PODS, n, "default", grace_period_seconds=0)
            except kc.ApiError:
                pass
        k.c.patch(kc.NODES, "localkube-node-1", {"metadata": {"labels": {"disk": None}}})

    def test_replicaset_replaces_deleted_pods_and_adopts_orphans(self):
        k = self.k
        orphan = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "orphan", "labels": {"app": "rs1"}},
                  "spec": sleeper_template({})["spec"]}
        k.create(kc.PODS, orphan)
        k.create(kc.REPLICASETS, {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                  "metadata": {"name": "rs1"},
                                  "spec": {"replicas": 2,
                                           "selector": {"matchLabels": {"app": "rs1"}},
                                           "template": sleeper_template({"app": "rs1"})}})

        def status():
            rs = k.c.get(kc.REPLICASETS, "rs1", "default")
            st = rs.get("status") or {}
            return st.get("readyReplicas") == 2 and st.get("replicas") == 2 and \
                st.get("fullyLabeledReplicas") == 2 and st.get("availableReplicas") == 2 and \
                st.get("observedGeneration") == rs["metadata"]["generation"] and rs
        rs = wait_for(status, 30, "rs ready")
        o = k.pod("orphan")
        self.assertEqual(kc.controller_ref(o)["uid"], rs["metadata"]["uid"])
        self.assertEqual(len(k.pods(selector="app=rs1")), 2)
        # a deleted pod is replaced
        k.c.delete(kc.PODS, "orphan", "default")
        wait_for(lambda: len([p for p in k.pods(selector="app=rs1") if p["metadata"]["name"] !=
                              "orphan" and kc.is_pod_ready(p)]) == 2, 30, "replacement")
        # a pod whose labels stop matching is released and replaced
        victim = k.pods(selector="app=rs1")[0]["metadata"]["name"]
        k.c.patch(kc.PODS, victim, {"metadata": {"labels": {"app": "gone"}}}, "default")
        wait_for(lambda: kc.controller_ref(k.pod(victim)) is None, 20, "released")
        wait_for(lambda: len(k.ready_pods("app=rs1")) == 2, 30, "replaced released pod")
        k.c.delete(kc.PODS, victim, "default", grace_period_seconds=0)
        k.c.delete(kc.REPLICASETS, "rs1", "default")

    def test_faults_do_not_break_the_controllers(self):
        k = self.k

        def fault(body):
            code, out, _ = k.srv.post("/localkube/faults", body)
            self.assertEqual(code, 200, out)

        k.create(kc.DEPLOYMENTS, tc.http_deployment("resilient", replicas=2))

        def available(n):
            d = k.c.get(kc.DEPLOYMENTS, "resilient", "default")
            return (d.get("status") or {}).get("availableReplicas") == n and \
                d["status"].get("observedGeneration") == d["metadata"]["generation"] and \
                len(k.ready_pods("app=resilient")) == n
        wait_for(lambda: available(2), 40, "available 2")
        # every watch history entry expires and every watch is cut: informers relist
        fault({"type": "expire"})
        fault({"type": "dropWatches"})
        # the controllers' own pod creations fail a few times with 500/429
        fault({"type": "fail", "verb": "create", "resource": "pods", "code": 500, "count": 2,
               "internal": True})
        fault({"type": "fail", "verb": "create", "resource": "pods", "code": 429, "count": 1,
               "retryAfter": 1, "internal": True})
        k.c.patch(kc.DEPLOYMENTS, "resilient", {"spec": {"replicas": 4}}, "default")
        wait_for(lambda: available(4), 40, "available 4 after faults")
        code, out, _ = k.srv.get("/localkube/faults")
        self.assertEqual(code, 200)
        self.assertEqual([f for f in out["faults"] if f.get("type") == "fail"], [],
                         "the injected failures were not consumed")
        # events after the faults still flow: scaling down works too
        fault({"type": "dropWatches"})
        k.c.patch(kc.DEPLOYMENTS, "resilient", {"spec": {"replicas": 1}}, "default")
        wait_for(lambda: available(1) and len(k.pods(selector="app=resilient", active=False))
                 == 1, 40, "scaled to 1")
        k.srv.delete("/localkube/faults")
        k.c.delete(kc.DEPLOYMENTS, "resilient", "default")

    def test_paused_deployment_and_progress_deadline(self):
        k = self.k
        k.create(kc.DEPLOYMENTS, tc.http_deployment("paused", replicas=1))
        r = k.kubectl("rollout", "status", "deployment/paused", "--timeout=40s", timeout=50)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = k.kubectl("rollout", "pause", "deployment/paused")
        self.assertEqual(r.returncode, 0, r.stderr)
        wait_for(lambda: (kc.get_condition(k.c.get(kc.DEPLOYMENTS, "paused", "default")[
            "status"], "Progressing") or {}).get("reason") == "DeploymentPaused", 10, "paused")
        k.c.patch(kc.DEPLOYMENTS, "paused", {"spec": {"template": {"metadata": {
            "annotations": {"v": "2"}}}}}, "default")
        time.sleep(1.5)
        rss = k.c.list(kc.REPLICASETS, "default", label_selector="app=paused")["items"]
        self.assertEqual(len(rss), 1, "a paused deployment must not roll out")
        d = k.c.get(kc.DEPLOYMENTS, "paused", "default")
        self.assertEqual(d["status"]["observedGeneration"], d["metadata"]["generation"])
        r = k.kubectl("rollout", "resume", "deployment/paused")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = k.kubectl("rollout", "status", "deployment/paused", "--timeout=40s", timeout=50)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(len(k.c.list(kc.REPLICASETS, "default",
                                      label_selector="app=paused")["items"]), 2)
        # an image that cannot be pulled: the rollout times out after progressDeadlineSeconds
        k.c.patch(kc.DEPLOYMENTS, "paused", {"spec": {
            "progressDeadlineSeconds": 2,
            "template": {"spec": {"containers": [{"name": "web",
                                                  "image": "example.com/missing:1"}]}}}},
            "default", "strategic")
        r = k.kubectl("rollout", "status", "deployment/paused", "--timeout=40s", timeout=50)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('deployment "paused" exceeded its progress deadline', r.stderr)
        d = k.c.get(kc.DEPLOYMENTS, "paused", "default")
        prog = kc.get_condition(d["status"], "Progressing")
        self.assertEqual((prog["status"], prog["reason"]), ("False", "ProgressDeadlineExceeded"))
        self.assertRegex(prog["message"], r'^ReplicaSet "paused-\w+" has timed out progressing\.$')
        # maxUnavailable 0 (the default surge 1): the old pod keeps serving
        self.assertEqual(len(k.ready_pods("app=paused")), 1)
        # cascading delete takes the ReplicaSets and pods
        k.c.delete(kc.DEPLOYMENTS, "paused", "default", propagation_policy="Background")
        wait_for(lambda: not k.pods(selector="app=paused", active=False) and not k.c.list(
            kc.REPLICASETS, "default", label_selector="app=paused")["items"], 30,
            "cascading delete")


class AdoptionCheckTest(unittest.TestCase):
    """The fresh read of the owner before adopting (RecheckDeletionTimestamp)."""

    class FakeClient:
        def __init__(self, answer):
            self.answer = answer
            self.gets = 0

        def get(self, res, name, namespace=None):
            self.gets += 1
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    OWNER = {"metadata": {"name": "d", "namespace": "ns", "uid": "u1"}}

    def check(self, answer):
        from lk.controllers import AdoptionCheck
        fc = self.FakeClient(answer)
        chk = AdoptionCheck(fc, kc.DEPLOYMENTS, self.OWNER)
        got = [chk(), chk()]
        self.assertEqual(fc.gets, 1)  # once per sync, like canAdoptOnce
        self.assertEqual(got[0], got[1])
        return got[0]

    def test_fresh_owner(self):
        self.assertTrue(self.check({"metadata": {"name": "d", "uid": "u1"}}))
        self.assertFalse(self.check(kc.ApiError(404, {"reason": "NotFound"})))
        self.assertFalse(self.check({"metadata": {"name": "d", "uid": "u2"}}))
        self.assertFalse(self.check({"metadata": {"name": "d", "uid": "u1",
                                                  "deletionTimestamp": "2024-01-01T00:00:00Z"}}))
        with self.assertRaises(kc.ApiError):
            self.check(kc.ApiError(500, {"reason": "InternalError"}))


class DeploymentMathTest(unittest.TestCase):
    def test_fenceposts(self):
        from lk import controllers as ctl

        def d(replicas, surge, unavail, stype="RollingUpdate"):
            return {"spec": {"replicas": replicas, "strategy": {"type": stype, "rollingUpdate": {
                "maxSurge": surge, "maxUnavailable": unavail}}}}
        # surge rounds up, unavailable rounds down (intstr.GetScaledValueFromIntOrPercent)
        self.assertEqual(ctl.resolve_fenceposts(d(10, "25%", "25%")), (3, 2))
        self.assertEqual(ctl.resolve_fenceposts(d(3, "25%", "25%")), (1, 0))
        self.assertEqual(ctl.resolve_fenceposts(d(1, "0%", "0%")), (0, 1))
        self.assertEqual(ctl.resolve_fenceposts(d(4, 0, 0)), (0, 1))
        self.assertEqual(ctl.max_unavailable(d(2, 0, 5)), 2)
        self.assertEqual(ctl.max_surge(d(4, 2, 1, "Recreate")), 0)
        self.assertEqual(ctl.max_surge({"spec": {"replicas": 4}}), 1)  # defaults 25%/25%
        self.assertEqual(ctl.max_unavailable({"spec": {"replicas": 4}}), 1)
        # the new RS grows up to replicas + surge in total
        dep = d(3, 1, 0)
        old = {"metadata": {"name": "o"}, "spec": {"replicas": 3}}
        new = {"metadata": {"name": "n"}, "spec": {"replicas": 0}}
        self.assertEqual(ctl.DeploymentController.new_rs_new_replicas(dep, [old, new], new), 1)
        old["spec"]["replicas"] = 2
        new["spec"]["replicas"] = 1
        self.assertEqual(ctl.DeploymentController.new_rs_new_replicas(dep, [old, new], new), 2)

    def test_template_hash_and_equality(self):
        from lk import controllers as ctl
        t = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}
        h = ctl.template_hash(t)
        self.assertRegex(h, r"^[bcdfghjklmnpqrstvwxz2456789]{1,10}$")
        self.assertEqual(h, ctl.template_hash(json.loads(json.dumps(t))))
        self.assertNotEqual(h, ctl.template_hash(t, 1))
        t2 = {"metadata": {"labels": {"app": "x", "pod-template-hash": h},
                           "creationTimestamp": None}, "spec": {"containers": [{"name": "c"}]}}
        self.assertTrue(ctl.equal_ignore_hash(t, t2))
        t2["spec"]["containers"][0]["image"] = "y"
        self.assertFalse(ctl.equal_ignore_hash(t, t2))


class SchedulerUnitTest(unittest.TestCase):
    def test_pod_requests(self):
        pod = {"spec": {
            "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                           {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"memory": "10Mi"}}}
        r = sched.pod_requests(pod)
        self.assertEqual(float(r["cpu"]), 2.0)
        self.assertEqual(r["memory"], (64 + 1024 + 10) * 2 ** 20)

    def test_affinity_and_taints(self):
        node = {"metadata": {"name": "n1", "labels": {"zone": "a", "gpu": "4"}},
                "spec": {"taints": [{"key": "dedicated", "value": "x",
                                     "effect": "NoSchedule"}]}}
        aff = {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["2"]}]}]}}}}}
        self.assertTrue(sched.node_matches_pod(aff, node))
        aff["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].pop()
        self.assertFalse(sched.node_matches_pod(aff, node))
        self.assertTrue(sched.node_matches_pod({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In",
                                  "values": ["n1"]}]}]}}}}}, node))
        self.assertIsNotNone(sched.untolerated_taint({"spec": {}}, node))
        self.assertIsNone(sched.untolerated_taint({"spec": {"tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "x"}]}}, node))
        self.assertIsNone(sched.untolerated_taint({"spec": {"tolerations": [
            {"operator": "Exists"}]}}, node))


if __name__ == "__main__":
    unittest.main()
