"""localkube's controller manager: Deployment, ReplicaSet, DaemonSet and Endpoints controllers,
node lifecycle (Node objects + Lease heartbeats), and, in the same process, the scheduler
(lk/scheduler.py) and the process kubelet (lk/kubelet.py).

    python3 -m lk.controllers --dir DIR --server http://127.0.0.1:PORT --nodes N --images FILE

Everything talks to the API server over its REST API only (lk/client.py), through shared
informers and work queues, like kube-controller-manager.  The controller logic follows
kubernetes/pkg/controller/{deployment,replicaset,daemon,endpoint} closely (names of functions
are kept in comments so the two can be compared).  Logs go to stderr.  SIGTERM stops the kubelet
gracefully (SIGTERM to every pod process group, wait, SIGKILL) and exits.
"""

import argparse
import json
import logging
import math
import os
import platform
import signal
import sys
import threading
import time

from lk import client as kc
from lk.client import (ApiError, Informer, WorkQueue, controller_ref, get_condition,
                       is_pod_active, is_pod_available, is_pod_ready, now_micro, now_rfc3339,
                       owner_ref, parse_time)
from lk.selectors import SelectorError, selector_from_label_selector_object

log = logging.getLogger("lk.controllers")

# annotations and labels of the deployment controller (k8s.io/kubectl/pkg/util/deployment)
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
ROLLBACK_TO = "deprecated.deployment.rollback.to"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
HASH_LABEL = "pod-template-hash"
DS_HASH_LABEL = "controller-revision-hash"
DS_GEN_LABEL = "pod-template-generation"
ANNOTATIONS_TO_SKIP = {LAST_APPLIED, REVISION, REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                       ROLLBACK_TO}
MAX_REV_HISTORY_CHARS = 2000

# condition reasons (pkg/controller/deployment/util/deployment_util.go)
NEW_RS_REASON = "NewReplicaSetCreated"
FOUND_NEW_RS_REASON = "FoundNewReplicaSet"
RS_UPDATED_REASON = "ReplicaSetUpdated"
NEW_RS_AVAILABLE_REASON = "NewReplicaSetAvailable"
TIMED_OUT_REASON = "ProgressDeadlineExceeded"
PAUSED_REASON = "DeploymentPaused"
RESUMED_REASON = "DeploymentResumed"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"
FAILED_RS_CREATE = "ReplicaSetCreateError"

NODE_LEASE_NS = "kube-node-lease"


# ---- small helpers -------------------------------------------------------------------------


def md(obj):
    return obj.setdefault("metadata", {}) if obj is not None else {}


def key_of(obj):
    return kc.obj_key(obj)


def uid_of(obj):
    return obj.get("metadata", {}).get("uid")


def selector_of(obj):
    """The spec.selector of a workload as a LabelSelector; a malformed one matches nothing."""
    try:
        sel = (obj.get("spec") or {}).get("selector")
        if sel is None:
            return None
        return selector_from_label_selector_object(sel)
    except SelectorError as e:
        log.warning("%s: bad selector: %s", key_of(obj), e)
        return None


def json_copy(v):
    return json.loads(json.dumps(v))


def int_or_percent(v, total, round_up):
    """intstr.GetScaledValueFromIntOrPercent."""
    if v is None:
        return 0
    if isinstance(v, bool):
        raise ValueError("invalid value for IntOrString: %r" % v)
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if s.endswith("%"):
        pct = int(s[:-1])
        x = pct * total / 100.0
        return int(math.ceil(x)) if round_up else int(math.floor(x))
    return int(s)


def condition(ctype, status, reason, message, update_time=True):
    now = now_rfc3339()
    c = {"type": ctype, "status": status, "lastTransitionTime": now, "reason": reason,
         "message": message}
    if update_time:
        c["lastUpdateTime"] = now
    return c


def set_condition(status, cond):
    """SetDeploymentCondition: keep lastTransitionTime while status is unchanged; no-op when
    status and reason are unchanged."""
    conds = status.setdefault("conditions", [])
    cur = None
    for c in conds:
        if c.get("type") == cond["type"]:
            cur = c
    if cur is not None and cur.get("status") == cond["status"] and \
            cur.get("reason") == cond["reason"]:
        return
    if cur is not None and cur.get("status") == cond["status"]:
        cond["lastTransitionTime"] = cur.get("lastTransitionTime", cond["lastTransitionTime"])
    status["conditions"] = [c for c in conds if c.get("type") != cond["type"]] + [cond]


def remove_condition(status, ctype):
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != ctype]


def template_hash(template, collision_count=None):
    """controller.ComputeHash: FNV-32a of the pod template (canonical JSON here, spew in kube)
    and the collision count, safe-encoded."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode("utf-8")
    h = kc.fnv32a(data)
    if collision_count is not None:
        h = kc.fnv32a(int(collision_count).to_bytes(4, "little"), h)
    return kc.safe_encode(str(h))


def _prune(v):
    """Drops nulls, empty maps and empty lists (absent and zero are one in Go's typed API)."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            x = _prune(x)
            if x is None or x == {} or x == []:
                continue
            out[k] = x
        return out
    if isinstance(v, list):
        return [_prune(x) for x in v]
    return v


def equal_ignore_hash(t1, t2):
    """EqualIgnoreHash: pod templates semantically equal apart from the pod-template-hash
    label."""
    a = json_copy(t1 or {})
    b = json_copy(t2 or {})
    for t in (a, b):
        labels = (t.get("metadata") or {}).get("labels")
        if labels is not None:
            labels.pop(HASH_LABEL, None)
    return _prune(a) == _prune(b)


class Expectations:
    """ControllerExpectations by name: creations/deletions a controller is waiting to see in its
    informer before it trusts the cache again (so it never double-creates)."""

    TTL = 30.0

    def __init__(self):
        self._lock = threading.Lock()
        self._exp = {}

    def expect(self, key, adds=(), dels=()):
        with self._lock:
            a, d, _ = self._exp.get(key, (set(), set(), 0))
            self._exp[key] = (a | set(adds), d | set(dels), time.monotonic() + self.TTL)

    def lower_add(self, key, name):
        with self._lock:
            if key in self._exp:
                self._exp[key][0].discard(name)

    def satisfied(self, key, informer):
        with self._lock:
            e = self._exp.get(key)
            if e is None:
                return True
            adds, dels, deadline = e
            for k in list(adds):
                if informer.get(k) is not None:
                    adds.discard(k)
            for k in list(dels):
                o = informer.get(k)
                if o is None or o.get("metadata", {}).get("deletionTimestamp"):
                    dels.discard(k)
            if (not adds and not dels) or time.monotonic() > deadline:
                del self._exp[key]
                return True
            return False

    def delete(self, key):
        with self._lock:
            self._exp.pop(key, None)


class AdoptionCheck:
    """controller.RecheckDeletionTimestamp behind ControllerRefManager's canAdoptOnce: before
    the first adoption of a sync, re-read the owner from the API server (never the informer
    cache, which may still hold an owner that was just deleted with --cascade=orphan) and
    refuse to adopt when it is gone, is being deleted, or has another uid."""

    def __init__(self, client, res, owner):
        self.client = client
        self.res = res
        self.owner = owner
        self.ok = None

    def __call__(self):
        if self.ok is None:
            m = self.owner["metadata"]
            try:
                fresh = self.client.get(self.res, m["name"], m.get("namespace"))
            except ApiError as e:
                if not e.not_found:
                    raise
                fresh = None
            why = None
            if fresh is None:
                why = "is gone"
            elif uid_of(fresh) != uid_of(self.owner):
                why = "is gone: got uid %s, wanted %s" % (uid_of(fresh), uid_of(self.owner))
            elif fresh["metadata"].get("deletionTimestamp"):
                why = "has just been deleted at %s" % fresh["metadata"]["deletionTimestamp"]
            if why:
                log.info("%s %s/%s %s: not adopting", self.res.kind, m.get("namespace"),
                         m["name"], why)
            self.ok = why is None
        return self.ok


class EventRecorder:
    """Best-effort core/v1 Events (what `kubectl describe` shows), written from one thread."""

    def __init__(self, client, component, host=None):
        self.client = client
        self.component = component
        self.host = host
        self.q = WorkQueue("events")
        self._pending = {}
        self._lock = threading.Lock()
        self._seq = 0
        threading.Thread(target=self._run, name="events-" + component, daemon=True).start()

    def event(self, obj, etype, reason, message):
        if obj is None:
            return
        m = obj.get("metadata", {})
        ns = m.get("namespace") or "default"
        now = now_rfc3339()
        with self._lock:
            self._seq += 1
            name = "%s.%x%04x" % (m.get("name"), time.time_ns() // 1000, self._seq % 65536)
            ev = {"apiVersion": "v1", "kind": "Event",
                  "metadata": {"name": name, "namespace": ns},
                  "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                     "name": m.get("name"), "namespace": m.get("namespace"),
                                     "uid": m.get("uid"),
                                     "resourceVersion": m.get("resourceVersion")},
                  "reason": reason, "message": message, "type": etype, "count": 1,
                  "firstTimestamp": now, "lastTimestamp": now,
                  "source": {"component": self.component, "host": self.host},
                  "reportingComponent": self.component, "reportingInstance": self.host or ""}
            if ev["source"]["host"] is None:
                del ev["source"]["host"]
            self._pending[name] = ev
        self.q.add(name)

    def _run(self):
        while True:
            name = self.q.get()
            if name is None:
                return
            with self._lock:
                ev = self._pending.pop(name, None)
            try:
                if ev is not None:
                    self.client.request("POST", self.client.path(kc.EVENTS, ev["metadata"][
                        "namespace"]), body=ev, retries=1)
            except (ApiError, ConnectionError) as e:
                log.debug("event %s: %s", name, e)
            finally:
                self.q.done(name)

    def stop(self):
        self.q.shutdown()


class Context:
    """What every component shares: the client, the informers, options, a stop flag."""

    def __init__(self, server, dir_, nodes, component="controller-manager"):
        self.server = server
        self.dir = dir_
        self.node_names = ["localkube-node-%d" % i for i in range(1, nodes + 1)]
        self.client = kc.Client(server, component)
        self.stop = threading.Event()
        self.informers = {}
        self.recorders = {}

    def informer(self, res, resync=0.0):
        inf = self.informers.get(res.plural)
        if inf is None:
            inf = Informer(self.client, res, resync=resync)
            self.informers[res.plural] = inf
        return inf

    def recorder(self, component, host=None):
        k = (component, host)
        r = self.recorders.get(k)
        if r is None:
            r = EventRecorder(kc.Client(self.server, component), component, host)
            self.recorders[k] = r
        return r

    @property
    def pods(self):
        return self.informer(kc.PODS)

    @property
    def nodes(self):
        return self.informer(kc.NODES)


class Controller:
    """A work queue plus worker threads running sync(key); errors requeue with backoff."""

    name = "controller"
    workers = 1
    resync = 30.0

    def __init__(self, ctx):
        self.ctx = ctx
        self.client = kc.Client(ctx.server, self.name)
        self.queue = WorkQueue(self.name)
        self.threads = []

    def start(self):
        for i in range(self.workers):
            t = threading.Thread(target=self._worker, name="%s-%d" % (self.name, i), daemon=True)
            t.start()
            self.threads.append(t)
        if self.resync:
            t = threading.Thread(target=self._resync, name=self.name + "-resync", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.queue.shutdown()

    def all_keys(self):
        return []

    def _resync(self):
        while not self.ctx.stop.wait(self.resync):
            for k in self.all_keys():
                self.queue.add(k)

    def _worker(self):
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                after = self.sync(key)
                self.queue.forget(key)
                if after:
                    self.queue.add_after(key, after)
            except ApiError as e:
                lvl = logging.DEBUG if e.code in (404, 409) else logging.WARNING
                log.log(lvl, "%s: sync %s: %s", self.name, key, e)
                self.queue.add_rate_limited(key)
            except ConnectionError as e:
                log.warning("%s: sync %s: %s", self.name, key, e)
                self.queue.add_rate_limited(key)
            except Exception:
                log.exception("%s: sync %s failed", self.name, key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def sync(self, key):
        raise NotImplementedError


# ---- ReplicaSet controller (pkg/controller/replicaset) --------------------------------------


def pod_rank_key(pod):
    """ActivePodsWithRanks ordering: the pods to delete first sort first."""
    st = pod.get("status") or {}
    spec = pod.get("spec") or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(st.get("phase"), 0)
    ready = is_pod_ready(pod)
    ready_since = 0.0
    if ready:
        c = get_condition(st, "Ready")
        ready_since = parse_time(c.get("lastTransitionTime")) or 0.0
    restarts = max([c.get("restartCount", 0) for c in st.get("containerStatuses") or []] or [0])
    created = parse_time(pod.get("metadata", {}).get("creationTimestamp")) or 0.0
    return (1 if spec.get("nodeName") else 0, phase_rank, 1 if ready else 0,
            -ready_since if ready else 0.0, -restarts, -created)


class ReplicaSetController(Controller):
    name = "replicaset-controller"
    workers = 2
    BURST = 500

    def __init__(self, ctx):
        super().__init__(ctx)
        self.rs = ctx.informer(kc.REPLICASETS)
        self.pods = ctx.pods
        self.exp = Expectations()
        self.events = ctx.recorder("replicaset-controller")
        self.rs.add_handler(lambda o: self.queue.add(key_of(o)),
                            lambda o, n: self.queue.add(key_of(n)),
                            self._rs_deleted)
        self.pods.add_handler(self._pod_event, lambda o, n: self._pod_changed(o, n),
                              self._pod_event)

    def all_keys(self):
        return self.rs.keys()

    def _rs_deleted(self, rs):
        self.exp.delete(key_of(rs))
        self.queue.add(key_of(rs))

    def _owners_for(self, pod):
        ref = controller_ref(pod)
        ns = pod["metadata"].get("namespace")
        if ref is not None:
            if ref.get("kind") == "ReplicaSet":
                rs = self.rs.get(ns, ref.get("name"))
                if rs is not None and uid_of(rs) == ref.get("uid"):
                    return [key_of(rs)]
            return []
        out = []
        labels = pod["metadata"].get("labels") or {}
        for rs in self.rs.list(ns):
            sel = selector_of(rs)
            if sel is not None and not sel.empty and sel.matches(labels):
                out.append(key_of(rs))
        return out

    def _pod_event(self, pod):
        for k in self._owners_for(pod):
            self.queue.add(k)

    def _pod_changed(self, old, new):
        keys = set(self._owners_for(new))
        if (controller_ref(old) or {}).get("uid") != (controller_ref(new) or {}).get("uid") or \
                old["metadata"].get("labels") != new["metadata"].get("labels"):
            keys |= set(self._owners_for(old))
        for k in keys:
            self.queue.add(k)
        # availability after minReadySeconds: requeue when the pod turns ready
        if not is_pod_ready(old) and is_pod_ready(new):
            for k in keys:
                rs = self.rs.get(k)
                mrs = (rs or {}).get("spec", {}).get("minReadySeconds") or 0
                if mrs:
                    self.queue.add_after(k, mrs + 0.1)

    def claim_pods(self, rs, sel, pods):
        """ControllerRefManager.ClaimPods: adopt matching orphans, release non-matching ours."""
        out = []
        uid = uid_of(rs)
        deleting = bool(rs["metadata"].get("deletionTimestamp"))
        can_adopt = AdoptionCheck(self.client, kc.REPLICASETS, rs)
        for p in pods:
            ref = controller_ref(p)
            labels = p["metadata"].get("labels") or {}
            if ref is not None:
                if ref.get("uid") != uid:
                    continue
                if sel.matches(labels):
                    out.append(p)
                elif not deleting:
                    self._release(rs, p)
                continue
            if deleting or not sel.matches(labels) or p["metadata"].get("deletionTimestamp"):
                continue
            if not can_adopt():
                continue
            if self._adopt(rs, p):
                out.append(p)
        return out

    def _adopt(self, rs, pod):
        refs = list(pod["metadata"].get("ownerReferences") or [])
        refs.append(owner_ref(rs))
        try:
            patched = self.client.patch(kc.PODS, pod["metadata"]["name"],
                                        {"metadata": {"ownerReferences": refs,
                                                      "uid": uid_of(pod)}},
                                        pod["metadata"]["namespace"], "merge")
            self.pods.mutate(patched)
            log.info("replicaset %s adopted pod %s", key_of(rs), key_of(pod))
            return True
        except ApiError as e:
            if e.not_found:
                return False
            raise

    def _release(self, rs, pod):
        refs = [r for r in pod["metadata"].get("ownerReferences") or []
                if r.get("uid") != uid_of(rs)]
        try:
            self.client.patch(kc.PODS, pod["metadata"]["name"],
                              {"metadata": {"ownerReferences": refs or None,
                                            "uid": uid_of(pod)}},
                              pod["metadata"]["namespace"], "merge")
        except ApiError as e:
            if not e.not_found:
                raise

    def sync(self, key):
        rs = self.rs.get(key)
        if rs is None:
            self.exp.delete(key)
            return None
        ns = rs["metadata"]["namespace"]
        sel = selector_of(rs)
        if sel is None or sel.empty:
            return None
        needs_sync = self.exp.satisfied(key, self.pods)
        pods = [p for p in self.pods.list(ns) if is_pod_active(p)]
        pods = self.claim_pods(rs, sel, pods)
        err = None
        if needs_sync and not rs["metadata"].get("deletionTimestamp"):
            try:
                self.manage_replicas(rs, pods)
            except ApiError as e:
                err = e
        self.update_status(rs, pods, err)
        if err is not None:
            raise err
        spec = rs.get("spec") or {}
        mrs = spec.get("minReadySeconds") or 0
        if mrs and sum(1 for p in pods if is_pod_ready(p)) > sum(
                1 for p in pods if is_pod_available(p, mrs)):
            return mrs / 2.0 + 0.1
        return None if needs_sync else 1.0

    def manage_replicas(self, rs, pods):
        key = key_of(rs)
        want = (rs.get("spec") or {}).get("replicas", 1)
        diff = len(pods) - want
        if diff < 0:
            n = min(-diff, self.BURST)
            names = [kc.generate_name(rs["metadata"]["name"] + "-") for _ in range(n)]
            self.exp.expect(key, adds=["%s/%s" % (rs["metadata"]["namespace"], x)
                                       for x in names])
            created = 0
            batch = 1
            i = 0
            # slowStartBatch: 1, 2, 4, ... creations, stopping at the first error
            while i < n:
                for name in names[i:i + batch]:
                    try:
                        pod = self.client.create(kc.PODS, self.pod_from_template(rs, name))
                        self.pods.mutate(pod)
                        created += 1
                    except ApiError as e:
                        for rest in names[i:]:
                            self.exp.lower_add(key, "%s/%s" % (rs["metadata"]["namespace"],
                                                                rest))
                        if e.already_exists:
                            continue
                        self.events.event(rs, "Warning", "FailedCreate",
                                          "Error creating: %s" % e.message)
                        raise
                    self.events.event(rs, "Normal", "SuccessfulCreate",
                                      "Created pod: %s" % name)
                i += batch
                batch *= 2
            log.info("replicaset %s: created %d pod(s)", key, created)
        elif diff > 0:
            victims = sorted(pods, key=pod_rank_key)[:diff]
            self.exp.expect(key, dels=[key_of(p) for p in victims])
            for p in victims:
                try:
                    self.client.delete(kc.PODS, p["metadata"]["name"], p["metadata"]["namespace"],
                                       preconditions={"uid": uid_of(p)})
                    self.events.event(rs, "Normal", "SuccessfulDelete",
                                      "Deleted pod: %s" % p["metadata"]["name"])
                except ApiError as e:
                    if not e.not_found and e.code != 409:
                        raise
            log.info("replicaset %s: deleted %d pod(s)", key, len(victims))

    @staticmethod
    def pod_from_template(owner, name):
        tmpl = json_copy((owner.get("spec") or {}).get("template") or {})
        tmd = tmpl.get("metadata") or {}
        meta = {"name": name, "generateName": owner["metadata"]["name"] + "-",
                "namespace": owner["metadata"]["namespace"],
                "labels": dict(tmd.get("labels") or {}),
                "ownerReferences": [owner_ref(owner)]}
        if tmd.get("annotations"):
            meta["annotations"] = dict(tmd["annotations"])
        if tmd.get("finalizers"):
            meta["finalizers"] = list(tmd["finalizers"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                "spec": tmpl.get("spec") or {}}

    def update_status(self, rs, pods, err):
        spec = rs.get("spec") or {}
        mrs = spec.get("minReadySeconds") or 0
        tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        now = time.time()
        st = dict(rs.get("status") or {})
        new = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(
                1 for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v
                                       for k, v in tmpl_labels.items())),
            "readyReplicas": sum(1 for p in pods if is_pod_ready(p)),
            "availableReplicas": sum(1 for p in pods if is_pod_available(p, mrs, now)),
            "observedGeneration": rs["metadata"].get("generation", 0),
        }
        conds = [c for c in st.get("conditions") or [] if c.get("type") != "ReplicaFailure"]
        if err is not None:
            reason = "FailedCreate" if len(pods) < spec.get("replicas", 1) else "FailedDelete"
            conds.append(condition("ReplicaFailure", "True", reason, err.message,
                                   update_time=False))
        cur = {k: st.get(k, 0) for k in new}
        if cur == new and (st.get("conditions") or []) == conds:
            return
        out = {k: v for k, v in new.items() if v or k in ("replicas", "observedGeneration")}
        if conds:
            out["conditions"] = conds
        obj = dict(rs)
        obj["status"] = out
        updated = self.client.update_status(kc.REPLICASETS, obj)
        self.rs.mutate(updated)


# ---- Deployment controller (pkg/controller/deployment) --------------------------------------


def d_replicas(d):
    r = (d.get("spec") or {}).get("replicas")
    return 1 if r is None else int(r)


def rs_replicas(rs):
    if rs is None:
        return 0
    r = (rs.get("spec") or {}).get("replicas")
    return 1 if r is None else int(r)


def rs_status(rs, field):
    if rs is None:
        return 0
    return int((rs.get("status") or {}).get(field) or 0)


def strategy(d):
    s = (d.get("spec") or {}).get("strategy") or {}
    return s.get("type") or "RollingUpdate"


def is_rolling(d):
    return strategy(d) == "RollingUpdate"


def resolve_fenceposts(d):
    ru = ((d.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    desired = d_replicas(d)
    surge = int_or_percent(ru.get("maxSurge", "25%"), desired, True)
    unavail = int_or_percent(ru.get("maxUnavailable", "25%"), desired, False)
    if surge == 0 and unavail == 0:
        unavail = 1
    return surge, unavail


def max_surge(d):
    if not is_rolling(d):
        return 0
    return resolve_fenceposts(d)[0]


def max_unavailable(d):
    if not is_rolling(d) or d_replicas(d) == 0:
        return 0
    u = resolve_fenceposts(d)[1]
    return min(u, d_replicas(d))


def revision_of(obj):
    try:
        return int(obj.get("metadata", {}).get("annotations", {}).get(REVISION, "0"))
    except (TypeError, ValueError):
        return 0


def created_key(obj):
    return (obj.get("metadata", {}).get("creationTimestamp") or "", obj["metadata"]["name"])


def active_rss(rss):
    return [r for r in rss if r is not None and rs_replicas(r) > 0]


def sum_spec(rss):
    return sum(rs_replicas(r) for r in rss if r is not None)


def sum_status(rss, field):
    return sum(rs_status(r, field) for r in rss if r is not None)


def has_progress_deadline(d):
    pds = (d.get("spec") or {}).get("progressDeadlineSeconds", 600)
    return pds is not None and pds != 2147483647


def deployment_complete(d, status):
    want = d_replicas(d)
    return (status.get("updatedReplicas", 0) == want and status.get("replicas", 0) == want and
            status.get("availableReplicas", 0) == want and
            status.get("observedGeneration", 0) >= d["metadata"].get("generation", 0))


def deployment_progressing(d, new):
    old = d.get("status") or {}
    old_old = old.get("replicas", 0) - old.get("updatedReplicas", 0)
    new_old = new.get("replicas", 0) - new.get("updatedReplicas", 0)
    return (new.get("updatedReplicas", 0) > old.get("updatedReplicas", 0) or new_old < old_old or
            new.get("readyReplicas", 0) > old.get("readyReplicas", 0) or
            new.get("availableReplicas", 0) > old.get("availableReplicas", 0))


def deployment_timed_out(d, new):
    if not has_progress_deadline(d):
        return False
    c = get_condition(new, "Progressing")
    if c is None or c.get("reason") == NEW_RS_AVAILABLE_REASON:
        return False
    if c.get("reason") == TIMED_OUT_REASON:
        return True
    frm = parse_time(c.get("lastUpdateTime"))
    pds = (d.get("spec") or {}).get("progressDeadlineSeconds", 600)
    return frm is not None and frm + pds < time.time()


class DeploymentController(Controller):
    name = "deployment-controller"
    resync = 15.0

    def __init__(self, ctx):
        super().__init__(ctx)
        self.deps = ctx.informer(kc.DEPLOYMENTS)
        self.rs = ctx.informer(kc.REPLICASETS)
        self.pods = ctx.pods
        self.events = ctx.recorder("deployment-controller")
        self.deps.add_handler(lambda o: self.queue.add(key_of(o)),
                              lambda o, n: self.queue.add(key_of(n)),
                              lambda o: self.queue.add(key_of(o)))
        self.rs.add_handler(self._rs_event, lambda o, n: self._rs_changed(o, n), self._rs_event)
        self.pods.add_handler(None, None, self._pod_deleted)

    def all_keys(self):
        return self.deps.keys()

    def _owners_for(self, rs):
        ref = controller_ref(rs)
        ns = rs["metadata"].get("namespace")
        if ref is not None:
            if ref.get("kind") == "Deployment":
                d = self.deps.get(ns, ref.get("name"))
                if d is not None and uid_of(d) == ref.get("uid"):
                    return [key_of(d)]
            return []
        out = []
        for d in self.deps.list(ns):
            sel = selector_of(d)
            if sel is not None and not sel.empty and \
                    sel.matches(rs["metadata"].get("labels") or {}):
                out.append(key_of(d))
        return out

    def _rs_event(self, rs):
        for k in self._owners_for(rs):
            self.queue.add(k)

    def _rs_changed(self, old, new):
        keys = set(self._owners_for(new)) | set(self._owners_for(old))
        for k in keys:
            self.queue.add(k)

    def _pod_deleted(self, pod):
        # Recreate waits for old pods to go away
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.rs.get(pod["metadata"].get("namespace"), ref.get("name"))
        if rs is not None:
            for k in self._owners_for(rs):
                d = self.deps.get(k)
                if d is not None and strategy(d) == "Recreate":
                    self.queue.add(k)

    # -- getReplicaSetsForDeployment: claim (adopt / release) ReplicaSets
    def rs_for_deployment(self, d):
        sel = selector_of(d)
        uid = uid_of(d)
        out = []
        deleting = bool(d["metadata"].get("deletionTimestamp"))
        can_adopt = AdoptionCheck(self.client, kc.DEPLOYMENTS, d)
        for rs in self.rs.list(d["metadata"]["namespace"]):
            ref = controller_ref(rs)
            labels = rs["metadata"].get("labels") or {}
            if ref is not None:
                if ref.get("uid") != uid:
                    continue
                if sel is not None and sel.matches(labels):
                    out.append(rs)
                elif not deleting:
                    refs = [r for r in rs["metadata"].get("ownerReferences") or []
                            if r.get("uid") != uid]
                    self.client.patch(kc.REPLICASETS, rs["metadata"]["name"],
                                      {"metadata": {"ownerReferences": refs or None,
                                                    "uid": uid_of(rs)}},
                                      rs["metadata"]["namespace"])
                continue
            if deleting or sel is None or sel.empty or not sel.matches(labels) or \
                    rs["metadata"].get("deletionTimestamp"):
                continue
            if not can_adopt():
                continue
            refs = list(rs["metadata"].get("ownerReferences") or []) + [owner_ref(d)]
            try:
                rs = self.client.patch(kc.REPLICASETS, rs["metadata"]["name"],
                                       {"metadata": {"ownerReferences": refs,
                                                     "uid": uid_of(rs)}},
                                       rs["metadata"]["namespace"])
                self.rs.mutate(rs)
                out.append(rs)
            except ApiError as e:
                if not e.not_found:
                    raise
        return out

    def sync(self, key):
        d = self.deps.get(key)
        if d is None:
            return None
        d = json_copy(d)
        d.setdefault("status", {})
        sel = (d.get("spec") or {}).get("selector")
        if sel == {} or sel is None:
            if d["status"].get("observedGeneration", 0) < d["metadata"].get("generation", 0):
                d["status"]["observedGeneration"] = d["metadata"].get("generation", 0)
                self.deps.mutate(self.client.update_status(kc.DEPLOYMENTS, d))
            return None
        rss = self.rs_for_deployment(d)
        if d["metadata"].get("deletionTimestamp"):
            new_rs, old = self.get_all_rs(d, rss, False)
            self.sync_status(d, old + [new_rs], new_rs)
            return None
        self.check_paused_conditions(d)
        spec = d.get("spec") or {}
        if spec.get("paused"):
            self.sync_scale(d, rss)
            return None
        if self.is_scaling_event(d, rss):
            self.sync_scale(d, rss)
            return None
        if strategy(d) == "Recreate":
            self.rollout_recreate(d, rss)
        else:
            self.rollout_rolling(d, rss)
        # progress deadline / minReadySeconds: look again later (requeueStuckDeployment)
        st = (self.deps.get(key) or d).get("status") or {}
        if not deployment_complete(d, st) and has_progress_deadline(d):
            return 5.0
        return None

    # -- checkPausedConditions
    def check_paused_conditions(self, d):
        if not has_progress_deadline(d):
            return
        c = get_condition(d["status"], "Progressing")
        if c is not None and c.get("reason") == TIMED_OUT_REASON:
            return
        paused_exists = c is not None and c.get("reason") == PAUSED_REASON
        paused = bool((d.get("spec") or {}).get("paused"))
        if paused and not paused_exists:
            set_condition(d["status"], condition("Progressing", "Unknown", PAUSED_REASON,
                                                 "Deployment is paused"))
        elif not paused and paused_exists:
            set_condition(d["status"], condition("Progressing", "Unknown", RESUMED_REASON,
                                                 "Deployment is resumed"))
        else:
            return
        self.update_deployment_status(d)

    def update_deployment_status(self, d):
        upd = self.client.update_status(kc.DEPLOYMENTS, d)
        self.deps.mutate(upd)
        d["metadata"]["resourceVersion"] = upd["metadata"].get("resourceVersion")
        return upd

    # -- getAllReplicaSetsAndSyncRevision / getNewReplicaSet
    def get_all_rs(self, d, rss, create):
        tmpl = (d.get("spec") or {}).get("template") or {}
        new_rs = None
        for rs in sorted(rss, key=created_key):
            if equal_ignore_hash((rs.get("spec") or {}).get("template"), tmpl):
                new_rs = rs
                break
        old = [rs for rs in rss if rs is not new_rs]
        max_old = max([revision_of(r) for r in old] or [0])
        new_revision = str(max_old + 1)
        if new_rs is not None:
            rs_copy = json_copy(new_rs)
            changed = self.set_new_rs_annotations(d, rs_copy, new_revision, True)
            mrs = (d.get("spec") or {}).get("minReadySeconds") or 0
            if changed or (rs_copy.get("spec") or {}).get("minReadySeconds", 0) != mrs:
                rs_copy.setdefault("spec", {})["minReadySeconds"] = mrs
                rs_copy = self.client.update(kc.REPLICASETS, rs_copy)
                self.rs.mutate(rs_copy)
            self.set_deployment_revision(d, rs_copy["metadata"].get("annotations", {}).get(
                REVISION))
            if has_progress_deadline(d) and get_condition(d["status"], "Progressing") is None:
                set_condition(d["status"], condition(
                    "Progressing", "True", FOUND_NEW_RS_REASON,
                    'Found new replica set "%s"' % rs_copy["metadata"]["name"]))
                self.update_deployment_status(d)
            return rs_copy, old
        if not create:
            return None, old
        collision = d["status"].get("collisionCount")
        h = template_hash(tmpl, collision)
        new_tmpl = json_copy(tmpl)
        new_tmpl.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        sel = json_copy((d.get("spec") or {}).get("selector") or {})
        sel.setdefault("matchLabels", {})[HASH_LABEL] = h
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": "%s-%s" % (d["metadata"]["name"], h),
                           "namespace": d["metadata"]["namespace"],
                           "ownerReferences": [owner_ref(d)],
                           "labels": dict(new_tmpl["metadata"]["labels"])},
              "spec": {"replicas": 0,
                       "minReadySeconds": (d.get("spec") or {}).get("minReadySeconds") or 0,
                       "selector": sel, "template": new_tmpl}}
        rs["spec"]["replicas"] = self.new_rs_new_replicas(d, old + [rs], rs)
        self.set_new_rs_annotations(d, rs, new_revision, False)
        already = False
        try:
            created = self.client.create(kc.REPLICASETS, rs)
        except ApiError as e:
            if not e.already_exists:
                if has_progress_deadline(d):
                    set_condition(d["status"], condition("Progressing", "False", FAILED_RS_CREATE,
                                                         "Failed to create new replica set %s: %s"
                                                         % (rs["metadata"]["name"], e.message)))
                    self.update_deployment_status(d)
                raise
            created = self.client.get(kc.REPLICASETS, rs["metadata"]["name"],
                                      d["metadata"]["namespace"])
            ref = controller_ref(created)
            if ref is not None and ref.get("uid") == uid_of(d):
                # ours (our cache was behind, or the template was normalised differently):
                # use it rather than bumping collisionCount forever
                already = True
            elif equal_ignore_hash((created.get("spec") or {}).get("template"), tmpl):
                already = True
            else:
                d["status"]["collisionCount"] = int(collision or 0) + 1
                self.update_deployment_status(d)
                log.info("deployment %s: hash collision on %s; collisionCount=%d",
                         key_of(d), rs["metadata"]["name"], d["status"]["collisionCount"])
                raise ApiError(409, {"reason": "Conflict", "message": "hash collision"})
        self.rs.mutate(created)
        if not already:
            self.events.event(d, "Normal", "ScalingReplicaSet",
                              "Scaled up replica set %s to %d from 0" % (
                                  created["metadata"]["name"], rs_replicas(created)))
            if has_progress_deadline(d):
                set_condition(d["status"], condition(
                    "Progressing", "True", NEW_RS_REASON,
                    'Created new replica set "%s"' % created["metadata"]["name"]))
        self.set_deployment_revision(d, new_revision)
        if not already:
            self.update_deployment_status(d)
        return created, old

    def set_deployment_revision(self, d, rev):
        if not rev:
            return
        ann = d["metadata"].get("annotations") or {}
        if ann.get(REVISION) == rev:
            return
        upd = self.client.patch(kc.DEPLOYMENTS, d["metadata"]["name"],
                                {"metadata": {"annotations": {REVISION: rev}}},
                                d["metadata"]["namespace"])
        self.deps.mutate(upd)
        d["metadata"].setdefault("annotations", {})[REVISION] = rev
        d["metadata"]["resourceVersion"] = upd["metadata"].get("resourceVersion")

    def set_new_rs_annotations(self, d, rs, new_revision, exists):
        changed = False
        ann = rs["metadata"].setdefault("annotations", {})
        for k, v in (d["metadata"].get("annotations") or {}).items():
            if k in ANNOTATIONS_TO_SKIP or ann.get(k) == v:
                continue
            ann[k] = v
            changed = True
        old_rev = ann.get(REVISION)
        try:
            old_int = int(old_rev) if old_rev else 0
        except ValueError:
            return changed
        new_int = int(new_revision)
        if old_int < new_int:
            ann[REVISION] = new_revision
            changed = True
            if old_rev:
                hist = ann.get(REVISION_HISTORY, "")
                revs = [r for r in hist.split(",") if r] + [old_rev]
                while len(",".join(revs)) > MAX_REV_HISTORY_CHARS and len(revs) > 1:
                    revs.pop(0)
                ann[REVISION_HISTORY] = ",".join(revs)
        if not exists:
            if self.set_replicas_annotations(rs, d_replicas(d), d_replicas(d) + max_surge(d)):
                changed = True
        return changed

    @staticmethod
    def set_replicas_annotations(rs, desired, max_replicas):
        ann = rs["metadata"].setdefault("annotations", {})
        changed = False
        if ann.get(DESIRED_REPLICAS) != str(desired):
            ann[DESIRED_REPLICAS] = str(desired)
            changed = True
        if ann.get(MAX_REPLICAS) != str(max_replicas):
            ann[MAX_REPLICAS] = str(max_replicas)
            changed = True
        return changed

    @staticmethod
    def replicas_annotations_need_update(rs, desired, max_replicas):
        ann = rs["metadata"].get("annotations") or {}
        return ann.get(DESIRED_REPLICAS) != str(desired) or \
            ann.get(MAX_REPLICAS) != str(max_replicas)

    @staticmethod
    def new_rs_new_replicas(d, all_rss, new_rs):
        """NewRSNewReplicas."""
        if is_rolling(d):
            surge = max_surge(d)
            current = sum_spec(all_rss)
            max_total = d_replicas(d) + surge
            if current >= max_total:
                return rs_replicas(new_rs)
            up = min(max_total - current, d_replicas(d) - rs_replicas(new_rs))
            return rs_replicas(new_rs) + up
        return d_replicas(d)

    # -- scaleReplicaSet
    def scale_rs(self, rs, new_scale, d, event=True):
        size_changed = rs_replicas(rs) != new_scale
        desired = d_replicas(d)
        maxr = desired + max_surge(d)
        if not size_changed and not self.replicas_annotations_need_update(rs, desired, maxr):
            return False, rs
        old = rs_replicas(rs)
        c = json_copy(rs)
        c.setdefault("spec", {})["replicas"] = new_scale
        self.set_replicas_annotations(c, desired, maxr)
        upd = self.client.update(kc.REPLICASETS, c)
        self.rs.mutate(upd)
        if size_changed and event:
            self.events.event(d, "Normal", "ScalingReplicaSet", "Scaled %s replica set %s to %d "
                              "from %d" % ("up" if new_scale > old else "down",
                                           rs["metadata"]["name"], new_scale, old))
            log.info("deployment %s: scaled %s %d -> %d", key_of(d), rs["metadata"]["name"],
                     old, new_scale)
        return size_changed, upd

    # -- rolloutRolling
    def rollout_rolling(self, d, rss):
        new_rs, old = self.get_all_rs(d, rss, True)
        all_rss = old + [new_rs]
        if self.reconcile_new_rs(all_rss, new_rs, d):
            return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))
        new_rs = self._fresh1(new_rs)
        if self.reconcile_old_rss(self._fresh(all_rss), active_rss(self._fresh(old)), new_rs, d):
            return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))
        if deployment_complete(d, d["status"]):
            self.cleanup(d, self._fresh(old))
        return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))

    def _fresh1(self, rs):
        if rs is None:
            return None
        cur = self.rs.get(key_of(rs))
        if cur is not None and kc.rv_int(cur) >= kc.rv_int(rs):
            return cur
        return rs

    def _fresh(self, rss):
        return [self._fresh1(r) for r in rss if r is not None]

    def reconcile_new_rs(self, all_rss, new_rs, d):
        want = d_replicas(d)
        if rs_replicas(new_rs) == want:
            return False
        if rs_replicas(new_rs) > want:
            return self.scale_rs(new_rs, want, d)[0]
        n = self.new_rs_new_replicas(d, all_rss, new_rs)
        return self.scale_rs(new_rs, n, d)[0]

    def reconcile_old_rss(self, all_rss, old_rss, new_rs, d):
        old_count = sum_spec(old_rss)
        if old_count == 0:
            return False
        all_count = sum_spec(all_rss)
        min_available = d_replicas(d) - max_unavailable(d)
        new_unavailable = rs_replicas(new_rs) - rs_status(new_rs, "availableReplicas")
        max_scaled_down = all_count - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        # cleanupUnhealthyReplicas
        old_rss = sorted(old_rss, key=created_key)
        total = 0
        fresh = []
        for rs in old_rss:
            if total >= max_scaled_down or rs_replicas(rs) == 0 or \
                    rs_replicas(rs) == rs_status(rs, "availableReplicas"):
                fresh.append(rs)
                continue
            n = min(max_scaled_down - total, rs_replicas(rs) - rs_status(rs, "availableReplicas"))
            _, rs = self.scale_rs(rs, rs_replicas(rs) - n, d)
            total += n
            fresh.append(rs)
        # scaleDownOldReplicaSetsForRollingUpdate
        all_rss = fresh + [new_rs]
        available = sum_status(all_rss, "availableReplicas")
        scaled = 0
        if available > min_available:
            to_scale = available - min_available
            for rs in sorted(fresh, key=created_key):
                if scaled >= to_scale:
                    break
                if rs_replicas(rs) == 0:
                    continue
                n = min(rs_replicas(rs), to_scale - scaled)
                self.scale_rs(rs, rs_replicas(rs) - n, d)
                scaled += n
        return total + scaled > 0

    # -- rolloutRecreate
    def rollout_recreate(self, d, rss):
        new_rs, old = self.get_all_rs(d, rss, False)
        all_rss = old + ([new_rs] if new_rs else [])
        scaled = False
        for rs in active_rss(old):
            if self.scale_rs(rs, 0, d)[0]:
                scaled = True
        if scaled:
            return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))
        if self.old_pods_running(new_rs, self._fresh(old)):
            return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))
        if new_rs is None:
            new_rs, old = self.get_all_rs(d, rss, True)
            all_rss = old + [new_rs]
        if rs_replicas(new_rs) != d_replicas(d):
            self.scale_rs(new_rs, d_replicas(d), d)
        if deployment_complete(d, d["status"]):
            self.cleanup(d, self._fresh(old))
        return self.sync_rollout_status(d, self._fresh(all_rss), self._fresh1(new_rs))

    def old_pods_running(self, new_rs, old):
        if any(rs_status(r, "replicas") > 0 for r in old):
            return True
        old_uids = {uid_of(r) for r in old}
        for p in self.pods.list(None if not old else old[0]["metadata"]["namespace"]):
            ref = controller_ref(p)
            if ref is None or ref.get("uid") not in old_uids:
                continue
            if (p.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
                continue
            return True
        return False

    # -- isScalingEvent / sync (scale)
    def is_scaling_event(self, d, rss):
        new_rs, old = self.get_all_rs(d, rss, False)
        for rs in active_rss(old + [new_rs]):
            desired = (rs["metadata"].get("annotations") or {}).get(DESIRED_REPLICAS)
            if desired is None:
                continue
            try:
                if int(desired) != d_replicas(d):
                    return True
            except ValueError:
                continue
        return False

    def sync_scale(self, d, rss):
        new_rs, old = self.get_all_rs(d, rss, False)
        self.scale(d, new_rs, old)
        new_rs = self._fresh1(new_rs)
        old = self._fresh(old)
        if (d.get("spec") or {}).get("paused"):
            self.cleanup(d, old)
        self.sync_status(d, old + [new_rs], new_rs)

    def scale(self, d, new_rs, old):
        active = active_rss(old + [new_rs])
        # FindActiveOrLatest
        target = None
        if len(active) == 1:
            target = active[0]
        elif not active:
            cand = [r for r in [new_rs] + old if r is not None]
            if cand:
                target = new_rs if new_rs is not None else sorted(cand, key=created_key)[-1]
        if target is not None:
            if rs_replicas(target) != d_replicas(d):
                self.scale_rs(target, d_replicas(d), d)
            return
        # IsSaturated
        if new_rs is not None and rs_replicas(new_rs) == d_replicas(d) and \
                (new_rs["metadata"].get("annotations") or {}).get(DESIRED_REPLICAS) == \
                str(d_replicas(d)) and rs_status(new_rs, "availableReplicas") == d_replicas(d):
            for rs in active_rss(old):
                self.scale_rs(rs, 0, d)
            return
        if not is_rolling(d):
            return
        all_rss = active
        all_count = sum_spec(all_rss)
        allowed = d_replicas(d) + max_surge(d) if d_replicas(d) > 0 else 0
        to_add = allowed - all_count
        if to_add > 0:  # ReplicaSetsBySizeNewer
            all_rss = sorted(all_rss, key=lambda r: (rs_replicas(r), created_key(r)),
                             reverse=True)
        elif to_add < 0:  # ReplicaSetsBySizeOlder
            all_rss = sorted(all_rss, key=lambda r: (-rs_replicas(r), created_key(r)))
        added = 0
        sizes = {}
        for rs in all_rss:
            if to_add != 0:
                p = self.get_proportion(rs, d, to_add, added)
                sizes[rs["metadata"]["name"]] = rs_replicas(rs) + p
                added += p
            else:
                sizes[rs["metadata"]["name"]] = rs_replicas(rs)
        for i, rs in enumerate(all_rss):
            n = rs["metadata"]["name"]
            if i == 0 and to_add != 0:
                sizes[n] = max(0, sizes[n] + to_add - added)
            self.scale_rs(rs, sizes[n], d)

    @staticmethod
    def get_proportion(rs, d, to_add, added):
        if rs is None or rs_replicas(rs) == 0 or to_add == 0 or to_add == added:
            return 0
        if d_replicas(d) == 0:
            frac = -rs_replicas(rs)
        else:
            dep_replicas = d_replicas(d) + max_surge(d)
            try:
                annotated = int((rs["metadata"].get("annotations") or {})[MAX_REPLICAS])
            except (KeyError, ValueError):
                annotated = (d.get("status") or {}).get("replicas", 0)
            if annotated == 0:
                frac = 0
            else:
                frac = int(math.floor(rs_replicas(rs) * dep_replicas / annotated + 0.5)) - \
                    rs_replicas(rs)
        allowed = to_add - added
        return min(frac, allowed) if to_add > 0 else max(frac, allowed)

    # -- cleanupDeployment
    def cleanup(self, d, old):
        limit = (d.get("spec") or {}).get("revisionHistoryLimit", 10)
        if limit is None:
            return
        alive = [r for r in old if r is not None and not r["metadata"].get("deletionTimestamp")]
        diff = len(alive) - int(limit)
        if diff <= 0:
            return
        for rs in sorted(alive, key=lambda r: (revision_of(r), created_key(r)))[:diff]:
            if rs_status(rs, "replicas") != 0 or rs_replicas(rs) != 0 or \
                    rs["metadata"].get("generation", 0) > rs_status(rs, "observedGeneration"):
                continue
            try:
                self.client.delete(kc.REPLICASETS, rs["metadata"]["name"],
                                   rs["metadata"]["namespace"],
                                   preconditions={"uid": uid_of(rs)})
                log.info("deployment %s: cleaned up old replica set %s", key_of(d),
                         rs["metadata"]["name"])
            except ApiError as e:
                if not e.not_found:
                    raise

    # -- calculateStatus / syncDeploymentStatus / syncRolloutStatus
    def calculate_status(self, d, all_rss, new_rs):
        available = sum_status(all_rss, "availableReplicas")
        total = sum_spec(all_rss)
        st = {
            "observedGeneration": d["metadata"].get("generation", 0),
            "replicas": sum_status(all_rss, "replicas"),
            "updatedReplicas": sum_status([new_rs], "replicas"),
            "readyReplicas": sum_status(all_rss, "readyReplicas"),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available),
        }
        if d["status"].get("collisionCount") is not None:
            st["collisionCount"] = d["status"]["collisionCount"]
        st["conditions"] = [dict(c) for c in d["status"].get("conditions") or []]
        if available >= d_replicas(d) - max_unavailable(d):
            set_condition(st, condition("Available", "True", MIN_AVAILABLE,
                                        "Deployment has minimum availability."))
        else:
            set_condition(st, condition("Available", "False", MIN_UNAVAILABLE,
                                        "Deployment does not have minimum availability."))
        return st

    def _write_status(self, d, st):
        cur = d.get("status") or {}
        norm = {k: v for k, v in st.items() if v not in (0, None, []) or k in (
            "observedGeneration",)}
        curn = {k: v for k, v in cur.items() if v not in (0, None, []) or k in (
            "observedGeneration",)}
        if norm == curn:
            return
        d["status"] = norm
        self.update_deployment_status(d)

    def sync_status(self, d, all_rss, new_rs):
        all_rss = [r for r in all_rss if r is not None]
        self._write_status(d, self.calculate_status(d, all_rss, new_rs))

    def sync_rollout_status(self, d, all_rss, new_rs):
        all_rss = [r for r in all_rss if r is not None]
        st = self.calculate_status(d, all_rss, new_rs)
        if not has_progress_deadline(d):
            remove_condition(st, "Progressing")
        cur = get_condition(d["status"], "Progressing")
        complete = st["replicas"] == st["updatedReplicas"] and cur is not None and \
            cur.get("reason") == NEW_RS_AVAILABLE_REASON
        if has_progress_deadline(d) and not complete:
            rsn = new_rs["metadata"]["name"] if new_rs is not None else None
            if deployment_complete(d, st):
                msg = ('ReplicaSet "%s" has successfully progressed.' % rsn if rsn else
                       'Deployment "%s" has successfully progressed.' % d["metadata"]["name"])
                set_condition(st, condition("Progressing", "True", NEW_RS_AVAILABLE_REASON, msg))
            elif deployment_progressing(d, st):
                msg = ('ReplicaSet "%s" is progressing.' % rsn if rsn else
                       'Deployment "%s" is progressing.' % d["metadata"]["name"])
                c = condition("Progressing", "True", RS_UPDATED_REASON, msg)
                if cur is not None:
                    if cur.get("status") == "True":
                        c["lastTransitionTime"] = cur.get("lastTransitionTime")
                    remove_condition(st, "Progressing")
                st["conditions"].append(c)
            elif deployment_timed_out(d, st):
                msg = ('ReplicaSet "%s" has timed out progressing.' % rsn if rsn else
                       'Deployment "%s" has timed out progressing.' % d["metadata"]["name"])
                set_condition(st, condition("Progressing", "False", TIMED_OUT_REASON, msg))
        # getReplicaFailures: surface a ReplicaFailure of the replica sets
        for rs in ([new_rs] if new_rs is not None else []) + all_rss:
            rc = get_condition(rs.get("status"), "ReplicaFailure")
            if rc is not None and rc.get("status") == "True":
                set_condition(st, condition("ReplicaFailure", "True", rc.get("reason", ""),
                                            rc.get("message", "")))
                break
        else:
            remove_condition(st, "ReplicaFailure")
        self._write_status(d, st)


# ---- DaemonSet controller (pkg/controller/daemon) -------------------------------------------


class DaemonSetController(Controller):
    name = "daemonset-controller"
    resync = 15.0

    def __init__(self, ctx):
        super().__init__(ctx)
        self.ds = ctx.informer(kc.DAEMONSETS)
        self.pods = ctx.pods
        self.nodes = ctx.nodes
        self.exp = Expectations()
        self.events = ctx.recorder("daemonset-controller")
        self.ds.add_handler(lambda o: self.queue.add(key_of(o)),
                            lambda o, n: self.queue.add(key_of(n)),
                            lambda o: (self.exp.delete(key_of(o)), self.queue.add(key_of(o))))
        self.pods.add_handler(self._pod_event, lambda o, n: self._pod_event(n), self._pod_event)
        self.nodes.add_handler(lambda n: self._all(), self._node_changed, lambda n: self._all())

    def all_keys(self):
        return self.ds.keys()

    def _all(self):
        for k in self.ds.keys():
            self.queue.add(k)

    def _node_changed(self, old, new):
        if old.get("metadata", {}).get("labels") != new.get("metadata", {}).get("labels") or \
                node_ready(old) != node_ready(new) or \
                (old.get("spec") or {}) != (new.get("spec") or {}):
            self._all()

    def _pod_event(self, pod):
        ref = controller_ref(pod)
        if ref is not None and ref.get("kind") == "DaemonSet":
            self.queue.add("%s/%s" % (pod["metadata"].get("namespace"), ref.get("name")))
            if not is_pod_ready(pod):
                return
            ds = self.ds.get(pod["metadata"].get("namespace"), ref.get("name"))
            mrs = ((ds or {}).get("spec") or {}).get("minReadySeconds") or 0
            if mrs:
                self.queue.add_after(key_of(ds), mrs + 0.1)

    def should_run(self, ds, node):
        from lk.scheduler import node_matches_pod
        if not node_ready(node):
            return False
        tmpl = (ds.get("spec") or {}).get("template") or {}
        return node_matches_pod({"spec": tmpl.get("spec") or {}}, node)

    def sync(self, key):
        ds = self.ds.get(key)
        if ds is None:
            self.exp.delete(key)
            return None
        ns = ds["metadata"]["namespace"]
        sel = selector_of(ds)
        if sel is None or sel.empty:
            return None
        spec = ds.get("spec") or {}
        tmpl = spec.get("template") or {}
        h = template_hash(tmpl, (ds.get("status") or {}).get("collisionCount"))
        uid = uid_of(ds)
        pods = []
        for p in self.pods.list(ns):
            ref = controller_ref(p)
            if ref is not None and ref.get("uid") == uid and \
                    not p["metadata"].get("deletionTimestamp"):
                pods.append(p)
        by_node = {}
        for p in pods:
            by_node.setdefault((p.get("spec") or {}).get("nodeName") or "", []).append(p)
        nodes = sorted(self.nodes.list(), key=lambda n: n["metadata"]["name"])
        wanted = [n["metadata"]["name"] for n in nodes if self.should_run(ds, n)]
        needs_sync = self.exp.satisfied(key, self.pods)
        if needs_sync and not ds["metadata"].get("deletionTimestamp"):
            to_create, to_delete = [], []
            for n in wanted:
                ps = [p for p in by_node.get(n, []) if not kc.is_pod_terminal(p)]
                failed = [p for p in by_node.get(n, []) if kc.is_pod_terminal(p)]
                to_delete.extend(failed)
                if not ps:
                    to_create.append(n)
                elif len(ps) > 1:
                    # keep the oldest (prefer the updated one)
                    ps.sort(key=lambda p: ((p["metadata"].get("labels") or {}).get(
                        DS_HASH_LABEL) != h, created_key(p)))
                    to_delete.extend(ps[1:])
            for n, ps in by_node.items():
                if n not in wanted:
                    to_delete.extend(ps)
            # rolling update (maxSurge 0): replace old pods within maxUnavailable
            ustrat = spec.get("updateStrategy") or {}
            if (ustrat.get("type") or "RollingUpdate") == "RollingUpdate":
                mu = int_or_percent((ustrat.get("rollingUpdate") or {}).get("maxUnavailable", 1),
                                    len(wanted), True)
                if mu == 0:
                    mu = 1
                mrs = spec.get("minReadySeconds") or 0
                now = time.time()
                unavailable = 0
                allowed, candidates = [], []
                for n in wanted:
                    ps = [p for p in by_node.get(n, []) if p not in to_delete]
                    if len(ps) != 1:
                        unavailable += 1
                        continue
                    p = ps[0]
                    updated = (p["metadata"].get("labels") or {}).get(DS_HASH_LABEL) == h
                    if updated:
                        if not is_pod_available(p, mrs, now):
                            unavailable += 1
                    elif not is_pod_available(p, mrs, now):
                        allowed.append(p)
                    elif unavailable < mu:
                        candidates.append(p)
                remaining = max(0, min(mu - unavailable, len(candidates)))
                to_delete.extend(allowed + candidates[:remaining])
            self.sync_nodes(ds, h, to_create, to_delete)
        self.update_status(ds, h, wanted, by_node)
        return None if needs_sync else 1.0

    def sync_nodes(self, ds, h, to_create, to_delete):
        key = key_of(ds)
        ns = ds["metadata"]["namespace"]
        seen = set()
        dels = [p for p in to_delete if not (key_of(p) in seen or seen.add(key_of(p)))]
        names = {n: kc.generate_name(ds["metadata"]["name"] + "-") for n in to_create}
        self.exp.expect(key, adds=["%s/%s" % (ns, x) for x in names.values()],
                        dels=[key_of(p) for p in dels])
        for node, name in names.items():
            pod = ReplicaSetController.pod_from_template(ds, name)
            pod["metadata"]["labels"][DS_HASH_LABEL] = h
            pod["metadata"]["labels"][DS_GEN_LABEL] = str(ds["metadata"].get("generation", 1))
            pod["spec"]["nodeName"] = node
            try:
                self.pods.mutate(self.client.create(kc.PODS, pod))
                self.events.event(ds, "Normal", "SuccessfulCreate", "Created pod: %s" % name)
            except ApiError as e:
                self.exp.lower_add(key, "%s/%s" % (ns, name))
                if not e.already_exists:
                    self.events.event(ds, "Warning", "FailedCreate", "Error creating: %s" %
                                      e.message)
                    raise
        for p in dels:
            try:
                self.client.delete(kc.PODS, p["metadata"]["name"], ns,
                                   preconditions={"uid": uid_of(p)})
                self.events.event(ds, "Normal", "SuccessfulDelete",
                                  "Deleted pod: %s" % p["metadata"]["name"])
            except ApiError as e:
                if not e.not_found and e.code != 409:
                    raise
        if names or dels:
            log.info("daemonset %s: created %d, deleted %d pod(s)", key, len(names), len(dels))

    def update_status(self, ds, h, wanted, by_node):
        spec = ds.get("spec") or {}
        mrs = spec.get("minReadySeconds") or 0
        now = time.time()
        desired = len(wanted)
        current = ready = updated = available = 0
        misscheduled = 0
        for n, ps in by_node.items():
            active = [p for p in ps if not kc.is_pod_terminal(p)]
            if n not in wanted:
                if active:
                    misscheduled += 1
                continue
            if not active:
                continue
            current += 1
            p = sorted(active, key=created_key)[0]
            if is_pod_ready(p):
                ready += 1
                if is_pod_available(p, mrs, now):
                    available += 1
            if any((q["metadata"].get("labels") or {}).get(DS_HASH_LABEL) == h for q in active):
                updated += 1
        new = {"currentNumberScheduled": current, "numberMisscheduled": misscheduled,
               "desiredNumberScheduled": desired, "numberReady": ready,
               "observedGeneration": ds["metadata"].get("generation", 0),
               "updatedNumberScheduled": updated, "numberAvailable": available,
               "numberUnavailable": max(0, desired - available)}
        st = ds.get("status") or {}
        if all(st.get(k, 0) == v for k, v in new.items()):
            return
        obj = json_copy(ds)
        out = dict(st)
        out.update(new)
        obj["status"] = out
        self.ds.mutate(self.client.update_status(kc.DAEMONSETS, obj))


def node_ready(node):
    c = get_condition(node.get("status"), "Ready")
    return c is not None and c.get("status") == "True"


# ---- Endpoints controller (pkg/controller/endpoint) -----------------------------------------


class EndpointsController(Controller):
    name = "endpoint-controller"
    resync = 30.0

    def __init__(self, ctx):
        super().__init__(ctx)
        self.svcs = ctx.informer(kc.SERVICES)
        self.eps = ctx.informer(kc.ENDPOINTS)
        self.pods = ctx.pods
        self.svcs.add_handler(lambda o: self.queue.add(key_of(o)),
                              lambda o, n: self.queue.add(key_of(n)),
                              lambda o: self.queue.add(key_of(o)))
        self.eps.add_handler(None, None, lambda o: self.queue.add(key_of(o)))
        self.pods.add_handler(self._pod, lambda o, n: self._pod_changed(o, n), self._pod)

    def all_keys(self):
        return self.svcs.keys()

    def _services_for(self, pod):
        ns = pod["metadata"].get("namespace")
        labels = pod["metadata"].get("labels") or {}
        out = []
        for s in self.svcs.list(ns):
            sel = (s.get("spec") or {}).get("selector")
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                out.append(key_of(s))
        return out

    def _pod(self, pod):
        for k in self._services_for(pod):
            self.queue.add(k)

    def _pod_changed(self, old, new):
        if old.get("status") == new.get("status") and \
                old["metadata"].get("labels") == new["metadata"].get("labels") and \
                old["metadata"].get("deletionTimestamp") == new["metadata"].get(
                    "deletionTimestamp"):
            return
        for k in set(self._services_for(old)) | set(self._services_for(new)):
            self.queue.add(k)

    @staticmethod
    def find_port(pod, sport):
        """podutil.FindPort: a service targetPort (number or name) -> the container port."""
        tp = sport.get("targetPort", sport.get("port"))
        proto = sport.get("protocol", "TCP")
        if isinstance(tp, int):
            return tp
        if isinstance(tp, str) and tp.isdigit():
            return int(tp)
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == tp and p.get("protocol", "TCP") == proto:
                    return p.get("containerPort")
        return None

    def sync(self, key):
        svc = self.svcs.get(key)
        ns, name = kc.split_key(key)
        if svc is None:
            # the service is gone: remove its Endpoints (kube deletes them by name)
            if self.eps.get(key) is not None:
                try:
                    self.client.delete(kc.ENDPOINTS, name, ns)
                except ApiError as e:
                    if not e.not_found:
                        raise
            return None
        spec = svc.get("spec") or {}
        sel = spec.get("selector")
        if not sel:
            return None  # endpoints of selector-less services are managed by the user
        publish = bool(spec.get("publishNotReadyAddresses"))
        subsets = {}
        for p in self.pods.list(ns):
            labels = p["metadata"].get("labels") or {}
            if not all(labels.get(k) == v for k, v in sel.items()):
                continue
            st = p.get("status") or {}
            if not st.get("podIP") or kc.is_pod_terminal(p):
                continue
            if p["metadata"].get("deletionTimestamp") and not publish:
                continue
            addr = {"ip": st["podIP"],
                    "targetRef": {"kind": "Pod", "namespace": ns,
                                  "name": p["metadata"]["name"],
                                  "uid": p["metadata"].get("uid")}}
            node = (p.get("spec") or {}).get("nodeName")
            if node:
                addr["nodeName"] = node
            hn = (p.get("spec") or {}).get("hostname")
            if hn:
                addr["hostname"] = hn
            ports = []
            for sp in spec.get("ports") or []:
                port = self.find_port(p, sp)
                if port is None:
                    continue
                e = {"port": port, "protocol": sp.get("protocol", "TCP")}
                if sp.get("name"):
                    e["name"] = sp["name"]
                if sp.get("appProtocol"):
                    e["appProtocol"] = sp["appProtocol"]
                ports.append(e)
            if spec.get("ports") and not ports:
                continue
            pk = json.dumps(sorted(ports, key=lambda e: (e.get("name", ""), e["port"])),
                            sort_keys=True)
            ready = publish or is_pod_ready(p)
            b = subsets.setdefault(pk, ([], []))
            b[0 if ready else 1].append(addr)
        out = []
        for pk in sorted(subsets):
            ready, not_ready = subsets[pk]
            ss = {}
            if ready:
                ss["addresses"] = sorted(ready, key=lambda a: a["ip"])
            if not_ready:
                ss["notReadyAddresses"] = sorted(not_ready, key=lambda a: a["ip"])
            ports = json.loads(pk)
            if ports:
                ss["ports"] = ports
            out.append(ss)
        labels = dict(svc["metadata"].get("labels") or {})
        if spec.get("clusterIP") == "None":
            labels["service.kubernetes.io/headless"] = ""
        cur = self.eps.get(key)
        if cur is not None and (cur.get("subsets") or []) == out and \
                (cur["metadata"].get("labels") or {}) == labels:
            return None
        ep = {"apiVersion": "v1", "kind": "Endpoints",
              "metadata": {"name": name, "namespace": ns,
                           "annotations": {"endpoints.kubernetes.io/last-change-trigger-time":
                                           now_rfc3339()}},
              "subsets": out}
        if labels:
            ep["metadata"]["labels"] = labels
        if cur is None:
            try:
                self.eps.mutate(self.client.create(kc.ENDPOINTS, ep))
                return None
            except ApiError as e:
                if not e.already_exists:
                    raise
                cur = self.client.get(kc.ENDPOINTS, name, ns)
        ep["metadata"]["resourceVersion"] = cur["metadata"].get("resourceVersion")
        ann = dict(cur["metadata"].get("annotations") or {})
        ann.update(ep["metadata"]["annotations"])
        ep["metadata"]["annotations"] = ann
        self.eps.mutate(self.client.update(kc.ENDPOINTS, ep))
        return None


# ---- node lifecycle: Node objects, status heartbeats, Leases --------------------------------


def host_memory_ki():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 8 * 1024 * 1024


class NodeManager:
    """Registers localkube-node-1..N (the kubelet's job) and keeps them Ready: node status every
    STATUS_PERIOD seconds and a Lease in kube-node-lease every LEASE_PERIOD seconds."""

    STATUS_PERIOD = 20.0
    LEASE_PERIOD = 10.0

    def __init__(self, ctx, cpu=None, memory=None, max_pods=110):
        self.ctx = ctx
        self.client = kc.Client(ctx.server, "kubelet")
        self.cpu = str(cpu or os.cpu_count() or 2)
        self.memory = memory or "%dKi" % host_memory_ki()
        self.max_pods = str(max_pods)
        self.started = now_rfc3339()
        self.leases = {}
        self.node_uids = {}  # node name -> uid (for the Lease ownerReference)
        self.thread = None

    def node_status(self, name, old=None):
        now = now_rfc3339()
        prev = {c.get("type"): c for c in ((old or {}).get("status") or {}).get("conditions")
                or []}

        def cond(t, status, reason, msg):
            p = prev.get(t)
            ltt = p.get("lastTransitionTime") if p and p.get("status") == status else now
            return {"type": t, "status": status, "lastHeartbeatTime": now,
                    "lastTransitionTime": ltt, "reason": reason, "message": msg}

        arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
        res = {"cpu": self.cpu, "memory": self.memory, "pods": self.max_pods,
               "ephemeral-storage": "100Gi"}
        return {
            "capacity": dict(res), "allocatable": dict(res),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory",
                     "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure",
                     "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID",
                     "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                         "kernelVersion": platform.release(), "osImage": "localkube",
                         "containerRuntimeVersion": "localkube://0.1",
                         "kubeletVersion": "v1.32.0-localkube",
                         "kubeProxyVersion": "v1.32.0-localkube",
                         "operatingSystem": "linux", "architecture": arch},
        }

    def register(self):
        for i, name in enumerate(self.ctx.node_names):
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      "kubernetes.io/arch": self.node_status(name)["nodeInfo"]["architecture"],
                      "beta.kubernetes.io/os": "linux",
                      "node.localkube.dev/index": str(i + 1)}
            node = self.client.get_or_none(kc.NODES, name)
            if node is None:
                body = {"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": labels},
                        "spec": {}, "status": self.node_status(name)}
                try:
                    node = self.client.create(kc.NODES, body)
                    log.info("registered node %s", name)
                except ApiError as e:
                    if not e.already_exists:
                        raise
                    node = self.client.get(kc.NODES, name)
            else:
                missing = {k: v for k, v in labels.items()
                           if (node["metadata"].get("labels") or {}).get(k) != v}
                if missing:
                    node = self.client.patch(kc.NODES, name, {"metadata": {"labels": missing}})
            self.node_uids[name] = node["metadata"]["uid"]
            self.post_status(name, node)
        try:
            self.client.create(kc.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NODE_LEASE_NS}})
        except ApiError as e:
            if not e.already_exists:
                raise
        for name in self.ctx.node_names:
            self.renew_lease(name)

    def post_status(self, name, node=None):
        if node is None:
            node = self.ctx.nodes.get(name) if self.ctx.nodes.synced else None
        st = self.node_status(name, node)
        try:
            self.client.patch(kc.NODES, name, {"status": st}, subresource="status")
        except ApiError as e:
            if e.not_found:
                log.warning("node %s disappeared; re-registering", name)
                self.register()
            else:
                raise

    def _node_owner(self, name):
        """The ownerReference the kubelet's node lease controller puts on its Lease
        (setNodeOwnerFunc), or None while the Node's uid is unknown."""
        node = self.ctx.nodes.get(name) if self.ctx.nodes.synced else None
        uid = (node or {}).get("metadata", {}).get("uid") or self.node_uids.get(name)
        if not uid:
            return None
        return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}

    def renew_lease(self, name):
        now = now_micro()
        lease = self.leases.get(name)
        owner = self._node_owner(name)
        for _ in range(3):
            if lease is None:
                lease = self.client.get_or_none(kc.LEASES, name, NODE_LEASE_NS)
            if lease is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": name, "namespace": NODE_LEASE_NS},
                        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                                 "renewTime": now}}
                if owner is not None:
                    body["metadata"]["ownerReferences"] = [owner]
                try:
                    self.leases[name] = self.client.create(kc.LEASES, body)
                    return
                except ApiError as e:
                    if not e.already_exists:
                        raise
                    continue
            lease = json_copy(lease)
            lease.setdefault("spec", {}).update({"holderIdentity": name, "renewTime": now,
                                                 "leaseDurationSeconds": 40})
            if owner is not None and not lease["metadata"].get("ownerReferences"):
                lease["metadata"]["ownerReferences"] = [owner]
            try:
                self.leases[name] = self.client.update(kc.LEASES, lease)
                return
            except ApiError as e:
                if e.code not in (404, 409):
                    raise
                lease = None
        self.leases.pop(name, None)

    def start(self):
        self.thread = threading.Thread(target=self._run, name="node-heartbeat", daemon=True)
        self.thread.start()

    def _run(self):
        last_status = time.monotonic()
        while not self.ctx.stop.wait(self.LEASE_PERIOD):
            for name in self.ctx.node_names:
                try:
                    self.renew_lease(name)
                except (ApiError, ConnectionError) as e:
                    log.warning("lease %s: %s", name, e)
            if time.monotonic() - last_status >= self.STATUS_PERIOD:
                last_status = time.monotonic()
                for name in self.ctx.node_names:
                    try:
                        self.post_status(name)
                    except (ApiError, ConnectionError) as e:
                        log.warning("node status %s: %s", name, e)


# ---- main -----------------------------------------------------------------------------------


def wait_for_server(c, timeout, stop):
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        try:
            c.request("GET", "/readyz", retries=0, raw=True)
            return True
        except (ApiError, ConnectionError):
            if time.monotonic() > deadline:
                return False
            stop.wait(0.2)
    return False


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m lk.controllers",
                                 description="localkube controller manager + scheduler + kubelet")
    ap.add_argument("--dir", required=True, help="localkube state directory")
    ap.add_argument("--server", required=True, help="API server URL, http://127.0.0.1:PORT")
    ap.add_argument("--nodes", type=int, default=2, help="number of simulated nodes")
    ap.add_argument("--images", default=None, help="image -> command map (images.json)")
    ap.add_argument("--backoff-scale", type=float, default=1.0,
                    help="multiply the kubelet's restart/pull back-off (10s..300s) by this")
    ap.add_argument("--shutdown-grace", type=float, default=10.0,
                    help="at most this many seconds of SIGTERM grace for pods on exit")
    ap.add_argument("--node-cpu", default=None, help="cpu capacity of each node")
    ap.add_argument("--node-memory", default=None, help="memory capacity of each node")
    ap.add_argument("--max-pods", type=int, default=110)
    ap.add_argument("--no-kubelet", action="store_true", help="do not run pods")
    ap.add_argument("--runtime", choices=["process", "podman"], default="process",
                    help="how the kubelet runs containers: local processes (images.json) or "
                         "podman from the real images")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname).1s %(threadName)s %(name)s: "
                               "%(message)s")
    from lk.kubelet import Kubelet
    from lk.scheduler import Scheduler

    ctx = Context(args.server, os.path.abspath(args.dir), args.nodes)
    stop = ctx.stop

    def on_signal(signum, frame):
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    if not wait_for_server(ctx.client, 60, stop):
        log.error("API server %s not ready", args.server)
        return 1
    kubelet = None
    if not args.no_kubelet:
        kubelet = Kubelet(ctx, images_file=args.images, backoff_scale=args.backoff_scale,
                          runtime=args.runtime)
        kubelet.kill_leftovers()
    nodes = NodeManager(ctx, args.node_cpu, args.node_memory, args.max_pods)
    while not stop.is_set():
        try:
            nodes.register()
            break
        except (ApiError, ConnectionError) as e:
            log.warning("registering nodes: %s", e)
            stop.wait(1.0)
    comps = [ReplicaSetController(ctx), DeploymentController(ctx), DaemonSetController(ctx),
             EndpointsController(ctx), Scheduler(ctx)]
    if kubelet is not None:
        comps.append(kubelet)
    for inf in ctx.informers.values():
        inf.start()
    for inf in ctx.informers.values():
        while not stop.is_set() and not inf.wait_synced(1.0):
            pass
    if stop.is_set():
        return 0
    nodes.start()
    for c in comps:
        c.start()
    log.info("localkube controllers running: nodes=%s server=%s", ",".join(ctx.node_names),
             args.server)
    while not stop.wait(1.0):
        pass
    if kubelet is not None:
        kubelet.shutdown(args.shutdown_grace)
    for c in comps:
        c.stop()
    for inf in ctx.informers.values():
        inf.stop()
    for r in ctx.recorders.values():
        r.stop()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
