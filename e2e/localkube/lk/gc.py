"""Garbage collector, namespace finalizer and CRD cleanup, run inside the apiserver process.

Mirrors kube-controller-manager's garbage collector closely enough for tests:
* ownerReferences are matched by uid; a namespaced dependent can only be owned by an object in
  its namespace or by a cluster-scoped object; a cluster-scoped dependent naming a namespaced
  owner kind is unresolvable and never collected;
* background: a dependent whose owners are all absent is deleted (policy from its own
  finalizers, Background by default);
* foreground: an owner with the foregroundDeletion finalizer keeps it until every dependent with
  blockOwnerDeletion=true is gone; its dependents are deleted (Foreground when they have
  dependents themselves);
* orphan: references to the owner are stripped from its dependents, then the orphan finalizer is
  removed;
* a dependent that still has a solid owner only loses its references to absent or
  foreground-deleting owners.
Namespace deletion deletes everything in the namespace, then removes the "kubernetes" spec
finalizer (which removes the namespace).  CRD deletion deletes every custom resource, then removes
the customresourcecleanup finalizer.

The store calls on_event under its lock; the worker thread wakes at once and converges within
milliseconds; a full sweep also runs every sweep_interval seconds as a safety net.
"""

import logging
import threading

from lk.store import (CRD_CLEANUP_FINALIZER, CRD_KEY, DELETED, NS_KEY, DeleteOptions,
                      WriteOptions, meta_of)

log = logging.getLogger("localkube.gc")

MANAGER = "generic-garbage-collector"


class GarbageCollector:
    def __init__(self, store, sweep_interval=2.0):
        self.store = store
        self.sweep_interval = sweep_interval
        self._cond = threading.Condition(threading.Lock())
        self._items = set()
        self._owners = set()
        self._namespaces = set()
        self._crds = set()
        self._stop = False
        self._thread = None
        self.passes = 0
        store.listeners.append(self.on_event)

    # -- event intake (called with the store lock held) ----------------------------------
    def on_event(self, key, ev):
        st = self.store
        items, owners, nss, crds = [], [], [], []
        obj = ev.prev if ev.type == DELETED else ev.obj
        m = meta_of(obj)
        ns = m.get("namespace") or ""
        name = m.get("name")
        if ev.type == DELETED:
            uid = m.get("uid")
            for dep in st.owner_index.get(uid, ()):
                items.append(dep)
            if ns and st.namespace_state(ns) == "Terminating":
                nss.append(ns)
            rt = st.registry.by_key(key)
            if rt is not None and rt.is_custom:
                crds.append(rt.crd)
        else:
            if m.get("ownerReferences"):
                items.append((key, ns, name))
            if m.get("deletionTimestamp"):
                fins = m.get("finalizers") or []
                if "orphan" in fins or "foregroundDeletion" in fins:
                    owners.append((key, ns, name))
                if key == NS_KEY:
                    nss.append(name)
                if key == CRD_KEY:
                    crds.append(name)
        # owners of this object may be waiting for it (foreground) or it lost a reference
        refs = list(m.get("ownerReferences") or [])
        if ev.prev is not None and ev.type != DELETED:
            refs += meta_of(ev.prev).get("ownerReferences") or []
        for ref in refs:
            if isinstance(ref, dict):
                loc = st.uid_index.get(ref.get("uid"))
                if loc is not None:
                    owners.append(loc)
        if not (items or owners or nss or crds):
            return
        with self._cond:
            self._items.update(items)
            self._owners.update(owners)
            self._namespaces.update(nss)
            self._crds.update(crds)
            self._cond.notify()

    # -- thread -------------------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self._run, name="localkube-gc", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self):
        while True:
            with self._cond:
                if not (self._items or self._owners or self._namespaces or self._crds or
                        self._stop):
                    self._cond.wait(self.sweep_interval)
                if self._stop:
                    return
                work = (self._items, self._owners, self._namespaces, self._crds)
                self._items, self._owners, self._namespaces, self._crds = (set(), set(),
                                                                           set(), set())
            try:
                if not any(work):
                    work = self._sweep()
                self._process(*work)
            except Exception:  # pragma: no cover - keep collecting whatever happens
                log.exception("garbage collector pass failed")

    def _sweep(self):
        st = self.store
        items, owners, nss, crds = set(), set(), set(), set()
        with st.lock:
            for key, bucket in st.data.items():
                for (ns, name), o in bucket.items():
                    m = meta_of(o)
                    if m.get("ownerReferences"):
                        items.add((key, ns, name))
                    if m.get("deletionTimestamp"):
                        fins = m.get("finalizers") or []
                        if "orphan" in fins or "foregroundDeletion" in fins:
                            owners.add((key, ns, name))
                        if key == NS_KEY:
                            nss.add(name)
                        if key == CRD_KEY:
                            crds.add(name)
        return items, owners, nss, crds

    def run_once(self):
        """Synchronous full pass (tests)."""
        self._process(*self._sweep())

    def _process(self, items, owners, nss, crds):
        self.passes += 1
        for it in sorted(items):
            self.attempt_delete(*it)
        for it in sorted(owners):
            self.process_owner(*it)
        for ns in sorted(nss):
            self.process_namespace(ns)
        for name in sorted(crds):
            self.process_crd(name)

    # -- owner resolution ----------------------------------------------------------------
    def owner_state(self, ref, dep_ns):
        """'solid', 'dangling', 'waiting' (foreground deleting) or 'unknown'."""
        st = self.store
        av = ref.get("apiVersion") or ""
        group = av.split("/", 1)[0] if "/" in av else ""
        rt = st.registry.by_group_kind(group, ref.get("kind") or "")
        if rt is None:
            return "unknown"
        if rt.namespaced:
            if not dep_ns:
                return "unknown"
            obj = st._get(rt.key, dep_ns, ref.get("name"))
        else:
            obj = st._get(rt.key, "", ref.get("name"))
        if obj is None or meta_of(obj).get("uid") != ref.get("uid"):
            return "dangling"
        m = meta_of(obj)
        if m.get("deletionTimestamp") and "foregroundDeletion" in (m.get("finalizers") or []):
            return "waiting"
        return "solid"

    def _opts(self):
        return WriteOptions(field_manager=MANAGER, user_agent="localkube/" + MANAGER,
                            internal=True, field_validation="Ignore")

    def attempt_delete(self, key, ns, name):
        st = self.store
        with st.lock:
            obj = st._get(key, ns, name)
            if obj is None:
                return
            m = meta_of(obj)
            if m.get("deletionTimestamp"):
                return
            refs = [r for r in m.get("ownerReferences") or [] if isinstance(r, dict)]
            if not refs:
                return
            solid, dangling, waiting = [], [], []
            for ref in refs:
                s = self.owner_state(ref, ns)
                if s == "unknown":
                    return
                {"solid": solid, "dangling": dangling, "waiting": waiting}[s].append(ref)
            if solid:
                if dangling or waiting:
                    gone = {r.get("uid") for r in dangling + waiting}

                    def strip(o):
                        mm = o["metadata"]
                        mm["ownerReferences"] = [r for r in mm.get("ownerReferences") or []
                                                 if r.get("uid") not in gone]
                        if not mm["ownerReferences"]:
                            del mm["ownerReferences"]
                    st.internal_update(key, ns, name, strip, MANAGER)
                return
            fins = m.get("finalizers") or []
            if waiting and st.owner_index.get(m.get("uid")):
                policy = "Foreground"
            elif "orphan" in fins:
                policy = "Orphan"
            elif "foregroundDeletion" in fins:
                policy = "Foreground"
            else:
                policy = "Background"
            rt = st.registry.by_key(key)
            if rt is None:
                return
            log.info("gc: deleting %s %s/%s (%s)", rt.plural, ns, name, policy)
            try:
                st.delete(rt, ns, name, DeleteOptions(propagation=policy,
                                                      precondition_uid=m.get("uid")),
                          self._opts())
            except Exception as e:  # ApiError (e.g. already gone)
                log.info("gc: delete %s/%s: %s", ns, name, e)

    def process_owner(self, key, ns, name):
        st = self.store
        with st.lock:
            obj = st._get(key, ns, name)
            if obj is None:
                return
            m = meta_of(obj)
            if not m.get("deletionTimestamp"):
                return
            fins = m.get("finalizers") or []
            uid = m.get("uid")
            deps = sorted(st.owner_index.get(uid, ()))
            if "orphan" in fins:
                for (dk, dns, dname) in deps:
                    def strip(o):
                        mm = o["metadata"]
                        mm["ownerReferences"] = [r for r in mm.get("ownerReferences") or []
                                                 if r.get("uid") != uid]
                        if not mm["ownerReferences"]:
                            del mm["ownerReferences"]
                    st.internal_update(dk, dns, dname, strip, MANAGER)
                self._remove_finalizer(key, ns, name, "orphan")
                return
            if "foregroundDeletion" in fins:
                blocking = False
                for (dk, dns, dname) in deps:
                    dobj = st._get(dk, dns, dname)
                    if dobj is None:
                        continue
                    if not meta_of(dobj).get("deletionTimestamp"):
                        self.attempt_delete(dk, dns, dname)
                    dobj = st._get(dk, dns, dname)
                    if dobj is None:
                        continue
                    for r in meta_of(dobj).get("ownerReferences") or []:
                        if r.get("uid") == uid and r.get("blockOwnerDeletion"):
                            blocking = True
                if not blocking:
                    self._remove_finalizer(key, ns, name, "foregroundDeletion")

    def _remove_finalizer(self, key, ns, name, fin):
        def rm(o):
            mm = o["metadata"]
            f = [x for x in mm.get("finalizers") or [] if x != fin]
            if f == (mm.get("finalizers") or []):
                return False
            if f:
                mm["finalizers"] = f
            else:
                mm.pop("finalizers", None)
        self.store.internal_update(key, ns, name, rm, MANAGER)

    def process_namespace(self, ns):
        st = self.store
        with st.lock:
            nso = st._get(NS_KEY, "", ns)
            if nso is None or not meta_of(nso).get("deletionTimestamp"):
                return
            remaining = 0
            for key in list(st.data.keys()):
                rt = st.registry.by_key(key)
                if rt is None or not rt.namespaced:
                    continue
                for o in st.objects(key, ns):
                    m = meta_of(o)
                    if not m.get("deletionTimestamp"):
                        try:
                            st.delete(rt, ns, m.get("name"), DeleteOptions(
                                propagation="Background"), self._opts())
                        except Exception as e:
                            log.info("namespace %s cleanup: %s", ns, e)
                    if st._get(key, ns, m.get("name")) is not None:
                        remaining += 1
            if remaining:
                return
            if (nso.get("spec") or {}).get("finalizers"):
                def fin(o):
                    o["spec"] = dict(o.get("spec") or {})
                    o["spec"]["finalizers"] = []
                st.internal_update(NS_KEY, "", ns, fin, "namespace-controller", sub="finalize")

    def process_crd(self, name):
        st = self.store
        with st.lock:
            crd = st._get(CRD_KEY, "", name)
            if crd is None or not meta_of(crd).get("deletionTimestamp"):
                return
            if CRD_CLEANUP_FINALIZER not in (meta_of(crd).get("finalizers") or []):
                return
            spec = crd.get("spec") or {}
            key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            rt = st.registry.by_key(key)
            remaining = 0
            for o in st.objects(key):
                m = meta_of(o)
                if rt is not None and not m.get("deletionTimestamp"):
                    try:
                        st.delete(rt, m.get("namespace") or "", m.get("name"),
                                  DeleteOptions(propagation="Background"), self._opts())
                    except Exception as e:
                        log.info("crd %s cleanup: %s", name, e)
                if st._get(key, m.get("namespace") or "", m.get("name")) is not None:
                    remaining += 1
            if not remaining:
                self._remove_finalizer(CRD_KEY, "", name, CRD_CLEANUP_FINALIZER)
