"""Watch semantics of the localkube API server: synthetic ADDED, resume, expiry, selector
transitions, bookmarks, WatchList, timeouts, Table watches, fan-out, slow consumers."""

import json
import os
import socket
import sys
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.lkserver import LocalApiServer  # noqa: E402

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def cm(name, labels=None, data=None):
    md = {"name": name}
    if labels:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data or {"k": "v"}}


class WatchStream:
    """A watch read by a background thread (so a test can write while it streams)."""

    def __init__(self, srv, path, headers=None, timeout=10.0):
        self.events = []
        self.ended = threading.Event()
        self.status = None
        self.cond = threading.Condition()
        self._t = threading.Thread(target=self._run, args=(srv, path, headers, timeout),
                                   daemon=True)
        self._t.start()

    def _run(self, srv, path, headers, timeout):
        def until(evs):
            with self.cond:
                self.events = list(evs)
                self.cond.notify_all()
            return False
        try:
            evs = srv.watch(path, timeout=timeout, headers=headers, until=until)
            self.status = srv.last_watch_status
            with self.cond:
                self.events = evs
                self.cond.notify_all()
        finally:
            self.ended.set()

    def wait_for(self, n, timeout=5.0):
        deadline = time.time() + timeout
        with self.cond:
            while len(self.events) < n and time.time() < deadline:
                self.cond.wait(deadline - time.time())
            return list(self.events)


class WatchTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = LocalApiServer(bookmark_interval=0.3).start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def ns(self):
        name = "w-" + uuid.uuid4().hex[:8]
        code, body, _ = self.srv.post("/api/v1/namespaces", {"metadata": {"name": name}})
        self.assertEqual(code, 201, body)
        return name


class TestWatch(WatchTestBase):
    def test_synthetic_added_then_changes(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.srv.post(base, cm("b"))
        self.srv.post(base, cm("a"))
        for rv in ("", "&resourceVersion=0"):
            w = WatchStream(self.srv, base + "?watch=1&timeoutSeconds=3" + rv)
            evs = w.wait_for(2)
            self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs[:2]],
                             [("ADDED", "a"), ("ADDED", "b")])
            self.srv.patch(base + "/a", {"data": {"k": "w" + rv}})
            evs = w.wait_for(3)
            self.assertEqual(evs[2]["type"], "MODIFIED")
            self.assertEqual(evs[2]["object"]["data"]["k"], "w" + rv)
            w.ended.wait(5)
            self.assertEqual(w.status, 200)

    def test_resume_and_deleted_restamped(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, a, _ = self.srv.post(base, cm("a"))
        rv0 = a["metadata"]["resourceVersion"]
        code, a2, _ = self.srv.patch(base + "/a", {"data": {"k": "2"}})
        code, _, _ = self.srv.delete(base + "/a")
        self.srv.post(base, cm("b"))
        evs = self.srv.watch(base + "?watch=true&resourceVersion=%s" % rv0, max_events=3,
                             timeout=3)
        self.assertEqual([e["type"] for e in evs], ["MODIFIED", "DELETED", "ADDED"])
        deleted = evs[1]["object"]
        self.assertEqual(deleted["data"]["k"], "2")  # last state
        self.assertGreater(int(deleted["metadata"]["resourceVersion"]),
                           int(a2["metadata"]["resourceVersion"]))  # re-stamped
        self.assertLess(int(deleted["metadata"]["resourceVersion"]),
                        int(evs[2]["object"]["metadata"]["resourceVersion"]))
        # events are compact one-line JSON documents
        raw = self.srv.request("GET", base + "?watch=1&resourceVersion=%s&timeoutSeconds=1"
                               % rv0)
        self.assertEqual(raw[0], 200)

    def test_too_old_resource_version(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, a, _ = self.srv.post(base, cm("a"))
        rv = a["metadata"]["resourceVersion"]
        code, res, _ = self.srv.post("/localkube/faults", {"type": "expire"})
        self.assertEqual(code, 200, res)
        t0 = time.time()
        evs = self.srv.watch(base + "?watch=1&resourceVersion=" + rv, timeout=5)
        self.assertLess(time.time() - t0, 3)  # the stream closes by itself
        self.assertEqual(self.srv.last_watch_status, 200)
        self.assertEqual(len(evs), 1)
        self.assertEqual(evs[0]["type"], "ERROR")
        st = evs[0]["object"]
        self.assertEqual((st["kind"], st["code"], st["reason"]), ("Status", 410, "Expired"))
        self.assertRegex(st["message"], r"^too old resource version: %s \(\d+\)$" % rv)
        # a fresh list RV works again
        code, lst, _ = self.srv.get(base)
        w = WatchStream(self.srv, base + "?watch=1&timeoutSeconds=2&resourceVersion="
                        + lst["metadata"]["resourceVersion"])
        time.sleep(0.2)
        self.srv.post(base, cm("z"))
        evs = w.wait_for(1)
        self.assertEqual(evs[0]["type"], "ADDED")

    def test_selector_transitions(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.srv.post(base, cm("x", labels={"app": "a"}))
        code, lst, _ = self.srv.get(base)
        w = WatchStream(self.srv, base + "?watch=1&labelSelector=app%3Db&timeoutSeconds=3"
                        "&resourceVersion=" + lst["metadata"]["resourceVersion"])
        time.sleep(0.2)
        self.srv.patch(base + "/x", {"metadata": {"labels": {"app": "b"}}})  # starts matching
        self.srv.patch(base + "/x", {"data": {"k": "2"}})  # still matching
        code, last, _ = self.srv.patch(base + "/x", {"metadata": {"labels": {"app": "c"}}})
        self.srv.patch(base + "/x", {"data": {"k": "3"}})  # no event
        evs = w.wait_for(3)
        self.assertEqual([e["type"] for e in evs], ["ADDED", "MODIFIED", "DELETED"])
        gone = evs[2]["object"]
        self.assertEqual(gone["metadata"]["labels"], {"app": "b"})  # the old object
        self.assertEqual(gone["metadata"]["resourceVersion"],
                         last["metadata"]["resourceVersion"])  # with the new RV
        w.ended.wait(5)
        self.assertEqual(len(w.events), 3)

    def test_single_object_watch_and_field_selector(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.srv.post(base, cm("one"))
        self.srv.post(base, cm("two"))
        w = WatchStream(self.srv, base + "?watch=1&fieldSelector=metadata.name%3Dtwo"
                        "&timeoutSeconds=2")
        time.sleep(0.2)
        self.srv.patch(base + "/one", {"data": {"k": "1"}})
        self.srv.patch(base + "/two", {"data": {"k": "2"}})
        w.ended.wait(5)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in w.events],
                         [("ADDED", "two"), ("MODIFIED", "two")])
        c, body, _ = self.srv.get(base + "?watch=1&fieldSelector=spec.x%3D1")
        self.assertEqual(c, 400)

    def test_bookmarks_and_timeout(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        code, lst, _ = self.srv.get(base)
        t0 = time.time()
        evs = self.srv.watch(base + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=1"
                             "&resourceVersion=" + lst["metadata"]["resourceVersion"],
                             timeout=5)
        took = time.time() - t0
        self.assertGreater(took, 0.9)
        self.assertLess(took, 3)
        bms = [e for e in evs if e["type"] == "BOOKMARK"]
        self.assertTrue(bms, evs)
        self.assertEqual(set(bms[0]["object"]), {"kind", "apiVersion", "metadata"})
        self.assertEqual(bms[0]["object"]["kind"], "ConfigMap")
        self.assertGreaterEqual(int(bms[0]["object"]["metadata"]["resourceVersion"]),
                                int(lst["metadata"]["resourceVersion"]))
        # no bookmarks unless asked
        evs = self.srv.watch(base + "?watch=1&timeoutSeconds=1&resourceVersion="
                             + lst["metadata"]["resourceVersion"], timeout=5)
        self.assertEqual(evs, [])

    def test_send_initial_events(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.srv.post(base, cm("a"))
        self.srv.post(base, cm("b"))
        evs = self.srv.watch(base + "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                             "&resourceVersionMatch=NotOlderThan&timeoutSeconds=2",
                             max_events=3, timeout=5)
        self.assertEqual([e["type"] for e in evs], ["ADDED", "ADDED", "BOOKMARK"])
        self.assertEqual(evs[2]["object"]["metadata"]["annotations"],
                         {"k8s.io/initial-events-end": "true"})
        c, body, _ = self.srv.get(base + "?watch=1&sendInitialEvents=true")
        self.assertEqual(c, 422)
        self.assertEqual(body["reason"], "Invalid")

    def test_table_watch(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        self.srv.post(base, cm("a"))
        w = WatchStream(self.srv, base + "?watch=1&timeoutSeconds=2", headers={"Accept": TABLE})
        self.srv.post(base, cm("b"))
        w.ended.wait(5)
        evs = w.events
        self.assertEqual([e["type"] for e in evs], ["ADDED", "ADDED"])
        self.assertEqual(evs[0]["object"]["kind"], "Table")
        self.assertTrue(evs[0]["object"]["columnDefinitions"])
        self.assertFalse(evs[1]["object"].get("columnDefinitions"))
        self.assertEqual(len(evs[1]["object"]["rows"]), 1)

    def test_drop_watches_fault(self):
        ns = self.ns()
        base = "/api/v1/namespaces/%s/configmaps" % ns
        w = WatchStream(self.srv, base + "?watch=1&timeoutSeconds=30")
        time.sleep(0.3)
        code, res, _ = self.srv.post("/localkube/faults", {"type": "dropWatches"})
        self.assertEqual(code, 200)
        self.assertGreaterEqual(res["dropped"], 1)
        self.assertTrue(w.ended.wait(3))

    def test_all_namespaces_watch(self):
        a, b = self.ns(), self.ns()
        code, lst, _ = self.srv.get("/api/v1/configmaps")
        w = WatchStream(self.srv, "/api/v1/configmaps?watch=1&timeoutSeconds=2&resourceVersion="
                        + lst["metadata"]["resourceVersion"])
        time.sleep(0.2)
        self.srv.post("/api/v1/namespaces/%s/configmaps" % a, cm("x"))
        self.srv.post("/api/v1/namespaces/%s/configmaps" % b, cm("y"))
        evs = w.wait_for(2)
        self.assertEqual(sorted(e["object"]["metadata"]["namespace"] for e in evs[:2]),
                         sorted([a, b]))


class TestWatchFanout(unittest.TestCase):
    """In-process server: slow consumers and fan-out latency."""

    def test_slow_consumer_does_not_block_writers(self):
        srv = LocalApiServer(in_process=True).start()
        try:
            srv.api.store.watcher_queue = 20
            base = "/api/v1/namespaces/default/configmaps"
            sock = socket.create_connection(("127.0.0.1", srv.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(("GET %s?watch=1&timeoutSeconds=30 HTTP/1.1\r\nHost: x\r\n\r\n"
                          % base).encode())
            time.sleep(0.2)
            big = "x" * 100000
            t0 = time.time()
            for i in range(150):
                code, _, _ = srv.post(base, cm("big%d" % i, data={"d": big}))
                self.assertEqual(code, 201)
            self.assertLess(time.time() - t0, 20)
            # the stalled watcher was dropped instead of buffering without bound
            deadline = time.time() + 5
            while time.time() < deadline and srv.api.store.watchers.get(("", "configmaps")):
                time.sleep(0.05)
            self.assertFalse(srv.api.store.watchers.get(("", "configmaps")))
            sock.close()
        finally:
            srv.stop()

    def test_fanout_latency(self):
        srv = LocalApiServer(in_process=True).start()
        try:
            base = "/api/v1/namespaces/default/configmaps"
            for i in range(300):
                srv.post(base, cm("o%03d" % i))
            code, lst, _ = srv.get(base)
            rv = lst["metadata"]["resourceVersion"]
            n_watch = 20
            lat = []
            lock = threading.Lock()
            ready = threading.Barrier(n_watch + 1, timeout=10)
            sent = {}

            def watcher():
                sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                sock.sendall(("GET %s?watch=1&timeoutSeconds=8&resourceVersion=%s HTTP/1.1\r\n"
                              "Host: x\r\n\r\n" % (base, rv)).encode())
                f = sock.makefile("rb")
                while f.readline() not in (b"\r\n", b""):
                    pass
                ready.wait()
                got = 0
                while got < 40:
                    size = int(f.readline().strip() or b"0", 16)
                    if size == 0:
                        break
                    data = f.read(size)
                    f.readline()
                    now = time.time()
                    ev = json.loads(data)
                    name = ev["object"]["metadata"]["name"]
                    with lock:
                        lat.append(now - sent[name])
                    got += 1
                sock.close()

            ts = [threading.Thread(target=watcher, daemon=True) for _ in range(n_watch)]
            for t in ts:
                t.start()
            ready.wait()
            time.sleep(0.2)
            for i in range(40):
                name = "o%03d" % (i * 7)
                sent[name] = time.time()
                srv.patch(base + "/" + name, {"data": {"k": str(i)}})
                time.sleep(0.01)
            for t in ts:
                t.join(15)
            self.assertEqual(len(lat), n_watch * 40)
            lat.sort()
            p99 = lat[int(len(lat) * 0.99) - 1]
            self.assertLess(p99, 0.25, "p99 fan-out latency %.1f ms" % (p99 * 1000))
        finally:
            srv.stop()


class TestStoreWatcherUnit(unittest.TestCase):
    def test_overflow_closes_only_that_watcher(self):
        from lk.store import Store, WriteOptions
        st = Store()
        st.bootstrap()
        rt = st.registry.lookup("", "v1", "configmaps")
        slow, _, _ = st.watch(rt, "default", rv=str(st.rv))
        slow.maxq = 3
        fast, _, _ = st.watch(rt, "default", rv=str(st.rv))
        for i in range(5):
            st.create(rt, "default", cm("u%d" % i), WriteOptions())
            items, closed = fast.take(0)
            self.assertEqual(len(items), 1)
            self.assertFalse(closed)
        items, closed = slow.take(0)
        self.assertTrue(closed)
        self.assertEqual(slow.close_reason, "overflow")
        self.assertNotIn(slow, st.watchers[rt.key])
        self.assertIn(fast, st.watchers[rt.key])


if __name__ == "__main__":
    unittest.main()
