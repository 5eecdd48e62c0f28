"""localkube's scheduler: binds pending pods to the simulated nodes.

A pod is ours when spec.nodeName is empty, spec.schedulerName is unset or "default-scheduler",
and it is neither terminating nor terminal.  Filters (as kube-scheduler's plugins of the same
names): NodeUnschedulable, NodeName, NodeAffinity (nodeSelector + required node affinity),
TaintToleration (NoSchedule / NoExecute), NodeResourcesFit (cpu, memory, ephemeral-storage,
pods; requests summed over containers, max'd with init containers, plus overhead).  Score: least
allocated (mean of cpu and memory fractions), ties broken round-robin.  Binding goes through the
pods/binding subresource (a merge patch of spec.nodeName when the server lacks it).  When nothing
fits, the pod gets condition PodScheduled=False, reason Unschedulable, with kube's message
("0/2 nodes are available: 2 Insufficient cpu.") and is retried when nodes or pods change and
every few seconds.
"""

import logging
import threading
import time

from lk import client as kc
from lk.client import ApiError, WorkQueue, get_condition, now_rfc3339
from lk.quantity import parse_quantity

log = logging.getLogger("lk.scheduler")

SCHEDULER_NAME = "default-scheduler"
RESOURCES = ("cpu", "memory", "ephemeral-storage")


def _q(v):
    try:
        return parse_quantity(v)
    except (ValueError, TypeError):
        return 0


def pod_requests(pod):
    """resourcehelper.PodRequests: max(sum(containers), each init container) + overhead; a
    resource with only a limit is requested at its limit (API defaulting does that in kube)."""
    spec = pod.get("spec") or {}

    def creq(c):
        r = (c.get("resources") or {})
        req = dict(r.get("limits") or {})
        req.update(r.get("requests") or {})
        return {k: _q(v) for k, v in req.items()}

    total = {}
    for c in spec.get("containers") or []:
        for k, v in creq(c).items():
            total[k] = total.get(k, 0) + v
    sidecars = {}
    for c in spec.get("initContainers") or []:
        r = creq(c)
        if c.get("restartPolicy") == "Always":
            for k, v in r.items():
                sidecars[k] = sidecars.get(k, 0) + v
                total[k] = total.get(k, 0) + v
            continue
        for k, v in r.items():
            if v + sidecars.get(k, 0) > total.get(k, 0):
                total[k] = v + sidecars.get(k, 0)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + _q(v)
    return total


def match_node_selector_term(term, node):
    labels = node.get("metadata", {}).get("labels") or {}
    for e in term.get("matchExpressions") or []:
        if not _match_expr(e, labels):
            return False
    for e in term.get("matchFields") or []:
        if e.get("key") != "metadata.name":
            return False
        if not _match_expr(e, {"metadata.name": node["metadata"]["name"]}):
            return False
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def _match_expr(e, labels):
    k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
    has = k in labels
    if op == "In":
        return has and labels[k] in vals
    if op == "NotIn":
        return not has or labels[k] not in vals
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        try:
            a, b = int(labels[k]), int(vals[0])
        except (KeyError, IndexError, ValueError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_matches_pod(pod, node):
    """NodeAffinity filter: spec.nodeSelector and requiredDuringScheduling node affinity."""
    spec = pod.get("spec") or {}
    labels = node.get("metadata", {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req:
        terms = req.get("nodeSelectorTerms") or []
        if not any(match_node_selector_term(t, node) for t in terms):
            return False
    return True


def tolerates(pod, taint):
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def untolerated_taint(pod, node):
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not tolerates(pod, taint):
            return taint
    return None


def _ready(node):
    c = get_condition(node.get("status"), "Ready")
    return c is not None and c.get("status") == "True"


class Scheduler:
    name = "scheduler"
    RETRY = 5.0
    ASSUME_TTL = 30.0

    def __init__(self, ctx):
        self.ctx = ctx
        self.client = kc.Client(ctx.server, "scheduler")
        self.pods = ctx.pods
        self.nodes = ctx.nodes
        self.queue = WorkQueue("scheduler")
        self.events = ctx.recorder("default-scheduler")
        self.unschedulable = set()
        self.assumed = {}  # pod key -> (node name, requests, uid, expires)
        self.lock = threading.Lock()
        self.rr = 0
        self.use_binding = None
        self.pods.add_handler(self._pod_added, lambda o, n: self._pod_updated(o, n),
                              self._pod_deleted)
        self.nodes.add_handler(lambda n: self._retry_all(), lambda o, n: self._node_updated(o, n),
                               lambda n: None)
        self.threads = []

    @staticmethod
    def wants(pod):
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            return False
        if (spec.get("schedulerName") or SCHEDULER_NAME) != SCHEDULER_NAME:
            return False
        return kc.is_pod_active(pod)

    def _pod_added(self, pod):
        if self.wants(pod):
            self.queue.add(kc.obj_key(pod))

    def _pod_updated(self, old, new):
        if self.wants(new):
            self.queue.add(kc.obj_key(new))
        elif (new.get("spec") or {}).get("nodeName"):
            with self.lock:
                a = self.assumed.get(kc.obj_key(new))
                if a is not None and a[2] == new["metadata"].get("uid"):
                    del self.assumed[kc.obj_key(new)]
            if kc.is_pod_terminal(new) and not kc.is_pod_terminal(old):
                self._retry_all()

    def _pod_deleted(self, pod):
        with self.lock:
            self.assumed.pop(kc.obj_key(pod), None)
        if (pod.get("spec") or {}).get("nodeName"):
            self._retry_all()

    def _node_updated(self, old, new):
        if old.get("metadata", {}).get("labels") != new.get("metadata", {}).get("labels") or \
                old.get("spec") != new.get("spec") or _ready(old) != _ready(new) or \
                (old.get("status") or {}).get("allocatable") != \
                (new.get("status") or {}).get("allocatable"):
            self._retry_all()

    def _retry_all(self):
        with self.lock:
            keys = list(self.unschedulable)
        for k in keys:
            self.queue.add(k)

    def start(self):
        t = threading.Thread(target=self._worker, name="scheduler", daemon=True)
        t.start()
        self.threads.append(t)
        t = threading.Thread(target=self._periodic, name="scheduler-retry", daemon=True)
        t.start()
        self.threads.append(t)
        for p in self.pods.list():
            self._pod_added(p)

    def stop(self):
        self.queue.shutdown()

    def _periodic(self):
        while not self.ctx.stop.wait(self.RETRY):
            self._retry_all()
            now = time.monotonic()
            with self.lock:
                for k, a in list(self.assumed.items()):
                    if a[3] < now:
                        del self.assumed[k]

    def _worker(self):
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                self.schedule(key)
                self.queue.forget(key)
            except (ApiError, ConnectionError) as e:
                log.warning("scheduling %s: %s", key, e)
                self.queue.add_rate_limited(key)
            except Exception:
                log.exception("scheduling %s failed", key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    # ---- the scheduling cycle -------------------------------------------------------------

    def node_usage(self):
        """Requested resources and pod count per node (bound pods + assumed ones)."""
        usage = {}
        seen = set()
        for p in self.pods.list():
            node = (p.get("spec") or {}).get("nodeName")
            if not node or kc.is_pod_terminal(p):
                continue
            seen.add(kc.obj_key(p))
            u = usage.setdefault(node, {"pods": 0})
            u["pods"] += 1
            for k, v in pod_requests(p).items():
                u[k] = u.get(k, 0) + v
        with self.lock:
            assumed = list(self.assumed.items())
        for key, (node, req, _, _) in assumed:
            if key in seen:
                continue
            u = usage.setdefault(node, {"pods": 0})
            u["pods"] += 1
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
        return usage

    def filter(self, pod, nodes):
        """Returns (feasible nodes with a score, {reason: count})."""
        req = pod_requests(pod)
        usage = self.node_usage()
        feasible, reasons = [], {}

        def fail(r):
            reasons[r] = reasons.get(r, 0) + 1

        for n in nodes:
            if not _ready(n):
                fail("node(s) had untolerated taint {node.kubernetes.io/not-ready: }")
                continue
            if (n.get("spec") or {}).get("unschedulable"):
                fail("node(s) were unschedulable")
                continue
            if not node_matches_pod(pod, n):
                fail("node(s) didn't match Pod's node affinity/selector")
                continue
            t = untolerated_taint(pod, n)
            if t is not None:
                fail("node(s) had untolerated taint {%s: %s}" % (t.get("key"),
                                                                 t.get("value", "")))
                continue
            alloc = (n.get("status") or {}).get("allocatable") or {}
            u = usage.get(n["metadata"]["name"], {"pods": 0})
            bad = []
            if "pods" in alloc and u["pods"] + 1 > _q(alloc["pods"]):
                bad.append("Too many pods")
            for k, v in req.items():
                if not v:
                    continue
                if k not in alloc:
                    if k in RESOURCES:
                        continue
                    bad.append("Insufficient %s" % k)
                    continue
                if u.get(k, 0) + v > _q(alloc[k]):
                    bad.append("Insufficient %s" % k)
            if bad:
                for b in bad:
                    fail(b)
                continue
            score = 0.0
            for k in ("cpu", "memory"):
                cap = _q(alloc.get(k, 0))
                if cap:
                    score += float((u.get(k, 0) + req.get(k, 0)) / cap)
            feasible.append((score, u["pods"], n))
        return feasible, reasons

    def schedule(self, key):
        pod = self.pods.get(key)
        if pod is None or not self.wants(pod):
            with self.lock:
                self.unschedulable.discard(key)
            return
        with self.lock:
            a = self.assumed.get(key)
        if a is not None and a[2] == pod["metadata"].get("uid"):
            return  # bound, waiting for the informer
        nodes = sorted(self.nodes.list(), key=lambda n: n["metadata"]["name"])
        feasible, reasons = self.filter(pod, nodes)
        if not feasible:
            self.mark_unschedulable(pod, len(nodes), reasons)
            return
        best = min(s for s, _, _ in feasible)
        ties = [n for s, _, n in feasible if s - best < 1e-9]
        ties.sort(key=lambda n: n["metadata"]["name"])
        self.rr += 1
        node = ties[self.rr % len(ties)]
        self.bind(pod, node["metadata"]["name"])
        with self.lock:
            self.unschedulable.discard(key)

    def bind(self, pod, node):
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if self.use_binding is None:
            self.use_binding = self.client.has_resource("v1", "pods/binding")
        with self.lock:
            self.assumed[kc.obj_key(pod)] = (node, pod_requests(pod), pod["metadata"].get("uid"),
                                             time.monotonic() + self.ASSUME_TTL)
        try:
            if self.use_binding:
                self.client.create(kc.PODS, {
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns,
                                 "uid": pod["metadata"].get("uid")},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                    namespace=ns, subresource="binding", name=name)
            else:
                self.client.patch(kc.PODS, name, {"spec": {"nodeName": node}}, ns)
        except ApiError:
            with self.lock:
                self.assumed.pop(kc.obj_key(pod), None)
            raise
        log.info("bound pod %s/%s to %s", ns, name, node)
        self.events.event(pod, "Normal", "Scheduled", "Successfully assigned %s/%s to %s" % (
            ns, name, node))

    def mark_unschedulable(self, pod, total, reasons):
        key = kc.obj_key(pod)
        with self.lock:
            self.unschedulable.add(key)
        parts = ["%d %s" % (n, r) for r, n in sorted(reasons.items())]
        msg = "0/%d nodes are available%s." % (total, ": " + ", ".join(parts) if parts else "")
        cur = get_condition(pod.get("status"), "PodScheduled")
        if cur is not None and cur.get("status") == "False" and cur.get("message") == msg:
            return
        cond = {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(), "reason": "Unschedulable", "message": msg}
        if cur is not None and cur.get("status") == "False":
            cond["lastTransitionTime"] = cur.get("lastTransitionTime") or cond[
                "lastTransitionTime"]
        conds = [c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") != "PodScheduled"] + [cond]
        try:
            self.pods.mutate(self.client.patch(
                kc.PODS, pod["metadata"]["name"],
                {"metadata": {"uid": pod["metadata"].get("uid")},
                 "status": {"phase": "Pending", "conditions": conds}},
                pod["metadata"]["namespace"], subresource="status"))
        except ApiError as e:
            if not e.not_found:
                raise
        log.info("pod %s unschedulable: %s", key, msg)
        self.events.event(pod, "Warning", "FailedScheduling", msg)
