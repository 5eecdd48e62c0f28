#!/usr/bin/env python3
"""Prompt logprobs cost in tandem-engine: one prompt's latency with and without prompt_logprobs.

    python3 e2e/bench/prompt_logprobs_bench.py [--shape large] [--type q8_0] [--input-len 512]
        [--top 5] [--threads 2] [--repeats 5]

Starts `tandem-engine serve` on the generated ~290M-parameter model and times /v1/completions
requests of --input-len random prompt tokens and max_tokens 1 (prefill-only), three ways:
  * plain (the reference);
  * prompt_logprobs 0 (every position's own logprob and rank);
  * prompt_logprobs --top (plus the top entries).
The variants alternate for --repeats rounds with fresh prompts (no prefix-cache hits for the
plain one either); each figure is the median. A request with prompt logprobs runs the LM head
over every prompt row and turns each row into a logprob, rank and top list; the ratios to the
plain request are what that costs. Prints the table, then a JSON summary.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402
import engine_serving  # noqa: E402


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    out = json.loads(urllib.request.urlopen(req, timeout=600).read())
    return time.time() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="large")
    ap.add_argument("--type", default="q8_0")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    model = engine_cpu.ensure_model(a.shape, a.type)
    vocab = engine_cpu.shape_vocab(a.shape)
    proc, url, log = engine_serving.start_server(model, a.threads, "1GiB",
                                                 "prompt_logprobs_bench.log")
    rng = random.Random(7)
    variants = (("plain", None), ("plp0", 0), ("plp_top", a.top))
    times = {name: [] for name, _ in variants}
    errors = 0
    try:
        post(url, {"model": "bench", "prompt": [5] * 16, "max_tokens": 1})  # warm up
        for _ in range(a.repeats):
            for name, k in variants:
                prompt = [rng.randrange(3, vocab) for _ in range(a.input_len)]
                body = {"model": "bench", "prompt": prompt, "max_tokens": 1, "temperature": 0}
                if k is not None:
                    body["prompt_logprobs"] = k
                dt, out = post(url, body)
                plp = out["choices"][0].get("prompt_logprobs")
                if k is not None and (not plp or len(plp) != a.input_len):
                    errors += 1
                times[name].append(dt)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    med = {name: statistics.median(v) for name, v in times.items()}
    print("%d-token prompt, max_tokens 1, %d threads, medians of %d:"
          % (a.input_len, a.threads, a.repeats))
    for name, _ in variants:
        print("  %-8s %7.3f s  (%.2fx plain)" % (name, med[name], med[name] / med["plain"]))
    print(json.dumps({"benchmark": "prompt_logprobs", "model": os.path.basename(model),
                      "threads": a.threads, "input_len": a.input_len, "top": a.top,
                      "seconds": {k: round(v, 4) for k, v in med.items()},
                      "ratios": {k: round(v / med["plain"], 3) for k, v in med.items()},
                      "errors": errors}))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
