#!/usr/bin/env python3
"""Logits of tandem-engine against llama.cpp on the same GGUF files (Python 3 stdlib only).

    vs_llamacpp.py TANDEM_ENGINE TANDEM_GENMODEL REFERENCE_DIR WORK_DIR [--only NAME]
                   [--device cpu|cuda] [--tensor-parallel-size N]

For every model of the matrix below (llama, qwen2, qwen3, gemma2, gemma3 (sliding windows, soft-
capping), phi3 (partial rotary dims), qwen2moe (with its shared expert), qwen3moe and Mixtral
(experts); F32, F16, BF16, Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS and the Q4_K_M / Q5_K_M mixes; GQA and MHA; tied
and untied output; Llama 3, linear, YaRN and LongRoPE RoPE scaling) it writes a seeded random-weight GGUF
with tandem-genmodel, then
evaluates the same prompt and 32 teacher-forced tokens with
  * `tandem-engine generate --prompt-tokens P --teacher-tokens T --dump-logits A` (F32 KV cache),
  * llama.cpp through node-llama-cpp (engine/reference/llama_logits.mjs, F32 KV cache),
and compares the logits rows (the last prompt position, then one row per teacher step) by
max |delta|. The bound per weight type is in BOUNDS and justified in docs/engine.md:
F32 1e-3 (the issue's bound); F16 2e-2 and BF16 1e-1, because llama.cpp rounds the activations to
F16 / BF16 before those matmuls (a relative error of 2^-11 / 2^-8 per element) while our kernels
multiply F32 activations; Q8_0 and Q4_0 2.5e-1: both engines quantise activations to Q8_0 with
the same formula (ggml's x86 quantize_row_q8_0), so most runs agree exactly, but quantisation is
discontinuous: the F32 parts of the two engines (norms, softmax) differ in summation order at
~1e-7 relative, and an activation that lands within that distance of a rounding boundary moves
by a whole step (1/127 of its block's maximum) in one engine only; over ~10^5 quantised values
per layer a few such flips, amplified through the layers, reach ~0.1 on logits spanning ~15. Exit 77 (skip) when node or the reference packages are missing.

`--device cuda` (or TANDEM_REFERENCE_DEVICE=cuda) runs tandem-engine on the CUDA backend
(`generate --device cuda`) against the same llama.cpp logits, with CUDA_BOUNDS: the device keeps
F32 matrices as F16 (a relative error of 2^-11 per weight, like F16's activation rounding), so
F32 gets F16's bound; the rest keep theirs. Exit 77 when no CUDA device is usable (the engine says
so at start with exit status 2). These bounds are unverified until a GPU run (docs/cuda.md).

`--tensor-parallel-size N` runs tandem-engine with the model split over N ranks
(docs/tensor-parallel.md), against the same llama.cpp logits and bounds: only the order of the
row-parallel sums changes. Models whose shapes N does not divide are left out (and listed); on
the CUDA backend, exit 77 when fewer than N devices are visible.
"""

import array
import json
import os
import random
import shutil
import subprocess
import sys

# name: (arch, type, layers, dim, heads, kv_heads, head_dim, ffn, tied)
MODELS = {
    "llama-f32-gqa": ("llama", "f32", 2, 128, 4, 2, 0, 256, False),
    "llama-f32-mha-tied": ("llama", "f32", 2, 128, 4, 4, 0, 256, True),
    "llama-f32-gqa4-d256": ("llama", "f32", 4, 256, 8, 2, 0, 704, False),
    "llama-q8_0-gqa4-d256": ("llama", "q8_0", 4, 256, 8, 2, 0, 704, False),
    "llama-f16-gqa": ("llama", "f16", 2, 128, 4, 2, 0, 256, False),
    "llama-bf16-gqa": ("llama", "bf16", 2, 128, 4, 2, 0, 256, False),
    "llama-q8_0-gqa": ("llama", "q8_0", 2, 128, 4, 2, 0, 256, False),
    "llama-q4_0-mha-tied": ("llama", "q4_0", 2, 128, 4, 4, 0, 256, True),
    "qwen2-f32-gqa": ("qwen2", "f32", 2, 128, 4, 2, 0, 256, False),
    "qwen2-q8_0-tied": ("qwen2", "q8_0", 2, 128, 4, 2, 0, 256, True),
    "qwen3-f32-gqa-hd64": ("qwen3", "f32", 2, 128, 4, 2, 64, 256, False),
    "qwen3-q4_0-gqa": ("qwen3", "q4_0", 2, 128, 4, 2, 64, 256, True),
    "llama-f32-rope-llama3": ("llama", "f32", 2, 128, 4, 2, 0, 256, False),
    "qwen2-f32-rope-linear": ("qwen2", "f32", 2, 128, 4, 2, 0, 256, False),
    "qwen2-f32-rope-yarn": ("qwen2", "f32", 2, 128, 4, 2, 0, 256, False),
    # the other legacy block types (32 elements)
    "llama-q4_1-gqa": ("llama", "q4_1", 2, 128, 4, 2, 0, 256, False),
    "qwen3-q5_0-gqa": ("qwen3", "q5_0", 2, 128, 4, 2, 64, 256, False),
    "llama-q5_1-mha-tied": ("llama", "q5_1", 2, 128, 4, 4, 0, 256, True),
    "qwen2-iq4_nl-gqa": ("qwen2", "iq4_nl", 2, 128, 4, 2, 0, 256, False),
    # K-quants and IQ4_XS (256-element super-blocks: dim, heads x head_dim and ffn multiples of
    # 256), and llama-quantize's Q4_K_M / Q5_K_M mixes (Q6_K output, attn_v and ffn_down in the
    # use_more_bits layers; where a row is not whole super-blocks, llama-quantize's fallback: the
    # d512 model's ffn_down rows of 1152 are Q5_0, or Q8_0 in place of Q6_K)
    "llama-q4_k-d256": ("llama", "q4_k", 2, 256, 8, 4, 0, 768, False),
    "llama-q5_k-d256": ("llama", "q5_k", 2, 256, 8, 4, 0, 768, False),
    "qwen2-q6_k-d256": ("qwen2", "q6_k", 2, 256, 8, 4, 0, 768, False),
    "llama-q3_k-d256": ("llama", "q3_k", 2, 256, 8, 4, 0, 768, False),
    "llama-q2_k-d256": ("llama", "q2_k", 2, 256, 8, 4, 0, 768, False),
    "qwen3-iq4_xs-d256": ("qwen3", "iq4_xs", 2, 256, 4, 2, 64, 768, False),
    "llama-q4_k_m-d256": ("llama", "q4_k_m", 2, 256, 8, 2, 0, 768, False),
    "llama-q4_k_m-d512": ("llama", "q4_k_m", 2, 512, 8, 4, 0, 1152, False),
    "qwen2-q5_k_m-tied": ("qwen2", "q5_k_m", 4, 256, 8, 2, 0, 768, True),
    # the other architectures (flags in EXTRA): gemma2 (sliding window on even layers, soft-
    # capped attention and logits, GeGLU, post-norms, scaled embeddings), gemma3 (q/k norms,
    # 2 of 3 layers sliding with their own RoPE base, linear scaling on the global ones), phi3
    # (fused QKV and gate/up; partial rotary dims), qwen3moe and Mixtral (top-k experts)
    "gemma2-f32-swa": ("gemma2", "f32", 3, 128, 4, 2, 32, 256, True),
    "gemma2-q8_0-swa": ("gemma2", "q8_0", 3, 128, 4, 2, 32, 256, True),
    "gemma3-f32-swa": ("gemma3", "f32", 4, 128, 4, 2, 32, 256, True),
    "gemma3-q4_k_m-d256": ("gemma3", "q4_k_m", 4, 256, 4, 2, 64, 768, True),
    "phi3-f32-gqa": ("phi3", "f32", 2, 128, 4, 2, 0, 256, False),
    "phi3-f32-partial-rotary": ("phi3", "f32", 2, 128, 4, 4, 0, 256, False),
    "phi3-q4_0-gqa": ("phi3", "q4_0", 2, 128, 4, 2, 0, 256, False),
    "phi3-f32-longrope": ("phi3", "f32", 2, 128, 4, 2, 0, 256, False),
    "phi3-f32-longrope-short": ("phi3", "f32", 2, 128, 4, 4, 0, 256, False),
    "qwen3moe-f32": ("qwen3moe", "f32", 2, 128, 4, 2, 32, 256, False),
    "qwen3moe-q8_0": ("qwen3moe", "q8_0", 2, 128, 4, 2, 32, 256, False),
    "mixtral-f32": ("mixtral", "f32", 2, 128, 4, 2, 0, 256, False),
    "mixtral-q4_k-d256": ("mixtral", "q4_k", 2, 256, 8, 2, 0, 512, False),
    # qwen2moe: experts without renormalization, q/k/v biases, a sigmoid-gated shared expert
    "qwen2moe-f32": ("qwen2moe", "f32", 2, 128, 4, 2, 0, 256, False),
    "qwen2moe-q8_0": ("qwen2moe", "q8_0", 2, 128, 4, 4, 0, 256, False),
}

# RoPE scaling (tandem-genmodel flags): Llama 3.1's rope_freqs with its 500000 base, linear, and
# YaRN (original context 4096, base 10000, head dim 32: the ramp runs from pair 5 to pair 12 of
# 16, floor(5.24) and ceil(11.26), so pairs 0-5 keep their angle, 12-15 are interpolated by 1/4
# and 6-11 mix; cos/sin get YaRN's magnitude 1 + 0.1 ln 4)
EXTRA = {
    "llama-f32-rope-llama3": ["--rope-scaling", "llama3:8", "--rope-base", "500000"],
    "qwen2-f32-rope-linear": ["--rope-scaling", "linear:4"],
    "qwen2-f32-rope-yarn": ["--rope-scaling", "yarn:4"],
    # windows of 16 over the 56 positions; gemma3's pattern 3 makes layers 0, 1 and 3 slide
    "gemma2-f32-swa": ["--sliding-window", "16", "--attn-softcap", "1.5"],
    "gemma2-q8_0-swa": ["--sliding-window", "16"],
    "gemma3-f32-swa": ["--sliding-window", "16", "--swa-pattern", "3", "--rope-base", "1000000",
                       "--rope-base-swa", "10000", "--rope-scaling", "linear:8"],
    "gemma3-q4_k_m-d256": ["--sliding-window", "12", "--final-softcap", "30"],
    "phi3-f32-partial-rotary": ["--rotary-dim", "24"],
    # LongRoPE: llama.cpp's context (64 tokens asked, padded to 256) is past the original 32
    # (long factors) and within the original 256 (short factors); both carry the magnitude
    # sqrt(1 + ln s / ln original)
    "phi3-f32-longrope": ["--ctx", "256", "--rope-scaling", "longrope:8"],
    "phi3-f32-longrope-short": ["--ctx", "8192", "--rope-scaling", "longrope:32",
                                "--rotary-dim", "24"],
    "qwen3moe-f32": ["--experts", "8", "--experts-used", "2", "--expert-ffn", "96"],
    "qwen3moe-q8_0": ["--experts", "8", "--experts-used", "3", "--expert-ffn", "64"],
    "mixtral-f32": ["--experts", "4", "--experts-used", "2"],
    "qwen2moe-f32": ["--experts", "8", "--experts-used", "2", "--expert-ffn", "64"],
    "qwen2moe-q8_0": ["--experts", "6", "--experts-used", "3", "--expert-ffn", "96"],
    "mixtral-q4_k-d256": ["--experts", "4", "--experts-used", "2"],
}

# tandem-engine flags per model: LongRoPE picks its factors by the context (--max-model-len), as
# llama.cpp by its context size (256 here: it pads n_ctx to a multiple of 256)
ENGINE_ARGS = {
    "phi3-f32-longrope-short": ["--max-model-len", "256"],
}

# The quantized types beyond Q8_0/Q4_0 share Q8_0's reasoning: both engines quantise the
# activations with ggml's formula for the type's vec_dot type (Q8_0, Q8_1 or Q8_K) and sum the
# integer products exactly, so they differ only where a value sits on a rounding boundary.
QUANT = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k",
         "q6_k", "iq4_xs", "q4_k_m", "q5_k_m")
BOUNDS = dict({"f32": 1e-3, "f16": 2e-2, "bf16": 1e-1}, **{q: 2.5e-1 for q in QUANT})
CUDA_BOUNDS = dict({"f32": 3e-2, "f16": 3e-2, "bf16": 1e-1}, **{q: 2.5e-1 for q in QUANT})
# (on the CUDA backend the types without device kernels are dequantised to F16 at load: F16
# weights against llama.cpp's quantised dot products, inside the same bound)

# gemma's GeGLU: llama.cpp's CPU backend looks GELU up in a table of f16 inputs and outputs
# (ggml_vec_geglu_f32 under GGML_GELU_FP16), a relative error up to 2^-11 per activation, where
# we compute ggml_gelu_f32's formula in float as transformers and vLLM do. Emulating the table
# brings the F32 gemma models to 3.5e-4 / 7.1e-4; computed exactly they differ by ~2.4e-3. So
# F32 gemma gets F16's reasoning with a bound of 5e-3 (a missing attention soft-cap gives 2.4,
# a window one position too wide 2.4).
GEMMA_F32_BOUND = 5e-3

# what the CUDA backend refuses by name (cuda_check_arch): gemma's features, sliding windows,
# experts
CPU_ONLY_ARCHS = ("gemma2", "gemma3", "qwen2moe", "qwen3moe", "mixtral")

N_PROMPT = 24
N_TEACHER = 32


def splits(tp, heads, kv, hd, ffn, typ, arch="llama"):
    """Whether tp ranks can share the model (engine/model/shard.c's rules: no experts)."""
    if tp == 1:
        return True
    if arch in ("qwen2moe", "qwen3moe", "mixtral"):
        return False
    def block(cols):  # a row of a K type that is not whole super-blocks falls back to 32
        if typ in ("f32", "f16", "bf16"):
            return 1
        ktype = typ.endswith("_k") or typ.endswith("_k_m") or typ == "iq4_xs"
        return 256 if ktype and cols % 256 == 0 else 32
    return (heads % tp == 0 and (kv % tp == 0 or tp % kv == 0) and ffn % tp == 0 and
            heads // tp * hd % block(heads * hd) == 0 and ffn // tp % block(ffn) == 0)


def read_rows(path, n_vocab):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return [a[i * n_vocab:(i + 1) * n_vocab] for i in range(len(a) // n_vocab)]


def main():
    engine, genmodel, refdir, work = (os.path.abspath(p) for p in sys.argv[1:5])
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    device = (sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else
              os.environ.get("TANDEM_REFERENCE_DEVICE", "cpu"))
    tp = int(sys.argv[sys.argv.index("--tensor-parallel-size") + 1]
             if "--tensor-parallel-size" in sys.argv else 1)
    bounds = CUDA_BOUNDS if device == "cuda" else BOUNDS
    tp_args = ["--tensor-parallel-size", str(tp)] if tp > 1 else []
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(refdir, "node_modules", "node-llama-cpp")):
        print("SKIP: node or engine/reference/node_modules missing (scripts/install-node-deps.sh)")
        return 77
    os.makedirs(work, exist_ok=True)
    if device != "cpu" or tp > 1:
        probe = os.path.join(work, "probe.gguf")
        subprocess.run([genmodel, "--format", "gguf", "--out", probe, "--arch", "llama",
                        "--type", "f16", "--layers", "1", "--dim", "64", "--heads", "4",
                        "--kv-heads", "2", "--ffn", "128", "--vocab", "512", "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        r = subprocess.run([engine, "generate", "--model", probe, "--prompt-tokens", "1,2",
                            "--n", "1", "--device", device] + tp_args, capture_output=True,
                           text=True)
        if r.returncode == 2 and ("no usable CUDA device" in r.stderr or
                                  "CUDA device(s) are visible" in r.stderr):
            print("SKIP: --device %s: %s" % (device, r.stderr.strip()))
            return 77
        if r.returncode != 0:
            print("FAIL: generate --device %s: %s" % (device, r.stderr.strip()))
            return 1
    rng = random.Random(1234)
    vocab = 1024
    jobs, cases = [], []
    for name, (arch, typ, layers, dim, heads, kv, hd, ffn, tied) in MODELS.items():
        if only and name != only:
            continue
        if device == "cuda" and arch in CPU_ONLY_ARCHS:
            print("skip %-22s: the CUDA backend does not run %s yet" % (name, arch))
            continue
        if not splits(tp, heads, kv, hd or dim // heads, ffn, typ, arch):
            print("skip %-22s: tensor parallel size %d does not divide its shapes (or it has "
                  "experts)" % (name, tp))
            continue
        path = os.path.join(work, name + ".gguf")
        cmd = [genmodel, "--format", "gguf", "--out", path, "--arch", arch, "--type", typ,
               "--layers", str(layers), "--dim", str(dim), "--heads", str(heads), "--kv-heads",
               str(kv), "--ffn", str(ffn), "--vocab", str(vocab), "--seed", "7"]
        if hd:
            cmd += ["--head-dim", str(hd)]
        if tied:
            cmd.append("--tied")
        cmd += EXTRA.get(name, [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        prompt = [rng.randrange(3, vocab) for _ in range(N_PROMPT)]
        teacher = [rng.randrange(3, vocab) for _ in range(N_TEACHER)]
        ours = os.path.join(work, name + ".tandem.f32")
        theirs = os.path.join(work, name + ".llama.f32")
        subprocess.run([engine, "generate", "--model", path, "--prompt-tokens",
                        ",".join(map(str, prompt)), "--teacher-tokens",
                        ",".join(map(str, teacher)), "--n", str(N_TEACHER), "--dump-logits",
                        ours, "--kv-cache-dtype", "float32", "--threads", "1", "--device",
                        device] + tp_args + ENGINE_ARGS.get(name, []),
                       check=True, stdout=subprocess.DEVNULL)
        jobs.append({"model": path, "tokens": ",".join(map(str, prompt)),
                     "teacher": ",".join(map(str, teacher)), "out": theirs, "threads": 1})
        cases.append((name, typ, ours, theirs))
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    env = dict(os.environ, UV_THREADPOOL_SIZE="1")
    subprocess.run([node, "--v8-pool-size=0", "--single-threaded-gc",
                    os.path.join(refdir, "llama_logits.mjs"), "--jobs", jobs_path],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=refdir)
    failed = 0
    results = []
    # Hugging Face twins (same seed and shape, written as config.json + model.safetensors +
    # tokenizer.json; llama Q/K un-permuted, so the engine runs them with NeoX RoPE) must give
    # the GGUF file's logits.
    for name in ("llama-f32-gqa", "qwen3-f32-gqa-hd64", "llama-bf16-gqa", "llama-f32-rope-llama3",
                 "qwen2-f32-rope-yarn", "gemma2-f32-swa", "gemma3-f32-swa",
                 "phi3-f32-partial-rotary", "phi3-f32-longrope", "phi3-f32-longrope-short",
                 "qwen2moe-f32", "qwen3moe-f32", "mixtral-f32"):
        if (only and name != only) or not any(c[0] == name for c in cases):
            continue
        arch, typ, layers, dim, heads, kv, hd, ffn, tied = MODELS[name]
        hf = os.path.join(work, name + "-hf")
        cmd = [genmodel, "--format", "hf", "--out", hf, "--arch", arch, "--type", typ,
               "--layers", str(layers), "--dim", str(dim), "--heads", str(heads), "--kv-heads",
               str(kv), "--ffn", str(ffn), "--vocab", str(vocab), "--seed", "7"]
        if hd:
            cmd += ["--head-dim", str(hd)]
        if tied:
            cmd.append("--tied")
        cmd += EXTRA.get(name, [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        job = next(j for j in jobs if j["model"].endswith(name + ".gguf"))
        ours_hf = os.path.join(work, name + ".hf.f32")
        subprocess.run([engine, "generate", "--model", hf, "--prompt-tokens", job["tokens"],
                        "--teacher-tokens", job["teacher"], "--n", str(N_TEACHER),
                        "--dump-logits", ours_hf, "--kv-cache-dtype", "float32", "--threads",
                        "1", "--device", device] + tp_args + ENGINE_ARGS.get(name, []), check=True,
                       stdout=subprocess.DEVNULL)
        a = read_rows(ours_hf, vocab)
        b = read_rows(os.path.join(work, name + ".tandem.f32"), vocab)
        worst = max((max(abs(x - y) for x, y in zip(ra, rb)) for ra, rb in zip(a, b)),
                    default=float("inf"))
        ok = len(a) == len(b) == N_TEACHER and worst <= 1e-4
        failed += not ok
        print("%s %-22s HF twin vs GGUF: max|dlogit| %.3g (bound 1e-4)"
              % ("ok  " if ok else "FAIL", name, worst))
    for name, typ, ours, theirs in cases:
        a = read_rows(ours, vocab)
        b = read_rows(theirs, vocab)
        n = min(len(a), len(b))
        if len(a) != N_TEACHER or n < N_TEACHER:
            print("FAIL %s: %d rows from tandem, %d from llama.cpp (want %d)"
                  % (name, len(a), len(b), N_TEACHER))
            failed += 1
            continue
        worst = 0.0
        spread = 0.0
        argmax_agree = 0
        for i in range(n):
            ra, rb = a[i], b[i]
            worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)))
            spread = max(spread, max(rb) - min(rb))
            argmax_agree += max(range(vocab), key=ra.__getitem__) == max(range(vocab),
                                                                         key=rb.__getitem__)
        bound = bounds[typ]
        if name.startswith("gemma") and typ == "f32":
            bound = max(bound, GEMMA_F32_BOUND)
        ok = worst <= bound and spread > 1.0
        failed += not ok
        results.append({"model": name, "device": device, "tp": tp, "max_abs_diff": worst,
                        "bound": bound,
                        "logit_spread": round(spread, 3), "argmax_agree": argmax_agree,
                        "rows": n})
        print("%s %-22s max|dlogit| %.3g (bound %g)  spread %.2f  argmax agree %d/%d"
              % ("ok  " if ok else "FAIL", name, worst, bound, spread, argmax_agree, n))
    print(json.dumps({"vs_llamacpp": results}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
