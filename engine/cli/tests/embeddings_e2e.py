#!/usr/bin/env python3
"""/v1/embeddings end to end against llama.cpp's embeddings (node-llama-cpp).

    embeddings_e2e.py TANDEM_ENGINE TANDEM_GENMODEL WORK_DIR

On a small random llama model (F32):
  - LAST pooling without normalisation equals llama.cpp's embedding of the same tokens (the
    final-normed hidden state of the last token, engine/reference/llama_embed.mjs) within
    EMBED_BOUND of the largest component: llama.cpp's embedding context keeps an F16 KV cache
    (its logits move by ~7e-4 for the same reason), this engine an F32 one;
  - "use_activation": true gives the same vector scaled to unit length ("normalize" is vLLM's
    400: it was removed); base64 decodes to the floats; embed_dtype (float16, bfloat16, fp8) and
    endianness give the floats rounded to nearest even in that byte order, in base64 and as
    encoding_format "bytes" (the binary body and its "metadata" header) or "bytes_only";
  - MEAN pooling equals the average of the LAST embeddings of every prefix (causal attention:
    token i's hidden state depends on the first i tokens only), prompts long enough to be
    prefilled in several chunks included;
  - string inputs, usage, vLLM's 400s (dimensions on a non-matryoshka model, bad
    encoding_format, empty input, an input too long for max_model_len).
Exit 77 (skipped) when node or the npm packages are missing.
"""

import base64
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_e2e import FAILS, Server, check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "reference")
EMBED_BOUND = 5e-3


def embed(srv, body):
    st, out, _ = srv.post("/v1/embeddings", body)
    return st, json.loads(out)


def vecs(resp):
    return [d["embedding"] for d in resp["data"]]


def max_rel(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def round_even(x, mbits, emin):
    """x (a float32) rounded to nearest even with mbits mantissa bits and emin the smallest
    normal exponent (subnormals below), exactly; None past the range is not expected here."""
    if x == 0:
        return 0.0
    m, e = math.frexp(abs(x))  # abs(x) = m * 2**e, 0.5 <= m < 1
    e = max(e - 1, emin)
    unit = 2.0 ** (e - mbits)
    q = abs(x) / unit
    n = math.floor(q)
    r = q - n
    if r > 0.5 or (r == 0.5 and n % 2 == 1):
        n += 1
    return math.copysign(n * unit, x)


def decode(raw, dtype, big):
    """The values of raw in vLLM's embed_dtype and byte order."""
    o = ">" if big else "<"
    if dtype == "float32":
        return list(struct.unpack("%s%df" % (o, len(raw) // 4), raw))
    if dtype == "float16":
        return list(struct.unpack("%s%de" % (o, len(raw) // 2), raw))
    if dtype == "bfloat16":
        hs = struct.unpack("%s%dH" % (o, len(raw) // 2), raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
    ebits, mbits, bias = (4, 3, 7) if dtype == "fp8_e4m3" else (5, 2, 15)
    out = []
    for b in raw:
        s, e, m = b >> 7, (b >> mbits) & ((1 << ebits) - 1), b & ((1 << mbits) - 1)
        v = (m / (1 << mbits)) * 2.0 ** (1 - bias) if e == 0 else \
            (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        out.append(-v if s else v)
    return out


ROUND = {"float32": lambda x: f32(x), "float16": lambda x: round_even(f32(x), 10, -14),
         "bfloat16": lambda x: round_even(f32(x), 7, -126),
         "fp8_e4m3": lambda x: round_even(f32(x), 3, -6),
         "fp8_e5m2": lambda x: round_even(f32(x), 2, -14)}


def check_encodings(srv, toks, floats):
    """Every embed_dtype and endianness, base64 and bytes, against the float answer."""
    for dtype in ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"):
        for endian in ("little", "big", "native"):
            big = endian == "big" or (endian == "native" and sys.byteorder == "big")
            st, r = embed(srv, {"input": toks, "encoding_format": "base64", "embed_dtype": dtype,
                                "endianness": endian})
            got = [decode(base64.b64decode(v), dtype, big) for v in vecs(r)] if st == 200 else []
            want = [[ROUND[dtype](x) for x in v] for v in floats]
            check(st == 200 and got == want,
                  "base64 %s %s: %d, first %r want %r" % (dtype, endian, st, got[0][:4] if got
                                                          else None, want[0][:4]))
        st, body, resp = srv.post("/v1/embeddings", {"input": toks, "encoding_format": "bytes",
                                                     "embed_dtype": dtype})
        meta = json.loads(resp.getheader("metadata") or "{}")
        size = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 1)
        check(st == 200 and resp.getheader("Content-Type") == "application/octet-stream" and
              len(body) == len(toks) * 64 * size and meta.get("id", "").startswith("embd-") and
              [d["shape"] for d in meta["data"]] == [[64]] * len(toks) and
              meta["data"][1]["start"] == 64 * size and meta["data"][1]["embed_dtype"] == dtype and
              meta["usage"]["prompt_tokens"] == sum(len(t) for t in toks),
              "bytes %s: %d %d bytes, metadata %r" % (dtype, st, len(body), meta))
        got = [decode(body[d["start"]:d["end"]], dtype, sys.byteorder == "big")
               for d in meta.get("data", [])]
        check(got == [[ROUND[dtype](x) for x in v] for v in floats], "bytes %s values" % dtype)
    st, body, resp = srv.post("/v1/embeddings", {"input": toks, "encoding_format": "bytes_only",
                                                 "embed_dtype": "float16", "endianness": "big"})
    check(st == 200 and resp.getheader("metadata") is None and len(body) == len(toks) * 128 and
          decode(body[:128], "float16", True) == [ROUND["float16"](x) for x in floats[0]],
          "bytes_only: %d, %d bytes" % (st, len(body)))


def main():
    exe, gen, work = sys.argv[1:4]
    if not shutil.which("node") or not os.path.isdir(
            os.path.join(REFERENCE, "node_modules", "node-llama-cpp")):
        print("skipped: node or engine/reference/node_modules/node-llama-cpp missing")
        return 77
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "11"], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(5)
    inputs = [[rng.randrange(3, 500) for _ in range(n)] for n in (1, 2, 7, 19, 40, 90)]
    path = os.path.join(work, "inputs.json")
    with open(path, "w") as f:
        json.dump(inputs, f)
    r = subprocess.run(["node", os.path.join(REFERENCE, "llama_embed.mjs"), "--model", model,
                        "--inputs", path], stdout=subprocess.PIPE, text=True, timeout=300,
                       cwd=REFERENCE, check=True)
    ref = json.loads(r.stdout)
    toks = ref["tokens"]

    last = Server(exe, model, ["--max-model-len", "256", "--max-num-batched-tokens", "32",
                               "--pooler-config", '{"pooling_type": "LAST", "normalize": false}'],
                  os.path.join(work, "server-last.log"))
    mean = Server(exe, model, ["--max-model-len", "256", "--max-num-batched-tokens", "32",
                               "--pooler-config", '{"pooling_type": "MEAN", "normalize": false}'],
                  os.path.join(work, "server-mean.log"))
    try:
        st, resp = embed(last, {"input": toks})
        check(st == 200 and resp["object"] == "list" and resp["id"].startswith("embd-") and
              len(resp["data"]) == len(toks), "LAST: %d %s" % (st, str(resp)[:200]))
        worst = 0.0
        for i, (ours, theirs) in enumerate(zip(vecs(resp), ref["embeddings"])):
            d = max_rel(ours, theirs)
            worst = max(worst, d)
            check(len(ours) == 64 and d <= EMBED_BOUND,
                  "input %d (%d tokens) vs llama.cpp: max |diff| / max |ref| = %.2e (bound %.0e)"
                  % (i, len(toks[i]), d, EMBED_BOUND))
        print("LAST vs llama.cpp: worst max |diff| / max |ref| = %.2e" % worst)
        check(resp["usage"]["prompt_tokens"] == sum(len(t) for t in toks) and
              resp["usage"]["completion_tokens"] == 0, "usage %s" % resp["usage"])

        st, normed = embed(last, {"input": toks[:3], "use_activation": True})
        for a, b in zip(vecs(normed), vecs(resp)):
            n = math.sqrt(sum(x * x for x in b))
            check(st == 200 and abs(math.sqrt(sum(x * x for x in a)) - 1) < 1e-5 and
                  max(abs(x - y / n) for x, y in zip(a, b)) < 1e-6, "use_activation: unit vector")
        st, plain = embed(last, {"input": toks[:1], "use_activation": None})
        check(st == 200 and max_rel(vecs(plain)[0], vecs(resp)[0]) < 1e-5,
              "use_activation null: the pooler's default (not normalised here)")
        check_encodings(last, toks[:2], vecs(resp)[:2])
        st, b64 = embed(last, {"input": toks[:2], "encoding_format": "base64"})
        for a, b in zip(vecs(b64), vecs(resp)):
            raw = base64.b64decode(a)
            floats = struct.unpack("<%df" % (len(raw) // 4), raw)
            check(st == 200 and len(floats) == 64 and
                  all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(floats, b)),
                  "base64 decodes to the float answer")

        # MEAN: the average of the LAST embeddings of every prefix
        for t in (toks[2], toks[4], toks[5]):
            st, m = embed(mean, {"input": [t]})
            st2, prefixes = embed(last, {"input": [t[:i] for i in range(1, len(t) + 1)]})
            avg = [sum(v[d] for v in vecs(prefixes)) / len(t) for d in range(64)]
            d = max_rel(vecs(m)[0], avg)
            check(st == 200 and st2 == 200 and d < 1e-4,
                  "MEAN of %d tokens = average of the prefixes' LAST: %.2e" % (len(t), d))

        st, s = embed(mean, {"input": ["hello world", "the cat sat"], "use_activation": True,
                             "truncation_side": "right", "padding": "do_not_pad",
                             "cache_salt": "salt", "request_id": "ignored-here"})
        check(st == 200 and len(s["data"]) == 2 and
              all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vecs(s)),
              "string inputs, normalised: %d" % st)
        for body, field in (({"input": "x", "dimensions": 8}, "dimensions"),
                            ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                            ({"input": []}, "input"), ({"input": [[]]}, "input"),
                            ({"input": [[5] * 300]}, "input"), ({}, "input"),
                            ({"input": "x", "normalize": True}, "normalize"),
                            ({"input": "x", "embed_dtype": "int8"}, "embed_dtype"),
                            ({"input": "x", "endianness": "middle"}, "endianness"),
                            ({"input": "x", "padding": "max_length"}, "padding"),
                            ({"input": "x", "cache_salt": "a/b"}, "cache_salt")):
            st, e = embed(last, body)
            check(st == 400 and e["error"]["param"] == field,
                  "400 naming %s: %d %s" % (field, st, e))
    finally:
        last.stop()
        mean.stop()
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
