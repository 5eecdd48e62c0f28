"""localkube's podman runtime (lk/runtime_podman.py).

* The `podman create` command line built for a pod spec (pure: nothing runs): command/args
  against the image's ENTRYPOINT/CMD, env (fieldRef, configMapKeyRef, $(VAR)), volume mounts
  (read-only rules, subPath, service account, kubeconfig), securityContext (user, groups,
  runAsNonRoot, read-only root, capabilities), labels and names.
* Live, when podman is present and runs: `localkube up --runtime podman`-style controllers run
  pods from a tiny image built here from the host's /bin/sh and a few coreutils (imported once
  into podman's storage as localkube-test-tiny:1): init container, emptyDir shared as a non-root
  user, configMap volume, env, exec readiness probe, exit codes, graceful deletion, a missing
  image (ErrImagePull / ImagePullBackOff), runAsNonRoot refusal, and no container left behind.
  podman's settings come from images/env.sh (the project's containers.conf/storage.conf) when
  CONTAINERS_CONF is not set.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LK_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(LK_ROOT))
sys.path.insert(0, LK_ROOT)

from lk import client as kc  # noqa: E402
from lk import kubelet as kl  # noqa: E402
from lk import runtime_podman as rp  # noqa: E402


# ---- pure: the command line ----------------------------------------------------------------


class FakeCtx:
    server = "http://127.0.0.1:4321"
    nodes = {}


class FakeKubelet:
    """What PodWorker.build_env and PodmanRuntime.create_args read of the kubelet."""

    def __init__(self, d):
        self.dir = d
        self.ctx = FakeCtx()
        self.events = None
        self.cms = self.secrets = self

    synced = True

    def get(self, ns, name):  # the ConfigMap / Secret informers
        if name == "app-config":
            return {"metadata": {"name": name, "resourceVersion": "1"},
                    "data": {"level": "debug", "app.yaml": "a: 1\n"}}
        return None


def pod_obj(containers, volumes=None, init=None, **spec):
    s = {"containers": containers, "nodeName": "localkube-node-1"}
    if volumes:
        s["volumes"] = volumes
    if init:
        s["initContainers"] = init
    s.update(spec)
    return {"metadata": {"name": "web-1", "namespace": "ns1", "uid": "0a1b2c3d-4e5f-0000",
                         "labels": {"app": "web"}}, "spec": s}


IMAGE = {"Id": "ab" * 32, "RepoDigests": ["localhost/app@sha256:" + "cd" * 32],
         "Config": {"User": "65532:65532", "Entrypoint": ["/usr/local/bin/app"],
                    "Cmd": ["--default"], "WorkingDir": "/"}}


def opt(argv, flag):
    """Every value of a repeated option in argv."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="lk-podman-unit-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(os.path.join(self.dir, "kubeconfig"), "w") as f:
            f.write("apiVersion: v1\n")
        self.kl = FakeKubelet(self.dir)
        self.rt = rp.PodmanRuntime(self.kl, env={"PATH": os.environ.get("PATH", "")})

    def plan(self, pod, name=None):
        """(name, env, argv) for container `name` (default: the first) of pod."""
        w = kl.PodWorker(self.kl, pod)
        w.ip = "127.0.9.9"
        w.sync_volumes(pod)
        r = [x for x in w.runs if name is None or x.name == name][0]
        return self.rt.create_args(w, r, pod, IMAGE)

    def test_full_command_line(self):
        c = {"name": "app", "image": "app:1.0",
             "command": ["/usr/local/bin/app", "serve"],
             "args": ["--listen=$(POD_IP):8080", "--level", "$(LEVEL)", "$$(literal)"],
             "workingDir": "/work",
             "env": [{"name": "LEVEL", "valueFrom": {"configMapKeyRef": {
                         "name": "app-config", "key": "level"}}},
                     {"name": "MY_NS", "valueFrom": {"fieldRef": {
                         "fieldPath": "metadata.namespace"}}},
                     {"name": "URL", "value": "http://$(POD_IP):8080/x"}],
             "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"},
                              {"name": "scratch", "mountPath": "/scratch/"},
                              {"name": "data", "mountPath": "/data", "readOnly": True},
                              {"name": "scratch", "mountPath": "/cache", "subPath": "c/d"}],
             "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": True,
                                 "allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}
        hostdir = os.path.join(self.dir, "host-data")
        os.makedirs(hostdir)
        pod = pod_obj([c], volumes=[
            {"name": "cfg", "configMap": {"name": "app-config"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "hostPath": {"path": hostdir}}],
            securityContext={"runAsGroup": 2000, "runAsUser": 5, "supplementalGroups": [7],
                             "fsGroup": 9})
        name, env, argv = self.plan(pod)
        self.assertEqual(name, "lk-ns1-web-1-app-0a1b2c3d-1")
        self.assertEqual(argv[:10], ["podman", "create", "--name", name, "--pull", "never",
                                     "--network", "host", "--log-driver", "passthrough"])
        # command replaces the ENTRYPOINT (podman then drops the CMD); args follow the image
        i = argv.index("--entrypoint")
        self.assertEqual(json.loads(argv[i + 1]), ["/usr/local/bin/app", "serve"])
        self.assertEqual(argv[i + 2:], ["app:1.0", "--listen=127.0.9.9:8080", "--level", "debug",
                                        "$(literal)"])
        self.assertEqual(opt(argv, "--hostname"), ["web-1"])
        self.assertEqual(opt(argv, "--workdir"), ["/work"])
        # the container's runAsUser wins over the pod's; runAsGroup comes from the pod
        self.assertEqual(opt(argv, "--user"), ["1000:2000"])
        self.assertEqual(opt(argv, "--group-add"), ["7", "9"])
        self.assertIn("--read-only", argv)
        self.assertIn("--read-only-tmpfs=false", argv)
        self.assertEqual(opt(argv, "--security-opt"), ["no-new-privileges"])
        self.assertEqual(opt(argv, "--cap-drop"), ["ALL"])
        self.assertEqual(opt(argv, "--cap-add"), ["NET_BIND_SERVICE"])
        labels = dict(x.split("=", 1) for x in opt(argv, "--label"))
        self.assertEqual(labels, {rp.LABEL_DIR: self.dir, rp.LABEL_NS: "ns1",
                                  rp.LABEL_POD: "web-1", rp.LABEL_UID: "0a1b2c3d-4e5f-0000",
                                  rp.LABEL_CONTAINER: "app"})
        # env: the pod's variables and the resolved refs; nothing of the host's
        envs = dict(x.split("=", 1) for x in opt(argv, "--env"))
        self.assertEqual(envs, env)
        self.assertEqual(envs["LEVEL"], "debug")
        self.assertEqual(envs["MY_NS"], "ns1")
        self.assertEqual(envs["URL"], "http://127.0.9.9:8080/x")
        self.assertEqual(envs["POD_IP"], "127.0.9.9")
        self.assertEqual(envs["KUBECONFIG"], os.path.join(self.dir, "kubeconfig"))
        self.assertEqual(envs["LOCALKUBE_SERVER"], "http://127.0.0.1:4321")
        for k in ("PATH", "HOME", "LOCALKUBE_DIR", "LOCALKUBE_POD_DIR", "LOCALKUBE_MOUNT_CFG"):
            self.assertNotIn(k, envs)
        # mounts: at their mountPath; configMap read-only; the explicit readOnly; subPath
        vols = os.path.join(self.dir, "pods", "ns1_web-1", "volumes")
        sa = os.path.join(self.dir, "pods", "ns1_web-1", "serviceaccount")
        kcfg = os.path.join(self.dir, "kubeconfig")
        self.assertEqual(opt(argv, "--mount"), [
            "type=bind,src=%s/cfg,dst=/etc/app,ro=true" % vols,
            "type=bind,src=%s/scratch,dst=/scratch" % vols,
            "type=bind,src=%s,dst=/data,ro=true" % hostdir,
            "type=bind,src=%s/scratch/c/d,dst=/cache" % vols,
            "type=bind,src=%s,dst=%s,ro=true" % (sa, rp.SA_MOUNT),
            "type=bind,src=%s,dst=%s,ro=true" % (kcfg, kcfg)])
        with open(os.path.join(vols, "cfg", "app.yaml")) as f:
            self.assertEqual(f.read(), "a: 1\n")
        # emptyDirs (and their subPaths) are writable by any user, as kubelet makes them
        self.assertEqual(os.stat(os.path.join(vols, "scratch")).st_mode & 0o777, 0o777)
        self.assertEqual(os.stat(os.path.join(vols, "scratch", "c", "d")).st_mode & 0o777, 0o777)

    def test_entrypoint_rules(self):
        # only args: the image's ENTRYPOINT with these args instead of its CMD
        _, _, argv = self.plan(pod_obj([{"name": "a", "image": "app:1", "args": ["x", "-y"]}]))
        self.assertNotIn("--entrypoint", argv)
        self.assertEqual(argv[-3:], ["app:1", "x", "-y"])
        # neither: the image's own ENTRYPOINT and CMD
        _, _, argv = self.plan(pod_obj([{"name": "a", "image": "app:1"}]))
        self.assertNotIn("--entrypoint", argv)
        self.assertEqual(argv[-1], "app:1")
        # no securityContext: the image's USER, a writable root, no extra groups
        for flag in ("--user", "--read-only", "--group-add", "--cap-drop", "--workdir"):
            self.assertNotIn(flag, argv)

    def test_automount_off_and_pvc_read_only(self):
        pod = pod_obj([{"name": "a", "image": "app:1", "volumeMounts": [
            {"name": "models", "mountPath": "/models"}]}],
            volumes=[{"name": "models", "persistentVolumeClaim": {"claimName": "m",
                                                                  "readOnly": True}}],
            automountServiceAccountToken=False)
        _, _, argv = self.plan(pod)
        pvc = os.path.join(self.dir, "pvc", "ns1_m")
        self.assertEqual(opt(argv, "--mount")[:1], ["type=bind,src=%s,dst=/models,ro=true" % pvc])
        self.assertFalse(any(rp.SA_MOUNT in m for m in opt(argv, "--mount")))

    def test_run_as_non_root(self):
        sc = {"runAsNonRoot": True}
        rp.check_run_as_non_root(sc, "65532:65532", "c")
        rp.check_run_as_non_root(dict(sc, runAsUser=10), "", "c")
        with self.assertRaisesRegex(rp.ConfigError, "image will run as root"):
            rp.check_run_as_non_root(sc, "", "c")
        with self.assertRaisesRegex(rp.ConfigError, "image will run as root"):
            rp.check_run_as_non_root(sc, "0:0", "c")
        with self.assertRaisesRegex(rp.ConfigError, r"non-numeric user \(tandem\)"):
            rp.check_run_as_non_root(sc, "tandem", "c")
        with self.assertRaisesRegex(rp.ConfigError, "runAsUser breaks non-root policy"):
            rp.check_run_as_non_root(dict(sc, runAsUser=0), "65532", "c")
        rp.check_run_as_non_root({}, "", "c")  # not asked for: root is fine
        # through create_args: the image's user is root
        pod = pod_obj([{"name": "a", "image": "app:1"}], securityContext={"runAsNonRoot": True})
        w = kl.PodWorker(self.kl, pod)
        w.sync_volumes(pod)
        with self.assertRaisesRegex(rp.ConfigError, "image will run as root"):
            self.rt.create_args(w, w.runs[0], pod, {"Config": {"User": ""}})

    def test_user_arg_and_names(self):
        self.assertIsNone(rp.user_arg({}, "65532"))
        self.assertEqual(rp.user_arg({"runAsUser": 7}, ""), "7")
        self.assertEqual(rp.user_arg({"runAsUser": 7, "runAsGroup": 8}, ""), "7:8")
        self.assertEqual(rp.user_arg({"runAsGroup": 8}, "tandem:tandem"), "tandem:8")
        self.assertEqual(rp.user_arg({"runAsGroup": 8}, ""), "0:8")
        self.assertEqual(rp.container_name("a", "b.c", "d_e", "1234-5678-9abc", 3),
                         "lk-a-b.c-d_e-12345678-3")
        self.assertEqual(rp.container_name("a", "b", "c", "", 1), "lk-a-b-c--1")
        self.assertEqual(rp.pod_hostname("x" * 62 + "-yz"), "x" * 62)
        self.assertEqual(rp.pod_hostname("web-1"), "web-1")

    def test_bad_sub_path(self):
        pod = pod_obj([{"name": "a", "image": "app:1", "volumeMounts": [
            {"name": "s", "mountPath": "/s", "subPath": "../../etc"}]}],
            volumes=[{"name": "s", "emptyDir": {}}])
        with self.assertRaisesRegex(rp.ConfigError, "without '..'"):
            self.plan(pod)

    def test_bad_mount_paths(self):
        with self.assertRaisesRegex(rp.ConfigError, "without ','"):
            rp.create_argv("podman", "n", "i", mounts=[("/a,b", "/tmp", False)])
        with self.assertRaisesRegex(rp.ConfigError, "absolute"):
            rp.create_argv("podman", "n", "i", mounts=[("rel", "/tmp", False)])

    def test_init_container_and_sidecar_names(self):
        pod = pod_obj([{"name": "main", "image": "app:1"}],
                      init=[{"name": "setup", "image": "app:1", "command": ["sh", "-c", "true"]}])
        name, _, argv = self.plan(pod, "setup")
        self.assertEqual(name, "lk-ns1-web-1-setup-0a1b2c3d-1")
        self.assertEqual(json.loads(opt(argv, "--entrypoint")[0]), ["sh", "-c", "true"])
        self.assertEqual(argv[-1], "app:1")


# ---- live: pods from an image ------------------------------------------------------------------

TINY = "localhost/localkube-test-tiny:1"
TINY_FILES = ("/bin/sh", "/bin/sleep", "/bin/cat", "/bin/echo", "/usr/bin/id", "/bin/ls",
              "/bin/touch", "/bin/mkdir", "/bin/rm", "/usr/bin/test")


def podman_test_env():
    """(env, None) to run podman with, or (None, why not)."""
    env = dict(os.environ)
    if not env.get("CONTAINERS_CONF"):
        envsh = os.path.join(REPO, "images", "env.sh")
        if os.path.exists(envsh):
            p = subprocess.run(["bash", envsh], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=60)
            if p.returncode != 0:
                return None, "images/env.sh failed: %s" % p.stderr.decode()[-300:]
            for line in p.stdout.decode().splitlines():
                k, _, v = line.partition("=")
                if k.startswith("CONTAINERS_"):
                    env[k] = v
    why = rp.check_podman(env)
    return (None, why) if why else (env, None)


def ensure_tiny_image(env):
    """A ~4 MB image of the host's sh and a few coreutils (with their libraries) and a non-root
    user 65532, imported into podman once."""
    if subprocess.run(["podman", "image", "exists", TINY], env=env).returncode == 0:
        return
    root = tempfile.mkdtemp(prefix="lk-tiny-")
    try:
        files = set()
        for f in TINY_FILES:
            if not os.path.exists(f):
                raise unittest.SkipTest("%s not on this host (the live test's image)" % f)
            files.add(f)
            out = subprocess.run(["ldd", f], stdout=subprocess.PIPE).stdout.decode()
            files.update(w for w in out.split() if w.startswith("/"))
        for f in files:
            dst = os.path.join(root, f.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.realpath(f), dst)
        os.makedirs(os.path.join(root, "etc"))
        os.makedirs(os.path.join(root, "tmp"), mode=0o1777)
        with open(os.path.join(root, "etc", "passwd"), "w") as f:
            f.write("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532::/tmp:/bin/sh\n")
        with subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE) as tar:
            imp = subprocess.run(["podman", "import", "-q", "--change", 'CMD ["/bin/sh"]', "-",
                                  TINY], stdin=tar.stdout, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        if imp.returncode != 0:
            raise AssertionError("podman import failed: %s" % imp.stderr.decode())
    finally:
        shutil.rmtree(root, ignore_errors=True)


class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        env, why = podman_test_env()
        if env is None:
            raise unittest.SkipTest("podman cannot run here: %s" % why)
        ensure_tiny_image(env)
        from tests import test_controllers as tc
        cls.tc = tc
        old = dict(os.environ)
        os.environ.update({k: v for k, v in env.items() if k.startswith("CONTAINERS_")})
        try:
            cls.k = tc.Cluster(nodes=1, backoff_scale=0.1, extra=["--runtime", "podman"]).start()
        finally:
            os.environ.clear()
            os.environ.update(old)
        cls.env = env

    @classmethod
    def tearDownClass(cls):
        cls.k.stop()
        left = rp.list_containers(cls.k.dir, cls.env)
        rp.cleanup_dir(cls.k.dir, cls.env)
        assert not left, "containers left after the controllers stopped: %s" % left

    def wait(self, pred, timeout, what):
        return self.tc.wait_for(pred, timeout, what)

    def cstatus(self, name, c, init=False):
        p = self.k.pod(name) or {}
        for s in (p.get("status") or {}).get("initContainerStatuses" if init else
                                             "containerStatuses") or []:
            if s["name"] == c:
                return s
        return None

    def test_pod_from_image(self):
        k = self.k
        k.create(kc.CONFIGMAPS, {"metadata": {"name": "greeting"}, "data": {"msg": "hello"}})
        pod = {"metadata": {"name": "tiny"}, "spec": {
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True},
            "volumes": [{"name": "shared", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "greeting"}}],
            "initContainers": [{"name": "init", "image": TINY, "command": ["sh", "-c"],
                                "args": ["echo from-init > /shared/init.txt"],
                                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
            "containers": [{
                "name": "main", "image": TINY, "workingDir": "/shared",
                "command": ["sh", "-c"],
                "args": ['trap "echo got-term; exit 0" TERM; id -u; cat init.txt; '
                         'cat /etc/cfg/msg; echo; echo "ip=$POD_IP ns=$MY_NS"; '
                         'touch /etc/cfg/x 2>/dev/null || echo cfg-read-only; '
                         'touch ready; while :; do sleep 0.2; done'],
                "env": [{"name": "MY_NS", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.namespace"}}}],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"},
                                 {"name": "cfg", "mountPath": "/etc/cfg"}],
                "readinessProbe": {"exec": {"command": ["test", "-f", "/shared/ready"]},
                                   "periodSeconds": 1}}]}}
        k.create(kc.PODS, pod)
        self.wait(lambda: kc.is_pod_ready(k.pod("tiny") or {}), 60, "pod tiny Ready")
        p = k.pod("tiny")
        ip = p["status"]["podIP"]
        cs = self.cstatus("tiny", "main")
        self.assertTrue(cs["containerID"].startswith("podman://"), cs)
        self.assertTrue(cs["imageID"].startswith("localhost/localkube-test-tiny@sha256:"), cs)
        ics = self.cstatus("tiny", "init", init=True)
        self.assertEqual(ics["state"]["terminated"]["exitCode"], 0)
        self.assertEqual(ics["state"]["terminated"]["reason"], "Completed")
        self.wait(lambda: "cfg-read-only" in k.container_log("tiny", "main"), 10, "the log")
        logtxt = k.container_log("tiny", "main")
        self.assertIn("65532\nfrom-init\nhello\nip=%s ns=default\ncfg-read-only\n" % ip, logtxt)
        # the container runs in podman, labelled, and was not started as a local process
        names = rp.list_containers(k.dir, self.env)
        self.assertIn("lk-default-tiny-main-%s-1" % p["metadata"]["uid"].replace("-", "")[:8],
                      names)
        out = subprocess.run(["podman", "ps", "--filter", "label=%s=%s" % (
            rp.LABEL_POD, "tiny"), "--format", "{{.Labels}}"], env=self.env,
            stdout=subprocess.PIPE).stdout.decode()
        self.assertIn(k.dir, out)
        # graceful deletion: the container gets SIGTERM (its trap logs) and is removed
        k.c.delete(kc.PODS, "tiny", "default")
        self.wait(lambda: k.pod("tiny") is None, 30, "pod tiny gone")
        self.assertIn("got-term", k.container_log("tiny", "main"))
        self.wait(lambda: not [n for n in rp.list_containers(k.dir, self.env) if "-tiny-" in n],
                  15, "tiny's containers removed")

    def test_exit_codes_and_restart(self):
        k = self.k
        k.create(kc.PODS, {"metadata": {"name": "exits"}, "spec": {
            "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": TINY, "command": ["sh", "-c"],
                            "args": ["if [ -f /d/once ]; then exit 0; fi; touch /d/once; "
                                     "echo failing; exit 3"],
                            "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
            "volumes": [{"name": "d", "emptyDir": {}}]}})
        self.wait(lambda: (k.pod("exits") or {}).get("status", {}).get("phase") == "Succeeded",
                  60, "pod exits Succeeded after one restart")
        cs = self.cstatus("exits", "c")
        self.assertEqual(cs["restartCount"], 1)
        self.assertEqual(cs["lastState"]["terminated"]["exitCode"], 3)
        self.assertEqual(cs["lastState"]["terminated"]["reason"], "Error")
        self.assertEqual(cs["state"]["terminated"]["exitCode"], 0)
        self.assertIn("failing", k.container_log("exits", "c"))
        k.c.delete(kc.PODS, "exits", "default")

    def test_image_errors(self):
        k = self.k
        k.create(kc.PODS, {"metadata": {"name": "noimage"}, "spec": {"containers": [
            {"name": "c", "image": "localhost/localkube-test-no-such-image:9"}]}})
        reasons = set()

        def pulling():
            w = ((self.cstatus("noimage", "c") or {}).get("state") or {}).get("waiting") or {}
            reasons.add(w.get("reason"))
            return "ImagePullBackOff" in reasons and w
        w = self.wait(pulling, 30, "ImagePullBackOff")
        self.assertIn("ErrImagePull", reasons)
        self.assertIn('image "localhost/localkube-test-no-such-image:9"', w["message"])
        self.assertIn("not in podman's local storage", w["message"])
        k.c.delete(kc.PODS, "noimage", "default")
        # runAsNonRoot with the image's root user: refused before anything runs
        k.create(kc.PODS, {"metadata": {"name": "asroot"}, "spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "c", "image": TINY, "command": ["sleep", "60"]}]}})

        def refused():
            w = ((self.cstatus("asroot", "c") or {}).get("state") or {}).get("waiting") or {}
            return w.get("reason") == "CreateContainerConfigError" and w
        w = self.wait(refused, 30, "CreateContainerConfigError")
        self.assertIn("image will run as root", w["message"])
        self.assertFalse([n for n in rp.list_containers(k.dir, self.env) if "-asroot-" in n])
        k.c.delete(kc.PODS, "asroot", "default")
        # an entrypoint that does not exist: StartError, then a crash loop
        k.create(kc.PODS, {"metadata": {"name": "noexec"}, "spec": {"containers": [
            {"name": "c", "image": TINY, "command": ["/no/such/binary"]}]}})

        def start_error():
            cs = self.cstatus("noexec", "c") or {}
            t = (cs.get("lastState") or {}).get("terminated") or \
                (cs.get("state") or {}).get("terminated") or {}
            return t.get("reason") == "StartError" and t
        t = self.wait(start_error, 30, "StartError")
        self.assertEqual(t["exitCode"], 128)
        self.assertIn("/no/such/binary", t.get("message", ""))
        k.c.delete(kc.PODS, "noexec", "default")
        for n in ("noimage", "asroot", "noexec"):
            self.wait(lambda: k.pod(n) is None, 30, "pod %s gone" % n)


class LiveCliTest(unittest.TestCase):
    """`localkube up --runtime podman` / `down` through the CLI, with the controllers killed
    (SIGKILL: no graceful stop) while a pod runs: `down` still removes its container, using the
    podman settings recorded in state.json."""

    def test_down_after_a_crash(self):
        env, why = podman_test_env()
        if env is None:
            self.skipTest("podman cannot run here: %s" % why)
        ensure_tiny_image(env)
        cli = os.path.join(LK_ROOT, "localkube")
        d = tempfile.mkdtemp(prefix="lk-podman-cli-")
        self.addCleanup(shutil.rmtree, d, True)
        self.addCleanup(rp.cleanup_dir, d, env)

        def lk(*args):
            return subprocess.run([cli] + list(args), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=120)
        p = lk("up", "--dir", d, "--runtime", "podman", "--nodes", "1")
        self.addCleanup(lk, "down", "--dir", d)
        self.assertEqual(p.returncode, 0, p.stdout.decode())
        self.assertIn(b"runtime podman", p.stdout)
        with open(os.path.join(d, "state.json")) as f:
            st = json.load(f)
        self.assertEqual(st["runtime"], "podman")
        self.assertEqual(st["podmanEnv"].get("CONTAINERS_CONF"), env.get("CONTAINERS_CONF"))
        c = kc.Client(st["server"], "test")
        c.create(kc.PODS, {"metadata": {"name": "sleeper"}, "spec": {"containers": [
            {"name": "c", "image": TINY, "command": ["sleep", "600"]}]}}, "default")
        from tests import test_controllers as tc
        tc.wait_for(lambda: (c.get(kc.PODS, "sleeper", "default").get("status") or {}).get(
            "phase") == "Running", 60, "pod sleeper Running")
        self.assertEqual(len(rp.list_containers(d, env)), 1)
        os.kill(st["controllers"]["pid"], 9)
        time.sleep(0.5)
        self.assertEqual(len(rp.list_containers(d, env)), 1, "the container outlives its kubelet")
        # down without the podman settings in its environment: they come from state.json
        plain = {k: v for k, v in env.items() if not k.startswith("CONTAINERS_")}
        p = subprocess.run([cli, "down", "--dir", d], env=plain, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout.decode())
        self.assertIn(b"removed 1 leftover container(s)", p.stdout)
        self.assertEqual(rp.list_containers(d, env), [])
        c.close()


if __name__ == "__main__":
    unittest.main()
