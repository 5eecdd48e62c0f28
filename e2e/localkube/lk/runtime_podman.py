"""localkube's podman runtime (`localkube up --runtime podman`): each container of a pod runs from
its real image with podman, instead of as a local process (lk/kubelet.py's ProcessRuntime).

Per container run (a start, or a restart):

* `podman image inspect IMAGE`: the image must be in podman's local storage (nothing is ever
  pulled: every imagePullPolicy behaves as Never); a missing image keeps the container waiting
  with ErrImagePull, then ImagePullBackOff, as kubelet does;
* `podman create --name lk-<ns>-<pod>-<container>-<uid8>-<run> --pull never --network host
  --log-driver passthrough ...` (create_argv below: command -> --entrypoint, args -> the CMD,
  env, bind mounts of the pod's volumes at their mountPath, workingDir, securityContext), with
  labels io.localkube.* naming the localkube DIR, pod and container, so cleanup_dir() finds every
  container a localkube started, and only those;
* `podman start --attach NAME` with stdout and stderr on DIR/pods/<ns>_<pod>/<container>.log:
  with the passthrough log driver the container writes straight into that file (kubectl logs
  reads it), and the attach client exits with the container;
* stop: `podman stop -t GRACE` (the image's STOPSIGNAL, then SIGKILL); kill: `podman kill -s KILL`;
* when it exited: `podman inspect` gives the exit code (OOMKilled, a start error), then the
  container is removed (`podman rm`);
* exec probes: `podman exec NAME CMD...`; HTTP and TCP probes reach the pod IP as in process
  mode (--network host: the container shares the host's loopback addresses and binds $POD_IP).

podman runs with the environment of the controllers process (CONTAINERS_CONF,
CONTAINERS_STORAGE_CONF: images/env.sh sets them); LOCALKUBE_PODMAN names another podman binary.
"""

import json
import logging
import math
import os
import re
import shutil
import subprocess
import threading

log = logging.getLogger("lk.runtime_podman")

LABEL_DIR = "io.localkube.dir"
LABEL_NS = "io.localkube.pod.namespace"
LABEL_POD = "io.localkube.pod.name"
LABEL_UID = "io.localkube.pod.uid"
LABEL_CONTAINER = "io.localkube.container.name"
# The environment variables that choose podman's configuration and storage; `localkube up`
# records them in state.json so that `down` cleans up in the same storage.
PODMAN_ENV = ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF",
              "LOCALKUBE_PODMAN")
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# volume types whose mounts are read-only whatever the volumeMount says (as kubelet does)
READ_ONLY_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")


class ConfigError(ValueError):
    """A pod spec the runtime cannot run (CreateContainerConfigError)."""


def podman_binary(env=None):
    return (env if env is not None else os.environ).get("LOCALKUBE_PODMAN") or "podman"


def podman_env(env=None):
    """The podman-related variables of env (default os.environ): what state.json records."""
    env = os.environ if env is None else env
    return {k: env[k] for k in PODMAN_ENV if env.get(k)}


def run_podman(argv, env=None, timeout=60):
    """Runs a podman command; returns (exit code, stdout, stderr). A missing binary or a timeout
    is exit code 127 / 124 with the reason in stderr."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env, timeout=timeout)
    except OSError as e:
        return 127, "", str(e)
    except subprocess.TimeoutExpired:
        return 124, "", "%s timed out after %ss" % (" ".join(argv[:3]), timeout)
    return (p.returncode, p.stdout.decode("utf-8", "replace"),
            p.stderr.decode("utf-8", "replace"))


def check_podman(env=None):
    """None when podman can run here, else why not (for `localkube up --runtime podman`)."""
    exe = podman_binary(env)
    if shutil.which(exe) is None:
        return "podman not found (%s); install it (scripts/install-deps.sh) or set " \
               "LOCALKUBE_PODMAN" % exe
    rc, out, err = run_podman([exe, "info", "--format", "{{.Store.GraphRoot}}"], env, 60)
    if rc != 0:
        return "`%s info` failed (exit %d): %s" % (exe, rc, (err or out).strip()[-500:])
    return None


def list_containers(dir_, env=None):
    """Names of the containers (any state) that the localkube in dir_ started."""
    exe = podman_binary(env)
    rc, out, err = run_podman([exe, "ps", "-a", "--filter", "label=%s=%s" % (
        LABEL_DIR, os.path.abspath(dir_)), "--format", "{{.Names}}"], env, 60)
    if rc != 0:
        raise RuntimeError("podman ps failed (exit %d): %s" % (rc, err.strip()))
    return [x for x in out.split() if x]


def cleanup_dir(dir_, env=None):
    """Removes (force, no grace) every container labelled with dir_; returns how many. Containers
    of other localkube DIRs and containers localkube did not start are never touched."""
    exe = podman_binary(env)
    if shutil.which(exe) is None:
        return 0
    try:
        names = list_containers(dir_, env)
    except RuntimeError as e:
        log.warning("cleanup of %s: %s", dir_, e)
        return 0
    if names:
        rc, _, err = run_podman([exe, "rm", "-f", "-t", "0"] + names, env, 120)
        if rc != 0:
            log.warning("podman rm -f %s: %s", " ".join(names), err.strip())
    return len(names)


# ---- the command line (pure functions) -------------------------------------------------------


def container_name(ns, pod, container, uid, run):
    raw = "lk-%s-%s-%s-%s-%d" % (ns, pod, container, (uid or "").replace("-", "")[:8], run)
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", raw)


def pod_hostname(name):
    """kubelet's GeneratePodHostNameAndDomain: at most 63 characters, no trailing '-' or '.'."""
    return name[:63].rstrip("-.")


def security_context(pod, c):
    """The effective securityContext of container c: runAsUser, runAsGroup and runAsNonRoot from
    the container's, else the pod's; the rest from the container's, plus the pod's
    supplementalGroups and fsGroup."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    csc = c.get("securityContext") or {}
    out = dict(csc)
    for k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile"):
        if csc.get(k) is None and psc.get(k) is not None:
            out[k] = psc[k]
    groups = [int(g) for g in psc.get("supplementalGroups") or []]
    if psc.get("fsGroup") is not None:
        groups.append(int(psc["fsGroup"]))
    out["groups"] = sorted(set(groups))
    return out


def _image_uid(image_user):
    """(uid or None, user name or None) of an image's USER ("", "65532", "65532:65532",
    "tandem", "tandem:tandem")."""
    u = (image_user or "").split(":", 1)[0]
    if u == "":
        return 0, None
    if u.isdigit():
        return int(u), None
    return (0, None) if u == "root" else (None, u)


def user_arg(sc, image_user):
    """podman's --user value for the effective securityContext sc (None: the image's USER)."""
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    if uid is None and gid is None:
        return None
    if uid is None:
        u = (image_user or "").split(":", 1)[0] or "0"
        return "%s:%d" % (u, int(gid))
    return "%d:%d" % (int(uid), int(gid)) if gid is not None else "%d" % int(uid)


def check_run_as_non_root(sc, image_user, container):
    """kubelet's verifyRunAsNonRoot: raises ConfigError when runAsNonRoot is set and the
    container would run as root, or as a user name that cannot be verified."""
    if not sc.get("runAsNonRoot"):
        return
    if sc.get("runAsUser") is not None:
        if int(sc["runAsUser"]) == 0:
            raise ConfigError("container's runAsUser breaks non-root policy (pod: container %s)"
                              % container)
        return
    uid, name = _image_uid(image_user)
    if name is not None:
        raise ConfigError("container has runAsNonRoot and image has non-numeric user (%s), "
                          "cannot verify user is non-root (container %s)" % (name, container))
    if uid == 0:
        raise ConfigError("container has runAsNonRoot and image will run as root (container %s)"
                          % container)


def create_argv(podman, name, image, command=None, args=None, env=None, mounts=(),
                workdir=None, user=None, groups=(), hostname=None, labels=None, sc=None):
    """`podman create` for one container run.

    command replaces the image's ENTRYPOINT (and, as in Kubernetes and Docker, drops its CMD);
    args replaces the CMD; neither: the image's own. env: {name: value}; mounts: [(mountPath,
    host path, read-only)]; sc: the effective securityContext (security_context())."""
    sc = sc or {}
    argv = [podman, "create", "--name", name, "--pull", "never", "--network", "host",
            "--log-driver", "passthrough"]
    if hostname:
        argv += ["--hostname", hostname]
    for k in sorted(labels or {}):
        argv += ["--label", "%s=%s" % (k, labels[k])]
    for k, v in (env or {}).items():
        argv += ["--env", "%s=%s" % (k, v)]
    for dst, src, ro in mounts:
        for what, p in (("mountPath", dst), ("volume path", src)):
            if "," in p or not os.path.isabs(p):
                raise ConfigError("%s %r: podman mounts need an absolute path without ','"
                                  % (what, p))
        argv += ["--mount", "type=bind,src=%s,dst=%s%s" % (src, dst, ",ro=true" if ro else "")]
    if workdir:
        argv += ["--workdir", workdir]
    if user:
        argv += ["--user", user]
    for g in groups:
        argv += ["--group-add", str(g)]
    if sc.get("privileged"):
        argv.append("--privileged")
    if sc.get("readOnlyRootFilesystem"):
        # as in Kubernetes: nothing writable but the volumes (podman would add tmpfs /tmp, /run)
        argv += ["--read-only", "--read-only-tmpfs=false"]
    if sc.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    caps = sc.get("capabilities") or {}
    for c in caps.get("drop") or []:
        argv += ["--cap-drop", str(c)]
    for c in caps.get("add") or []:
        argv += ["--cap-add", str(c)]
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        argv += ["--security-opt", "seccomp=unconfined"]
    if command:
        argv += ["--entrypoint", json.dumps(list(command))]
    argv.append(image)
    argv += list(args or [])
    return argv


# ---- the runtime -------------------------------------------------------------------------------


class PodmanRuntime:
    """The kubelet's container runtime interface (see ProcessRuntime in lk/kubelet.py) on
    podman."""

    name = "podman"

    def __init__(self, kubelet, env=None):
        self.kl = kubelet
        self.env = dict(os.environ if env is None else env)
        self.podman = podman_binary(self.env)
        self._graphroot = None

    # -- helpers --

    def _run(self, argv, timeout=60):
        return run_podman([self.podman] + argv, self.env, timeout)

    def graphroot(self):
        if self._graphroot is None:
            rc, out, _ = self._run(["info", "--format", "{{.Store.GraphRoot}}"])
            self._graphroot = out.strip() if rc == 0 else "?"
        return self._graphroot

    def image_info(self, image):
        """podman image inspect's object for image, or None when it is not in local storage."""
        rc, out, _ = self._run(["image", "inspect", image])
        if rc != 0:
            return None
        try:
            return json.loads(out)[0]
        except (ValueError, IndexError, TypeError):
            return None

    def inspect(self, name):
        rc, out, _ = self._run(["container", "inspect", name])
        if rc != 0:
            return None
        try:
            return json.loads(out)[0]
        except (ValueError, IndexError, TypeError):
            return None

    def remove(self, name):
        rc, _, err = self._run(["rm", "-f", "-t", "0", name], 120)
        if rc not in (0, 1) and "no such container" not in err:
            log.warning("podman rm %s: %s", name, err.strip())

    # -- the interface --

    def cleanup(self):
        n = cleanup_dir(self.kl.dir, self.env)
        if n:
            log.info("removed %d leftover container(s) of %s", n, self.kl.dir)
        return n

    def mounts(self, w, pod, c, env):
        """[(mountPath, host path, read-only)] of container c: its volumeMounts, the service
        account token and the kubeconfig (at the path $KUBECONFIG names)."""
        from lk.kubelet import expand
        vols = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        out = []
        for vm in c.get("volumeMounts") or []:
            local = w.volumes.get(vm.get("name"))
            mp = vm.get("mountPath")
            if local is None or not mp:
                continue
            v = vols.get(vm.get("name")) or {}
            if "emptyDir" in v or "persistentVolumeClaim" in v:
                # kubelet's emptyDirs are 0777: non-root users of an image can write them
                try:
                    os.chmod(local, 0o777)
                except OSError:
                    pass
            sub = vm.get("subPath") or expand(vm.get("subPathExpr") or "", env)
            src = local
            if sub:
                if os.path.isabs(sub) or ".." in sub.split("/"):
                    raise ConfigError("volumeMount %s: subPath %r must be a relative path "
                                      "without '..'" % (vm.get("name"), sub))
                src = os.path.join(local, sub)
                if not os.path.exists(src):
                    os.makedirs(src, exist_ok=True)
                    os.chmod(src, 0o777)
            ro = bool(vm.get("readOnly")) or any(k in v for k in READ_ONLY_VOLUMES) or \
                bool((v.get("persistentVolumeClaim") or {}).get("readOnly"))
            out.append((mp.rstrip("/") or "/", src, ro))
        sa = w.volumes.get("\0sa")
        if sa and not any(mp == SA_MOUNT for mp, _, _ in out):
            out.append((SA_MOUNT, sa, True))
        kcfg = env.get("KUBECONFIG")
        if kcfg and os.path.isfile(kcfg) and not any(mp == kcfg for mp, _, _ in out):
            out.append((kcfg, kcfg, True))
        return out

    def create_args(self, w, r, pod, info):
        """(container name, env, `podman create` argv) of the next run of container r of worker
        w's pod, given its image's `podman image inspect` object; runs nothing (but creates
        missing subPath directories and opens emptyDirs to every user). Raises ConfigError."""
        from lk.kubelet import expand
        c = r.spec
        cfg = info.get("Config") or {}
        env, _ = w.build_env(pod, c, container=True)
        command = [expand(x, env) for x in c.get("command") or []]
        args = [expand(x, env) for x in c.get("args") or []]
        sc = security_context(pod, c)
        check_run_as_non_root(sc, cfg.get("User"), r.name)
        name = container_name(w.ns, w.pname, r.name, w.uid, r.run_id + 1)
        labels = {LABEL_DIR: self.kl.dir, LABEL_NS: w.ns, LABEL_POD: w.pname, LABEL_UID: w.uid,
                  LABEL_CONTAINER: r.name}
        spec = pod.get("spec") or {}
        argv = create_argv(self.podman, name, c.get("image") or "", command, args, env,
                           self.mounts(w, pod, c, env), c.get("workingDir"),
                           user_arg(sc, cfg.get("User")), sc.get("groups"),
                           pod_hostname(spec.get("hostname") or w.pname), labels, sc)
        return name, env, argv

    def start(self, w, r, pod):
        """Creates and starts one run of container r; returns (the attach client's Popen, the
        open log file, a description for the log). Raises Waiting."""
        from lk.kubelet import Waiting
        image = r.spec.get("image") or ""
        info = self.image_info(image) if image else None
        if info is None:
            raise Waiting("ErrImagePull", 'failed to pull and unpack image "%s": not in podman\'s '
                                          'local storage (%s); localkube\'s podman runtime never '
                                          'pulls: build it (scripts/images.sh) or `podman load` '
                                          'it' % (image, self.graphroot()))
        try:
            name, env, argv = self.create_args(w, r, pod, info)
        except ConfigError as e:
            raise Waiting("CreateContainerConfigError", str(e))
        rc, out, err = run_podman(argv, self.env, 120)
        if rc != 0 and "already in use" in err:
            self.remove(name)  # a leftover of an earlier kubelet with the same run number
            rc, out, err = run_podman(argv, self.env, 120)
        if rc != 0:
            raise Waiting("CreateContainerError", "podman create: %s" % (
                (err or out).strip().splitlines() or ["exit %d" % rc])[-1])
        cid = out.strip().splitlines()[-1] if out.strip() else ""
        if not re.match(r"^[0-9a-f]{64}$", cid):
            # (podman 4.3 prints no id with the passthrough log driver)
            rc, out, _ = self._run(["container", "inspect", "--format", "{{.Id}}", name])
            cid = out.strip() if rc == 0 else ""
        path = os.path.join(w.dir, "%s.log" % r.name)
        logf = open(path, "ab", buffering=0)
        r.log_path, r.log_offset = path, logf.tell()
        try:
            proc = subprocess.Popen([self.podman, "start", "--attach", name], env=self.env,
                                    stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, close_fds=True,
                                    start_new_session=True)
        except OSError as e:
            logf.close()
            self.remove(name)
            raise Waiting("RunContainerError", 'failed to start container "%s": %s' % (
                r.name, e))
        r.cname = name
        r.cid = cid
        digests = info.get("RepoDigests") or []
        r.image_id = digests[0] if digests else "sha256:%s" % info.get("Id", "")
        r.env = env
        r.mounts = []
        r.cwd = None
        return proc, logf, "%s (image %s)" % (name, image)

    def stop(self, r, grace):
        """Graceful stop in the background: the image's STOPSIGNAL, SIGKILL after grace."""
        if not r.cname:
            return
        t = max(0, int(math.ceil(grace)))
        threading.Thread(target=self._run, args=(["stop", "-t", str(t), r.cname], t + 60),
                         name="stop-" + r.cname, daemon=True).start()

    def kill(self, r):
        if r.cname:
            self._run(["kill", "-s", "KILL", r.cname], 30)

    def reaped(self, r, rc):
        """The run of r ended (its attach client exited with rc): (exit code, reason or None,
        message or None) from podman inspect; the container is removed."""
        name = r.cname
        code = rc if rc >= 0 else 128 - rc
        reason = message = None
        st = (self.inspect(name) or {}).get("State") if name else None
        if st and st.get("Running"):
            # the attach client went away, not the container: stop it now
            self._run(["kill", "-s", "KILL", name], 30)
            self._run(["wait", name], 30)
            st = (self.inspect(name) or {}).get("State") or st
        if st:
            if st.get("Status") in ("created", "configured", "initialized"):
                # it never started (runc could not exec the entrypoint, ...): the reason is in
                # the attach client's output, at the end of the log
                code, reason = 128, "StartError"
                message = self._start_error(r) or st.get("Error") or "the container did not start"
            else:
                code = int(st.get("ExitCode") or 0)
                if st.get("OOMKilled"):
                    reason = "OOMKilled"
                if st.get("Error"):
                    message = st["Error"]
        if name:
            self.remove(name)
        return code, reason, message

    def _start_error(self, r):
        try:
            with open(r.log_path, "rb") as f:
                f.seek(r.log_offset)
                text = f.read(65536).decode("utf-8", "replace")
        except (OSError, TypeError):
            return None
        errs = [x[len("Error: "):] for x in text.splitlines() if x.startswith("Error: ")]
        return errs[-1] if errs else None

    def exec_probe(self, w, r, cmd, timeout):
        """An exec probe: `podman exec`; the podman client's own start-up (about half a second)
        is allowed on top of timeoutSeconds."""
        if not r.cname:
            return False, "no container"
        try:
            p = subprocess.Popen([self.podman, "exec", r.cname] + list(cmd), env=self.env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            return False, str(e)
        try:
            _, err = p.communicate(timeout=timeout + 1.0)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return False, "command timed out after %ss" % timeout
        if p.returncode == 0:
            return True, ""
        msg = err.decode("utf-8", "replace").strip().splitlines()
        return False, "command exited with %d%s" % (p.returncode, ": " + msg[-1] if msg else "")

    def container_id(self, r):
        return "podman://%s" % r.cid if r.cid else None
