#!/usr/bin/env python3
"""Decode prefetch distances for this CPU, measured on the engine (Python 3 standard library only).

    python3 e2e/bench/cpu_tune.py [--model large] [--types f32,f16,q8_0,q4_k_m]
        [--threads 1,2] [--candidates 0,4096,8192,16384,32768] [-n 64] [--rounds 3]

The CPU kernels software-prefetch the weight stream during decode by a distance per weight class
(F32; F16/BF16; quantized) and per pool size (one thread / several), from a table keyed by the
CPU's vendor, family and model (kernels/cpu/kc_cpu.c), which TANDEM_CPU_TUNE overrides. For each
file and thread count this runs `tandem-engine bench -p 0 -n N` with the table's value and with
TANDEM_CPU_TUNE set to each candidate, the order rotated each round so a host whose speed drifts
weighs on all alike, and reports the median tokens/s of each against the table's. The last line
is the TANDEM_CPU_TUNE that takes, per class and column, the best candidate (a class with several
files: the best mean of each file's figure relative to its own best).

`kc_bench --tune` sweeps the same distances on the kernels alone (no attention, no norms between
the matrices); it can disagree with this sweep (Zen 5, F16 on one thread: no prefetch wins on the
kernels alone and loses 10-15 % in the engine), so table rows are set from this one.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_cpu  # noqa: E402  (the models and the build directory)

CLASS_OF = {"f32": "pf_f32", "f16": "pf_half", "bf16": "pf_half"}


def tg(model, n, t, spec):
    exe = os.path.join(engine_cpu.build_dir(), "engine", "cli", "tandem-engine")
    env = dict(os.environ)
    env.pop("TANDEM_CPU_TUNE", None)
    if spec:
        env["TANDEM_CPU_TUNE"] = spec
    out = subprocess.run([exe, "bench", "--model", model, "-p", "0", "-n", str(n), "-t", str(t),
                          "-r", "2", "-o", "json"], check=True, stdout=subprocess.PIPE, text=True,
                         env=env)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["t_s"]
    raise RuntimeError("tandem-engine bench printed no result")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="large", choices=sorted(engine_cpu.SHAPES))
    ap.add_argument("--types", default="f32,f16,q8_0,q4_k_m")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--candidates", default="0,4096,8192,16384,32768")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.rounds < 1 or a.n < 1:
        ap.error("--rounds and -n must be >= 1")
    cands = [int(c) for c in a.candidates.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    # per class, per column (0: one thread, 1: several): {candidate: [relative figures]}
    rel = {}
    for typ in a.types.split(","):
        model = engine_cpu.ensure_model(a.model, typ)
        key = CLASS_OF.get(typ, "pf_quant")
        for t in threads:
            col = 0 if t == 1 else 1
            specs = [None] + cands
            runs = {s: [] for s in specs}
            for r in range(a.rounds):
                k = r % len(specs)
                for s in specs[k:] + specs[:k]:
                    spec = None if s is None else "%s=%d" % (key, s)
                    runs[s].append(tg(model, a.n, t, spec))
            med = {s: engine_cpu.median(v) for s, v in runs.items()}
            base = med[None]
            print("%s %-6s t=%d  table %8.2f t/s  " % (a.model, typ, t, base)
                  + "  ".join("%s=%d %.3f" % (key, c, med[c] / base) for c in cands),
                  flush=True)
            top = max(med[c] for c in cands)
            slot = rel.setdefault(key, [{}, {}])[col]
            for c in cands:
                slot.setdefault(c, []).append(med[c] / top)
    parts = []
    for key in ("pf_quant", "pf_half", "pf_f32"):
        if key not in rel:
            continue
        best = []
        for col in (0, 1):
            slot = rel[key][col]
            if slot:
                best.append(max(slot, key=lambda c: sum(slot[c]) / len(slot[c])))
        parts.append("%s=%s" % (key, "/".join(map(str, best))))
    print("TANDEM_CPU_TUNE=" + ",".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
