#!/usr/bin/env python3
"""Watch fan-out latency of localkube's API server (Python 3 standard library only).

    python3 e2e/bench/watch_latency.py [--objects 2000] [--watchers 50] [--updates 2000]
                                       [--rate 200] [--json-only] [--server URL]

Brings up its own localkube API server (`python3 -m lk.apiserver`, no controllers) in a temporary
directory, creates --objects ConfigMaps, opens --watchers concurrent raw-HTTP watches on them
(from the list's resourceVersion, spread over a few worker processes so that the client's own
GIL does not distort the figures), then performs --updates merge patches paced at --rate per
second, each carrying its sequence number and send time in annotations. Every watcher records
when each MODIFIED event arrives; the delivery latency of an event is its receive time minus the
send time of the write (end to end: includes the write itself) and, as a second figure, minus the
time the write was acknowledged. Prints a table and a one-line JSON summary (last line), then
tears everything down. The whole run is bounded (about a minute with the defaults; a hard limit
of --time-limit seconds, default 170).

The target is p99 < 50 ms (end to end); the result says whether it was met, it is not asserted.
With --server URL it measures an already running server instead (nothing is started or stopped;
the objects are created in a fresh namespace that is deleted at the end).
"""

import argparse
import http.client
import json
import multiprocessing
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
LOCALKUBE = os.path.normpath(os.path.join(HERE, "..", "localkube"))
SEQ_RE = re.compile(rb'"bench\.tandem\.dev/seq":"(\d+)"')
TYPE_RE = re.compile(rb'^\{"type":"([A-Z]+)"')
TYPE_RE_ANY = re.compile(rb'"type"\s*:\s*"([A-Z]+)"')


class BenchError(Exception):
    pass


def now_ns():
    # CLOCK_MONOTONIC is system-wide on Linux, so worker processes and the writer share it
    return time.monotonic_ns()


# ---- HTTP ----------------------------------------------------------------------------------------


class Api:
    """A keep-alive JSON client for one thread."""

    def __init__(self, base, timeout=30.0):
        u = urllib.parse.urlsplit(base)
        if u.scheme != "http":
            raise BenchError("only http:// servers are supported: %s" % base)
        self.host = u.hostname
        self.port = u.port or 80
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, ctype="application/json"):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": "tandem-bench/watch-latency"}
        if data is not None:
            headers["Content-Type"] = ctype
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                return resp.status, raw
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def json(self, method, path, body=None, ctype="application/json", ok=(200, 201)):
        status, raw = self.request(method, path, body, ctype)
        if status not in ok:
            raise BenchError("%s %s -> HTTP %d: %s" % (method, path, status, raw[:300]))
        return json.loads(raw) if raw else None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# ---- the server under test ----------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A localkube API server process of our own."""

    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "apiserver")
        os.makedirs(self.dir)
        self.log_path = os.path.join(workdir, "apiserver.log")
        self.port = free_port()
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lk.apiserver", "--dir", self.dir, "--port", str(self.port),
             "--host", "127.0.0.1", "--log-level", "WARNING"],
            cwd=LOCALKUBE, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.url = "http://127.0.0.1:%d" % self.port

    def wait_ready(self, limit=30.0):
        deadline = time.monotonic() + limit
        api = Api(self.url, timeout=2.0)
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise BenchError("apiserver exited with %d: %s" % (self.proc.returncode,
                                                                     self.tail()))
                try:
                    status, _ = api.request("GET", "/readyz")
                    if status == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.1)
        finally:
            api.close()
        raise BenchError("apiserver not ready after %.0fs: %s" % (limit, self.tail()))

    def tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-800:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# ---- watchers (run in worker processes) ---------------------------------------------------------


def watch_thread(base, path, expected, deadline_mono, out, errors, ready):
    """Reads one watch stream; appends (seq, recv_ns) for every MODIFIED event."""
    u = urllib.parse.urlsplit(base)
    got = []
    conn = None
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5.0)
        conn.request("GET", path, headers={"Accept": "application/json",
                                           "User-Agent": "tandem-bench/watcher"})
        resp = conn.getresponse()
        if resp.status != 200:
            errors.append("watch answered HTTP %d: %r" % (resp.status, resp.read(300)))
            return
        ready.release()
        buf = b""
        while len(got) < expected and time.monotonic() < deadline_mono:
            try:
                chunk = resp.read1(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            t = now_ns()
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[:nl], buf[nl + 1:]
                if not line.strip():
                    continue
                m = TYPE_RE.match(line) or TYPE_RE_ANY.search(line)
                if not m or m.group(1) != b"MODIFIED":
                    if m and m.group(1) == b"ERROR":
                        errors.append("ERROR event: %r" % line[:300])
                    continue
                s = SEQ_RE.search(line)
                if s:
                    got.append((int(s.group(1)), t))
    except Exception as e:  # noqa: BLE001 (reported, not swallowed)
        errors.append("watcher: %r" % e)
    finally:
        if conn is not None:
            conn.close()
        out.extend(got)


def watch_worker(base, path, nthreads, expected, time_budget, started, conn_out):
    """A worker process: nthreads watches; sends back [(seq, recv_ns), ...] per watch."""
    deadline = time.monotonic() + time_budget
    results = [[] for _ in range(nthreads)]
    errors = []
    ready = threading.Semaphore(0)
    threads = [threading.Thread(target=watch_thread,
                                args=(base, path, expected, deadline, results[i], errors, ready),
                                daemon=True)
               for i in range(nthreads)]
    for t in threads:
        t.start()
    opened = 0
    for _ in range(nthreads):
        if ready.acquire(timeout=max(0.1, deadline - time.monotonic())):
            opened += 1
    started.put(opened)
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    conn_out.send((results, errors))
    conn_out.close()


# ---- statistics ----------------------------------------------------------------------------


def percentile(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = (len(sorted_vals) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def summarize(vals_ms):
    v = sorted(vals_ms)
    return {"count": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90),
            "p99": percentile(v, 99), "max": v[-1] if v else float("nan"),
            "min": v[0] if v else float("nan")}


# ---- the benchmark ------------------------------------------------------------------------------


def create_objects(base, ns, n, parallel):
    """Creates n ConfigMaps with `parallel` threads; returns the elapsed seconds."""
    errors = []
    nxt = [0]
    lock = threading.Lock()

    def worker():
        api = Api(base)
        try:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= n or errors:
                    return
                body = {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cm-%05d" % i, "labels": {"bench": "watch"}},
                        "data": {"index": str(i), "payload": "x" * 256}}
                api.json("POST", "/api/v1/namespaces/%s/configmaps" % ns, body)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        finally:
            api.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise BenchError("creating ConfigMaps: %s" % errors[0])
    return time.monotonic() - t0


def run(args):
    t_start = time.monotonic()
    hard_deadline = t_start + args.time_limit
    workdir = None
    server = None
    base = args.server
    if base is None:
        workdir = tempfile.mkdtemp(prefix="tandem-bench-watch-")
        server = Server(workdir)
    api = None
    ns = "bench-watch-%d" % os.getpid()
    procs = []
    try:
        if server is not None:
            server.wait_ready()
            base = server.url
        api = Api(base)
        api.json("POST", "/api/v1/namespaces",
                 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

        create_s = create_objects(base, ns, args.objects, args.create_parallel)
        lst = api.json("GET", "/api/v1/namespaces/%s/configmaps?labelSelector=bench%%3Dwatch" % ns)
        if len(lst["items"]) != args.objects:
            raise BenchError("listed %d ConfigMaps, created %d" % (len(lst["items"]), args.objects))
        rv = lst["metadata"]["resourceVersion"]

        # watches, spread over worker processes
        remaining = hard_deadline - time.monotonic()
        watch_budget = min(remaining - 5, 20 + args.updates / max(args.rate, 1) + 30)
        if watch_budget < 10:
            raise BenchError("not enough time left for the watch phase")
        path = ("/api/v1/namespaces/%s/configmaps?watch=1&labelSelector=bench%%3Dwatch"
                "&resourceVersion=%s&timeoutSeconds=%d" % (ns, rv, int(watch_budget) + 5))
        nproc = max(1, min(args.processes, args.watchers))
        per = [args.watchers // nproc + (1 if i < args.watchers % nproc else 0)
               for i in range(nproc)]
        ctx = multiprocessing.get_context("fork")
        started = ctx.Queue()
        pipes = []
        for k in per:
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=watch_worker,
                            args=(base, path, k, args.updates, watch_budget, started, w),
                            daemon=True)
            p.start()
            w.close()
            procs.append(p)
            pipes.append(r)
        opened = 0
        for _ in procs:
            opened += started.get(timeout=30)
        if opened != args.watchers:
            raise BenchError("only %d of %d watches opened" % (opened, args.watchers))
        time.sleep(0.5)  # let every stream settle

        # paced updates
        sent = {}
        acked = {}
        interval = 1.0 / args.rate if args.rate > 0 else 0.0
        t0 = time.monotonic()
        for seq in range(args.updates):
            target = t0 + seq * interval
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if time.monotonic() > hard_deadline - 15:
                raise BenchError("time limit reached during the update phase (%d updates done)"
                                 % seq)
            name = "cm-%05d" % (seq % args.objects)
            ts = now_ns()
            patch = {"metadata": {"annotations": {"bench.tandem.dev/seq": str(seq),
                                                  "bench.tandem.dev/sent": str(ts)}}}
            sent[seq] = ts
            api.json("PATCH", "/api/v1/namespaces/%s/configmaps/%s" % (ns, name), patch,
                     ctype="application/merge-patch+json", ok=(200,))
            acked[seq] = now_ns()
        write_s = time.monotonic() - t0

        # collect
        e2e, from_ack, errors = [], [], []
        per_watcher_counts = []
        for r, p in zip(pipes, procs):
            wait = max(1.0, hard_deadline - time.monotonic() - 5)
            if not r.poll(wait):
                raise BenchError("a watcher process did not report within %.0fs" % wait)
            results, errs = r.recv()
            errors.extend(errs)
            for got in results:
                per_watcher_counts.append(len(got))
                for seq, t in got:
                    if seq in sent:
                        e2e.append((t - sent[seq]) / 1e6)
                        from_ack.append((t - acked[seq]) / 1e6)
            p.join(5)
        expected = args.updates * args.watchers
        return {
            "base": base, "create_s": create_s, "write_s": write_s, "e2e": summarize(e2e),
            "ack": summarize(from_ack), "expected": expected, "received": len(e2e),
            "per_watcher_min": min(per_watcher_counts) if per_watcher_counts else 0,
            "errors": errors, "server_log": server.log_path if server else None,
        }
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
        if api is not None:
            try:
                api.request("DELETE", "/api/v1/namespaces/%s" % ns)
            except Exception:  # noqa: BLE001 (best-effort cleanup)
                pass
            api.close()
        if server is not None:
            server.stop()
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def report(args, r, elapsed):
    e, a = r["e2e"], r["ack"]
    met = r["received"] == r["expected"] and e["p99"] < args.target_p99_ms
    summary = {
        "benchmark": "watch_latency",
        "objects": args.objects, "watchers": args.watchers, "updates": args.updates,
        "target_rate_per_s": args.rate,
        "events_expected": r["expected"], "events_received": r["received"],
        "latency_ms": {k: round(e[k], 3) for k in ("p50", "p90", "p99", "max")},
        "latency_from_ack_ms": {k: round(a[k], 3) for k in ("p50", "p90", "p99", "max")},
        "write_rate_per_s": round(args.updates / r["write_s"], 1) if r["write_s"] else None,
        "create_rate_per_s": round(args.objects / r["create_s"], 1) if r["create_s"] else None,
        "target_p99_ms": args.target_p99_ms, "target_met": met,
        "elapsed_s": round(elapsed, 1),
    }
    if not args.json_only:
        print("watch_latency: %d ConfigMaps, %d watchers, %d updates at %g/s (server %s)"
              % (args.objects, args.watchers, args.updates, args.rate, r["base"]))
        print("  created %d objects in %.2fs (%.0f/s, %d parallel clients)"
              % (args.objects, r["create_s"], args.objects / r["create_s"], args.create_parallel))
        print("  wrote %d updates in %.2fs (%.0f/s achieved)"
              % (args.updates, r["write_s"], args.updates / r["write_s"]))
        print("  events received %d of %d (slowest watcher got %d of %d)"
              % (r["received"], r["expected"], r["per_watcher_min"], args.updates))
        print("  %-28s %9s %9s %9s %9s %9s" % ("delivery latency (ms)", "count", "p50", "p90",
                                               "p99", "max"))
        for label, s in (("receive - send (end to end)", e), ("receive - write ack", a)):
            print("  %-28s %9d %9.2f %9.2f %9.2f %9.2f"
                  % (label, s["count"], s["p50"], s["p90"], s["p99"], s["max"]))
        print("  target p99 < %g ms: %s" % (args.target_p99_ms, "met" if met else "NOT met"))
        for err in r["errors"][:5]:
            print("  watcher error: %s" % err)
    print(json.dumps(summary, sort_keys=True))
    return summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--watchers", type=int, default=50)
    p.add_argument("--updates", type=int, default=2000)
    p.add_argument("--rate", type=float, default=200.0, help="updates per second (0 = unpaced)")
    p.add_argument("--processes", type=int, default=5, help="worker processes for the watchers")
    p.add_argument("--create-parallel", type=int, default=8)
    p.add_argument("--target-p99-ms", type=float, default=50.0)
    p.add_argument("--time-limit", type=float, default=170.0, help="hard limit for the run (s)")
    p.add_argument("--server", default=None, help="measure this running server instead")
    p.add_argument("--json-only", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if min(args.objects, args.watchers, args.updates) < 1:
        p.error("--objects, --watchers and --updates must be positive")
    # a SIGTERM (e.g. from run.sh's backstop timeout) still tears the server down
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t0 = time.monotonic()
    try:
        r = run(args)
    except BenchError as e:
        print("watch_latency: FAILED: %s" % e, file=sys.stderr)
        return 1
    report(args, r, time.monotonic() - t0)
    if r["received"] != r["expected"]:
        print("watch_latency: FAILED: %d of %d events were not delivered"
              % (r["expected"] - r["received"], r["expected"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
