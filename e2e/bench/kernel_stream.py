#!/usr/bin/env python3
"""Decode matmuls from memory as % of the machine's read bandwidth (Python 3 stdlib only).

    python3 e2e/bench/kernel_stream.py [--types f32,f16,...] [--json-only]

Runs `kc_bench --stream` (kernels/cpu/bench/kc_bench.c: n = 1 through the projections of the
~290M model's 20 layers, 140 prepared matrices of 120-860 MiB in all, best of 5 sweeps) and
`tandem-membw` (1 GiB, best of 5) on 1 and 2 threads, and prints GB/s of weights streamed per
weight type with its % of the read bandwidth at the same thread count. This is the kernels'
share of the engine's decode figure (engine_cpu.py) without attention, norms or sampling, and
with less noise. Last line: a JSON summary. The issue's goal (decode at >= 85 % of the
bandwidth for the large model on one thread) is reported, not asserted.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def build_dir():
    return os.environ.get("TANDEM_BUILD_DIR", os.path.join(ROOT, "build"))


def run_membw():
    exe = os.path.join(build_dir(), "engine", "backend", "tandem-membw")
    out = subprocess.run([exe, "-t", "1,2", "-o", "json"], check=True, stdout=subprocess.PIPE,
                         text=True)
    return {o["threads"]: o["read_gbs"] for o in map(json.loads, out.stdout.splitlines()) if o}


def run_stream(types):
    exe = os.path.join(build_dir(), "kernels", "cpu", "kc_bench")
    cmd = [exe, "--stream"] + ([types] if types else [])
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    rows = []
    isa = ""
    for line in out.stdout.splitlines():
        f = line.split()
        if line.startswith("isa "):
            isa = f[1].rstrip(",")
        elif len(f) == 5 and f[1].isdigit():
            rows.append({"type": f[0], "threads": int(f[1]), "mib": float(f[2]),
                         "us_per_token": float(f[3]), "gbs": float(f[4])})
    return isa, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="")
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    bw = run_membw()
    isa, rows = run_stream(a.types)
    if not rows:
        print("kernel_stream: kc_bench --stream printed no rows", file=sys.stderr)
        return 1
    for r in rows:
        read = bw.get(r["threads"], 0.0)
        r["bw_pct"] = round(100.0 * r["gbs"] / read, 1) if read else None
    if not a.json_only:
        print("read bandwidth: " + ", ".join("%d thread(s) %.2f GB/s" % (t, g)
                                             for t, g in sorted(bw.items())))
        print("| type | threads | MiB | us/token | GB/s | % of read bw |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            print("| %s | %d | %.1f | %.1f | %.2f | %s |" % (
                r["type"], r["threads"], r["mib"], r["us_per_token"], r["gbs"],
                "%.0f %%" % r["bw_pct"] if r["bw_pct"] is not None else "-"))
    one = [r["bw_pct"] for r in rows if r["threads"] == 1 and r["bw_pct"] is not None]
    print(json.dumps({"benchmark": "kernel_stream", "isa": isa,
                      "read_bandwidth_gbs": {str(t): g for t, g in sorted(bw.items())},
                      "goals": {"bw_pct_min_1t": min(one) if one else None},
                      "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
