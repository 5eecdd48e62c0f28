"""localkube's process kubelet: runs the containers of pods bound to the simulated nodes as local
processes (ProcessRuntime, the default), or from their images with podman (`--runtime podman`,
lk/runtime_podman.py; what follows about commands, env and mount rewriting is the process
runtime's).

Per pod (a PodWorker thread, like the kubelet's pod workers):
* a unique loopback IP 127.0.X.Y (X >= 1, so never 127.0.0.1; hostNetwork pods get 127.0.0.1),
  released when the pod is gone;
* DIR/pods/<ns>_<pod>/ is the working directory; <container>.log gets stdout+stderr;
  volumes are materialised under DIR/pods/<ns>_<pod>/volumes/<name> (emptyDir, configMap,
  secret, downwardAPI, projected, persistentVolumeClaim -> DIR/pvc/<ns>_<claim>, hostPath = the
  path itself).  Processes cannot mount, so every argument / env value / workingDir that starts
  with a volumeMount's mountPath (also the value of a `--flag=PATH` argument) is rewritten to the
  local directory, and LOCALKUBE_MOUNT_<VOLUME> is set;
* init containers in order (native sidecars, restartPolicy: Always, keep running), then the
  containers, each in its own session / process group;
* image -> command from images.json (see README.md); a container `command` wins when its first
  word is an existing executable (absolute, or on PATH);
* env: the container's env (value, fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef)
  and envFrom, $(VAR) expansion as kube does, plus POD_IP and LOCALKUBE_* helpers;
* probes (startup, liveness, readiness; httpGet / tcpSocket / exec) with kube's timing fields;
* restarts per restartPolicy with kube's back-off (10 s doubling to 300 s, scaled by
  --backoff-scale), CrashLoopBackOff / ErrImagePull / ImagePullBackOff waiting reasons;
* pod status (phase, conditions, container statuses, IPs) through the status subresource;
* graceful deletion: SIGTERM to every process group, SIGKILL after the grace period, then
  DELETE gracePeriodSeconds=0.  preStop / postStart hooks are not run.
"""

import base64
import hashlib
import http.client
import json
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time

from lk import client as kc
from lk.client import ApiError, now_rfc3339
from lk.quantity import parse_quantity

log = logging.getLogger("lk.kubelet")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DEFAULT_IMAGES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "images.json")
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PASS_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "ASAN_OPTIONS",
            "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "TANDEM_BUILD_DIR", "PYTHONPATH",
            "PYTHONDONTWRITEBYTECODE", "TMPDIR")
BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0


def rfc3339(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def go_duration(sec):
    """time.Duration.String() for whole / sub-second values: 10s, 1m20s, 5m0s, 500ms."""
    if sec < 1:
        ms = int(round(sec * 1000))
        return "%dms" % ms if ms else "0s"
    s = int(round(sec))
    if s < 60:
        return "%ds" % s
    m, s = divmod(s, 60)
    if m < 60:
        return "%dm%ds" % (m, s)
    h, m = divmod(m, 60)
    return "%dh%dm%ds" % (h, m, s)


def expand(s, env):
    """k8s.io/kubernetes/third_party/forked/golang/expansion.Expand: $(VAR) -> value when
    defined, $$ -> $, anything else unchanged."""
    if not isinstance(s, str) or "$" not in s:
        return s
    out = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "$" and i + 1 < n:
            nx = s[i + 1]
            if nx == "$":
                out.append("$")
                i += 2
                continue
            if nx == "(":
                j = s.find(")", i + 2)
                if j >= 0:
                    name = s[i + 2:j]
                    out.append(env[name] if name in env else "$(" + name + ")")
                    i = j + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nx)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


_MOUNT_RX = {}


def _mount_regex(paths):
    rx = _MOUNT_RX.get(paths)
    if rx is None and paths not in _MOUNT_RX:
        alts = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True) if p != "/")
        rx = re.compile(r"(^|[\s=:,'\"(])(%s)(?=$|[/\s'\";):,])" % alts) if alts else None
        _MOUNT_RX[paths] = rx
    return rx


def env_name(volume):
    return "LOCALKUBE_MOUNT_" + re.sub(r"[^A-Za-z0-9]", "_", volume).upper()


def proc_start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
        rest = data[data.rindex(")") + 2:].split()
        return int(rest[19]), int(rest[2])  # starttime, pgrp
    except (OSError, ValueError, IndexError):
        return None


def kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_recorded(pid_dir, sig=signal.SIGKILL):
    """Kills the process groups recorded in pid files (pid + start time, so a recycled pid is
    never hit); returns how many groups were signalled."""
    n = 0
    try:
        names = os.listdir(pid_dir)
    except OSError:
        return 0
    for fn in names:
        if not fn.endswith(".pid"):
            continue
        path = os.path.join(pid_dir, fn)
        try:
            with open(path) as f:
                pid, start = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            continue
        # members of the group started no earlier than its leader
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            st = proc_start_time(int(p))
            if st is not None and st[1] == pid and st[0] >= start:
                if kill_group(pid, sig):
                    n += 1
                break
        try:
            os.unlink(path)
        except OSError:
            pass
    return n


# ---- images ---------------------------------------------------------------------------------


class ImageMap:
    """images.json: {"images": [{"image", "match": exact|prefix|name|repository|glob,
    "command": [...], "args": [...], "standIn": bool, "note": "..."}]}; ${VAR} in command/args
    is expanded from TANDEM_BUILD_DIR (default <repo>/build), TANDEM_SOURCE_DIR, LOCALKUBE_DIR
    and the environment."""

    def __init__(self, path=None, variables=None):
        self.path = path or DEFAULT_IMAGES
        self.vars = dict(os.environ)
        self.vars.setdefault("TANDEM_BUILD_DIR", os.path.join(REPO_ROOT, "build"))
        self.vars.setdefault("TANDEM_SOURCE_DIR", REPO_ROOT)
        self.vars.update(variables or {})
        self.entries = []
        try:
            with open(self.path) as f:
                doc = json.load(f)
            self.entries = list(doc.get("images") or [])
        except (OSError, ValueError) as e:
            log.error("images file %s: %s", self.path, e)

    @staticmethod
    def split(image):
        """(repository path without tag/digest, last path component)."""
        ref = image.split("@", 1)[0]
        last = ref.rsplit("/", 1)[-1]
        if ":" in last:
            ref = ref[:len(ref) - len(last)] + last.split(":", 1)[0]
        return ref, ref.rsplit("/", 1)[-1]

    def _sub(self, s):
        return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}",
                      lambda m: self.vars.get(m.group(1), m.group(2) or ""), s)

    def resolve(self, image):
        import fnmatch
        repo, name = self.split(image or "")
        for e in self.entries:
            pat = e.get("image", "")
            how = e.get("match", "name")
            ok = ((how == "exact" and image == pat) or
                  (how == "prefix" and image.startswith(pat)) or
                  (how == "name" and (name == pat or repo == pat)) or
                  (how == "repository" and repo == pat) or
                  (how == "glob" and fnmatch.fnmatchcase(image, pat)))
            if ok:
                return {"command": [self._sub(x) for x in e.get("command") or []],
                        "args": [self._sub(x) for x in e.get("args") or []],
                        "image": pat}
        return None


def find_executable(cmd, path_env, cwd):
    if not cmd:
        return None
    if "/" in cmd:
        p = cmd if os.path.isabs(cmd) else os.path.join(cwd, cmd)
        return p if os.path.isfile(p) and os.access(p, os.X_OK) else None
    return shutil.which(cmd, path=path_env)


# ---- pod IPs ------------------------------------------------------------------------------


class IPAllocator:
    """127.0.X.Y with X in 1..255, Y in 1..254, handed out round-robin (like host-local IPAM).

    Several localkube instances may run on one host (parallel tests), so every address in use is
    leased host-wide: a file named after the IP in `ipam_dir` (default
    /tmp/localkube-ipam-<uid>, or $LOCALKUBE_IPAM_DIR), holding the owner's pid and start time,
    written under an flock.  A lease whose owner process is gone is taken over."""

    def __init__(self, ipam_dir=None, owner=""):
        self.lock = threading.Lock()
        self.used = {}
        self.next = 0
        self.dir = ipam_dir or os.environ.get("LOCALKUBE_IPAM_DIR") or \
            os.path.join("/tmp", "localkube-ipam-%d" % os.getuid())
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        st = proc_start_time(os.getpid())
        self.me = "%d %d" % (os.getpid(), st[0] if st else 0)
        self.owner = owner

    @staticmethod
    def _ip(i):
        return "127.0.%d.%d" % (1 + i // 254, 1 + i % 254)

    @staticmethod
    def _index(ip):
        m = re.match(r"^127\.0\.(\d+)\.(\d+)$", ip or "")
        if not m:
            return None
        x, y = int(m.group(1)), int(m.group(2))
        if not (1 <= x <= 255 and 1 <= y <= 254):
            return None
        return (x - 1) * 254 + (y - 1)

    def _leased_elsewhere(self, ip):
        try:
            with open(os.path.join(self.dir, ip)) as f:
                words = f.read().split()
            pid, start = int(words[0]), int(words[1])
        except (OSError, ValueError, IndexError):
            return False
        if "%d %d" % (pid, start) == self.me:
            return False  # ours (a leftover of a pod we no longer track)
        st = proc_start_time(pid)
        return st is not None and st[0] == start

    def _take(self, ip, uid):
        tmp = os.path.join(self.dir, ".%s.%d" % (ip, os.getpid()))
        with open(tmp, "w") as f:
            f.write("%s %s %s\n" % (self.me, uid, self.owner))
        os.replace(tmp, os.path.join(self.dir, ip))
        self.used[ip] = uid
        return ip

    def allocate(self, uid, prefer=None):
        import fcntl
        with self.lock:
            for ip, owner in self.used.items():
                if owner == uid:
                    return ip
            with open(os.path.join(self.dir, ".lock"), "a") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                i = self._index(prefer)
                if i is not None and prefer not in self.used and \
                        not self._leased_elsewhere(prefer):
                    return self._take(prefer, uid)
                total = 255 * 254
                for k in range(total):
                    j = (self.next + k) % total
                    ip = self._ip(j)
                    if ip in self.used or self._leased_elsewhere(ip):
                        continue
                    self.next = (j + 1) % total
                    return self._take(ip, uid)
        raise RuntimeError("no free pod IP")

    def _drop(self, ip):
        path = os.path.join(self.dir, ip)
        try:
            with open(path) as f:
                mine = f.read().startswith(self.me + " ")
            if mine:
                os.unlink(path)
        except OSError:
            pass

    def release(self, uid):
        with self.lock:
            for ip, owner in list(self.used.items()):
                if owner == uid:
                    del self.used[ip]
                    self._drop(ip)

    def release_all(self):
        with self.lock:
            for ip in list(self.used):
                del self.used[ip]
                self._drop(ip)


# ---- errors that keep a container waiting ----------------------------------------------------


class Waiting(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


# ---- container runtimes ------------------------------------------------------------------------


class ProcessRuntime:
    """The default runtime: each container is a local process in its own session / process group
    (its image mapped to a command by images.json). lk/runtime_podman.py's PodmanRuntime is the
    other one; both have these methods:

    * start(worker, run, pod) -> (Popen, open log file, description): start one run; raises
      Waiting (ErrImagePull, CreateContainerConfigError, RunContainerError, ...);
    * stop(run, grace): ask it to stop (SIGTERM); kill(run): SIGKILL;
    * reaped(run, rc) -> (exit code, reason or None, message or None) once the Popen exited;
    * exec_probe(worker, run, argv, timeout) -> (ok, why); container_id(run);
    * cleanup(): remove what a crashed kubelet of this DIR left running."""

    name = "process"

    def __init__(self, kubelet):
        self.kl = kubelet

    def start(self, w, r, pod):
        c = r.spec
        image = c.get("image") or ""
        entry = w.kl.images.resolve(image)
        if entry is None:
            raise Waiting("ErrImagePull", 'failed to pull and unpack image "%s": localkube has no '
                                          'mapping for this image (add it to %s)' % (
                                              image, w.kl.images.path))
        env, mounts = w.build_env(pod, c)
        cwd = w.dir
        if c.get("workingDir"):
            cwd = w.rewrite(c["workingDir"], mounts)
            os.makedirs(cwd, exist_ok=True)
        image_cmd = entry["command"]
        if image_cmd and find_executable(image_cmd[0], env.get("PATH"), cwd) is None:
            raise Waiting("ErrImagePull", 'failed to pull and unpack image "%s": its stand-in '
                                          '%s does not exist (not built yet?)' % (
                                              image, image_cmd[0]))
        r.image_id = "localkube://%s@sha256:%s" % (entry["image"], hashlib.sha256(
            json.dumps(image_cmd).encode()).hexdigest())
        command = [expand(x, env) for x in c.get("command") or []]
        args = [expand(x, env) for x in c.get("args") or []]
        command = [w.rewrite(x, mounts) for x in command]
        args = [w.rewrite(x, mounts) for x in args]
        if command:
            if find_executable(command[0], env.get("PATH"), cwd) is not None:
                argv = command + args
            elif image_cmd:
                argv = image_cmd + command[1:] + args
            else:
                raise Waiting("RunContainerError", 'failed to start container "%s": exec: "%s": '
                                                   'executable file not found in $PATH' % (
                                                       r.name, command[0]))
        elif args:
            argv = image_cmd + args
        else:
            argv = image_cmd + entry["args"]
        if not argv:
            raise Waiting("RunContainerError", 'failed to start container "%s": no command '
                                               'specified' % r.name)
        exe = find_executable(argv[0], env.get("PATH"), cwd)
        if exe is None:
            raise Waiting("RunContainerError", 'failed to start container "%s": exec: "%s": '
                                               'executable file not found in $PATH' % (
                                                   r.name, argv[0]))
        logf = open(os.path.join(w.dir, "%s.log" % r.name), "ab", buffering=0)
        try:
            proc = subprocess.Popen([exe] + argv[1:], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT, close_fds=True,
                                    start_new_session=True)
        except OSError as e:
            logf.close()
            raise Waiting("RunContainerError", 'failed to start container "%s": %s' % (
                r.name, e))
        r.mounts = mounts
        r.env = env
        r.cwd = cwd
        return proc, logf, " ".join(argv)

    def stop(self, r, grace):
        kill_group(r.pid, signal.SIGTERM)

    def kill(self, r):
        kill_group(r.pid, signal.SIGKILL)

    def reaped(self, r, rc):
        kill_group(r.pid, signal.SIGKILL)  # the container's other processes go with it
        return (rc if rc >= 0 else 128 - rc), None, None

    def exec_probe(self, w, r, cmd, timeout):
        env = r.env
        exe = find_executable(cmd[0], (env or os.environ).get("PATH"), w.dir)
        if exe is None:
            return False, "exec: %r: executable file not found" % cmd[0]
        try:
            p = subprocess.Popen([exe] + cmd[1:], cwd=r.cwd or w.dir, env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            return False, str(e)
        try:
            rc = p.wait(timeout=timeout)
            return rc == 0, "command exited with %d" % rc
        except subprocess.TimeoutExpired:
            kill_group(p.pid, signal.SIGKILL)
            p.wait()
            return False, "command timed out after %ss" % timeout

    def container_id(self, r):
        return "localkube://%d" % r.pid if r.pid else None

    def cleanup(self):
        return kill_recorded(self.kl.pid_dir)


def make_runtime(name, kubelet):
    if name in (None, "", "process"):
        return ProcessRuntime(kubelet)
    if name == "podman":
        from lk.runtime_podman import PodmanRuntime
        return PodmanRuntime(kubelet)
    raise ValueError("unknown container runtime %r (process or podman)" % name)


# ---- probes ---------------------------------------------------------------------------------


class Prober(threading.Thread):
    """One probe of one container run (kube's prober worker)."""

    def __init__(self, worker, cr, kind, probe):
        super().__init__(name="probe-%s-%s-%s" % (kind, worker.name_short, cr.name), daemon=True)
        self.worker = worker
        self.cr = cr
        self.kind = kind
        self.p = probe
        self.stop_ev = threading.Event()
        self.successes = 0
        self.failures = 0
        self.run_id = cr.run_id

    def stop(self):
        self.stop_ev.set()

    def _int(self, k, d):
        v = self.p.get(k)
        return d if v is None else max(0, int(v))

    def run(self):
        period = max(1, self._int("periodSeconds", 10))
        timeout = max(1, self._int("timeoutSeconds", 1))
        fail_th = max(1, self._int("failureThreshold", 3))
        succ_th = max(1, self._int("successThreshold", 1))
        delay = self._int("initialDelaySeconds", 0)
        if self.stop_ev.wait(max(0.0, self.cr.started_at + delay - time.time())):
            return
        while not self.stop_ev.is_set():
            if self.cr.run_id != self.run_id:
                return
            if self.kind != "startup" and not self.cr.started:
                if self.stop_ev.wait(min(period, 0.5)):
                    return
                continue
            try:
                ok, why = self.worker.run_probe(self.cr, self.p, timeout)
            except Exception as e:  # a probe bug counts as a failure
                ok, why = False, "probe error: %s" % e
            if self.stop_ev.is_set() or self.cr.run_id != self.run_id:
                return
            if ok:
                self.successes += 1
                self.failures = 0
            else:
                self.failures += 1
                self.successes = 0
            changed = False
            if self.kind == "readiness":
                if ok and self.successes >= succ_th and not self.cr.probe_ready:
                    self.cr.probe_ready = True
                    changed = True
                elif not ok and self.failures >= fail_th and self.cr.probe_ready:
                    self.cr.probe_ready = False
                    changed = True
            elif self.kind == "startup":
                if ok:
                    self.cr.started = True
                    self.worker.wake()
                    return
                if self.failures >= fail_th:
                    self.worker.request_kill(self.cr, "startup", self.run_id)
                    return
            elif self.kind == "liveness":
                if self.failures >= fail_th:
                    self.worker.request_kill(self.cr, "liveness", self.run_id)
                    return
            if changed:
                self.worker.wake()
            if not ok:
                lvl = logging.INFO if self.failures == fail_th else logging.DEBUG
                log.log(lvl, "pod %s: %s probe of %s failed (%d in a row): %s",
                        self.worker.name_short, self.kind, self.cr.name, self.failures, why)
            self.stop_ev.wait(period)


# ---- containers -----------------------------------------------------------------------------


class ContainerRun:
    """State of one container (across restarts)."""

    def __init__(self, spec, kind):
        self.spec = spec
        self.name = spec.get("name")
        self.kind = kind  # "init", "sidecar", "app"
        self.proc = None
        self.pid = None
        self.run_id = 0
        self.started_at = 0.0
        self.started = False
        self.probe_ready = False
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.restart_count = 0
        self.ever_ran = False
        self.done = False  # init container finished successfully
        self.exit_code = None
        self.backoff = None
        self.backoff_at = 0.0
        self.retry_at = 0.0
        self.pull_backoff = None
        self.kill_reason = None
        self.kill_deadline = None
        self.probers = []
        self.log_f = None
        self.image_id = ""
        self.pidfile = None
        self.terms = []
        self.finished_at = 0.0
        self.mounts = []
        self.env = None
        self.cwd = None
        self.cname = None  # podman runtime: the container's name, id, log file and offset
        self.cid = None
        self.log_path = None
        self.log_offset = 0

    @property
    def running(self):
        return self.proc is not None

    @property
    def ready(self):
        if not self.running or not self.started:
            return False
        if self.spec.get("readinessProbe"):
            return self.probe_ready
        return True


class PodWorker(threading.Thread):
    """Runs one pod (one uid) from first sight until it is gone from the API server."""

    TICK = 0.5

    def __init__(self, kubelet, pod):
        self.kl = kubelet
        self.pod = pod
        m = pod["metadata"]
        self.uid = m["uid"]
        self.ns = m["namespace"]
        self.pname = m["name"]
        self.name_short = "%s/%s" % (self.ns, self.pname)
        super().__init__(name="pod-" + self.name_short, daemon=True)
        self.cond = threading.Condition()
        self.dirty = True
        self.api_deleted = False
        self.shutdown_grace = None
        self.dir = os.path.join(kubelet.dir, "pods", "%s_%s" % (self.ns, self.pname))
        self.ip = None
        self.start_time = None
        self.conds = {}
        self.last_written = None
        self.volumes = {}
        self.vol_fingerprint = None
        self.vol_error = None
        self.written_files = {}
        self.terminal_phase = None
        self.init_failed = False
        spec = pod.get("spec") or {}
        self.runs = []
        for c in spec.get("initContainers") or []:
            self.runs.append(ContainerRun(c, "sidecar" if c.get("restartPolicy") == "Always"
                                          else "init"))
        for c in spec.get("containers") or []:
            self.runs.append(ContainerRun(c, "app"))
        self.events = kubelet.events
        self.finished = False

    # ---- notifications from other threads ---------------------------------------------

    def update(self, pod):
        with self.cond:
            self.pod = pod
            self.dirty = True
            self.cond.notify()

    def deleted(self):
        with self.cond:
            self.api_deleted = True
            self.dirty = True
            self.cond.notify()

    def stop_for_shutdown(self, grace):
        with self.cond:
            self.shutdown_grace = grace
            self.dirty = True
            self.cond.notify()

    def wake(self):
        with self.cond:
            self.dirty = True
            self.cond.notify()

    def request_kill(self, cr, reason, run_id):
        with self.cond:
            if cr.run_id == run_id and cr.running and cr.kill_reason is None:
                cr.kill_reason = reason
            self.dirty = True
            self.cond.notify()

    # ---- main loop ----------------------------------------------------------------------

    def run(self):
        try:
            self._loop()
        except Exception:
            log.exception("pod worker %s crashed", self.name_short)
            self._kill_all(0)
        finally:
            self.finished = True
            self._cleanup()
            self.kl.worker_done(self)

    def _loop(self):
        pod = self.pod
        if kc.is_pod_terminal(pod) and not self.runs_started():
            # a finished pod from an earlier kubelet: only its deletion is left to do
            self.terminal_phase = pod["status"]["phase"]
        else:
            self._setup(pod)
        while True:
            with self.cond:
                if not self.dirty:
                    self.cond.wait(self.TICK)
                self.dirty = False
                pod = self.pod
                api_deleted = self.api_deleted
                shutdown = self.shutdown_grace
            if shutdown is not None:
                self._kill_all(self._grace(pod, shutdown))
                return
            if api_deleted or pod["metadata"].get("deletionTimestamp"):
                self._terminate(pod, api_deleted)
                return
            try:
                if self.terminal_phase is None:
                    self._sync(pod)
                self._write_status(pod)
            except (ApiError, ConnectionError) as e:
                log.warning("pod %s: %s", self.name_short, e)
                time.sleep(0.5)
            except Exception:
                log.exception("pod %s: sync failed", self.name_short)
                time.sleep(1.0)

    def runs_started(self):
        return any(r.ever_ran for r in self.runs)

    def _setup(self, pod):
        os.makedirs(self.dir, exist_ok=True)
        uid_file = os.path.join(self.dir, ".uid")
        try:
            with open(uid_file) as f:
                old = f.read().strip()
        except OSError:
            old = None
        if old != self.uid:
            # a new pod with a reused name starts from empty volumes and logs
            shutil.rmtree(os.path.join(self.dir, "volumes"), ignore_errors=True)
            shutil.rmtree(os.path.join(self.dir, "serviceaccount"), ignore_errors=True)
            for fn in os.listdir(self.dir):
                if fn.endswith(".log"):
                    try:
                        os.unlink(os.path.join(self.dir, fn))
                    except OSError:
                        pass
            with open(uid_file, "w") as f:
                f.write(self.uid)
        st = pod.get("status") or {}
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork"):
            self.ip = "127.0.0.1"
        else:
            self.ip = self.kl.ips.allocate(self.uid, st.get("podIP"))
        self.start_time = st.get("startTime") or now_rfc3339()
        self.conds["PodScheduled"] = ("True", None, None, now_rfc3339())
        log.info("pod %s: starting on %s with IP %s", self.name_short, spec.get("nodeName"),
                 self.ip)

    def _grace(self, pod, cap=None):
        m = pod.get("metadata") or {}
        g = m.get("deletionGracePeriodSeconds")
        if g is None:
            g = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        if g is None:
            g = 30
        g = max(0.0, float(g))
        if cap is not None:
            g = min(g, cap)
        return g

    # ---- syncing ----------------------------------------------------------------------

    def _sync(self, pod):
        spec = pod.get("spec") or {}
        policy = spec.get("restartPolicy") or "Always"
        now = time.time()
        # 1. volumes (kept in sync with their sources)
        try:
            self.sync_volumes(pod)
            self.vol_error = None
        except Waiting as w:
            if self.vol_error != w.message:
                self.events.event(pod, "Warning", "FailedMount", w.message)
            self.vol_error = w.message
            for r in self.runs:
                if not r.running and not r.ever_ran:
                    r.state = {"waiting": {"reason": "ContainerCreating"}}
            if not self.volumes:
                return
        # 2. reap exited processes, handle kill requests
        for r in self.runs:
            self._check_process(r, now)
        # 3. init containers, in order
        init_pending = False
        for r in self.runs:
            if r.kind == "app":
                continue
            if r.kind == "init" and r.done:
                continue
            if r.kind == "sidecar" and r.running and r.started:
                continue
            if r.kind == "sidecar" and r.running:
                init_pending = True
                break
            if self.init_failed:
                init_pending = True
                break
            if not r.running:
                if r.ever_ran and r.kind == "init" and r.exit_code not in (0, None) and \
                        policy == "Never":
                    self.init_failed = True
                    init_pending = True
                    break
                self._maybe_start(r, pod, now)
            init_pending = True
            break
        if self.init_failed:
            self._finish_terminal(pod, "Failed")
            return
        if init_pending:
            for r in self.runs:
                if r.kind == "app" and not r.ever_ran:
                    r.state = {"waiting": {"reason": "PodInitializing"}}
            return
        # 4. app containers
        apps = [r for r in self.runs if r.kind == "app"]
        for r in apps:
            if r.running:
                continue
            if not r.ever_ran:
                self._maybe_start(r, pod, now)
                continue
            if policy == "Always" or (policy == "OnFailure" and r.exit_code != 0):
                self._maybe_start(r, pod, now)
        # 5. a pod whose containers will never run again is done
        if policy != "Always" and all(r.ever_ran and not r.running for r in apps):
            failed = any(r.exit_code != 0 for r in apps)
            if policy == "Never" or not failed:
                self._finish_terminal(pod, "Failed" if failed else "Succeeded")

    def _finish_terminal(self, pod, phase):
        self.terminal_phase = phase
        # sidecars and anything else still running are stopped
        self._kill_all(self._grace(pod, 30))
        log.info("pod %s: %s", self.name_short, phase)

    def _check_process(self, r, now):
        if r.proc is None:
            return
        if r.kill_reason and r.kill_deadline is None:
            spec = r.spec
            probe = spec.get({"liveness": "livenessProbe", "startup": "startupProbe"}.get(
                r.kill_reason, ""), {}) or {}
            grace = probe.get("terminationGracePeriodSeconds")
            if grace is None:
                grace = self._grace(self.pod)
            msg = "Container %s failed %s probe, will be restarted" % (r.name, r.kill_reason)
            log.info("pod %s: %s", self.name_short, msg)
            self.events.event(self.pod, "Normal", "Killing", msg)
            self.kl.runtime.stop(r, float(grace))
            r.kill_deadline = now + float(grace)
        if r.kill_deadline is not None and now >= r.kill_deadline:
            self.kl.runtime.kill(r)
        rc = r.proc.poll()
        if rc is None:
            return
        self._reaped(r, rc)

    def _reaped(self, r, rc):
        finished = time.time()
        for p in r.probers:
            p.stop()
        r.probers = []
        code, reason, message = self.kl.runtime.reaped(r, rc)
        term = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
                "startedAt": rfc3339(r.started_at), "finishedAt": rfc3339(finished),
                "containerID": self.kl.runtime.container_id(r)}
        if message:
            term["message"] = message
        if rc < 0 and self.kl.runtime.name == "process":
            term["signal"] = -rc
        r.state = {"terminated": term}
        r.terms = (r.terms + [term])[-2:]
        r.exit_code = code
        r.finished_at = finished
        r.proc = None
        r.started = False
        r.probe_ready = False
        r.kill_deadline = None
        r.kill_reason = None
        if r.log_f is not None:
            r.log_f.close()
            r.log_f = None
        if r.pidfile:
            try:
                os.unlink(r.pidfile)
            except OSError:
                pass
        if r.kind == "init" and code == 0:
            r.done = True
        log.info("pod %s: container %s exited with %d", self.name_short, r.name, code)

    def _backoff_wait(self, r, now):
        """Seconds left in the crash back-off for restarting r (0: go)."""
        scale = self.kl.backoff_scale
        if r.backoff is not None and now - r.backoff_at > 2 * BACKOFF_MAX * scale:
            r.backoff = None  # ran long enough: reset (kube: 2x the max back-off)
        if r.backoff is None:
            return 0.0
        fin = r.finished_at or now
        return max(0.0, fin + r.backoff - now)

    def _maybe_start(self, r, pod, now):
        if r.ever_ran:
            left = self._backoff_wait(r, now)
            if left > 0:
                msg = "back-off %s restarting failed container=%s pod=%s_%s(%s)" % (
                    go_duration(r.backoff), r.name, self.pname, self.ns, self.uid)
                if r.state.get("waiting", {}).get("reason") != "CrashLoopBackOff":
                    self.events.event(pod, "Warning", "BackOff",
                                      "Back-off restarting failed container %s in pod %s_%s(%s)"
                                      % (r.name, self.pname, self.ns, self.uid))
                r.state = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
                return
        if r.retry_at > now:
            return
        try:
            self._start(r, pod)
        except Waiting as w:
            if w.reason in ("ErrImagePull", "ImagePullBackOff"):
                scale = self.kl.backoff_scale
                cur = r.state.get("waiting", {}).get("reason")
                if cur in ("ErrImagePull", "ImagePullBackOff"):
                    r.pull_backoff = min((r.pull_backoff or BACKOFF_INITIAL * scale) * 2,
                                         BACKOFF_MAX * scale)
                    r.state = {"waiting": {"reason": "ImagePullBackOff",
                                           "message": 'Back-off pulling image "%s": %s' % (
                                               r.spec.get("image"), w.message)}}
                else:
                    r.pull_backoff = BACKOFF_INITIAL * scale
                    r.state = {"waiting": {"reason": "ErrImagePull", "message": w.message}}
                    self.events.event(pod, "Warning", "Failed", "Failed to pull image \"%s\": %s"
                                      % (r.spec.get("image"), w.message))
                r.retry_at = now + r.pull_backoff
            else:
                if r.state.get("waiting", {}).get("message") != w.message:
                    self.events.event(pod, "Warning", "Failed", "Error: %s" % w.message)
                r.state = {"waiting": {"reason": w.reason, "message": w.message}}
                r.retry_at = now + 1.0

    def _start(self, r, pod):
        c = r.spec
        proc, logf, desc = self.kl.runtime.start(self, r, pod)
        now = time.time()
        if r.ever_ran:
            r.restart_count += 1
            scale = self.kl.backoff_scale
            r.backoff = BACKOFF_INITIAL * scale if r.backoff is None else min(
                r.backoff * 2, BACKOFF_MAX * scale)
            r.backoff_at = now
        r.proc = proc
        r.pid = proc.pid
        r.log_f = logf
        r.run_id += 1
        r.ever_ran = True
        r.started_at = now
        r.exit_code = None
        r.pull_backoff = None
        r.retry_at = 0.0
        r.state = {"running": {"startedAt": rfc3339(now)}}
        r.started = not c.get("startupProbe")
        r.probe_ready = False
        st = proc_start_time(proc.pid)
        r.pidfile = os.path.join(self.kl.pid_dir, "%s_%s.pid" % (self.uid, r.name))
        try:
            with open(r.pidfile, "w") as f:
                f.write("%d %d\n" % (proc.pid, st[0] if st else 0))
        except OSError:
            r.pidfile = None
        threading.Thread(target=self._waiter, args=(proc,), name="wait-%d" % proc.pid,
                         daemon=True).start()
        for kind, field in (("startup", "startupProbe"), ("liveness", "livenessProbe"),
                            ("readiness", "readinessProbe")):
            if c.get(field):
                pr = Prober(self, r, kind, c[field])
                r.probers.append(pr)
                pr.start()
        log.info("pod %s: started container %s (pid %d): %s", self.name_short, r.name, proc.pid,
                 desc)
        self.events.event(pod, "Normal", "Started", "Started container %s" % r.name)

    def _waiter(self, proc):
        try:
            proc.wait()
        except Exception:
            pass
        self.wake()

    # ---- environment, volumes --------------------------------------------------------

    def _lookup(self, res, name):
        inf = self.kl.cms if res is kc.CONFIGMAPS else self.kl.secrets
        o = inf.get(self.ns, name) if inf.synced else None
        if o is None:
            try:
                o = self.kl.client.get_or_none(res, name, self.ns)
            except (ApiError, ConnectionError):
                o = None
        return o

    def _data(self, res, obj):
        out = {}
        if obj is None:
            return out
        if res is kc.SECRETS:
            for k, v in (obj.get("data") or {}).items():
                try:
                    out[k] = base64.b64decode(v or "")
                except (ValueError, TypeError):
                    out[k] = b""
            for k, v in (obj.get("stringData") or {}).items():
                out[k] = v.encode("utf-8")
        else:
            for k, v in (obj.get("data") or {}).items():
                out[k] = (v or "").encode("utf-8")
            for k, v in (obj.get("binaryData") or {}).items():
                try:
                    out[k] = base64.b64decode(v or "")
                except (ValueError, TypeError):
                    out[k] = b""
        return out

    def field_ref(self, pod, path):
        m = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        mm = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path or "")
        if mm:
            return (m.get(mm.group(1)) or {}).get(mm.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            d = m.get(path.split(".")[1]) or {}
            return "\n".join("%s=%s" % (k, json.dumps(d[k])) for k in sorted(d))
        return {
            "metadata.name": m.get("name", ""), "metadata.namespace": m.get("namespace", ""),
            "metadata.uid": m.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
            "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
            "status.podIP": self.ip or "", "status.podIPs": self.ip or "",
        }.get(path, "")

    def resource_ref(self, pod, ref, default_container=None):
        cname = ref.get("containerName") or default_container
        c = None
        for x in ((pod.get("spec") or {}).get("containers") or []) + (
                (pod.get("spec") or {}).get("initContainers") or []):
            if x.get("name") == cname:
                c = x
        res = ref.get("resource", "")
        kind, _, rname = res.partition(".")
        val = ((c or {}).get("resources") or {}).get(kind, {}).get(rname)
        if val is None and kind == "requests":
            val = ((c or {}).get("resources") or {}).get("limits", {}).get(rname)
            if val is None:
                val = "0"
        if val is None:  # an unset limit is the node's allocatable
            node = self.kl.ctx.nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            val = (((node or {}).get("status") or {}).get("allocatable") or {}).get(rname, "0")
        divisor = ref.get("divisor") or "1"
        try:
            q = parse_quantity(val)
            d = parse_quantity(divisor)
            import math
            return str(int(math.ceil(q / d))) if d else "0"
        except (ValueError, ZeroDivisionError):
            return "0"

    def build_env(self, pod, c, container=False):
        """(env, mounts) of container c. container=True (the podman runtime): no host variables
        (PATH, HOME, ... come from the image), no LOCALKUBE_*_DIR / LOCALKUBE_MOUNT_* and no
        path rewriting (volumes are mounted at their mountPath)."""
        spec = pod.get("spec") or {}
        if container:
            base = {}
        else:
            base = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
            base.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
            base["HOME"] = self.dir
            base["HOSTNAME"] = spec.get("hostname") or self.pname
        base["POD_IP"] = self.ip or ""
        base["LOCALKUBE_POD_IP"] = self.ip or ""
        base["LOCALKUBE_POD_NAME"] = self.pname
        base["LOCALKUBE_POD_NAMESPACE"] = self.ns
        base["LOCALKUBE_POD_UID"] = self.uid
        base["LOCALKUBE_NODE_NAME"] = spec.get("nodeName", "")
        if not container:
            base["LOCALKUBE_POD_DIR"] = self.dir
            base["LOCALKUBE_DIR"] = self.kl.dir
        base["LOCALKUBE_SERVER"] = self.kl.ctx.server
        kcfg = os.path.join(self.kl.dir, "kubeconfig")
        if os.path.exists(kcfg):
            base["KUBECONFIG"] = kcfg
        mounts = [] if container else self.mounts_for(c)
        if not container:
            for vname, path in sorted(self.volumes.items()):
                base[env_name(vname)] = path
        env = dict(base)
        for ef in c.get("envFrom") or []:
            prefix = ef.get("prefix") or ""
            for kind, res in (("configMapRef", kc.CONFIGMAPS), ("secretRef", kc.SECRETS)):
                ref = ef.get(kind)
                if not ref:
                    continue
                obj = self._lookup(res, ref.get("name"))
                if obj is None:
                    if ref.get("optional"):
                        continue
                    raise Waiting("CreateContainerConfigError", '%s "%s" not found' % (
                        "configmap" if res is kc.CONFIGMAPS else "secret", ref.get("name")))
                for k, v in self._data(res, obj).items():
                    if re.match(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", prefix + k):
                        env[prefix + k] = v.decode("utf-8", "replace")
        for e in c.get("env") or []:
            name = e.get("name")
            if not name:
                continue
            if "valueFrom" not in e:
                env[name] = expand(e.get("value", ""), env)
                continue
            vf = e.get("valueFrom") or {}
            if vf.get("fieldRef"):
                env[name] = self.field_ref(pod, vf["fieldRef"].get("fieldPath"))
            elif vf.get("resourceFieldRef"):
                env[name] = self.resource_ref(pod, vf["resourceFieldRef"], c.get("name"))
            elif vf.get("configMapKeyRef") or vf.get("secretKeyRef"):
                isc = bool(vf.get("configMapKeyRef"))
                ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef")
                res = kc.CONFIGMAPS if isc else kc.SECRETS
                obj = self._lookup(res, ref.get("name"))
                data = self._data(res, obj)
                if obj is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        continue
                    if obj is None:
                        raise Waiting("CreateContainerConfigError", '%s "%s" not found' % (
                            "configmap" if isc else "secret", ref.get("name")))
                    raise Waiting("CreateContainerConfigError", "couldn't find key %s in %s "
                                  "%s/%s" % (ref.get("key"), "ConfigMap" if isc else "Secret",
                                             self.ns, ref.get("name")))
                env[name] = data[ref["key"]].decode("utf-8", "replace")
        for k in list(env):
            if k not in base or env[k] != base[k]:
                env[k] = self.rewrite(env[k], mounts)
        return env, mounts

    def mounts_for(self, c):
        out = []
        for vm in c.get("volumeMounts") or []:
            local = self.volumes.get(vm.get("name"))
            mp = vm.get("mountPath")
            if local is None or not mp:
                continue
            if vm.get("subPath"):
                local = os.path.join(local, vm["subPath"])
                if not os.path.exists(local):
                    os.makedirs(local, exist_ok=True)
            out.append((mp.rstrip("/") or "/", local))
        sa = self.volumes.get("\0sa")
        if sa and not any(mp == SA_MOUNT for mp, _ in out):
            out.append((SA_MOUNT, sa))
        out.sort(key=lambda x: -len(x[0]))
        return out

    @staticmethod
    def rewrite(value, mounts):
        """Paths under a mountPath -> the same paths under the local volume directory.

        A mountPath is replaced where it starts a path: at the start of the value or after a
        space, '=', ':', ',', a quote or '(' (so `--flag=/etc/app/x`, `sh -c 'cat /etc/app/x'`
        and `A=/x:/etc/app` work), and where it ends one (end, '/', space, quote, ';', ')',
        ':', ',')."""
        if not isinstance(value, str) or not mounts:
            return value
        rx = _mount_regex(tuple(mp for mp, _ in mounts))
        if rx is None:
            return value
        local = dict(mounts)
        return rx.sub(lambda m: m.group(1) + local[m.group(2)], value)

    def _write_files(self, vname, dirpath, files, default_mode):
        """files: {relative path: (bytes, mode or None)}; removes files written earlier that
        are gone now."""
        os.makedirs(dirpath, exist_ok=True)
        old = self.written_files.get(vname, set())
        for rel, (data, mode) in files.items():
            p = os.path.join(dirpath, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            cur = None
            try:
                with open(p, "rb") as f:
                    cur = f.read()
            except OSError:
                pass
            if cur != data:
                tmp = p + ".lk-tmp"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, p)
            m = mode if mode is not None else default_mode
            if m is not None:
                try:
                    os.chmod(p, int(m) & 0o777)
                except OSError:
                    pass
        for rel in old - set(files):
            try:
                os.unlink(os.path.join(dirpath, rel))
            except OSError:
                pass
        self.written_files[vname] = set(files)

    def _keyed_files(self, res, src, kind_name):
        obj = self._lookup(res, src.get("name"))
        if obj is None:
            if src.get("optional"):
                return {}
            raise Waiting("ContainerCreating", 'MountVolume.SetUp failed: %s "%s" not found' % (
                kind_name, src.get("name")))
        data = self._data(res, obj)
        files = {}
        if src.get("items"):
            for it in src["items"]:
                if it.get("key") not in data:
                    if src.get("optional"):
                        continue
                    raise Waiting("ContainerCreating", "MountVolume.SetUp failed: configmap "
                                  "references non-existent config key: %s" % it.get("key"))
                files[it.get("path") or it["key"]] = (data[it["key"]], it.get("mode"))
        else:
            for k, v in data.items():
                files[k] = (v, None)
        return files

    def _downward_files(self, pod, items):
        files = {}
        for it in items or []:
            if it.get("fieldRef"):
                v = self.field_ref(pod, it["fieldRef"].get("fieldPath"))
            elif it.get("resourceFieldRef"):
                v = self.resource_ref(pod, it["resourceFieldRef"])
            else:
                continue
            files[it.get("path")] = (v.encode("utf-8"), it.get("mode"))
        return files

    def sync_volumes(self, pod):
        spec = pod.get("spec") or {}
        fp = []
        for v in spec.get("volumes") or []:
            for k, res in (("configMap", kc.CONFIGMAPS), ("secret", kc.SECRETS)):
                if v.get(k):
                    name = v[k].get("name") or v[k].get("secretName")
                    o = self._lookup(res, name) if name else None
                    fp.append((v.get("name"), k, name, (o or {}).get("metadata", {}).get(
                        "resourceVersion")))
            for src in ((v.get("projected") or {}).get("sources") or []):
                for k, res in (("configMap", kc.CONFIGMAPS), ("secret", kc.SECRETS)):
                    if src.get(k):
                        o = self._lookup(res, src[k].get("name"))
                        fp.append((v.get("name"), k, src[k].get("name"),
                                   (o or {}).get("metadata", {}).get("resourceVersion")))
        md_ = pod.get("metadata") or {}
        fp.append(("meta", json.dumps([md_.get("labels"), md_.get("annotations"), self.ip],
                                      sort_keys=True)))
        if fp == self.vol_fingerprint and self.volumes:
            return
        vols = {}
        base = os.path.join(self.dir, "volumes")
        for v in spec.get("volumes") or []:
            name = v.get("name")
            d = os.path.join(base, name)
            if v.get("hostPath"):
                hp = v["hostPath"]
                path = hp.get("path")
                if hp.get("type") in ("DirectoryOrCreate",) and not os.path.exists(path):
                    os.makedirs(path, exist_ok=True)
                elif hp.get("type") == "FileOrCreate" and not os.path.exists(path):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                vols[name] = path
            elif v.get("persistentVolumeClaim"):
                claim = v["persistentVolumeClaim"].get("claimName")
                p = os.path.join(self.kl.dir, "pvc", "%s_%s" % (self.ns, claim))
                os.makedirs(p, exist_ok=True)
                vols[name] = p
            elif v.get("configMap"):
                src = v["configMap"]
                self._write_files(name, d, self._keyed_files(kc.CONFIGMAPS, src, "configmap"),
                                  src.get("defaultMode", 0o644))
                vols[name] = d
            elif v.get("secret"):
                src = dict(v["secret"])
                src["name"] = src.get("secretName")
                self._write_files(name, d, self._keyed_files(kc.SECRETS, src, "secret"),
                                  src.get("defaultMode", 0o644))
                vols[name] = d
            elif v.get("downwardAPI"):
                src = v["downwardAPI"]
                self._write_files(name, d, self._downward_files(pod, src.get("items")),
                                  src.get("defaultMode", 0o644))
                vols[name] = d
            elif v.get("projected"):
                files = {}
                for s in v["projected"].get("sources") or []:
                    if s.get("configMap"):
                        files.update(self._keyed_files(kc.CONFIGMAPS, s["configMap"],
                                                       "configmap"))
                    elif s.get("secret"):
                        files.update(self._keyed_files(kc.SECRETS, s["secret"], "secret"))
                    elif s.get("downwardAPI"):
                        files.update(self._downward_files(pod, s["downwardAPI"].get("items")))
                    elif s.get("serviceAccountToken"):
                        files[s["serviceAccountToken"].get("path", "token")] = (
                            self._token(pod), None)
                self._write_files(name, d, files, v["projected"].get("defaultMode", 0o644))
                vols[name] = d
            else:
                # emptyDir, and anything we cannot emulate, is a plain directory
                if "emptyDir" not in v and name not in self.volumes:
                    log.warning("pod %s: volume %s: unsupported type, using an empty "
                                "directory", self.name_short, name)
                os.makedirs(d, exist_ok=True)
                vols[name] = d
        if spec.get("automountServiceAccountToken", True) is not False:
            d = os.path.join(self.dir, "serviceaccount")
            self._write_files("\0sa", d, {"token": (self._token(pod), None),
                                          "namespace": (self.ns.encode(), None),
                                          "ca.crt": (b"", None)}, 0o644)
            vols["\0sa"] = d
        self.volumes = vols
        self.vol_fingerprint = fp

    def _token(self, pod):
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        return ("localkube-token.%s.%s" % (self.ns, sa)).encode()

    # ---- probes ------------------------------------------------------------------------

    def run_probe(self, r, probe, timeout):
        host_default = self.ip or "127.0.0.1"
        if probe.get("httpGet"):
            hg = probe["httpGet"]
            port = self._port(r, hg.get("port"))
            host = hg.get("host") or host_default
            scheme = (hg.get("scheme") or "HTTP").upper()
            if scheme == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout)
            headers = {"User-Agent": "kube-probe/1.32", "Accept": "*/*"}
            for h in hg.get("httpHeaders") or []:
                headers[h.get("name")] = h.get("value", "")
            try:
                conn.request("GET", hg.get("path") or "/", headers=headers)
                resp = conn.getresponse()
                resp.read(10240)
                return 200 <= resp.status < 400, "HTTP probe failed with statuscode: %d" % (
                    resp.status)
            except (OSError, http.client.HTTPException) as e:
                return False, 'Get "%s://%s:%s%s": %s' % (scheme.lower(), host, port,
                                                          hg.get("path") or "/", e)
            finally:
                conn.close()
        if probe.get("tcpSocket"):
            ts = probe["tcpSocket"]
            try:
                s = socket.create_connection((ts.get("host") or host_default,
                                              self._port(r, ts.get("port"))), timeout=timeout)
                s.close()
                return True, ""
            except OSError as e:
                return False, "dial tcp: %s" % e
        if probe.get("exec"):
            mounts = r.mounts or []
            cmd = [self.rewrite(x, mounts) for x in probe["exec"].get("command") or []]
            if not cmd:
                return False, "no command"
            return self.kl.runtime.exec_probe(self, r, cmd, timeout)
        if probe.get("grpc"):
            return True, ""  # not emulated: treated as passing (README)
        return False, "no probe handler"

    @staticmethod
    def _port(r, port):
        if isinstance(port, int):
            return port
        if isinstance(port, str) and port.isdigit():
            return int(port)
        for p in r.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p.get("containerPort"))
        raise ValueError("unknown port %r" % port)

    # ---- termination -------------------------------------------------------------------

    def _kill_all(self, grace):
        running = [r for r in self.runs if r.running]
        for r in self.runs:
            for p in r.probers:
                p.stop()
        if not running:
            return
        for r in running:
            self.kl.runtime.stop(r, grace)
        deadline = time.time() + grace
        while time.time() < deadline:
            if all(r.proc.poll() is not None for r in running):
                break
            time.sleep(0.05)
        for r in running:
            if r.proc.poll() is None:
                log.info("pod %s: container %s did not stop in %.0fs: SIGKILL", self.name_short,
                         r.name, grace)
                self.kl.runtime.kill(r)
        for r in running:
            try:
                rc = r.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = -9
            self._reaped(r, rc)

    def _terminate(self, pod, api_deleted):
        grace = self._grace(pod, 2.0 if api_deleted else None)
        was_running = any(r.running for r in self.runs)
        if was_running:
            self.events.event(pod, "Normal", "Killing", "Stopping container %s" % ", ".join(
                r.name for r in self.runs if r.running))
        self._kill_all(grace)
        if api_deleted:
            return
        if was_running or self.terminal_phase is None:
            apps = [r for r in self.runs if r.kind == "app"]
            ran = [r for r in apps if r.ever_ran]
            ok = ran and all(r.exit_code == 0 for r in ran) and len(ran) == len(apps)
            self.terminal_phase = self.terminal_phase or ("Succeeded" if ok else "Failed")
            try:
                self._write_status(pod)
            except (ApiError, ConnectionError) as e:
                log.debug("pod %s: final status: %s", self.name_short, e)
        for _ in range(5):
            try:
                self.kl.client.delete(kc.PODS, self.pname, self.ns, grace_period_seconds=0,
                                      preconditions={"uid": self.uid})
                break
            except ApiError as e:
                if e.code in (404, 409):
                    break
                log.warning("pod %s: delete: %s", self.name_short, e)
                time.sleep(0.5)
            except ConnectionError as e:
                log.warning("pod %s: delete: %s", self.name_short, e)
                time.sleep(0.5)
        log.info("pod %s: terminated and removed", self.name_short)

    def _cleanup(self):
        for r in self.runs:
            if r.log_f is not None:
                r.log_f.close()
                r.log_f = None
            if r.pidfile:
                try:
                    os.unlink(r.pidfile)
                except OSError:
                    pass
        if self.ip and self.ip != "127.0.0.1":
            self.kl.ips.release(self.uid)

    # ---- status --------------------------------------------------------------------------

    def _cond(self, ctype, status, reason=None, message=None):
        cur = self.conds.get(ctype)
        if cur is not None and cur[0] == status and cur[1] == reason and cur[2] == message:
            return
        ltt = cur[3] if cur is not None and cur[0] == status else now_rfc3339()
        self.conds[ctype] = (status, reason, message, ltt)

    def _container_status(self, r, pod_initializing):
        st = {"name": r.name, "image": r.spec.get("image", ""), "imageID": r.image_id,
              "ready": r.ready, "restartCount": r.restart_count,
              "started": bool(r.running and r.started)}
        state = r.state
        if pod_initializing and not r.ever_ran and r.kind == "app":
            state = {"waiting": {"reason": "PodInitializing"}}
        st["state"] = state
        if "terminated" in state:
            st["lastState"] = {"terminated": r.terms[-2]} if len(r.terms) > 1 else {}
        else:
            st["lastState"] = {"terminated": r.terms[-1]} if r.terms else {}
        cid = self.kl.runtime.container_id(r) if r.pid and (r.running or r.ever_ran) else None
        if cid:
            st["containerID"] = cid
        return st

    def compute_status(self, pod):
        spec = pod.get("spec") or {}
        inits = [r for r in self.runs if r.kind != "app"]
        apps = [r for r in self.runs if r.kind == "app"]
        initialized = all((r.kind == "init" and r.done) or (r.kind == "sidecar" and r.started
                                                             and r.running) for r in inits)
        if self.terminal_phase is not None:
            phase = self.terminal_phase
        elif self.init_failed:
            phase = "Failed"
        elif not initialized:
            phase = "Pending"
        else:
            running = stopped = succeeded = waiting = 0
            for r in apps:
                if r.running:
                    running += 1
                elif r.ever_ran:
                    stopped += 1
                    if r.exit_code == 0:
                        succeeded += 1
                else:
                    waiting += 1
            policy = spec.get("restartPolicy") or "Always"
            if waiting:
                phase = "Pending"
            elif running:
                phase = "Running"
            elif stopped:
                if policy == "Always":
                    phase = "Running"
                elif stopped == succeeded:
                    phase = "Succeeded"
                elif policy == "Never":
                    phase = "Failed"
                else:
                    phase = "Running"
            else:
                phase = "Pending"
        self._cond("PodReadyToStartContainers", "True" if self.ip else "False")
        if initialized:
            self._cond("Initialized", "True")
        else:
            pending = [r.name for r in inits if not r.done and not (r.kind == "sidecar" and
                                                                    r.started)]
            self._cond("Initialized", "False", "ContainersNotInitialized",
                       "containers with incomplete status: [%s]" % " ".join(pending))
        if phase in ("Succeeded", "Failed"):
            self._cond("ContainersReady", "False", "PodCompleted", None)
            self._cond("Ready", "False", "PodCompleted", None)
        else:
            unready = [r.name for r in apps if not r.ready]
            if unready:
                msg = "containers with unready status: [%s]" % " ".join(unready)
                self._cond("ContainersReady", "False", "ContainersNotReady", msg)
                self._cond("Ready", "False", "ContainersNotReady", msg)
            else:
                self._cond("ContainersReady", "True")
                self._cond("Ready", "True")
        conds = []
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                  "PodScheduled"):
            c = self.conds.get(t)
            if c is None:
                continue
            d = {"type": t, "status": c[0], "lastProbeTime": None, "lastTransitionTime": c[3]}
            if c[1]:
                d["reason"] = c[1]
            if c[2]:
                d["message"] = c[2]
            conds.append(d)
        status = {"phase": phase, "conditions": conds, "hostIP": "127.0.0.1",
                  "hostIPs": [{"ip": "127.0.0.1"}], "startTime": self.start_time,
                  "qosClass": qos_class(pod)}
        if self.ip:
            status["podIP"] = self.ip
            status["podIPs"] = [{"ip": self.ip}]
        status["containerStatuses"] = [self._container_status(r, not initialized) for r in apps]
        if inits:
            status["initContainerStatuses"] = [self._container_status(r, False) for r in inits]
        return status

    def _write_status(self, pod):
        if self.start_time is None:
            return
        st = self.compute_status(pod)
        if st == self.last_written:
            return
        try:
            upd = self.kl.client.patch(kc.PODS, self.pname,
                                       {"metadata": {"uid": self.uid}, "status": st}, self.ns,
                                       subresource="status")
            self.kl.pods.mutate(upd)
        except ApiError as e:
            if e.not_found:
                self.deleted()
                return
            raise
        self.last_written = st


def qos_class(pod):
    spec = pod.get("spec") or {}
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in cs:
        r = c.get("resources") or {}
        req, lim = r.get("requests") or {}, r.get("limits") or {}
        if req or lim:
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or (k in req and req[k] != lim[k]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# ---- the kubelet ------------------------------------------------------------------------------


class Kubelet:
    name = "kubelet"

    def __init__(self, ctx, images_file=None, backoff_scale=1.0, runtime="process"):
        self.ctx = ctx
        self.dir = ctx.dir
        self.nodes = set(ctx.node_names)
        self.client = kc.Client(ctx.server, "kubelet")
        self.images = ImageMap(images_file, {"LOCALKUBE_DIR": ctx.dir})
        self.backoff_scale = backoff_scale
        self.pid_dir = os.path.join(self.dir, "kubelet", "pids")
        os.makedirs(self.pid_dir, exist_ok=True)
        self.runtime = make_runtime(runtime, self)
        os.makedirs(os.path.join(self.dir, "pods"), exist_ok=True)
        self.ips = IPAllocator(owner=self.dir)
        self.pods = ctx.pods
        self.cms = ctx.informer(kc.CONFIGMAPS)
        self.secrets = ctx.informer(kc.SECRETS)
        self.events = ctx.recorder("kubelet", ctx.node_names[0] if ctx.node_names else None)
        self.workers = {}
        self.done_uids = set()
        self.lock = threading.Lock()
        self.stopping = False
        self.started = False
        self.pods.add_handler(self._pod_seen, lambda o, n: self._pod_seen(n), self._pod_gone)

    def kill_leftovers(self):
        n = kill_recorded(self.pid_dir)
        if n:
            log.info("killed %d leftover pod process group(s)", n)
        if self.runtime.name != "process":
            self.runtime.cleanup()

    def _ours(self, pod):
        return (pod.get("spec") or {}).get("nodeName") in self.nodes

    def _pod_seen(self, pod):
        if not self.started or not self._ours(pod):
            return
        uid = pod["metadata"].get("uid")
        with self.lock:
            if self.stopping or uid in self.done_uids:
                return
            w = self.workers.get(uid)
            if w is None:
                if kc.is_pod_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
                    return
                w = PodWorker(self, pod)
                self.workers[uid] = w
                w.start()
                return
        w.update(pod)

    def _pod_gone(self, pod):
        uid = pod["metadata"].get("uid")
        with self.lock:
            w = self.workers.get(uid)
        if w is not None:
            w.deleted()

    def worker_done(self, w):
        with self.lock:
            self.workers.pop(w.uid, None)
            self.done_uids.add(w.uid)

    def start(self):
        self.started = True
        for p in self.pods.list():
            self._pod_seen(p)

    def stop(self):
        pass

    def shutdown(self, grace):
        with self.lock:
            self.stopping = True
            ws = list(self.workers.values())
        for w in ws:
            w.stop_for_shutdown(grace)
        deadline = time.time() + grace + 10
        for w in ws:
            w.join(max(0.1, deadline - time.time()))
        n = kill_recorded(self.pid_dir)
        if n:
            log.warning("shutdown: killed %d stray process group(s)", n)
        if self.runtime.name != "process":
            n = self.runtime.cleanup()
            if n:
                log.warning("shutdown: removed %d stray container(s)", n)
        self.ips.release_all()
