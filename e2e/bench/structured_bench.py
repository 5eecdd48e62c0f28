#!/usr/bin/env python3
"""Grammar-constrained decode throughput of tandem-engine against unconstrained decode.

    python3 e2e/bench/structured_bench.py [--shape large] [--type q8_0] [--concurrency 1,16]
        [--output-len 128] [--requests-per-stream 2] [--threads 2] [--repeats 3]

Starts `tandem-engine serve` on the generated ~290M-parameter model (32,000-token byte-level BPE
vocabulary; the file e2e/bench/engine_cpu.py builds) and, at each concurrency level, runs the same
closed-loop load (e2e/bench/tools/serve_load.py: streamed /v1/completions, 32 random prompt
tokens, --output-len tokens, ignore_eos, temperature 1 with a seed; each variant its own prompts,
so none profits from another's prefix cache) three ways:
  * unconstrained;
  * a JSON schema (an array of at least 100 objects with a string, an integer and a boolean, so
    no answer ends before --output-len tokens), each request its own seed;
  * the same schema with every request on a distinct grammar (a different minItems), so no
    request finds another's masks in the cache: the cold-cache worst case.
The variants alternate for --repeats rounds and each figure is the median of its runs. Prints
each level and, last, a JSON summary with throughput ratios constrained / unconstrained. It
first measures the read bandwidth at --threads (tandem-membw) and gives each figure also as
weights streamed (steps/s x tensor bytes) and as % of that bandwidth.
The issue's goal: the mask costs at most 10 % of a decode step at 16 streams (ratio >= 0.9).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402
import engine_serving  # noqa: E402
import serve_load  # noqa: E402


def schema(min_items):
    return {"type": "array", "minItems": min_items, "maxItems": 1000,
            "items": {"type": "object", "additionalProperties": False,
                      "required": ["name", "id", "ok"],
                      "properties": {"name": {"type": "string", "maxLength": 40},
                                     "id": {"type": "integer"}, "ok": {"type": "boolean"}}}}


class Distinct:
    """A structured_outputs field whose schema differs per request (minItems 100, 101, ...)."""

    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return {"json": schema(100 + self.n)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="large")
    ap.add_argument("--type", default="q8_0")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    model = engine_cpu.ensure_model(a.shape, a.type)
    vocab = engine_cpu.shape_vocab(a.shape)
    # decode streams every weight once per step: steps/s x the tensor bytes, against the
    # machine's read bandwidth at the same thread count
    bw = engine_cpu.run_membw([a.threads])[a.threads]["read_gbs"]
    size = next(iter(engine_cpu.run_tandem(model, 1, 1, [a.threads], 1).values()))[2]
    print("read bandwidth %.1f GB/s at %d threads; %.1f MB of weights" % (bw, a.threads,
                                                                            size / 1e6))
    proc, url, log = engine_serving.start_server(model, a.threads, "2GiB",
                                                 "structured_bench.log")
    rows = []
    try:
        # warm up (first-touch of weights, the vocabulary trie)
        serve_load.run_level(url, "bench", 1, 1, 32, 16, vocab, 99,
                             extra={"structured_outputs": {"json": schema(100)}})
        for c in [int(x) for x in a.concurrency.split(",")]:
            row = {"concurrency": c}
            variants = (("plain", {"temperature": 1.0, "seed": 1}),
                        ("schema", {"temperature": 1.0, "seed": 1,
                                    "structured_outputs": {"json": schema(100)}}),
                        ("schema_cold", {"temperature": 1.0, "seed": 1,
                                         "structured_outputs": Distinct()}))
            engine_serving.alternate_variants(url, c, variants, a.repeats, a.requests_per_stream,
                                              a.output_len, vocab, row)
            for name, _ in variants:
                gbs = row[name] / c * size / 1e9  # c sequences share each step's weights
                row[name + "_weights_gbs"] = round(gbs, 2)
                row[name + "_pct_bw"] = round(100.0 * gbs / bw, 1)
            row["ratio"] = round(row["schema"] / row["plain"], 3) if row["plain"] else None
            row["ratio_cold"] = (round(row["schema_cold"] / row["plain"], 3)
                                 if row["plain"] else None)
            print("concurrency %2d: plain %8.1f tok/s (%.0f %% bw)  schema %8.1f (%.3f, %.0f %% bw)"
                  "  distinct schemas %8.1f (%.3f, %.0f %% bw)   (medians of %d)"
                  % (c, row["plain"], row["plain_pct_bw"], row["schema"], row["ratio"] or 0,
                     row["schema_pct_bw"], row["schema_cold"], row["ratio_cold"] or 0,
                     row["schema_cold_pct_bw"], a.repeats), flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    r16 = [r for r in rows if r["concurrency"] == 16]
    print(json.dumps({"benchmark": "structured_output", "model": os.path.basename(model),
                      "threads": a.threads, "read_gbs": bw, "weight_bytes": size,
                      "output_len": a.output_len, "levels": rows,
                      "goal_met": bool(r16) and (r16[0]["ratio"] or 0) >= 0.9}))
    errors = sum(r[k] for r in rows for k in r if k.endswith("_errors"))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
