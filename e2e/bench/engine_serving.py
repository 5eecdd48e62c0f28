#!/usr/bin/env python3
"""Serving throughput and latency of tandem-engine (Python 3 standard library only).

    python3 e2e/bench/engine_serving.py [--shape large] [--type q8_0] [--concurrency 1,4,16,64]
        [--input-len 32] [--output-len 128] [--requests-per-stream 2] [--threads 2] [--json-only]

Starts `tandem-engine serve` on a free loopback port with the generated ~290M-parameter llama
model (the same file e2e/bench/engine_cpu.py uses), then drives it with
e2e/bench/tools/serve_load.py (what `vllm bench serve` measures: TTFT, TPOT, ITL p50/p90/p99 and
output tokens/s) at each concurrency level: streaming /v1/completions with random token-id
prompts of --input-len tokens, --output-len generated tokens each (ignore_eos). The defaults
(32 in, 128 out) make the load generation-dominated, which is what the goal below is about;
--input-len 128 --output-len 64 shows a prefill-heavier mix. Prints the table
and, as the last line, a JSON summary including the goal of the issue: aggregate generation
throughput at 16 streams >= 4x the single-stream figure (reported, not asserted).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import statistics
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402
import serve_load  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_server(model, threads, kv_memory, log_name, extra=None):
    """Starts `tandem-engine serve` (model name "bench", plus the flags in extra) on a free
    loopback port and waits for /health; returns (process, base url, log file). The log is
    build/bench/<log_name>."""
    port = free_port()
    exe = os.path.join(engine_cpu.build_dir(), "engine", "cli", "tandem-engine")
    log = open(os.path.join(engine_cpu.build_dir(), "bench", log_name), "w")
    proc = subprocess.Popen([exe, "serve", "--model", model, "--served-model-name", "bench",
                             "--host", "127.0.0.1", "--port", str(port), "--threads",
                             str(threads), "--max-model-len", "1024", "--max-num-seqs", "64",
                             "--kv-cache-memory", kv_memory] + (extra or []), stdout=log,
                            stderr=log)
    url = "http://127.0.0.1:%d" % port
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url, log
        except OSError:
            if proc.poll() is not None:
                log.close()
                raise SystemExit("tandem-engine exited; see " + log_name)
            time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=60)
    log.close()
    raise SystemExit("tandem-engine did not become healthy; see " + log_name)



def alternate_variants(url, concurrency, variants, repeats, requests_per_stream, output_len,
                       vocab, row):
    """Runs each (name, extra) of variants at one concurrency level, the variants alternating for
    repeats rounds (a slow spell of the host hits all alike), each run with prompts of its own
    (no run finds another's in the prefix cache). Into row: each variant's median output tok/s
    under its name, its runs under name_runs, its errors (and the first one). Returns row."""
    runs = {name: [] for name, _ in variants}
    for rep in range(repeats):
        for k, (name, extra) in enumerate(variants):
            lv = serve_load.run_level(url, "bench", concurrency, requests_per_stream, 32,
                                      output_len, vocab, 100 * concurrency + 10 * rep + k,
                                      extra=extra)
            runs[name].append(lv["output_tok_s"])
            row[name + "_errors"] = row.get(name + "_errors", 0) + lv["errors"]
            if lv["errors"]:
                row[name + "_first_error"] = lv.get("first_error")
    for name in runs:
        row[name] = statistics.median(runs[name])
        row[name + "_runs"] = runs[name]
    return row

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="large")
    ap.add_argument("--type", default="q8_0")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    model = engine_cpu.ensure_model(a.shape, a.type)
    vocab = engine_cpu.shape_vocab(a.shape)
    proc, url, log = start_server(model, a.threads, "4GiB", "engine_serving.log")
    try:
        levels = []
        for c in [int(x) for x in a.concurrency.split(",")]:
            lv = serve_load.run_level(url, "bench", c, a.requests_per_stream, a.input_len,
                                      a.output_len, vocab, 0)
            levels.append(lv)
            if not a.json_only:
                print("concurrency %3d: %8.1f output tok/s  TTFT p50 %s ms  TPOT p50 %s ms  "
                      "ITL p99 %s ms  errors %d" % (c, lv["output_tok_s"], lv["ttft_p50_ms"],
                                                   lv["tpot_p50_ms"], lv["itl_p99_ms"],
                                                   lv["errors"]), flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    if not a.json_only:
        serve_load.print_table(levels)
    by_c = {lv["concurrency"]: lv for lv in levels}
    scale = None
    if 1 in by_c and 16 in by_c and by_c[1]["output_tok_s"] > 0:
        scale = round(by_c[16]["output_tok_s"] / by_c[1]["output_tok_s"], 2)
    print(json.dumps({"benchmark": "engine_serving", "model": os.path.basename(model),
                      "threads": a.threads, "input_len": a.input_len,
                      "output_len": a.output_len, "scaling_16_vs_1": scale,
                      "goal_met": scale is not None and scale >= 4.0, "levels": levels}))
    return 0 if all(lv["errors"] == 0 for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
