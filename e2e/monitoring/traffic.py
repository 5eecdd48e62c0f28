#!/usr/bin/env python3
"""Traffic that gives every Tandem metric family the dashboards and rules read some data.

    traffic.py --gateway HOST:PORT --model M --decode HOST:PORT --prefill-host HOST [--rounds N]

Through the EPP's gateway: short completions (decode only), streamed completions (inter-token
latency), long new prompts (more uncached tokens than the pool's P/D threshold: a prefill pod
computes them and the decode pod pulls the KV blocks), and repeats of one long prefix with new
suffixes (prefix-cache hits, x-cache-hit). Directly on a decode pod's sidecar: one P/D request
whose prefiller (a pool pod's IP on a closed port) is unreachable, so the decode pod falls back to
a local prefill (tandem_agent_prefill_fallbacks_total{reason="prefill-unreachable"}).
Prompts are token-id lists (ids 10..499: any generated test model's vocabulary holds them).
Prints one JSON summary; exits 1 when a request failed or a path was not taken.
Standard library only.
"""

import argparse
import http.client
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor


_RNG = random.Random()


def ids(n):
    """N random token ids: a new prompt each time (its blocks are in no cache yet)."""
    return [_RNG.randrange(10, 500) for _ in range(n)]


def post(addr, body, headers=None, timeout=60):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--decode", required=True, help="a decode pod's sidecar HOST:PORT")
    ap.add_argument("--prefill-host", required=True, help="a pool pod's IP (allowlisted)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--long", type=int, default=160, help="tokens of a long (P/D) prompt")
    args = ap.parse_args()

    s = {"requests": 0, "errors": [], "pd": 0, "cache_hits": 0, "streamed": 0, "fallback": None}

    def record(what, st, hdr, data):
        s["requests"] += 1
        if st != 200:
            s["errors"].append("%s: %d %s" % (what, st, data[:200].decode(errors="replace")))
            return
        if hdr.get("x-prefill-pod"):
            s["pd"] += 1
        if hdr.get("x-cache-hit") == "true":
            s["cache_hits"] += 1

    def one(body, what):
        try:
            return what, post(args.gateway, body)
        except (OSError, http.client.HTTPException) as e:
            return what, (0, {}, str(e).encode())

    for _ in range(args.rounds):
        jobs = []
        for i in range(12):  # short, decode only
            jobs.append(({"model": args.model, "prompt": ids(20), "max_tokens": 4,
                          "temperature": 0}, "short %d" % i))
        for i in range(4):  # streamed
            jobs.append(({"model": args.model, "prompt": ids(24), "max_tokens": 8,
                          "temperature": 0, "stream": True, "ignore_eos": True}, "stream %d" % i))
        with ThreadPoolExecutor(4) as ex:
            for what, (st, hdr, data) in ex.map(lambda j: one(*j), jobs):
                record(what, st, hdr, data)
                if what.startswith("stream") and st == 200 and b"data: [DONE]" in data:
                    s["streamed"] += 1
        for i in range(4):  # long new prompts: P/D with a KV transfer
            what, (st, hdr, data) = one({"model": args.model, "prompt": ids(args.long),
                                         "max_tokens": 4, "temperature": 0}, "long %d" % i)
            record(what, st, hdr, data)
        prefix = ids(96)  # 6 blocks of 16
        for i in range(6):  # repeats of one prefix: the KV events steer them to its holder
            what, (st, hdr, data) = one({"model": args.model, "prompt": prefix + ids(8),
                                         "max_tokens": 2, "temperature": 0}, "prefix %d" % i)
            record(what, st, hdr, data)
            time.sleep(0.3)  # the holder's KV events reach the EPP's index
    # a P/D fallback: the prefiller named is allowlisted (a pool pod) but nothing listens on port 1
    try:
        st, hdr, data = post(args.decode, {"model": args.model, "prompt": ids(20), "max_tokens": 2,
                                           "temperature": 0},
                             headers={"x-prefiller-host-port": "%s:1" % args.prefill_host})
    except (OSError, http.client.HTTPException) as e:
        st, hdr, data = 0, {}, str(e).encode()
    record("fallback", st, hdr, data)
    s["fallback"] = hdr.get("x-tandem-pd-fallback")

    print(json.dumps(s))
    ok = not s["errors"] and s["pd"] > 0 and s["cache_hits"] > 0 and s["streamed"] > 0 and s["fallback"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
