"""The localkube API server driven by the real kubectl (1.32, validation on)."""

import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.lkserver import KUBECTL, LocalApiServer  # noqa: E402

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: CronTab spec
            properties:
              cronSpec: {type: string}
              image: {type: string}
              replicas: {type: integer, minimum: 0, maximum: 10}
          status:
            type: object
            properties:
              replicas: {type: integer}
"""

CR = """\
apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: my-cron
spec:
  cronSpec: "* * * * */5"
  image: my-image
  replicas: %d
"""

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  a: b\n"

DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %s
        ports:
        - containerPort: 80
"""


@unittest.skipUnless(os.path.exists(KUBECTL), "kubectl not installed")
class TestKubectl(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = LocalApiServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def k(self, *args, input=None, ok=True, timeout=30):
        p = self.srv.kubectl(*args, input=input, timeout=timeout)
        if ok:
            self.assertEqual(p.returncode, 0, "kubectl %s: %s%s" % (" ".join(args), p.stdout,
                                                                    p.stderr))
        return p

    def test_1_discovery_and_get(self):
        out = self.k("get", "ns").stdout
        for n in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.assertIn(n, out)
        self.assertIn("STATUS", out)
        self.assertIn("Active", out)
        out = self.k("api-resources").stdout
        self.assertIn("deployments", out)
        self.assertIn("leases", out)
        ver = json.loads(self.k("version", "-o", "json").stdout)
        self.assertEqual(ver["serverVersion"]["gitVersion"], "v1.32.0-localkube")
        out = json.loads(self.k("get", "--raw", "/api/v1/namespaces/default").stdout)
        self.assertEqual(out["metadata"]["name"], "default")

    def test_2_crd_and_custom_resource(self):
        p = self.k("apply", "-f", "-", input=CRD)
        self.assertIn("customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com "
                      "created", p.stdout)
        self.k("wait", "--for", "condition=established", "--timeout=10s",
               "crd/crontabs.stable.example.com")
        self.assertIn("crontabs", self.k("api-resources", "--api-group=stable.example.com")
                      .stdout)
        p = self.k("apply", "-f", "-", input=CR % 2)
        self.assertIn("crontab.stable.example.com/my-cron created", p.stdout)
        p = self.k("apply", "-f", "-", input=CR % 2)
        self.assertIn("unchanged", p.stdout)
        p = self.k("apply", "-f", "-", input=CR % 3)
        self.assertIn("configured", p.stdout)
        # validation happens on the server and kubectl prints kube's message
        p = self.k("apply", "-f", "-", input=CR % 20, ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('The CronTab "my-cron" is invalid: spec.replicas: Invalid value: 20: '
                      'spec.replicas in body should be less than or equal to 10', p.stderr)
        p = self.k("apply", "-f", "-", input=(CR % 1) + "  bogus: 1\n", ok=False)
        self.assertIn('unknown field "spec.bogus"', p.stderr)
        obj = json.loads(self.k("get", "ct", "my-cron", "-o", "json").stdout)
        self.assertEqual(obj["spec"]["replicas"], 3)
        self.assertEqual(obj["metadata"]["generation"], 2)
        out = self.k("get", "crontabs").stdout
        self.assertIn("SPEC", out)
        self.assertIn("REPLICAS", out)
        self.assertIn("* * * * */5", out)
        self.assertIn("crontab.stable.example.com/my-cron", self.k("get", "all").stdout)
        # scale subresource
        self.k("scale", "ct", "my-cron", "--replicas=5")
        obj = json.loads(self.k("get", "ct", "my-cron", "-o", "json").stdout)
        self.assertEqual(obj["spec"]["replicas"], 5)
        # patch: default strategic merge is refused for CRs, merge works
        p = self.k("patch", "ct", "my-cron", "-p", '{"spec":{"image":"x"}}', ok=False)
        self.assertIn("the body of the request was in an unknown format", p.stderr)
        self.k("patch", "ct", "my-cron", "--type=merge", "-p", '{"spec":{"image":"x"}}')
        self.assertEqual(json.loads(self.k("get", "ct", "my-cron", "-o", "json").stdout)
                         ["spec"]["image"], "x")
        out = self.k("explain", "crontab.spec").stdout
        self.assertIn("cronSpec", out)
        self.k("delete", "ct", "my-cron")
        self.assertIn("No resources found", self.k("get", "ct").stderr)

    def test_3_builtin_apply_scale_delete(self):
        self.k("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata:\n"
                                          "  name: kapps\n")
        p = self.k("apply", "-n", "kapps", "-f", "-", input=DEPLOY % (1, "nginx:1"))
        self.assertIn("deployment.apps/web created", p.stdout)
        p = self.k("apply", "-n", "kapps", "-f", "-", input=DEPLOY % (2, "nginx:2"))
        self.assertIn("deployment.apps/web configured", p.stdout)
        d = json.loads(self.k("get", "-n", "kapps", "deploy", "web", "-o", "json").stdout)
        self.assertEqual(d["spec"]["replicas"], 2)
        self.assertEqual(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2")
        self.assertEqual(d["spec"]["template"]["spec"]["containers"][0]["ports"],
                         [{"containerPort": 80, "protocol": "TCP"}])
        self.assertEqual(d["metadata"]["generation"], 2)
        self.assertEqual(d["spec"]["strategy"]["type"], "RollingUpdate")
        self.k("scale", "-n", "kapps", "deploy/web", "--replicas=4")
        d = json.loads(self.k("get", "-n", "kapps", "deploy", "web", "-o", "json").stdout)
        self.assertEqual(d["spec"]["replicas"], 4)
        p = self.k("apply", "-n", "kapps", "-f", "-",
                   input=DEPLOY.replace("image: %s", "image: %s\n        imagee: typo")
                   % (1, "x"), ok=False)
        self.assertIn('unknown field "spec.template.spec.containers[0].imagee"', p.stderr)
        p = self.k("apply", "--server-side", "-n", "kapps", "-f", "-",
                   input="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n"
                         "data:\n  a: '1'\n")
        self.assertIn("serverside-applied", p.stdout)
        out = self.k("get", "-n", "kapps", "cm", "ssa", "-o", "jsonpath={.data.a}").stdout
        self.assertEqual(out, "1")
        self.k("delete", "-n", "kapps", "deploy", "web")
        self.k("delete", "namespace", "kapps", timeout=30)
        p = self.k("get", "namespace", "kapps", ok=False)
        self.assertIn("NotFound", p.stderr)

    def test_4_get_watch(self):
        self.k("apply", "-f", "-", input=CM % "w0")
        proc = subprocess.Popen([KUBECTL, "--kubeconfig", self.srv.kubeconfig(), "--cache-dir",
                                 self.srv._cache_dir, "get", "configmaps", "-w",
                                 "--request-timeout=4s"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, HOME=self.srv.dir))
        lines = []

        def reader():
            for line in proc.stdout:
                lines.append(line)
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        deadline = time.time() + 5
        while time.time() < deadline and not any("w0" in x for x in lines):
            time.sleep(0.05)
        self.k("apply", "-f", "-", input=CM % "w1")
        deadline = time.time() + 5
        while time.time() < deadline and not any("w1" in x for x in lines):
            time.sleep(0.05)
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        t.join(5)
        proc.stdout.close()
        proc.stderr.close()
        text = "".join(lines)
        self.assertIn("NAME", text)
        self.assertIn("w0", text)
        self.assertIn("w1", text)

    def test_5_logs(self):
        self.k("run", "logger", "--image=busybox", "--restart=Never")
        pdir = os.path.join(self.srv.dir, "pods", "default_logger")
        os.makedirs(pdir, exist_ok=True)
        with open(os.path.join(pdir, "logger.log"), "w") as f:
            f.write("line1\nline2\nline3\n")
        self.assertEqual(self.k("logs", "logger").stdout, "line1\nline2\nline3\n")
        self.assertEqual(self.k("logs", "logger", "--tail=1").stdout, "line3\n")
        out = json.loads(self.k("get", "pod", "logger", "-o", "json").stdout)
        self.assertEqual(out["spec"]["containers"][0]["image"], "busybox")
        self.assertEqual(out["status"]["phase"], "Pending")
        self.k("delete", "pod", "logger", "--wait=false")

    def test_6_imperative_create_protobuf(self):
        # kubectl's typed clients send protobuf bodies for these
        self.k("create", "namespace", "imp")
        self.k("-n", "imp", "create", "configmap", "c1", "--from-literal=a=b")
        self.k("-n", "imp", "create", "secret", "generic", "s1", "--from-literal=k=v")
        self.k("-n", "imp", "create", "deployment", "d1", "--image=nginx", "--replicas=0",
               "--port=80")
        self.k("-n", "imp", "create", "service", "clusterip", "svc1", "--tcp=80:8080")
        self.k("-n", "imp", "create", "role", "r1", "--verb=get", "--resource=pods")
        cm = json.loads(self.k("-n", "imp", "get", "cm", "c1", "-o", "json").stdout)
        self.assertEqual(cm["data"], {"a": "b"})
        sec = json.loads(self.k("-n", "imp", "get", "secret", "s1", "-o", "json").stdout)
        self.assertEqual(sec["data"], {"k": "dg=="})
        d = json.loads(self.k("-n", "imp", "get", "deploy", "d1", "-o", "json").stdout)
        self.assertEqual(d["spec"]["replicas"], 0)
        self.assertEqual(d["spec"]["template"]["spec"]["containers"][0]["ports"][0]
                         ["containerPort"], 80)
        svc = json.loads(self.k("-n", "imp", "get", "svc", "svc1", "-o", "json").stdout)
        self.assertEqual(svc["spec"]["ports"][0]["targetPort"], 8080)
        self.assertTrue(svc["spec"]["clusterIP"].startswith("10.96."))
        role = json.loads(self.k("-n", "imp", "get", "role", "r1", "-o", "json").stdout)
        self.assertEqual(role["rules"][0]["verbs"], ["get"])
        p = self.k("-n", "imp", "create", "configmap", "c1", "--from-literal=a=b", ok=False)
        self.assertIn('configmaps "c1" already exists', p.stderr)


if __name__ == "__main__":
    unittest.main()
