"""The `localkube` CLI: up (detached processes, kubeconfig, state.json, refusing a second
instance), status, fault (round trip through the fault API), down (idempotent, leaves no
process behind: API server, controllers and pod process groups)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from lk import client as kc  # noqa: E402
from tests import test_controllers as tc  # noqa: E402

LOCALKUBE = os.path.join(ROOT, "localkube")
KUBECTL = os.environ.get("KUBECTL", shutil.which("kubectl") or "/usr/bin/kubectl")


def run(*args, timeout=90):
    return subprocess.run([LOCALKUBE] + list(args), capture_output=True, text=True,
                          timeout=timeout)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="lk-cli-")
        cls.cache = tempfile.mkdtemp(prefix="lk-cli-cache-")
        p = run("up", "--dir", cls.dir, "--port", "0", "--nodes", "1", "--wait", "60")
        if p.returncode != 0:
            run("down", "--dir", cls.dir)
            raise AssertionError("localkube up failed: %s%s" % (p.stdout, p.stderr))
        cls.up_out = p.stdout
        with open(os.path.join(cls.dir, "state.json")) as f:
            cls.state = json.load(f)
        cls.c = kc.Client(cls.state["server"], "test")

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        run("down", "--dir", cls.dir)
        shutil.rmtree(cls.dir, ignore_errors=True)
        shutil.rmtree(cls.cache, ignore_errors=True)

    def kubectl(self, *args):
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        return subprocess.run([KUBECTL, "--kubeconfig", os.path.join(self.dir, "kubeconfig"),
                               "--cache-dir", self.cache] + list(args), capture_output=True,
                              text=True, timeout=60, env=env)

    def test_1_up_output_state_and_kubeconfig(self):
        kcfg = os.path.join(self.dir, "kubeconfig")
        self.assertIn("export KUBECONFIG=%s" % kcfg, self.up_out)
        st = self.state
        self.assertEqual(st["server"], "http://127.0.0.1:%d" % st["port"])
        for what in ("apiserver", "controllers"):
            self.assertTrue(tc.group_alive(st[what]["pid"]), what)
        with open(kcfg) as f:
            txt = f.read()
        self.assertIn("server: %s" % st["server"], txt)
        self.assertIn("current-context: localkube", txt)
        p = self.kubectl("get", "nodes", "-o", "json")
        self.assertEqual(p.returncode, 0, p.stderr)
        nodes = json.loads(p.stdout)["items"]
        self.assertEqual([n["metadata"]["name"] for n in nodes], ["localkube-node-1"])
        p = self.kubectl("config", "view", "--minify", "-o", "jsonpath={..namespace}")
        self.assertEqual(p.stdout.strip(), "default")
        self.assertTrue(os.path.exists(os.path.join(self.dir, "apiserver.log")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "controllers.log")))

    def test_2_second_up_refused(self):
        p = run("up", "--dir", self.dir, "--wait", "10")
        self.assertEqual(p.returncode, 1)
        self.assertIn("already running in", p.stderr)
        self.assertIn("localkube down --dir", p.stderr)
        # and the running one is untouched
        self.assertTrue(tc.group_alive(self.state["apiserver"]["pid"]))

    def test_3_status(self):
        self.c.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "st"},
                                "spec": {"containers": [{"name": "c", "image": "busybox",
                                                         "command": ["sleep", "600"]}]}})
        tc.wait_for(lambda: self.c.get(kc.PODS, "st", "default")["status"].get("phase") ==
                    "Running", 20, "running")
        p = run("status", "--dir", self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(self.state["server"], p.stdout)
        self.assertIn("pid %d running" % self.state["apiserver"]["pid"], p.stdout)
        self.assertIn("localkube-node-1", p.stdout)
        self.assertRegex(p.stdout, r"default/st\s+Running\s+127\.0\.\d+\.\d+")

    def test_4_fault_round_trip(self):
        d = self.dir
        p = run("fault", "--dir", d, "fail", "--verb", "get", "--resource", "configmaps",
                "--code", "503", "--count", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(json.loads(p.stdout)["ok"])
        p = run("fault", "--dir", d, "list")
        faults = json.loads(p.stdout)["faults"]
        self.assertEqual(len(faults), 1)
        self.assertEqual((faults[0]["type"], faults[0]["verb"], faults[0]["resource"],
                          faults[0]["code"]), ("fail", "get", "configmaps", 503))
        # the next matching request from a normal client fails once
        raw = kc.Client(self.state["server"], "x", retries=0)
        raw.user_agent = "test-client"
        with self.assertRaises(kc.ApiError) as cx:
            raw.get(kc.CONFIGMAPS, "anything", "default")
        self.assertEqual(cx.exception.code, 503)
        with self.assertRaises(kc.ApiError) as cx:
            raw.get(kc.CONFIGMAPS, "anything", "default")
        self.assertEqual(cx.exception.code, 404)
        # latency, then clear
        p = run("fault", "--dir", d, "latency", "--ms", "400", "--verb", "get",
                "--resource", "secrets")
        self.assertEqual(p.returncode, 0, p.stderr)
        t0 = time.monotonic()
        raw.get_or_none(kc.SECRETS, "x", "default")
        self.assertGreaterEqual(time.monotonic() - t0, 0.35)
        for action in ("drop-watches", "expire"):
            p = run("fault", "--dir", d, action)
            self.assertEqual(p.returncode, 0, p.stderr)
        p = run("fault", "--dir", d, "fail", "--verb", "list", "--resource", "pods", "--code",
                "429", "--retry-after", "2", "--internal")
        self.assertEqual(p.returncode, 0, p.stderr)
        f = [x for x in json.loads(run("fault", "--dir", d, "list").stdout)["faults"]
             if x["type"] == "fail"]
        self.assertEqual((f[0]["retryAfter"], f[0]["internal"]), (2, True))
        p = run("fault", "--dir", d, "clear")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(run("fault", "--dir", d, "list").stdout)["faults"], [])
        t0 = time.monotonic()
        raw.get_or_none(kc.SECRETS, "x", "default")
        self.assertLess(time.monotonic() - t0, 0.3)
        raw.close()
        # a bad fault is refused with the server's message
        p = run("fault", "--dir", d, "fail", "--verb", "frobnicate", "--code", "500")
        self.assertEqual(p.returncode, 1)
        self.assertIn("verb", p.stderr)

    def test_5_down_leaves_nothing_behind(self):
        self.c.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": "stubborn"},
                                "spec": {"terminationGracePeriodSeconds": 60, "containers": [{
                                    "name": "c", "image": "busybox",
                                    "command": ["sh", "-c", "trap '' TERM; sleep 600 & wait"]}]}})
        pod = tc.wait_for(lambda: self.c.get(kc.PODS, "stubborn", "default")["status"].get(
            "containerStatuses") and self.c.get(kc.PODS, "stubborn", "default")["status"][
            "containerStatuses"][0].get("containerID") and
            self.c.get(kc.PODS, "stubborn", "default"), 20, "stubborn running")
        pgid = int(pod["status"]["containerStatuses"][0]["containerID"].split("://")[1])
        self.assertTrue(tc.group_alive(pgid))
        pids = [self.state["apiserver"]["pid"], self.state["controllers"]["pid"]]
        t0 = time.monotonic()
        p = run("down", "--dir", self.dir, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("stopped", p.stdout)
        self.assertLess(time.monotonic() - t0, 40)
        for pid in pids:
            self.assertFalse(tc.group_alive(pid), "pid %d survived down" % pid)
        self.assertFalse(tc.group_alive(pgid), "pod process group survived down")
        self.assertEqual(tc.procs_mentioning(self.dir), [])
        ps = subprocess.run(["ps", "-eo", "pid,pgid,args"], capture_output=True, text=True)
        self.assertNotIn(self.dir, ps.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "state.json")))
        # idempotent
        p = run("down", "--dir", self.dir)
        self.assertEqual(p.returncode, 0)
        self.assertIn("nothing running", p.stdout)
        p = run("status", "--dir", self.dir)
        self.assertNotEqual(p.returncode, 0)


class CliKillTest(unittest.TestCase):
    def test_down_after_controllers_were_killed(self):
        """A SIGKILLed controllers process leaves pods running: down still kills them."""
        d = tempfile.mkdtemp(prefix="lk-cli2-")
        try:
            p = run("up", "--dir", d, "--nodes", "1")
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "state.json")) as f:
                st = json.load(f)
            c = kc.Client(st["server"], "test")
            c.create(kc.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                               "spec": {"containers": [{"name": "c", "image": "busybox",
                                                        "command": ["sleep", "600"]}]}})
            pod = tc.wait_for(lambda: (c.get(kc.PODS, "p", "default")["status"].get(
                "containerStatuses") or [{}])[0].get("containerID") and
                c.get(kc.PODS, "p", "default"), 20, "running")
            c.close()
            pgid = int(pod["status"]["containerStatuses"][0]["containerID"].split("://")[1])
            os.kill(st["controllers"]["pid"], signal.SIGKILL)
            tc.wait_for(lambda: not tc.group_alive(st["controllers"]["pid"]) or
                        not os.path.exists("/proc/%d" % st["controllers"]["pid"]), 5, "killed")
            self.assertTrue(tc.group_alive(pgid))
            p = run("down", "--dir", d)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertFalse(tc.group_alive(pgid))
            self.assertEqual(tc.procs_mentioning(d), [])
        finally:
            run("down", "--dir", d)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
