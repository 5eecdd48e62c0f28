"""The process kubelet end to end (API server + `python3 -m lk.controllers`): crash loops and
back-off, probes (readiness, liveness, startup), graceful deletion with SIGTERM, init containers,
restart policies and terminal phases, env / volumes / mount rewriting, image mapping errors."""

import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from lk import client as kc  # noqa: E402
from lk import kubelet as kl  # noqa: E402
from tests import test_controllers as tc  # noqa: E402

wait_for = tc.wait_for


def pod(name, containers, **spec):
    s = {"terminationGracePeriodSeconds": 2, "containers": containers}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"t": name}},
            "spec": s}


def sh(name, script, **extra):
    c = {"name": name, "image": tc.BUSYBOX, "command": ["sh", "-c", script]}
    c.update(extra)
    return c


def cstatus(p, name, init=False):
    for c in (p.get("status") or {}).get("initContainerStatuses" if init else
                                          "containerStatuses") or []:
        if c["name"] == name:
            return c
    return None


class KubeletTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = tc.Cluster(nodes=1, backoff_scale=0.1).start()

    @classmethod
    def tearDownClass(cls):
        cls.k.stop()

    def get(self, name):
        return self.k.pod(name)

    def test_crash_loop_backoff(self):
        k = self.k
        k.create(kc.PODS, pod("crash", [sh("c", "echo crashing; exit 3")]))
        seen = set()

        def looping():
            p = self.get("crash")
            cs = cstatus(p, "c")
            if cs is None:
                return False
            w = cs["state"].get("waiting") or {}
            seen.add(w.get("reason"))
            return cs["restartCount"] >= 3 and "CrashLoopBackOff" in seen
        wait_for(looping, 30, "restartCount >= 3 with CrashLoopBackOff", step=0.05)
        p = self.get("crash")
        cs = cstatus(p, "c")
        self.assertEqual(p["status"]["phase"], "Running")  # restartPolicy Always
        self.assertEqual(cs["lastState"]["terminated"]["exitCode"], 3)
        self.assertEqual(cs["lastState"]["terminated"]["reason"], "Error")
        w = cs["state"].get("waiting")
        if w:
            self.assertFalse(cs["ready"])
            self.assertEqual(w["reason"], "CrashLoopBackOff")
            self.assertRegex(w["message"], r"^back-off \d+(\.\d+)?m?s restarting failed "
                                           r"container=c pod=crash_default\(")
        self.assertIn("crashing", k.container_log("crash", "c"))
        self.assertGreaterEqual(k.container_log("crash", "c").count("crashing"), 3)
        k.c.delete(kc.PODS, "crash", "default")

    def test_readiness_failure_keeps_not_ready(self):
        k = self.k
        k.create(kc.PODS, pod("unready", [sh("c", "sleep 600", readinessProbe={
            "exec": {"command": ["false"]}, "periodSeconds": 1})]))
        wait_for(lambda: (self.get("unready")["status"].get("phase") == "Running"), 20,
                 "running")
        t_end = time.time() + 3
        while time.time() < t_end:
            p = self.get("unready")
            self.assertFalse(kc.is_pod_ready(p))
            time.sleep(0.3)
        p = self.get("unready")
        ready = kc.get_condition(p["status"], "Ready")
        self.assertEqual((ready["status"], ready["reason"]), ("False", "ContainersNotReady"))
        self.assertEqual(ready["message"], "containers with unready status: [c]")
        self.assertEqual(kc.get_condition(p["status"], "ContainersReady")["status"], "False")
        cs = cstatus(p, "c")
        self.assertIn("running", cs["state"])
        self.assertTrue(cs["started"])
        self.assertEqual(cs["restartCount"], 0)
        k.c.delete(kc.PODS, "unready", "default")

    def test_liveness_failure_restarts(self):
        k = self.k
        # alive for ~1.5 s, then the liveness file goes away; a restart brings it back
        k.create(kc.PODS, pod("live", [sh(
            "c", "touch alive; echo started; sleep 1.5; rm alive; exec sleep 600",
            livenessProbe={"exec": {"command": ["cat", "alive"]}, "periodSeconds": 1,
                           "failureThreshold": 2},
            readinessProbe={"tcpSocket": {"port": 9}, "periodSeconds": 1})],
            terminationGracePeriodSeconds=1))
        wait_for(lambda: (cstatus(self.get("live"), "c") or {}).get("restartCount", 0) >= 1, 30,
                 "a liveness restart")
        p = self.get("live")
        cs = cstatus(p, "c")
        term = cs["lastState"]["terminated"]
        self.assertEqual(term["exitCode"], 143)  # SIGTERM
        wait_for(lambda: k.container_log("live", "c").count("started") >= 2, 10,
                 "the restarted container's output")
        self.assertFalse(kc.is_pod_ready(p))  # tcp :9 refuses
        k.c.delete(kc.PODS, "live", "default")

    def test_startup_probe_gates_readiness(self):
        k = self.k
        k.create(kc.PODS, pod("slow", [sh(
            "c", "sleep 1.5; touch up; exec sleep 600",
            startupProbe={"exec": {"command": ["test", "-f", "up"]}, "periodSeconds": 1,
                          "failureThreshold": 30})]))
        wait_for(lambda: cstatus(self.get("slow"), "c") and
                 "running" in cstatus(self.get("slow"), "c")["state"], 20, "running")
        cs = cstatus(self.get("slow"), "c")
        self.assertFalse(cs["started"])
        self.assertFalse(cs["ready"])
        wait_for(lambda: kc.is_pod_ready(self.get("slow")), 20, "ready after startup")
        self.assertTrue(cstatus(self.get("slow"), "c")["started"])
        k.c.delete(kc.PODS, "slow", "default")

    def test_graceful_delete_sends_sigterm(self):
        k = self.k
        marker = os.path.join(k.dir, "term-marker")
        k.create(kc.PODS, pod("grace", [sh(
            "c", "trap 'echo got-term > %s; exit 0' TERM; echo up; "
                 "while true; do sleep 0.1; done" % marker)], terminationGracePeriodSeconds=20))
        wait_for(lambda: self.get("grace")["status"].get("phase") == "Running", 20, "running")
        time.sleep(0.3)
        p = self.get("grace")
        pid = int(cstatus(p, "c")["containerID"].split("://")[1])
        self.assertTrue(tc.group_alive(pid))
        t0 = time.time()
        out = k.c.delete(kc.PODS, "grace", "default")
        self.assertTrue(out.get("metadata", {}).get("deletionTimestamp"),
                        "graceful delete must keep the object")
        wait_for(lambda: self.get("grace") is None, 15, "pod removed")
        self.assertLess(time.time() - t0, 10, "SIGTERM was not delivered (waited for grace)")
        with open(marker) as f:
            self.assertEqual(f.read().strip(), "got-term")
        self.assertFalse(tc.group_alive(pid))

    def test_sigkill_after_grace(self):
        k = self.k
        k.create(kc.PODS, pod("stubborn", [sh("c", "trap '' TERM; while true; do sleep 0.1; "
                                                    "done")], terminationGracePeriodSeconds=1))
        wait_for(lambda: self.get("stubborn")["status"].get("phase") == "Running", 20,
                 "running")
        pid = int(cstatus(self.get("stubborn"), "c")["containerID"].split("://")[1])
        t0 = time.time()
        k.c.delete(kc.PODS, "stubborn", "default")
        wait_for(lambda: self.get("stubborn") is None, 15, "pod removed")
        self.assertGreaterEqual(time.time() - t0, 0.9)
        wait_for(lambda: not tc.group_alive(pid), 5, "process group gone")

    def test_init_containers_and_terminal_phases(self):
        k = self.k
        k.create(kc.PODS, pod("inits", [sh("main", "cat order; echo main >> order")],
                              initContainers=[sh("i1", "sleep 0.5; echo i1 > order"),
                                              sh("i2", "echo i2 >> order")],
                              restartPolicy="Never"))
        wait_for(lambda: self.get("inits")["status"].get("phase") == "Succeeded", 20,
                 "Succeeded")
        p = self.get("inits")
        with open(os.path.join(k.pod_dir("inits"), "order")) as f:
            self.assertEqual(f.read().split(), ["i1", "i2", "main"])
        self.assertEqual([c["state"]["terminated"]["reason"] for c in
                          p["status"]["initContainerStatuses"]], ["Completed", "Completed"])
        self.assertEqual(kc.get_condition(p["status"], "Initialized")["status"], "True")
        ready = kc.get_condition(p["status"], "Ready")
        self.assertEqual((ready["status"], ready["reason"]), ("False", "PodCompleted"))
        # Never + failure -> Failed; OnFailure retries until success
        k.create(kc.PODS, pod("fails", [sh("c", "exit 4")], restartPolicy="Never"))
        k.create(kc.PODS, pod("retries", [sh("c", "n=$(cat n 2>/dev/null || echo 0); "
                                                  "echo $((n+1)) > n; test $n -ge 2")],
                              restartPolicy="OnFailure"))
        k.create(kc.PODS, pod("badinit", [sh("c", "sleep 600")],
                              initContainers=[sh("i", "exit 1")], restartPolicy="Never"))
        wait_for(lambda: self.get("fails")["status"].get("phase") == "Failed", 20, "Failed")
        self.assertEqual(cstatus(self.get("fails"), "c")["state"]["terminated"]["exitCode"], 4)
        wait_for(lambda: self.get("retries")["status"].get("phase") == "Succeeded", 30,
                 "OnFailure Succeeded")
        self.assertEqual(cstatus(self.get("retries"), "c")["restartCount"], 2)
        wait_for(lambda: self.get("badinit")["status"].get("phase") == "Failed", 20,
                 "init failure")
        self.assertIn("waiting", cstatus(self.get("badinit"), "c")["state"])
        for n in ("inits", "fails", "retries", "badinit"):
            k.c.delete(kc.PODS, n, "default")

    def test_env_volumes_and_mount_rewriting(self):
        k = self.k
        k.create(kc.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "cfg"},
                                 "data": {"greeting": "hello", "app.conf": "port=1\n"}})
        k.create(kc.SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
                              "data": {"token": "czNjcjN0"}})  # s3cr3t
        script = ("echo NAME=$MY_NAME NS=$MY_NS IP=$MY_IP NODE=$MY_NODE; "
                  "echo GREETING=$GREETING TOKEN=$TOKEN EXP=$EXPANDED MEM=$MEM_MI; "
                  "echo CFG_FOO=$CFG_greeting OPT=${OPT-unset}; "
                  "echo CONF=$(cat /etc/app/app.conf); echo LBL=$(cat /etc/info/labels); "
                  "echo data > /data/x; echo ARG=$0 $1; echo MOUNT=$LOCALKUBE_MOUNT_DATA; "
                  "echo DATAPATH=$DATA_PATH; sleep 600")
        c = sh("c", script, args=["/etc/app/app.conf", "--path=/data/sub"],
               env=[{"name": "MY_NAME", "valueFrom": {"fieldRef": {
                   "fieldPath": "metadata.name"}}},
                    {"name": "MY_NS", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.namespace"}}},
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MY_NODE", "valueFrom": {"fieldRef": {
                        "fieldPath": "spec.nodeName"}}},
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {
                        "name": "cfg", "key": "greeting"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {
                        "name": "sec", "key": "token"}}},
                    {"name": "OPT", "valueFrom": {"secretKeyRef": {
                        "name": "nope", "key": "x", "optional": True}}},
                    {"name": "EXPANDED", "value": "$(MY_NAME)-x-$$(MY_NAME)-$(UNDEFINED)"},
                    {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                        "resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "DATA_PATH", "value": "/data/file.txt"}],
               envFrom=[{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
               resources={"limits": {"memory": "64Mi"}},
               volumeMounts=[{"name": "app", "mountPath": "/etc/app"},
                             {"name": "info", "mountPath": "/etc/info"},
                             {"name": "data", "mountPath": "/data"}])
        k.create(kc.PODS, pod("envy", [c], volumes=[
            {"name": "app", "configMap": {"name": "cfg"}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "data", "emptyDir": {}}]))
        wait_for(lambda: "DATAPATH" in k.container_log("envy", "c"), 20, "output")
        p = self.get("envy")
        out = dict(line.split("=", 1) for line in k.container_log("envy", "c").split("\n")
                   if "=" in line.split(" ")[0])
        logtxt = k.container_log("envy", "c")
        d = k.pod_dir("envy")
        self.assertIn("NAME=envy NS=default IP=%s NODE=localkube-node-1" % p["status"]["podIP"],
                      logtxt)
        self.assertIn("GREETING=hello TOKEN=s3cr3t EXP=envy-x-$(MY_NAME)-$(UNDEFINED) MEM=64",
                      logtxt)
        self.assertIn("CFG_FOO=hello OPT=unset", logtxt)
        self.assertIn("CONF=port=1", logtxt)
        self.assertIn('LBL=t="envy"', logtxt)
        self.assertEqual(out["ARG"], "%s/volumes/app/app.conf --path=%s/volumes/data/sub" % (d, d))
        self.assertEqual(out["MOUNT"], "%s/volumes/data" % d)
        self.assertEqual(out["DATAPATH"], "%s/volumes/data/file.txt" % d)
        with open(os.path.join(d, "volumes", "data", "x")) as f:
            self.assertEqual(f.read(), "data\n")
        # a configMap change reaches the volume
        k.c.patch(kc.CONFIGMAPS, "cfg", {"data": {"app.conf": "port=2\n"}}, "default")

        def updated():
            with open(os.path.join(d, "volumes", "app", "app.conf")) as f:
                return f.read() == "port=2\n"
        wait_for(updated, 20, "configMap volume update")
        k.c.delete(kc.PODS, "envy", "default")

    def test_sidecar_and_more_volume_types(self):
        k = self.k
        host = os.path.join(k.dir, "hostdir")
        os.makedirs(host, exist_ok=True)
        with open(os.path.join(host, "h.txt"), "w") as f:
            f.write("from-host")
        k.create(kc.SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vs"},
                              "data": {"pw": "aHVudGVyMg=="}})  # hunter2
        k.create(kc.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "pc"}, "data": {"a": "A", "b": "B"}})
        side = sh("side", "echo side-up; exec sleep 600", restartPolicy="Always",
                  startupProbe={"exec": {"command": ["true"]}, "periodSeconds": 1})
        main = sh("main", "cat /s/pw; echo; cat /p/b-file /p/ns; echo; cat /h/h.txt; echo; "
                          "exec sleep 600",
                  volumeMounts=[{"name": "sec", "mountPath": "/s"},
                                {"name": "proj", "mountPath": "/p"},
                                {"name": "hp", "mountPath": "/h"}])
        k.create(kc.PODS, pod("vols", [main], initContainers=[side], volumes=[
            {"name": "sec", "secret": {"secretName": "vs", "defaultMode": 0o400}},
            {"name": "proj", "projected": {"sources": [
                {"configMap": {"name": "pc", "items": [{"key": "b", "path": "b-file"}]}},
                {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {
                    "fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "hp", "hostPath": {"path": host}}]))
        wait_for(lambda: kc.is_pod_ready(self.get("vols")), 20, "ready")
        wait_for(lambda: "from-host" in k.container_log("vols", "main"), 10, "main output")
        self.assertEqual(k.container_log("vols", "main").split(), ["hunter2", "Bdefault",
                                                                   "from-host"])
        p = self.get("vols")
        side_st = cstatus(p, "side", init=True)
        self.assertIn("running", side_st["state"])
        self.assertTrue(side_st["started"])
        self.assertEqual(oct(os.stat(os.path.join(k.pod_dir("vols"), "volumes", "sec",
                                                  "pw")).st_mode & 0o777), "0o400")
        self.assertFalse(os.path.exists(os.path.join(k.pod_dir("vols"), "volumes", "proj", "a")))
        k.c.delete(kc.PODS, "vols", "default")
        wait_for(lambda: self.get("vols") is None, 20, "deleted")
        self.assertFalse(tc.group_alive(int(side_st["containerID"].split("://")[1])))

    def test_missing_config_and_unknown_image(self):
        k = self.k
        k.create(kc.PODS, pod("nocfg", [sh("c", "sleep 600", env=[
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}])]))
        k.create(kc.PODS, pod("noimg", [{"name": "c", "image": "example.com/no/such:1.0"}]))
        wait_for(lambda: ((cstatus(self.get("nocfg"), "c") or {}).get("state", {}).get(
            "waiting", {}).get("reason") == "CreateContainerConfigError"), 20, "config error")
        self.assertEqual(cstatus(self.get("nocfg"), "c")["state"]["waiting"]["message"],
                         'configmap "absent" not found')
        self.assertEqual(self.get("nocfg")["status"]["phase"], "Pending")
        reasons = set()

        def pulled():
            w = (cstatus(self.get("noimg"), "c") or {}).get("state", {}).get("waiting", {})
            reasons.add(w.get("reason"))
            if w.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
                self.assertIn("example.com/no/such:1.0", w.get("message", ""))
            return {"ErrImagePull", "ImagePullBackOff"} <= reasons
        wait_for(pulled, 20, "ErrImagePull then ImagePullBackOff", step=0.05)
        self.assertEqual(self.get("noimg")["status"]["phase"], "Pending")
        # creating the configMap unblocks the first pod
        k.create(kc.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "absent"}, "data": {"k": "v"}})
        wait_for(lambda: self.get("nocfg")["status"].get("phase") == "Running", 20, "running")
        k.c.delete(kc.PODS, "nocfg", "default")
        k.c.delete(kc.PODS, "noimg", "default")

    def test_pod_ips_unique_and_released(self):
        k = self.k
        for i in range(4):
            k.create(kc.PODS, pod("ip%d" % i, [sh("c", "sleep 600")],
                                  terminationGracePeriodSeconds=0))
        ips = wait_for(lambda: [self.get("ip%d" % i)["status"].get("podIP") for i in range(4)]
                       if all(self.get("ip%d" % i)["status"].get("podIP") for i in range(4))
                       else None, 20, "pod IPs")
        self.assertEqual(len(set(ips)), 4)
        for ip in ips:
            self.assertRegex(ip, r"^127\.0\.(\d+)\.(\d+)$")
            self.assertNotEqual(ip, "127.0.0.1")
            self.assertFalse(ip.startswith("127.0.0."))
        for i in range(4):
            k.c.delete(kc.PODS, "ip%d" % i, "default")
        wait_for(lambda: all(self.get("ip%d" % i) is None for i in range(4)), 20, "deleted")


class UnitTest(unittest.TestCase):
    """Pure pieces of the kubelet."""

    def test_expand(self):
        env = {"A": "1", "B": "two"}
        self.assertEqual(kl.expand("$(A)-$(B)", env), "1-two")
        self.assertEqual(kl.expand("$$(A)", env), "$(A)")
        self.assertEqual(kl.expand("$(C)", env), "$(C)")
        self.assertEqual(kl.expand("$(A", env), "$(A")
        self.assertEqual(kl.expand("a$b$$c$", env), "a$b$c$")

    def test_images(self):
        m = kl.ImageMap(variables={"TANDEM_BUILD_DIR": "/b"})
        e = m.resolve("ghcr.io/x/tandem-echo:v1")
        self.assertEqual(e["command"], ["/b/e2e/tandem-echo"])
        self.assertEqual(m.resolve("tandem-echo")["command"], ["/b/e2e/tandem-echo"])
        self.assertEqual(m.resolve("python:3.11")["args"], ["python3"])
        self.assertEqual(m.resolve("docker.io/library/busybox@sha256:abc")["args"], ["sh"])
        self.assertIsNone(m.resolve("tandem-echo-other"))
        self.assertIsNone(m.resolve("nginx"))

    def test_ip_allocator(self):
        d = tempfile.mkdtemp(prefix="lk-ipam-")
        try:
            a = kl.IPAllocator(d)
            ips = [a.allocate("u%d" % i) for i in range(300)]
            self.assertEqual(len(set(ips)), 300)
            self.assertNotIn("127.0.0.1", ips)
            self.assertTrue(all(not ip.endswith(".0") and not ip.endswith(".255")
                                for ip in ips))
            self.assertEqual(a.allocate("u5"), ips[5])
            a.release("u5")
            self.assertFalse(os.path.exists(os.path.join(d, ips[5])))
            self.assertEqual(a.allocate("new", prefer=ips[5]), ips[5])
            a.release_all()
            self.assertEqual(os.listdir(d), [".lock"])
            # another live process holds 127.0.1.1; a dead one held 127.0.1.2 (stale)
            with open(os.path.join(d, "127.0.1.1"), "w") as f:
                st = kl.proc_start_time(os.getppid())
                f.write("%d %d x\n" % (os.getppid(), st[0]))
            with open(os.path.join(d, "127.0.1.2"), "w") as f:
                f.write("999999999 1 dead-owner\n")
            b = kl.IPAllocator(d)
            self.assertEqual(b.allocate("v0"), "127.0.1.2")
            self.assertEqual(b.allocate("v1"), "127.0.1.3")
            self.assertEqual(b.allocate("v2", prefer="127.0.1.1"), "127.0.1.4")
            with open(os.path.join(d, "127.0.1.2")) as f:
                self.assertTrue(f.read().startswith("%d " % os.getpid()))
            b.release_all()
            self.assertTrue(os.path.exists(os.path.join(d, "127.0.1.1")))
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_rewrite_and_durations(self):
        mounts = [("/etc/app", "/x/app"), ("/etc", "/x/etc")]
        rw = kl.PodWorker.rewrite
        self.assertEqual(rw("/etc/app/a.conf", mounts), "/x/app/a.conf")
        self.assertEqual(rw("/etc/other", mounts), "/x/etc/other")
        self.assertEqual(rw("--config=/etc/app", mounts), "--config=/x/app")
        self.assertEqual(rw("/etcetera", mounts), "/etcetera")
        self.assertEqual(rw("cat /etc/app/x; ls '/etc/app' /etc", mounts),
                         "cat /x/app/x; ls '/x/app' /x/etc")
        self.assertEqual(rw("PATH=/bin:/etc/app/bin", mounts), "PATH=/bin:/x/app/bin")
        self.assertEqual(rw("http://h/etc/app", mounts), "http://h/etc/app")
        self.assertEqual(kl.go_duration(10), "10s")
        self.assertEqual(kl.go_duration(300), "5m0s")
        self.assertEqual(kl.go_duration(80), "1m20s")
        self.assertEqual(kl.go_duration(0.5), "500ms")


if __name__ == "__main__":
    unittest.main()
