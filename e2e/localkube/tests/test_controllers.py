"""Controllers end to end: a real localkube API server (tests/lkserver.py) plus
`python3 -m lk.controllers` (controllers + scheduler + kubelet) running python3 http.server / sh
pods as local processes.  Deployment availability, rolling update (never below the desired ready
count, `kubectl rollout status` / undo), scaling, Endpoints following readiness.

Cluster (below) is the harness shared by the test_controllers* / test_kubelet* files."""

import http.client
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from lk import client as kc  # noqa: E402
from tests.lkserver import LocalApiServer  # noqa: E402

PY = "python:3.11"
BUSYBOX = "busybox"


def wait_for(pred, timeout, what="condition", step=0.1):
    """Polls pred() until it returns a truthy value (returned) or raises after timeout."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = pred()
        except (kc.ApiError, ConnectionError) as e:
            last = e
            if isinstance(e, kc.ApiError) and e.code not in (404, 409):
                raise
            last = None
        if last:
            return last
        time.sleep(step)
    raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))


def group_alive(pgid):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                data = f.read()
            fields = data[data.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def procs_mentioning(text):
    """pids whose command line contains text (e.g. a temp dir)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                cl = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open("/proc/%s/stat" % p) as f:
                data = f.read()
            if data[data.rindex(")") + 2] == "Z":
                continue
        except (OSError, ValueError):
            continue
        if text in cl:
            out.append(int(p))
    return out


class Cluster:
    """An API server + the controllers process in a temp dir."""

    def __init__(self, nodes=2, backoff_scale=0.05, extra=()):
        self.dir = tempfile.mkdtemp(prefix="lk-ctl-")
        self.nodes = nodes
        self.backoff_scale = backoff_scale
        self.extra = list(extra)
        self.srv = None
        self.proc = None
        self.c = None

    def start(self):
        self.srv = LocalApiServer(directory=self.dir).start()
        self.c = kc.Client(self.srv.url, "test")
        self._log = open(os.path.join(self.dir, "controllers.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lk.controllers", "--dir", self.dir, "--server", self.srv.url,
             "--nodes", str(self.nodes), "--images", os.path.join(ROOT, "images.json"),
             "--backoff-scale", str(self.backoff_scale), "--shutdown-grace", "3"] + self.extra,
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: len([n for n in self.c.list(kc.NODES)["items"] if kc.get_condition(
                n.get("status"), "Ready")]) == self.nodes, 20, "nodes")
        except Exception:
            self.stop()
            raise
        return self

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            self._log.close()
        from lk.kubelet import kill_recorded
        kill_recorded(os.path.join(self.dir, "kubelet", "pids"))
        if self.c is not None:
            self.c.close()
        if self.srv is not None:
            keep = os.environ.get("LK_TEST_KEEP")
            self.srv._own_dir = not keep
            self.srv.stop()
            if keep:
                sys.stderr.write("\nlocalkube test dir kept: %s\n" % self.dir)

    def log(self):
        try:
            with open(os.path.join(self.dir, "controllers.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # ---- helpers ---------------------------------------------------------------------

    def kubectl(self, *args, **kw):
        return self.srv.kubectl(*args, **kw)

    def pods(self, ns="default", selector=None, active=True):
        items = self.c.list(kc.PODS, ns, label_selector=selector)["items"]
        if active:
            items = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        return items

    def pod(self, name, ns="default"):
        return self.c.get_or_none(kc.PODS, name, ns)

    def pod_dir(self, name, ns="default"):
        return os.path.join(self.dir, "pods", "%s_%s" % (ns, name))

    def container_log(self, pod, container, ns="default"):
        try:
            with open(os.path.join(self.pod_dir(pod, ns), container + ".log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def ready_pods(self, selector, ns="default"):
        return [p for p in self.pods(ns, selector) if kc.is_pod_ready(p)]

    def create(self, res, obj, ns="default"):
        return self.c.create(res, obj, ns)


def http_deployment(name, replicas=3, max_surge=1, max_unavailable=0, extra_env=None,
                    min_ready=0):
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    env += extra_env or []
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "minReadySeconds": min_ready,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": max_surge,
                                           "maxUnavailable": max_unavailable}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 3,
                    "containers": [{
                        "name": "web", "image": PY,
                        "command": ["python3", "-m", "http.server", "--bind", "$(POD_IP)",
                                    "8080"],
                        "env": env,
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                                           "periodSeconds": 1},
                    }]}}}}


def http_get(ip, port, path="/", timeout=3):
    c = http.client.HTTPConnection(ip, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


class DeploymentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = Cluster(nodes=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.k.stop()

    def dep(self, name):
        return self.k.c.get(kc.DEPLOYMENTS, name, "default")

    def available(self, name):
        d = self.dep(name)
        c = kc.get_condition(d.get("status"), "Available")
        return c is not None and c["status"] == "True" and \
            d["status"].get("availableReplicas") == d["spec"]["replicas"] and \
            d["status"].get("observedGeneration") == d["metadata"]["generation"]

    def test_1_available_with_distinct_pod_ips_answering_http(self):
        k = self.k
        k.create(kc.DEPLOYMENTS, http_deployment("web"))
        wait_for(lambda: self.available("web"), 40, "deployment web available")
        d = self.dep("web")
        self.assertEqual(d["status"]["readyReplicas"], 3)
        self.assertEqual(d["status"]["updatedReplicas"], 3)
        self.assertEqual(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1")
        prog = kc.get_condition(d["status"], "Progressing")
        self.assertEqual(prog["reason"], "NewReplicaSetAvailable")
        rss = k.c.list(kc.REPLICASETS, "default", label_selector="app=web")["items"]
        self.assertEqual(len(rss), 1)
        rs = rss[0]
        h = rs["metadata"]["labels"]["pod-template-hash"]
        self.assertEqual(rs["metadata"]["name"], "web-" + h)
        self.assertEqual(rs["spec"]["selector"]["matchLabels"]["pod-template-hash"], h)
        ref = rs["metadata"]["ownerReferences"][0]
        self.assertEqual((ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]),
                         ("Deployment", d["metadata"]["uid"], True, True))
        self.assertEqual(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1")
        pods = k.pods(selector="app=web")
        self.assertEqual(len(pods), 3)
        ips = set()
        for p in pods:
            self.assertTrue(p["metadata"]["name"].startswith("web-%s-" % h))
            self.assertEqual(len(p["metadata"]["name"]), len("web-%s-" % h) + 5)
            self.assertEqual(kc.controller_ref(p)["uid"], rs["metadata"]["uid"])
            ip = p["status"]["podIP"]
            self.assertTrue(ip.startswith("127.0.") and ip != "127.0.0.1", ip)
            self.assertEqual(p["status"]["podIPs"], [{"ip": ip}])
            self.assertEqual(p["status"]["hostIP"], "127.0.0.1")
            self.assertIn(p["spec"]["nodeName"], ("localkube-node-1", "localkube-node-2"))
            ips.add(ip)
            self.assertEqual(http_get(ip, 8080), 200)
        self.assertEqual(len(ips), 3)
        # both nodes got pods (least-loaded spreading)
        self.assertEqual(len({p["spec"]["nodeName"] for p in pods}), 2)

    def test_2_rolling_update_keeps_ready_and_rollout_status_works(self):
        k = self.k
        if not k.c.get_or_none(kc.DEPLOYMENTS, "web", "default"):
            k.create(kc.DEPLOYMENTS, http_deployment("web"))
        wait_for(lambda: self.available("web"), 40, "deployment web available")
        samples = []
        stop = threading.Event()

        def sample():
            c = kc.Client(k.srv.url, "sampler")
            while not stop.is_set():
                try:
                    ps = c.list(kc.PODS, "default", label_selector="app=web")["items"]
                    samples.append(sum(1 for p in ps if kc.is_pod_ready(p) and
                                       not p["metadata"].get("deletionTimestamp")))
                except (kc.ApiError, ConnectionError):
                    pass
                time.sleep(0.05)
            c.close()

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            k.c.patch(kc.DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "VERSION", "value": "2"}]}]}}}}, "default", "strategic")
            p = k.kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=70)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn('deployment "web" successfully rolled out', p.stdout)
        finally:
            stop.set()
            t.join(5)
        self.assertGreater(len(samples), 10)
        self.assertGreaterEqual(min(samples), 3, "ready pods dropped below 3: %s" % samples)
        d = self.dep("web")
        self.assertEqual(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2")
        self.assertEqual(d["status"]["updatedReplicas"], 3)
        rss = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r
               for r in k.c.list(kc.REPLICASETS, "default", label_selector="app=web")["items"]}
        self.assertEqual(sorted(rss), ["1", "2"])
        self.assertEqual(rss["1"]["spec"]["replicas"], 0)
        self.assertEqual(rss["2"]["spec"]["replicas"], 3)
        for p in k.pods(selector="app=web"):
            self.assertEqual(p["metadata"]["labels"]["pod-template-hash"],
                             rss["2"]["metadata"]["labels"]["pod-template-hash"])
        # surge 1 / unavailable 0: never more than 4 pods (plus the terminating ones)
        hist = k.kubectl("rollout", "history", "deployment/web")
        self.assertEqual(hist.returncode, 0, hist.stderr)
        self.assertRegex(hist.stdout, r"(?m)^1\s")
        self.assertRegex(hist.stdout, r"(?m)^2\s")
        # undo: back to revision 1's template, which becomes revision 3 (same ReplicaSet)
        u = k.kubectl("rollout", "undo", "deployment/web")
        self.assertEqual(u.returncode, 0, u.stderr)
        p = k.kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=70)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rs1 = k.c.get(kc.REPLICASETS, rss["1"]["metadata"]["name"], "default")
        self.assertEqual(rs1["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "3")
        self.assertEqual(rs1["metadata"]["annotations"][
            "deployment.kubernetes.io/revision-history"], "1")
        self.assertEqual(rs1["spec"]["replicas"], 3)
        self.assertEqual(len(k.c.list(kc.REPLICASETS, "default",
                                      label_selector="app=web")["items"]), 2)

    def test_3_scale_up_and_down(self):
        k = self.k
        k.create(kc.DEPLOYMENTS, http_deployment("scaled", replicas=1))
        wait_for(lambda: self.available("scaled"), 40, "scaled available")
        p = k.kubectl("scale", "deployment/scaled", "--replicas=4")
        self.assertEqual(p.returncode, 0, p.stderr)
        wait_for(lambda: self.available("scaled") and
                 len(k.ready_pods("app=scaled")) == 4, 40, "4 ready")
        rs = k.c.list(kc.REPLICASETS, "default", label_selector="app=scaled")["items"]
        self.assertEqual(len(rs), 1, "scaling must not create a new ReplicaSet")
        self.assertEqual(rs[0]["metadata"]["annotations"][
            "deployment.kubernetes.io/desired-replicas"], "4")
        k.c.patch(kc.DEPLOYMENTS, "scaled", {"spec": {"replicas": 1}}, "default")
        wait_for(lambda: len(k.pods(selector="app=scaled", active=False)) == 1, 30,
                 "scale down to 1 pod")
        d = self.dep("scaled")
        wait_for(lambda: self.dep("scaled")["status"].get("replicas") == 1, 10, "status 1")
        self.assertEqual(d["spec"]["replicas"], 1)
        k.c.patch(kc.DEPLOYMENTS, "scaled", {"spec": {"replicas": 0}}, "default")
        wait_for(lambda: not k.pods(selector="app=scaled", active=False), 30, "scale to 0")
        wait_for(lambda: self.dep("scaled")["status"].get("replicas", 0) == 0, 10, "status 0")

    def test_4_endpoints_follow_readiness(self):
        k = self.k
        k.create(kc.SERVICES, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "gated"},
            "spec": {"selector": {"app": "gated"},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http"},
                               {"name": "num", "port": 81, "targetPort": 9999}]}})
        k.create(kc.PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gated-0", "labels": {"app": "gated"}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": BUSYBOX, "command": ["sleep", "600"],
                "ports": [{"name": "http", "containerPort": 7070}],
                "readinessProbe": {"exec": {"command": ["test", "-f", "ready"]},
                                   "periodSeconds": 1}}]}})

        def eps():
            e = k.c.get_or_none(kc.ENDPOINTS, "gated", "default")
            return (e or {}).get("subsets") or []

        subsets = wait_for(lambda: eps() and eps()[0].get("notReadyAddresses") and eps(), 30,
                           "not-ready address")
        self.assertNotIn("addresses", subsets[0])
        pod = k.pod("gated-0")
        addr = subsets[0]["notReadyAddresses"][0]
        self.assertEqual(addr["ip"], pod["status"]["podIP"])
        self.assertEqual(addr["targetRef"]["name"], "gated-0")
        self.assertEqual(addr["targetRef"]["uid"], pod["metadata"]["uid"])
        self.assertEqual(addr["nodeName"], pod["spec"]["nodeName"])
        ports = sorted((p["name"], p["port"]) for p in subsets[0]["ports"])
        self.assertEqual(ports, [("http", 7070), ("num", 9999)])
        # becomes ready: moves to addresses
        with open(os.path.join(k.pod_dir("gated-0"), "ready"), "w") as f:
            f.write("1")
        subsets = wait_for(lambda: eps() and eps()[0].get("addresses") and eps(), 20, "ready")
        self.assertNotIn("notReadyAddresses", subsets[0])
        # not ready again: moves back
        os.unlink(os.path.join(k.pod_dir("gated-0"), "ready"))
        wait_for(lambda: eps() and eps()[0].get("notReadyAddresses"), 20, "not ready again")
        # the service goes: its Endpoints go with it
        k.c.delete(kc.SERVICES, "gated", "default")
        wait_for(lambda: k.c.get_or_none(kc.ENDPOINTS, "gated", "default") is None, 20,
                 "endpoints deleted")
        k.c.delete(kc.PODS, "gated-0", "default")

    def test_5_recreate_and_history_limit(self):
        k = self.k
        d = http_deployment("rec", replicas=2)
        d["spec"]["strategy"] = {"type": "Recreate"}
        d["spec"]["revisionHistoryLimit"] = 1
        k.create(kc.DEPLOYMENTS, d)
        wait_for(lambda: self.available("rec"), 40, "rec available")
        first = {p["metadata"]["uid"] for p in k.pods(selector="app=rec")}
        for v in ("2", "3"):
            k.c.patch(kc.DEPLOYMENTS, "rec", {"spec": {"template": {"metadata": {
                "annotations": {"v": v}}}}}, "default")
            p = k.kubectl("rollout", "status", "deployment/rec", "--timeout=60s", timeout=70)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        pods = k.pods(selector="app=rec")
        self.assertEqual(len(pods), 2)
        self.assertFalse(first & {p["metadata"]["uid"] for p in pods})
        # revisionHistoryLimit 1: the current ReplicaSet and one old one
        wait_for(lambda: len(k.c.list(kc.REPLICASETS, "default",
                                      label_selector="app=rec")["items"]) == 2, 20,
                 "old replica sets cleaned up")


if __name__ == "__main__":
    unittest.main()
