#!/usr/bin/env python3
"""tandem-operator at scale on localkube (Python 3 standard library only).

    python3 e2e/bench/operator_scale.py [--pools 200] [--models-per-pool 2] [--steady 60]
                                        [--json-only] [--keep]

Brings up localkube (API server + controllers, 1 node) in a temporary directory, applies the CRDs,
starts tandem-operator ($TANDEM_BUILD_DIR/operator/controller/tandem-operator, default
<repo>/build) as a local process against it with leader election off, then creates --pools
InferencePools with --models-per-pool InferenceModels each (even pools disaggregated with
Disaggregated models, odd pools Unified models). Every worker and EPP Deployment asks for 0
replicas, so the controllers create Deployments and ReplicaSets but no pods: the figures measure
the operator, not a few thousand stand-in processes.

Measured:
  * convergence: from the first create until every pool and model has status.observedGeneration
    == metadata.generation and every object the operator owes them exists (target < 30 s);
  * steady state: once the operator has been quiet for 5 s, a --steady second window with no
    changes, counting its write requests (POST/PUT/PATCH/DELETE) in the API server's request log
    and in its own tandem_operator_kube_requests_total (target 0);
  * resident memory: VmRSS of the operator (/proc/PID/status) at convergence and the maximum over
    the steady window, with the number of objects it watches (target < 30 MB with >= 1,000).

Prints a table and, as its last line, a one-line JSON summary. Missed targets are reported, not
failures; the exit status is non-zero only when the run itself fails. Bounded: --time-limit
(default 230 s) for the whole run.
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
LOCALKUBE = os.path.join(REPO, "e2e", "localkube", "localkube")
CRDS = os.path.join(REPO, "manifests", "crds")
NS = "bench"
UA = "tandem-bench/operator-scale"
OP_UA_PREFIX = "tandem-operator"
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class BenchError(Exception):
    pass


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def check(self, what):
        if self.left() <= 0:
            raise BenchError("time limit reached while %s" % what)


# ---- HTTP ----------------------------------------------------------------------------------------


class Api:
    """A keep-alive JSON client for one thread."""

    def __init__(self, base, timeout=60.0):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": UA}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
            except (http.client.HTTPException, OSError):
                self.close()
                if attempt == 2:
                    raise
        raise BenchError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_get(url, timeout=5.0):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("GET", u.path or "/")
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


# ---- objects -------------------------------------------------------------------------------------


def pool_obj(i):
    name = "p%03d" % i
    spec = {"selector": {"matchLabels": {"app": name}}, "epp": {"replicas": 0}}
    if i % 2 == 0:
        spec["disaggregation"] = {"enabled": True, "threshold": 512}
    return {"apiVersion": "tandem.dev/v1alpha1", "kind": "InferencePool",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def model_obj(i, j):
    pool = "p%03d" % i
    name = "%s-m%d" % (pool, j)
    if i % 2 == 0:
        dep = {"type": "Disaggregated", "prefillWorkers": {"replicas": 0},
               "decodeWorkers": {"replicas": 0}}
    else:
        dep = {"type": "Unified", "unifiedWorkers": {"replicas": 0}}
    return {"apiVersion": "tandem.dev/v1alpha1", "kind": "InferenceModel",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"poolRef": {"name": pool}, "modelName": name,
                     "modelSource": {"storageUri": "file:///var/lib/tandem/models/%s.gguf" % name},
                     "deployment": dep}}


def expected_children(pools, per_pool):
    """{resource plural: set of names} the operator owes."""
    want = {"deployments": set(), "services": set(), "configmaps": set(),
            "serviceaccounts": set(), "roles": set(), "rolebindings": set()}
    for i in range(pools):
        p = "p%03d" % i
        want["deployments"].add(p + "-epp")
        want["services"].add(p + "-epp")
        want["configmaps"].add(p + "-epp-config")
        want["serviceaccounts"].update((p + "-epp", p + "-agent"))
        want["roles"].add(p + "-epp")
        want["rolebindings"].add(p + "-epp")
        for j in range(per_pool):
            m = "%s-m%d" % (p, j)
            if i % 2 == 0:
                want["deployments"].update((m + "-prefill", m + "-decode"))
            else:
                want["deployments"].add(m + "-worker")
    return want


CHILD_PATHS = {
    "deployments": "/apis/apps/v1/namespaces/%s/deployments" % NS,
    "services": "/api/v1/namespaces/%s/services" % NS,
    "configmaps": "/api/v1/namespaces/%s/configmaps" % NS,
    "serviceaccounts": "/api/v1/namespaces/%s/serviceaccounts" % NS,
    "roles": "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % NS,
    "rolebindings": "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % NS,
}
CR_PATHS = {
    "inferencepools": "/apis/tandem.dev/v1alpha1/namespaces/%s/inferencepools" % NS,
    "inferencemodels": "/apis/tandem.dev/v1alpha1/namespaces/%s/inferencemodels" % NS,
}
MANAGED = "?labelSelector=" + urllib.parse.quote("app.kubernetes.io/managed-by=tandem-operator")


# ---- processes -----------------------------------------------------------------------------------


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def kubectl():
    if os.environ.get("KUBECTL"):
        return os.environ["KUBECTL"]
    pinned = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32"
    return pinned if os.access(pinned, os.X_OK) else (shutil.which("kubectl") or "kubectl")


class Operator:
    def __init__(self, binary, kubeconfig, workdir):
        self.mport, self.hport = free_port(), free_port()
        self.log_path = os.path.join(workdir, "operator.log")
        self.logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
             "--metrics-bind-address", "127.0.0.1:%d" % self.mport,
             "--health-probe-bind-address", "127.0.0.1:%d" % self.hport, "--log-level", "info"],
            stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.mport

    def wait_ready(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise BenchError("tandem-operator exited with %s (log %s)" % (
                    self.proc.returncode, self.log_path))
            try:
                if http_get("http://127.0.0.1:%d/readyz" % self.hport, 1.0)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise BenchError("tandem-operator not ready within %ds (log %s)" % (seconds, self.log_path))

    def metrics(self):
        try:
            code, text = http_get(self.metrics_url)
        except OSError:
            return None
        return text if code == 200 else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.logf.close()


SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def metric_sum(text, name, label_re=None):
    total = 0.0
    found = False
    for line in (text or "").splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m or m.group(1) != name:
            continue
        if label_re and not re.search(label_re, m.group(2) or ""):
            continue
        try:
            total += float(m.group(3))
            found = True
        except ValueError:
            pass
    return total if found else None


WRITE_LABEL_RE = r'verb="write"'


class RequestLog:
    """Counts the operator's requests in localkube's API server log (lines ending
    "METHOD PATH CODE 1.2ms USER-AGENT")."""

    def __init__(self, path):
        self.path = path

    def mark(self):
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def since(self, offset, kinds=None):
        """(writes, reads, write lines) by the operator after byte offset; leases excluded.
        kinds (a dict), when given, counts the writes by "METHOD resource[/subresource]"."""
        writes, reads, lines = 0, 0, []
        with open(self.path, "rb") as f:
            f.seek(offset)
            for raw in f:
                parts = raw.decode("utf-8", "replace").split()
                if len(parts) < 5 or not parts[-1].startswith(OP_UA_PREFIX):
                    continue
                method, path = parts[-5], parts[-4]
                if method in WRITE_METHODS:
                    if "/leases" in path:
                        continue
                    writes += 1
                    if len(lines) < 20:
                        lines.append("%s %s %s" % (method, path, parts[-3]))
                    if kinds is not None:
                        key = "%s %s" % (method, resource_of(path))
                        kinds[key] = kinds.get(key, 0) + 1
                elif method == "GET":
                    reads += 1
        return writes, reads, lines


def resource_of(path):
    """"deployments", "inferencemodels/status"... of an API path."""
    segs = [x for x in urllib.parse.urlsplit(path).path.split("/") if x]
    segs = segs[2:] if segs[:1] == ["api"] else segs[3:]
    if len(segs) >= 3 and segs[0] == "namespaces":
        segs = segs[2:]
    if not segs:
        return "?"
    return segs[0] + ("/" + segs[2] if len(segs) >= 3 else "")


# ---- the run -------------------------------------------------------------------------------------


def create_all(base, objs, parallel):
    """POSTs every object (a list of (path, obj)) over `parallel` keep-alive connections."""
    errors = []
    idx = [0]
    lock = threading.Lock()

    def worker():
        api = Api(base)
        try:
            while True:
                with lock:
                    if idx[0] >= len(objs) or errors:
                        return
                    path, obj = objs[idx[0]]
                    idx[0] += 1
                code, body = api.request("POST", path, obj)
                if code != 201:
                    with lock:
                        errors.append("POST %s %s: %s %s" % (path, obj["metadata"]["name"], code,
                                                              (body or {}).get("message")))
        except Exception as e:  # noqa: BLE001 (reported below)
            with lock:
                errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            api.close()

    threads = [threading.Thread(target=worker) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError("creating objects: %s" % "; ".join(errors[:3]))


def list_items(api, path):
    code, body = api.request("GET", path)
    if code != 200:
        raise BenchError("GET %s: %s %s" % (path, code, (body or {}).get("message")))
    return body.get("items") or []


def lagging_crs(api):
    """Pools and models whose status.observedGeneration is not their generation."""
    n_lag, total = 0, 0
    for path in CR_PATHS.values():
        for o in list_items(api, path):
            total += 1
            st = o.get("status") or {}
            if st.get("observedGeneration") != o["metadata"].get("generation"):
                n_lag += 1
    return n_lag, total


def missing_children(api, want):
    missing = 0
    for res, names in want.items():
        have = {o["metadata"]["name"] for o in list_items(api, CHILD_PATHS[res] + MANAGED)}
        missing += len(names - have)
    return missing


def watched_objects(api):
    """Objects in the operator's informers: pools, models, the managed kinds and pods."""
    n = 0
    for path in CR_PATHS.values():
        n += len(list_items(api, path))
    for path in CHILD_PATHS.values():
        n += len(list_items(api, path + MANAGED))
    n += len(list_items(api, "/apis/autoscaling/v2/namespaces/%s/horizontalpodautoscalers" % NS))
    n += len(list_items(api, "/api/v1/pods"))
    return n


def run(args, deadline):
    build = os.environ.get("TANDEM_BUILD_DIR") or os.path.join(REPO, "build")
    binary = os.path.join(build, "operator", "controller", "tandem-operator")
    if not os.access(binary, os.X_OK):
        return {"skipped": "tandem-operator not built (%s)" % binary}
    workdir = tempfile.mkdtemp(prefix="operator-scale-")
    lkdir = os.path.join(workdir, "lk")
    op = None
    up = False
    try:
        env = dict(os.environ, TANDEM_BUILD_DIR=build)
        r = subprocess.run([sys.executable, LOCALKUBE, "up", "--dir", lkdir, "--nodes", "1",
                            "--node-cpu", "64", "--node-memory", "256Gi"],
                           env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise BenchError("localkube up failed: %s" % (r.stdout + r.stderr)[-2000:])
        up = True
        with open(os.path.join(lkdir, "state.json")) as f:
            base = json.load(f)["server"]
        kcfg = os.path.join(lkdir, "kubeconfig")
        kc = [kubectl(), "--kubeconfig", kcfg]
        r = subprocess.run(kc + ["apply", "-f", CRDS], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise BenchError("applying the CRDs: %s" % r.stderr)
        r = subprocess.run(kc + ["wait", "--for=condition=Established", "--timeout=60s",
                                 "crd/inferencepools.tandem.dev", "crd/inferencemodels.tandem.dev"],
                           capture_output=True, text=True, timeout=70)
        if r.returncode != 0:
            raise BenchError("CRDs not Established: %s" % r.stderr)
        api = Api(base)
        code, body = api.request("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        if code != 201:
            raise BenchError("creating namespace %s: %s %s" % (NS, code, body))

        op = Operator(binary, kcfg, workdir)
        op.wait_ready(30)
        reqlog = RequestLog(os.path.join(lkdir, "apiserver.log"))
        rss_idle = rss_kb(op.proc.pid)

        # ---- create and converge
        objs = []
        for i in range(args.pools):
            objs.append((CR_PATHS["inferencepools"], pool_obj(i)))
        for i in range(args.pools):
            for j in range(args.models_per_pool):
                objs.append((CR_PATHS["inferencemodels"], model_obj(i, j)))
        want = expected_children(args.pools, args.models_per_pool)
        n_children = sum(len(v) for v in want.values())
        off_create = reqlog.mark()
        t0 = time.monotonic()
        create_all(base, objs, args.create_parallel)
        create_s = time.monotonic() - t0
        converge_s = None
        lag = total = missing = None
        timeline = []
        while True:
            deadline.check("waiting for convergence")
            if op.proc.poll() is not None:
                raise BenchError("tandem-operator exited with %s during convergence (log %s)" % (
                    op.proc.returncode, op.log_path))
            lag, total = lagging_crs(api)
            missing = missing_children(api, want) if lag == 0 else None
            elapsed = time.monotonic() - t0
            timeline.append((elapsed, lag, missing))
            if lag == 0 and missing == 0:
                converge_s = elapsed
                break
            if elapsed > args.converge_limit:
                break
            time.sleep(0.5)
        rss_converged = rss_kb(op.proc.pid)
        converge_kinds = {}
        converge_writes, _, _ = reqlog.since(off_create, converge_kinds)
        if converge_s is None:
            raise BenchError("not converged after %.0fs: %s of %s pools/models lag behind their "
                             "generation, %s objects missing" % (args.converge_limit, lag, total,
                                                                 missing))

        # ---- settle: 5 s without an operator write (bounded)
        settle_t0 = time.monotonic()
        quiet_since = time.monotonic()
        off = reqlog.mark()
        settle_writes = 0
        settle_kinds = {}
        while time.monotonic() - quiet_since < 5:
            deadline.check("waiting for the operator to go quiet")
            if time.monotonic() - settle_t0 > args.settle_limit:
                break
            time.sleep(1)
            w, _, _ = reqlog.since(off, settle_kinds)
            off = reqlog.mark()
            if w:
                settle_writes += w
                quiet_since = time.monotonic()
        settle_s = time.monotonic() - settle_t0

        # ---- steady state
        if deadline.left() < args.steady + 15:
            raise BenchError("not enough time left for a %ds steady window" % args.steady)
        n_watched = watched_objects(api)
        api.close()
        m0 = op.metrics()
        off = reqlog.mark()
        rss_max = 0
        t_end = time.monotonic() + args.steady
        while time.monotonic() < t_end:
            v = rss_kb(op.proc.pid)
            if v:
                rss_max = max(rss_max, v)
            time.sleep(1)
        m1 = op.metrics()
        log_writes, log_reads, write_lines = reqlog.since(off)
        w0 = metric_sum(m0, "tandem_operator_kube_requests_total", WRITE_LABEL_RE)
        w1 = metric_sum(m1, "tandem_operator_kube_requests_total", WRITE_LABEL_RE)
        metric_writes = None if w0 is None or w1 is None else int(w1 - w0)
        rc0 = metric_sum(m0, "controller_runtime_reconcile_total")
        rc1 = metric_sum(m1, "controller_runtime_reconcile_total")
        if op.proc.poll() is not None:
            raise BenchError("tandem-operator exited during the steady window")
        cached = metric_sum(m1, "tandem_operator_cached_objects")

        # ---- a restarted operator: the same cache, without the history of the run
        op.stop()
        op = Operator(binary, kcfg, workdir)
        op.wait_ready(60)
        off = reqlog.mark()
        time.sleep(args.restart_wait)
        rss_restart = rss_kb(op.proc.pid)
        restart_writes, _, _ = reqlog.since(off)
        return {
            "pools": args.pools, "models": args.pools * args.models_per_pool,
            "children": n_children, "create_s": create_s, "converge_s": converge_s,
            "timeline": timeline, "settle_s": settle_s, "settle_writes": settle_writes,
            "steady_s": args.steady, "steady_writes_log": log_writes,
            "steady_writes_metrics": metric_writes, "steady_reads_log": log_reads,
            "steady_reconciles": None if rc0 is None or rc1 is None else int(rc1 - rc0),
            "write_lines": write_lines, "watched": n_watched,
            "rss_idle_kb": rss_idle, "rss_converged_kb": rss_converged, "rss_max_kb": rss_max,
            "rss_restart_kb": rss_restart, "restart_writes": restart_writes,
            "cached_objects": None if cached is None else int(cached),
            "converge_writes": converge_writes, "converge_kinds": converge_kinds,
            "settle_kinds": settle_kinds,
            "workdir": workdir if args.keep else None,
        }
    finally:
        if op is not None:
            op.stop()
        if up:
            subprocess.run([sys.executable, LOCALKUBE, "down", "--dir", lkdir],
                           capture_output=True, timeout=90)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def report(args, r, elapsed):
    if "skipped" in r:
        summary = {"benchmark": "operator_scale", "skipped": r["skipped"]}
        if not args.json_only:
            print("operator_scale: skipped: %s" % r["skipped"])
        print(json.dumps(summary, sort_keys=True))
        return summary
    mb = lambda kb: round(kb / 1024.0, 1) if kb else None  # noqa: E731
    steady_writes = r["steady_writes_log"]
    if r["steady_writes_metrics"] is not None:
        steady_writes = max(steady_writes, r["steady_writes_metrics"])
    rss_mb = mb(max(r["rss_max_kb"] or 0, r["rss_converged_kb"] or 0))
    per_obj = None
    if r["rss_restart_kb"] and r["rss_idle_kb"] and r["cached_objects"]:
        per_obj = round((r["rss_restart_kb"] - r["rss_idle_kb"]) / float(r["cached_objects"]), 1)
    met = {
        "converge": r["converge_s"] < args.target_converge_s,
        "steady_writes": steady_writes == 0,
        "rss": rss_mb is not None and rss_mb < args.target_rss_mb and r["watched"] >= 1000,
    }
    summary = {
        "benchmark": "operator_scale",
        "pools": r["pools"], "models": r["models"], "objects_owed": r["children"],
        "create_s": round(r["create_s"], 2), "converge_s": round(r["converge_s"], 2),
        "target_converge_s": args.target_converge_s,
        "settle_s": round(r["settle_s"], 1), "settle_writes": r["settle_writes"],
        "steady_window_s": r["steady_s"], "steady_writes_log": r["steady_writes_log"],
        "steady_writes_metrics": r["steady_writes_metrics"],
        "steady_reads_log": r["steady_reads_log"], "steady_reconciles": r["steady_reconciles"],
        "target_steady_writes": 0,
        "watched_objects": r["watched"], "cached_objects": r["cached_objects"],
        "rss_idle_mb": mb(r["rss_idle_kb"]),
        "rss_converged_mb": mb(r["rss_converged_kb"]), "rss_max_mb": mb(r["rss_max_kb"]),
        "rss_after_restart_mb": mb(r["rss_restart_kb"]), "restart_writes": r["restart_writes"],
        "rss_per_cached_object_kb": per_obj,
        "converge_writes": r["converge_writes"],
        "target_rss_mb": args.target_rss_mb,
        "targets_met": met, "elapsed_s": round(elapsed, 1),
    }
    if not args.json_only:
        print("operator_scale: %d InferencePools x %d InferenceModels on localkube (1 node, "
              "0-replica workloads)" % (args.pools, args.models_per_pool))
        rows = [
            ("objects created (pools + models)", "%d in %.2f s" % (
                r["pools"] + r["models"], r["create_s"]), ""),
            ("converged (status + %d owned objects)" % r["children"],
             "%.2f s" % r["converge_s"], "< %g s: %s" % (
                 args.target_converge_s, "met" if met["converge"] else "NOT met")),
            ("settled (5 s without writes)", "%.1f s later, %d writes" % (
                r["settle_s"], r["settle_writes"]), ""),
            ("writes in a %d s steady state" % r["steady_s"], "%d (log), %s (metrics)" % (
                r["steady_writes_log"], "n/a" if r["steady_writes_metrics"] is None
                else r["steady_writes_metrics"]),
             "0: %s" % ("met" if met["steady_writes"] else "NOT met")),
            ("reads / reconciles in the window", "%d / %s" % (
                r["steady_reads_log"], "n/a" if r["steady_reconciles"] is None
                else r["steady_reconciles"]), ""),
            ("watched objects (API / operator cache)", "%d / %s" % (
                r["watched"], "n/a" if r["cached_objects"] is None else r["cached_objects"]),
             ">= 1000"),
            ("RSS idle / converged / max steady", "%s / %s / %s MB" % (
                mb(r["rss_idle_kb"]), mb(r["rss_converged_kb"]), mb(r["rss_max_kb"])),
             "< %g MB: %s" % (args.target_rss_mb, "met" if met["rss"] else "NOT met")),
            ("RSS of a restarted operator (synced)", "%s MB, %d writes" % (
                mb(r["rss_restart_kb"]), r["restart_writes"]),
             "" if per_obj is None else "%.1f KB per cached object" % per_obj),
        ]
        for a, b, c in rows:
            print("  %-40s %-28s %s" % (a, b, c))
        print("  convergence timeline (s, lagging pools+models, missing objects):")
        step = max(1, len(r["timeline"]) // 12)
        for t, lag, missing in r["timeline"][::step] + r["timeline"][-1:]:
            print("    %6.1f %5d %s" % (t, lag, "-" if missing is None else missing))
        for title, kinds in (("while converging", r["converge_kinds"]),
                             ("while settling", r["settle_kinds"])):
            if kinds:
                print("  writes %s: %s" % (title, ", ".join(
                    "%s %d" % (k, v) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))))
        for line in r["write_lines"]:
            print("  steady-state write: %s" % line)
    print(json.dumps(summary, sort_keys=True))
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pools", type=int, default=200)
    p.add_argument("--models-per-pool", type=int, default=2)
    p.add_argument("--steady", type=int, default=60, help="steady-state window (s)")
    p.add_argument("--create-parallel", type=int, default=4)
    p.add_argument("--converge-limit", type=float, default=90.0,
                   help="give up waiting for convergence after this many seconds")
    p.add_argument("--settle-limit", type=float, default=40.0)
    p.add_argument("--restart-wait", type=float, default=5.0,
                   help="seconds after a restarted operator is ready before its RSS is read")
    p.add_argument("--target-converge-s", type=float, default=30.0)
    p.add_argument("--target-rss-mb", type=float, default=30.0)
    p.add_argument("--time-limit", type=float, default=230.0, help="hard limit for the run (s)")
    p.add_argument("--json-only", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if args.pools < 1 or args.models_per_pool < 0 or args.steady < 1:
        p.error("--pools and --steady must be positive, --models-per-pool >= 0")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t0 = time.monotonic()
    try:
        r = run(args, Deadline(args.time_limit))
    except (BenchError, subprocess.TimeoutExpired, OSError) as e:
        print("operator_scale: FAILED: %s" % e, file=sys.stderr)
        return 1
    report(args, r, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
