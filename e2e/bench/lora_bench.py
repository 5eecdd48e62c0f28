#!/usr/bin/env python3
"""LoRA decode throughput of tandem-engine: four adapters mixed in one batch against the base model.

    python3 e2e/bench/lora_bench.py [--shape large] [--type q8_0] [--concurrency 1,16]
        [--rank 16] [--adapter-type f16] [--output-len 128] [--requests-per-stream 2]
        [--threads 2] [--repeats 3]

Writes four random adapters for the generated ~290M-parameter model (tandem-genlora: all seven
projections of every layer, --rank, --adapter-type, as llama.cpp's adapter GGUF), starts
`tandem-engine serve --enable-lora --lora-modules a0=.. a3=.. --max-loras 4` on it, and at each
concurrency level runs the same closed-loop load (e2e/bench/tools/serve_load.py: streamed
/v1/completions, 32 random prompt tokens, --output-len tokens, ignore_eos) three ways:
  * the base model;
  * one adapter for every request;
  * the four adapters in turn (request i names a{i mod 4}), so every step's batch mixes them.
The variants alternate for --repeats rounds; each figure is the median of its runs. It measures
the read bandwidth at --threads first (tandem-membw) and gives each figure as % of it (weights
streamed per step: the model's tensors, and the adapters' for the LoRA variants). Prints each
level, then a JSON summary with the ratios to the base model.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402
import engine_serving  # noqa: E402
import serve_load  # noqa: E402


class Rotate:
    """The model field of request i: adapter a{i mod n}."""

    def __init__(self, n):
        self.n, self.i = n, 0

    def __call__(self):
        self.i += 1
        return "a%d" % (self.i % self.n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="large")
    ap.add_argument("--type", default="q8_0")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--adapter-type", default="f16")
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    model = engine_cpu.ensure_model(a.shape, a.type)
    shape = engine_cpu.SHAPES[a.shape]
    vocab = engine_cpu.shape_vocab(a.shape)
    arch_shape = [x for i, x in enumerate(shape)
                  if x != "--vocab" and (i == 0 or shape[i - 1] != "--vocab")]
    genlora = os.path.join(engine_cpu.build_dir(), "engine", "tools", "tandem-genlora")
    adir = os.path.join(engine_cpu.build_dir(), "bench", "lora")
    os.makedirs(adir, exist_ok=True)
    adapters, adapter_bytes = [], 0
    for i in range(4):
        path = os.path.join(adir, "%s-%s-r%d-%s-%d.gguf" % (a.shape, a.type, a.rank,
                                                           a.adapter_type, i))
        if not os.path.exists(path):
            subprocess.run([genlora, "--format", "gguf", "--out", path, "--arch", "llama",
                            "--rank", str(a.rank), "--alpha", str(2 * a.rank), "--type",
                            a.adapter_type, "--seed", str(100 + i)] + arch_shape, check=True,
                           stdout=subprocess.DEVNULL)
        adapters.append("a%d=%s" % (i, path))
        adapter_bytes = os.path.getsize(path)
    bw = engine_cpu.run_membw([a.threads])[a.threads]["read_gbs"]
    size = next(iter(engine_cpu.run_tandem(model, 1, 1, [a.threads], 1).values()))[2]
    print("read bandwidth %.1f GB/s at %d threads; %.1f MB of weights; adapters of %.1f MB"
          % (bw, a.threads, size / 1e6, adapter_bytes / 1e6))
    proc, url, log = engine_serving.start_server(
        model, a.threads, "2GiB", "lora_bench.log",
        ["--enable-lora", "--max-loras", "4", "--max-lora-rank", str(a.rank),
         "--lora-modules"] + adapters)
    rows = []
    try:
        serve_load.run_level(url, "bench", 1, 1, 32, 16, vocab, 99)  # warm up
        serve_load.run_level(url, "bench", 4, 1, 32, 16, vocab, 98, extra={"model": Rotate(4)})
        for c in [int(x) for x in a.concurrency.split(",")]:
            row = {"concurrency": c}
            n_ad = min(4, c)
            variants = (("base", {}), ("one_adapter", {"model": "a0"}),
                        ("four_adapters", {"model": Rotate(4)}))
            engine_serving.alternate_variants(url, c, variants, a.repeats, a.requests_per_stream,
                                              a.output_len, vocab, row)
            for name, n in (("base", 0), ("one_adapter", 1), ("four_adapters", n_ad)):
                # c sequences share each step's weights, and the adapters they use
                gbs = row[name] / c * (size + n * adapter_bytes) / 1e9
                row[name + "_weights_gbs"] = round(gbs, 2)
                row[name + "_pct_bw"] = round(100.0 * gbs / bw, 1)
            for name in ("one_adapter", "four_adapters"):
                row[name + "_ratio"] = round(row[name] / row["base"], 3) if row["base"] else None
            print("concurrency %2d: base %8.1f tok/s (%.0f %% bw)  one adapter %8.1f (%.3f)"
                  "  four adapters %8.1f (%.3f, %.0f %% bw)   (medians of %d)"
                  % (c, row["base"], row["base_pct_bw"], row["one_adapter"],
                     row["one_adapter_ratio"] or 0, row["four_adapters"],
                     row["four_adapters_ratio"] or 0, row["four_adapters_pct_bw"], a.repeats),
                  flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    print(json.dumps({"benchmark": "lora", "model": os.path.basename(model),
                      "threads": a.threads, "read_gbs": bw, "weight_bytes": size,
                      "adapter_bytes": adapter_bytes, "rank": a.rank,
                      "adapter_type": a.adapter_type, "output_len": a.output_len,
                      "levels": rows}))
    errors = sum(r[k] for r in rows for k in r if k.endswith("_errors"))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
