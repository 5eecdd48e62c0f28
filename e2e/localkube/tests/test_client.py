"""lk.client: watch stream parsing, retries, paging, the informer (re-watch, 410 relist) and the
work queue, against a fake API server in the test process (no localkube server needed)."""

import http.server
import json
import os
import socketserver
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lk import client as kc  # noqa: E402
from lk.client import ApiError, Client, Informer, WatchDecoder, WorkQueue  # noqa: E402


def cm(name, rv, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": str(rv),
                         "uid": "uid-" + name},
            "data": data or {}}


class FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        srv = self.server.fake
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        with srv.lock:
            srv.requests.append(("GET", u.path, q, self.headers.get("User-Agent")))
            action = srv.script.pop(0) if srv.script else None
        if action == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if isinstance(action, tuple) and action[0] == "status":
            self._send(action[1], {"kind": "Status", "code": action[1], "reason": "X",
                                   "message": "injected"}, action[2] if len(action) > 2 else None)
            return
        if q.get("watch") in ("1", "true"):
            return self._watch(srv, q)
        if u.path.endswith("/configmaps"):
            with srv.lock:
                if srv.lists and not q.get("continue"):
                    srv.items, srv.list_rv = srv.lists.pop(0)
            items = srv.items
            limit = int(q.get("limit") or 0)
            start = int(q.get("continue") or 0)
            if q.get("continue") and srv.expire_continue:
                srv.expire_continue = False
                self._send(410, {"kind": "Status", "code": 410, "reason": "Expired",
                                 "message": "continue expired"})
                return
            page = items[start:start + limit] if limit else items[start:]
            meta = {"resourceVersion": str(srv.list_rv)}
            if limit and start + limit < len(items):
                meta["continue"] = str(start + limit)
            self._send(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta,
                             "items": [{k: v for k, v in it.items() if k not in (
                                 "apiVersion", "kind")} for it in page]})
            return
        self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound",
                         "message": "nope"})

    def _watch(self, srv, q):
        with srv.lock:
            stream = srv.watch_streams.pop(0) if srv.watch_streams else None
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if stream is None:
            # nothing scripted: hold the stream open until the test ends
            srv.done.wait(10)
            try:
                self._chunk(b"")
            except OSError:
                pass
            return
        for piece in stream:
            if piece == "sleep":
                time.sleep(0.05)
                continue
            self._chunk(piece)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_POST(self):
        srv = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        with srv.lock:
            srv.requests.append(("POST", self.path, body, self.headers.get("User-Agent")))
            action = srv.script.pop(0) if srv.script else None
        if isinstance(action, tuple) and action[0] == "status":
            self._send(action[1], {"kind": "Status", "code": action[1], "reason": "X",
                                   "message": "injected"}, action[2] if len(action) > 2 else None)
            return
        if action == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._send(201, body)

    def do_DELETE(self):
        srv = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        u = urllib.parse.urlsplit(self.path)
        with srv.lock:
            srv.requests.append(("DELETE", u.path, (dict(urllib.parse.parse_qsl(u.query)), body),
                                 self.headers.get("User-Agent")))
        self._send(200, {"kind": "Status", "status": "Success"})


class FakeServer:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.script = []
        self.watch_streams = []
        self.items = []
        self.list_rv = 1
        self.expire_continue = False
        self.lists = []
        self.done = threading.Event()

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = S(("127.0.0.1", 0), FakeHandler)
        self.httpd.fake = self
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.done.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def reqs(self, method=None, watch=None):
        with self.lock:
            out = list(self.requests)
        if method:
            out = [r for r in out if r[0] == method]
        if watch is not None:
            out = [r for r in out if (r[2].get("watch") == "true") == watch]
        return out


def ev(etype, obj):
    return (json.dumps({"type": etype, "object": obj}) + "\n").encode()


def wait_for(pred, timeout=10.0, step=0.02):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


class WatchDecoderTest(unittest.TestCase):
    def test_partial_lines_byte_by_byte(self):
        data = ev("ADDED", cm("a", 5)) + ev("MODIFIED", cm("a", 6, {"k": "é✓"}))
        d = WatchDecoder()
        out = []
        for i in range(len(data)):
            out.extend(d.feed(data[i:i + 1]))  # splits UTF-8 sequences too
        out.extend(d.finish())
        self.assertEqual([e["type"] for e in out], ["ADDED", "MODIFIED"])
        self.assertEqual(out[1]["object"]["data"]["k"], "é✓")

    def test_several_events_in_one_chunk_and_blank_lines(self):
        data = ev("ADDED", cm("a", 1)) + b"\n\n" + ev("DELETED", cm("a", 2))
        d = WatchDecoder()
        out = d.feed(data[:-5]) + d.feed(data[-5:])
        self.assertEqual([e["type"] for e in out], ["ADDED", "DELETED"])
        self.assertEqual(d.finish(), [])

    def test_pretty_printed_and_unterminated_last_event(self):
        pretty = json.dumps({"type": "ADDED", "object": cm("p", 3)}, indent=2).encode() + b"\n"
        last = json.dumps({"type": "BOOKMARK", "object": {"metadata": {
            "resourceVersion": "9"}}}).encode()
        d = WatchDecoder()
        out = d.feed(pretty) + d.feed(last)
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0]["object"]["metadata"]["name"], "p")
        tail = d.finish()
        self.assertEqual(tail[0]["type"], "BOOKMARK")

    def test_cut_inside_event_is_dropped(self):
        d = WatchDecoder()
        self.assertEqual(d.feed(b'{"type":"ADDED","obj'), [])
        self.assertEqual(d.finish(), [])


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.srv = FakeServer()
        self.c = Client(self.srv.url, "unit-test", timeout=5)

    def tearDown(self):
        self.c.close()
        self.srv.close()

    def test_user_agent_paths_and_delete_options(self):
        self.c.create(kc.CONFIGMAPS, cm("x", 0))
        self.c.delete(kc.PODS, "p1", "ns1", propagation_policy="Foreground",
                      grace_period_seconds=0, preconditions={"uid": "u1"})
        post = self.srv.reqs("POST")[0]
        self.assertEqual(post[1], "/api/v1/namespaces/default/configmaps")
        self.assertEqual(post[3], "localkube/unit-test")
        dele = self.srv.reqs("DELETE")[0]
        self.assertEqual(dele[1], "/api/v1/namespaces/ns1/pods/p1")
        q, body = dele[2]
        self.assertEqual(q["gracePeriodSeconds"], "0")
        self.assertEqual(body["propagationPolicy"], "Foreground")
        self.assertEqual(body["preconditions"], {"uid": "u1"})
        self.assertEqual(Client.path(kc.DEPLOYMENTS, "a", "d", "status"),
                         "/apis/apps/v1/namespaces/a/deployments/d/status")
        self.assertEqual(Client.path(kc.NODES, None, "n1"), "/api/v1/nodes/n1")

    def test_retries_429_with_retry_after_5xx_and_dropped_connections(self):
        self.srv.script = [("status", 429, {"Retry-After": "1"}), ("status", 503), "drop"]
        t0 = time.monotonic()
        out = self.c.create(kc.CONFIGMAPS, cm("y", 0))
        took = time.monotonic() - t0
        self.assertEqual(out["metadata"]["name"], "y")
        self.assertEqual(len(self.srv.reqs("POST")), 4)
        self.assertGreaterEqual(took, 0.9, "Retry-After: 1 was not honoured")

    def test_errors_are_not_retried_and_carry_the_status(self):
        self.srv.script = [("status", 409)]
        with self.assertRaises(ApiError) as cx:
            self.c.create(kc.CONFIGMAPS, cm("z", 0))
        self.assertEqual(cx.exception.code, 409)
        self.assertEqual(cx.exception.message, "injected")
        self.assertEqual(len(self.srv.reqs("POST")), 1)
        with self.assertRaises(ApiError) as cx:
            self.c.get(kc.PODS, "nope", "default")
        self.assertTrue(cx.exception.not_found)
        self.assertIsNone(self.c.get_or_none(kc.PODS, "nope", "default"))

    def test_retries_give_up(self):
        c = Client(self.srv.url, "unit-test", retries=2)
        self.srv.script = [("status", 500)] * 5
        with self.assertRaises(ApiError) as cx:
            c.create(kc.CONFIGMAPS, cm("w", 0))
        self.assertEqual(cx.exception.code, 500)
        c.close()
        self.assertEqual(len(self.srv.reqs("POST")), 3)

    def test_list_pages_and_restarts_on_expired_continue(self):
        self.srv.items = [cm("c%d" % i, 10 + i) for i in range(7)]
        self.srv.list_rv = 20
        out = self.c.list(kc.CONFIGMAPS, "default", limit=3)
        self.assertEqual([i["metadata"]["name"] for i in out["items"]],
                         ["c%d" % i for i in range(7)])
        self.assertEqual(out["metadata"]["resourceVersion"], "20")
        self.assertNotIn("continue", out["metadata"])
        self.assertEqual(out["items"][0]["kind"], "ConfigMap")  # filled in
        gets = self.srv.reqs("GET")
        self.assertEqual([g[2].get("continue") for g in gets], [None, "3", "6"])
        # an expired continue token: start again without paging
        self.srv.requests.clear()
        self.srv.expire_continue = True
        out = self.c.list(kc.CONFIGMAPS, "default", limit=3)
        self.assertEqual(len(out["items"]), 7)
        gets = self.srv.reqs("GET")
        self.assertEqual(gets[-1][2].get("limit"), None)

    def test_watch_stream_partial_chunks_bookmark_and_410(self):
        a = ev("ADDED", cm("a", 11))
        b = ev("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1",
                            "metadata": {"resourceVersion": "12"}})
        self.srv.watch_streams = [[a[:7], "sleep", a[7:] + b[:3], "sleep", b[3:]]]
        got = list(self.c.watch(kc.CONFIGMAPS, "default", resource_version="10",
                                timeout_seconds=30))
        self.assertEqual([e["type"] for e in got], ["ADDED", "BOOKMARK"])
        q = self.srv.reqs("GET", watch=True)[0][2]
        self.assertEqual(q["resourceVersion"], "10")
        self.assertEqual(q["allowWatchBookmarks"], "true")
        self.assertEqual(q["timeoutSeconds"], "30")
        err = ev("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "code": 410, "reason": "Expired",
                           "message": "too old resource version: 1 (5)"})
        self.srv.watch_streams = [[err]]
        with self.assertRaises(ApiError) as cx:
            list(self.c.watch(kc.CONFIGMAPS, "default", resource_version="1"))
        self.assertTrue(cx.exception.expired)
        self.assertEqual(cx.exception.code, 410)

    def test_watch_open_error(self):
        self.srv.script = [("status", 403)]
        with self.assertRaises(ApiError) as cx:
            list(self.c.watch(kc.CONFIGMAPS, "default"))
        self.assertEqual(cx.exception.code, 403)


class InformerTest(unittest.TestCase):
    def setUp(self):
        self.srv = FakeServer()
        self.c = Client(self.srv.url, "unit-test", timeout=5)
        self.log = []
        self.lock = threading.Lock()

    def tearDown(self):
        self.c.close()
        self.srv.close()

    def record(self, kind):
        def fn(*objs):
            with self.lock:
                self.log.append((kind, objs[-1]["metadata"]["name"],
                                 objs[-1]["metadata"]["resourceVersion"]))
        return fn

    def test_list_watch_rewatch_and_relist_on_410(self):
        # after the 410, the relist sees a different world: a gone, c changed, d new
        self.srv.lists = [([cm("a", 1), cm("b", 2)], 5),
                          ([cm("c", 21, {"y": "2"}), cm("d", 22)], 25)]
        # stream 1: partial-chunked events, then the server ends it (e.g. timeout)
        s1 = ev("ADDED", cm("c", 6)) + ev("MODIFIED", cm("a", 7, {"x": "1"})) + \
            ev("BOOKMARK", {"metadata": {"resourceVersion": "8"}})
        # stream 2: a delete, then ends
        s2 = ev("DELETED", cm("b", 9))
        # stream 3: the history was compacted
        s3 = ev("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                          "message": "too old resource version: 9 (20)"})
        self.srv.watch_streams = [[s1[:13], "sleep", s1[13:50], "sleep", s1[50:]],
                                  [s2], [s3]]
        inf = Informer(self.c, kc.CONFIGMAPS, "default", watch_timeout=(30, 30))
        inf.add_handler(self.record("add"), self.record("update"), self.record("delete"))
        inf.start()
        try:
            self.assertTrue(inf.wait_synced(5))
            self.assertTrue(wait_for(lambda: inf.relists >= 2 and inf.get("default/d")))
            watches = self.srv.reqs("GET", watch=True)
            # re-watch from the last RV seen (the bookmark), never relisting before the 410
            self.assertEqual(watches[0][2]["resourceVersion"], "5")
            self.assertEqual(watches[1][2]["resourceVersion"], "8")
            self.assertEqual(watches[2][2]["resourceVersion"], "9")
            self.assertTrue(wait_for(lambda: len(self.srv.reqs("GET", watch=True)) >= 4))
            self.assertEqual(self.srv.reqs("GET", watch=True)[3][2]["resourceVersion"], "25")
            lists = [r for r in self.srv.reqs("GET", watch=False)]
            self.assertEqual(len(lists), 2)
        finally:
            inf.stop()
            inf.join(2)
        with self.lock:
            log = list(self.log)
        self.assertEqual(log[:2], [("add", "a", "1"), ("add", "b", "2")])
        self.assertIn(("add", "c", "6"), log)
        self.assertIn(("update", "a", "7"), log)
        self.assertIn(("delete", "b", "9"), log)
        # relist: a vanished (delete), c changed (update), d appeared (add)
        tail = log[log.index(("delete", "b", "9")) + 1:]
        self.assertIn(("delete", "a", "7"), tail)
        self.assertIn(("update", "c", "21"), tail)
        self.assertIn(("add", "d", "22"), tail)
        self.assertEqual(sorted(inf.keys()), ["default/c", "default/d"])
        self.assertEqual(inf.get("default", "c")["data"], {"y": "2"})

    def test_list_failure_is_retried(self):
        self.srv.items = [cm("a", 1)]
        self.srv.script = [("status", 403)]  # not retried by the client: the informer retries
        inf = Informer(self.c, kc.CONFIGMAPS, "default")
        inf.start()
        try:
            self.assertTrue(inf.wait_synced(5))
            self.assertIsNotNone(inf.get("default/a"))
        finally:
            inf.stop()
            inf.join(2)


class WorkQueueTest(unittest.TestCase):
    def test_dedupe_and_no_concurrent_processing(self):
        q = WorkQueue()
        q.add("a")
        q.add("b")
        q.add("a")
        self.assertEqual(len(q), 2)
        k = q.get(timeout=1)
        self.assertEqual(k, "a")
        q.add("a")  # while processing: held back, not handed to another worker
        self.assertEqual(q.get(timeout=1), "b")
        self.assertIsNone(q.get(timeout=0.1))
        q.done("a")
        self.assertEqual(q.get(timeout=1), "a")
        q.done("a")
        q.done("b")
        self.assertIsNone(q.get(timeout=0.05))

    def test_add_after_and_rate_limit(self):
        q = WorkQueue(base_delay=0.05)
        q.add_after("late", 0.3)
        q.add_after("soon", 0.05)
        t0 = time.monotonic()
        self.assertEqual(q.get(timeout=2), "soon")
        self.assertEqual(q.get(timeout=2), "late")
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        q.done("soon")
        q.done("late")
        q.add_rate_limited("x")
        q.add_rate_limited("x")
        self.assertEqual(q.num_requeues("x"), 2)
        self.assertEqual(q.get(timeout=2), "x")
        q.forget("x")
        self.assertEqual(q.num_requeues("x"), 0)
        q.shutdown()
        self.assertIsNone(q.get())


class HelpersTest(unittest.TestCase):
    def test_names_and_hashes(self):
        n = kc.generate_name("web-5d9b8c7f6-")
        self.assertTrue(n.startswith("web-5d9b8c7f6-"))
        self.assertEqual(len(n), len("web-5d9b8c7f6-") + 5)
        self.assertTrue(all(ch in "bcdfghjklmnpqrstvwxz2456789" for ch in n[-5:]))
        self.assertLessEqual(len(kc.generate_name("x" * 80 + "-")), 63)
        self.assertEqual(kc.fnv32a(b""), 0x811C9DC5)
        self.assertEqual(kc.fnv32a(b"a"), 0xE40C292C)  # FNV-1a 32 test vector
        self.assertEqual(kc.safe_encode("0123"), "bcdf"[0:0] + "".join(
            "bcdfghjklmnpqrstvwxz2456789"[b % 27] for b in b"0123"))

    def test_pod_readiness(self):
        now = time.time()
        t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 5))
        pod = {"status": {"conditions": [{"type": "Ready", "status": "True",
                                          "lastTransitionTime": t}]}}
        self.assertTrue(kc.is_pod_ready(pod))
        self.assertTrue(kc.is_pod_available(pod, 3, now))
        self.assertFalse(kc.is_pod_available(pod, 10, now))
        self.assertFalse(kc.is_pod_active({"metadata": {"deletionTimestamp": t}, "status": {}}))
        self.assertFalse(kc.is_pod_active({"metadata": {}, "status": {"phase": "Failed"}}))


if __name__ == "__main__":
    unittest.main()
