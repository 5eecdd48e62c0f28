#!/usr/bin/env python3
"""A serving load generator for OpenAI-compatible servers (Python 3 standard library only).

    python3 e2e/bench/tools/serve_load.py --url http://127.0.0.1:8200 [--model NAME]
        [--concurrency 1,4,16,64] [--requests-per-stream 4] [--input-len 128] [--output-len 64]
        [--vocab 4096] [--seed 0] [--time-limit 240] [--json-only]

Measures what `vllm bench serve` measures, the same way (vllm/benchmarks/serve.py):
  * TTFT: request start to the first streamed chunk carrying text;
  * ITL: gaps between later chunks (pooled over all requests);
  * TPOT: (latency - TTFT) / (output_tokens - 1) per request;
  * throughput: output tokens / wall time of the level, and requests / s.
Every request is a streaming /v1/completions call with a prompt of --input-len random token ids
(a token-id array, so the length is exact whatever the tokenizer), max_tokens --output-len,
ignore_eos true and temperature 0, with stream_options.include_usage so the server's own token
counts are used. For each concurrency level C, C client threads each send --requests-per-stream
requests back to back (closed loop). Prints a table and, as the last line, a JSON summary.
Importable: run_level(...) is used by e2e/bench/engine_serving.py.
"""

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(host, port, body, timeout):
    """Sends one streaming completion; returns a dict with timings and counts (or an error)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    chunks = []  # arrival times of chunks carrying text
    usage = None
    try:
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return {"error": "HTTP %d: %s" % (resp.status, resp.read(300).decode("utf-8", "replace"))}
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            obj = json.loads(payload)
            if "error" in obj:
                return {"error": json.dumps(obj["error"])[:300]}
            if obj.get("usage"):
                usage = obj["usage"]
            for ch in obj.get("choices") or []:
                if ch.get("text"):
                    chunks.append(time.perf_counter())
                    break
    except (OSError, http.client.HTTPException, ValueError) as e:
        return {"error": "%s: %s" % (type(e).__name__, e)}
    finally:
        conn.close()
    end = time.perf_counter()
    if not chunks:
        return {"error": "no text chunk received"}
    out_tokens = usage["completion_tokens"] if usage else len(chunks)
    ttft = chunks[0] - start
    latency = end - start
    return {
        "ttft": ttft,
        "latency": latency,
        "itl": [b - a for a, b in zip(chunks, chunks[1:])],
        "tpot": (latency - ttft) / (out_tokens - 1) if out_tokens > 1 else None,
        "output_tokens": out_tokens,
        "prompt_tokens": usage["prompt_tokens"] if usage else None,
    }


def run_level(url, model, concurrency, requests_per_stream, input_len, output_len, vocab, seed,
              timeout=300, extra=None):
    """Runs one closed-loop concurrency level; returns its summary dict. extra: fields merged into
    every request body (e.g. a structured-output constraint); a callable value is called once per
    request for that request's value."""
    u = urllib.parse.urlparse(url)
    rng = random.Random(seed * 1000003 + concurrency)
    bodies = []
    for _ in range(concurrency * requests_per_stream):
        prompt = [rng.randrange(10, vocab) for _ in range(input_len)]
        body = {
            "model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }
        for key, val in (extra or {}).items():
            body[key] = val() if callable(val) else val  # a callable: a value per request
        bodies.append(json.dumps(body).encode())
    results = []
    lock = threading.Lock()

    def worker(idx):
        for j in range(requests_per_stream):
            r = one_request(u.hostname, u.port or 80, bodies[idx * requests_per_stream + j], timeout)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    ttft = [r["ttft"] for r in ok]
    tpot = [r["tpot"] for r in ok if r["tpot"] is not None]
    itl = [x for r in ok for x in r["itl"]]
    out_tokens = sum(r["output_tokens"] for r in ok)

    def ms(v):
        return None if v is None else round(v * 1000.0, 2)

    summary = {"concurrency": concurrency, "requests": len(results), "completed": len(ok),
               "errors": len(errors), "wall_s": round(wall, 3),
               "output_tok_s": round(out_tokens / wall, 2) if wall > 0 else 0.0,
               "request_s": round(len(ok) / wall, 3) if wall > 0 else 0.0}
    for name, vals in (("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        for p in (50, 90, 99):
            summary["%s_p%d_ms" % (name, p)] = ms(percentile(vals, p))
    if errors:
        summary["first_error"] = errors[0]
    return summary


def print_table(levels, out=sys.stdout):
    cols = ["concurrency", "completed", "errors", "output_tok_s", "ttft_p50_ms", "ttft_p90_ms",
            "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p90_ms",
            "itl_p99_ms"]
    print(" ".join("%12s" % c[:12] for c in cols), file=out)
    for lv in levels:
        print(" ".join("%12s" % ("-" if lv.get(c) is None else lv.get(c)) for c in cols), file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8200")
    ap.add_argument("--model", default="")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=240)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    model = a.model
    if not model:
        u = urllib.parse.urlparse(a.url)
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
        conn.request("GET", "/v1/models")
        model = json.loads(conn.getresponse().read())["data"][0]["id"]
        conn.close()
    deadline = time.monotonic() + a.time_limit
    levels = []
    for c in [int(x) for x in a.concurrency.split(",") if x]:
        if time.monotonic() > deadline:
            print("time limit reached; skipping concurrency %d" % c, file=sys.stderr)
            break
        levels.append(run_level(a.url, model, c, a.requests_per_stream, a.input_len,
                                a.output_len, a.vocab, a.seed))
    if not a.json_only:
        print_table(levels)
    print(json.dumps({"benchmark": "serve_load", "model": model, "input_len": a.input_len,
                      "output_len": a.output_len, "levels": levels}))
    return 0 if all(lv["errors"] == 0 for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
