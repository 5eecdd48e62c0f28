#!/usr/bin/env python3
"""LoRA adapters end to end: logits against llama.cpp, PEFT twins, and the server's LoRA surface.

    lora_e2e.py TANDEM_ENGINE TANDEM_GENMODEL TANDEM_GENLORA WORK_DIR

1. Logits: for random llama / qwen2 / qwen3 GGUF models and random adapters written by
   tandem-genlora (llama.cpp's adapter GGUF; F32 and F16; all seven projections or a subset;
   ranks 4..16), `tandem-engine generate --lora` against llama.cpp with the same adapter
   (node-llama-cpp, engine/reference/llama_logits.mjs): the last prompt position and 8 teacher-
   forced steps, max |delta| within BOUND (F32 adapter: 1e-3, the engine's F32 bound; F16
   adapter: 5e-3: llama.cpp rounds the activations to F16 before an F16 matmul, a relative
   2^-11 on the adapter's small delta; measured 7.7e-4).
   The adapter must move the logits (max |delta| to the base model > 0.1).
2. Twins: the same adapter as a PEFT directory (HF names, HF Q/K row order) on the GGUF model,
   and both forms on the Hugging Face twin of the model, give the GGUF pair's logits within 1e-4.
3. Server (`serve --enable-lora --lora-modules ... --max-loras 2`, runtime updating on):
   /v1/models; requests naming adapters, the base model and several adapters at once, each
   answer equal (tokens and logprobs) to the same request alone; prefix-cache isolation between
   adapters; /v1/load_lora_adapter and /v1/unload_lora_adapter with vLLM's messages and statuses;
   vllm:lora_requests_info; the official openai client (engine/reference/lora_client.mjs);
   startup errors (--lora-modules without --enable-lora, a bad adapter, a rank above
   --max-lora-rank) and the routes' absence without VLLM_ALLOW_RUNTIME_LORA_UPDATING.
Exit 77 (skipped) when node or the npm packages are missing.
"""

import array
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_e2e import FAILS, Server, check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "reference")
BOUND = {"f32": 1e-3, "f16": 5e-3}
TWIN_BOUND = 1e-4
PROMPT = "1,5,9,200,33,17,250,3,99,41,8,311,64,2,77,150,12"
TEACHER = "7,100,42,300,11,250,3,64"

# name: (arch, extra shape flags, adapter type, rank, targets)
CASES = {
    "llama-all-f32": ("llama", [], "f32", 8, "q,k,v,o,gate,up,down"),
    "llama-all-f16": ("llama", [], "f16", 8, "q,k,v,o,gate,up,down"),
    "llama-qk-r16": ("llama", [], "f32", 16, "q,k"),
    "qwen2-sub-f32": ("qwen2", [], "f32", 4, "q,v,o,down"),
    "qwen3-all-f32": ("qwen3", ["--head-dim", "64"], "f32", 8, "q,k,v,o,gate,up,down"),
}
SHAPE = ["--layers", "2", "--dim", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256"]


def read_rows(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def max_diff(a, b):
    n = min(len(a), len(b))
    return max(abs(a[i] - b[i]) for i in range(n))


def generate(exe, model, out, lora=None):
    cmd = [exe, "generate", "--model", model, "--prompt-tokens", PROMPT, "--teacher-tokens",
           TEACHER, "--kv-cache-dtype", "float32", "--threads", "1", "--dump-logits", out]
    if lora:
        cmd += ["--lora", lora]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return read_rows(out)


def run_logits(exe, gen, genlora, work):
    models, jobs, ours = {}, [], {}
    for name, (arch, extra, typ, rank, targets) in CASES.items():
        shape = SHAPE + extra
        key = arch + "".join(extra)
        if key not in models:
            base = os.path.join(work, "base-%s.gguf" % key.replace("--", "-"))
            subprocess.run([gen, "--format", "gguf", "--out", base, "--arch", arch, "--type",
                            "f32", "--vocab", "512", "--seed", "7"] + shape, check=True,
                           stdout=subprocess.DEVNULL)
            hf = os.path.join(work, "hf-%s" % key.replace("--", "-"))
            subprocess.run([gen, "--format", "hf", "--out", hf, "--arch", arch, "--type", "f32",
                            "--vocab", "512", "--seed", "7"] + shape, check=True,
                           stdout=subprocess.DEVNULL)
            models[key] = (base, hf)
            out = os.path.join(work, "ref-base-%s.bin" % arch)
            jobs.append({"model": base, "tokens": PROMPT, "teacher": TEACHER, "out": out,
                         "name": "base-" + key})
        base, hf = models[key]
        lora_args = ["--arch", arch, "--type", typ, "--rank", str(rank), "--alpha",
                     str(2 * rank), "--targets", targets, "--seed", str(len(name))] + shape
        gguf = os.path.join(work, name + ".gguf")
        peft = os.path.join(work, name + "-peft")
        subprocess.run([genlora, "--format", "gguf", "--out", gguf] + lora_args, check=True)
        subprocess.run([genlora, "--format", "peft", "--out", peft] + lora_args, check=True)
        out = os.path.join(work, "ref-%s.bin" % name)
        jobs.append({"model": base, "tokens": PROMPT, "teacher": TEACHER, "out": out,
                     "lora": gguf, "name": name})
        ours[name] = (base, hf, gguf, peft, typ, key)
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    env = dict(os.environ, UV_THREADPOOL_SIZE="1")
    r = subprocess.run(["node", "--v8-pool-size=0", "--single-threaded-gc",
                        os.path.join(REFERENCE, "llama_logits.mjs"), "--jobs", jobs_path],
                       stdout=subprocess.PIPE, text=True, cwd=REFERENCE, env=env, timeout=600)
    for line in r.stdout.splitlines():
        res = json.loads(line)
        check("error" not in res, "llama.cpp job: %s" % line)
    check(r.returncode == 0, "llama_logits.mjs exit %d" % r.returncode)
    if r.returncode != 0:
        return models
    for name, (base, hf, gguf, peft, typ, key) in ours.items():
        ref = read_rows(os.path.join(work, "ref-%s.bin" % name))
        ref_base = read_rows(os.path.join(work, "ref-base-%s.bin" % CASES[name][0]))
        mine = generate(exe, base, os.path.join(work, "t-%s.bin" % name), gguf)
        d, effect = max_diff(mine, ref), max_diff(ref, ref_base)
        print("%-15s vs llama.cpp: max |delta| %.2e (bound %.0e); adapter moves logits by %.2f"
              % (name, d, BOUND[typ], effect))
        check(len(mine) == len(ref) - 512 or len(mine) == len(ref),
              "%s: %d vs %d logits" % (name, len(mine), len(ref)))
        check(d <= BOUND[typ], "%s vs llama.cpp: %.3e > %.0e" % (name, d, BOUND[typ]))
        check(effect > 0.1, "%s: the adapter moves the logits (%.3f)" % (name, effect))
        for label, model, adapter in (("PEFT on GGUF", base, peft), ("PEFT on HF", hf, peft),
                                      ("GGUF on HF", hf, gguf)):
            twin = generate(exe, model, os.path.join(work, "t-%s-twin.bin" % name), adapter)
            dt = max_diff(twin, mine)
            check(dt <= TWIN_BOUND, "%s %s: %.3e from the GGUF pair" % (name, label, dt))
        print("%-15s twins (PEFT on GGUF, PEFT on HF, GGUF on HF) within %.0e" %
              (name, TWIN_BOUND))
    return models


def completion(srv, model, prompt, n=16, **kw):
    body = {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
            "logprobs": 3, "ignore_eos": True}
    body.update(kw)
    st, out, _ = srv.post("/v1/completions", body)
    return st, json.loads(out)


def answer(resp):
    c = resp["choices"][0]
    return (c["text"], c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"],
            c["logprobs"]["top_logprobs"])


def run_server(exe, models, work):
    base = models["llama"][0]
    a, b = os.path.join(work, "llama-all-f32.gguf"), os.path.join(work, "llama-qk-r16-peft")
    c_path = os.path.join(work, "qwen2-sub-f32.gguf")  # another architecture: refused
    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    srv = Server(exe, base, ["--enable-lora", "--lora-modules", "a=" + a,
                             json.dumps({"name": "b", "path": b}), "--max-loras", "2",
                             "--max-lora-rank", "16", "--max-num-seqs", "8",
                             "--max-model-len", "2048"],
                 os.path.join(work, "server.log"))
    try:
        st, body, _ = srv.get("/v1/models")
        ms = json.loads(body)["data"]
        check(st == 200 and [m["id"] for m in ms] == ["tiny", "a", "b"] and
              ms[1]["parent"] == "tiny" and ms[1]["root"] == a and ms[2]["root"] == b and
              ms[1]["max_model_len"] is None, "/v1/models: %s" % body[:300])

        prompts = ["hello world", "the quick brown fox", "1 2 3", "once upon a time"]
        jobs = [("tiny", prompts[0]), ("a", prompts[0]), ("b", prompts[0]), ("a", prompts[1]),
                ("b", prompts[2]), ("tiny", prompts[3]), ("a", prompts[3]), ("b", prompts[1])]
        alone = {}
        for model, p in jobs:
            st, resp = completion(srv, model, p)
            check(st == 200 and resp["model"] == model, "%s alone: %d %s" %
                  (model, st, str(resp)[:200]))
            alone[(model, p)] = answer(resp)
        check(alone[("a", prompts[0])] != alone[("tiny", prompts[0])] and
              alone[("b", prompts[0])] != alone[("a", prompts[0])],
              "adapters change the answer")
        # all at once: the batches mix both adapters and the base model
        results = {}

        def one(job):
            results[job] = completion(srv, *job)

        for _ in range(2):
            threads = [threading.Thread(target=one, args=(j,)) for j in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for job in jobs:
                st, resp = results[job]
                check(st == 200 and answer(resp) == alone[job],
                      "%s %r in a mixed batch equals alone" % job)
        print("mixed batches of 2 adapters and the base model: %d requests equal alone" %
              (2 * len(jobs)))

        # prefix cache: blocks computed under one adapter never serve another
        long_prompt = " ".join("w%d" % i for i in range(60))
        hits = lambda: srv.metric("vllm:prefix_cache_hits_total")  # noqa: E731
        completion(srv, "tiny", long_prompt, n=1)
        h0 = hits()
        completion(srv, "a", long_prompt, n=1)
        h1 = hits()
        completion(srv, "a", long_prompt, n=1)
        h2 = hits()
        check(h1 == h0 and h2 > h1,
              "prefix cache isolated per adapter: hits %g -> %g (adapter a, cold) -> %g (warm)"
              % (h0, h1, h2))

        # vllm:lora_requests_info while an adapter's request runs
        _, mbody, _ = srv.get("/metrics")
        info = [x for x in mbody.decode().splitlines()
                if x.startswith("vllm:lora_requests_info{")]
        check(len(info) == 1 and info[0].startswith(
            'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",'
            'running_lora_adapters=""} '), "idle lora_requests_info: %s" % info)
        seen = []

        def watch():
            for _ in range(500):
                _, mb, _ = srv.get("/metrics")
                line = [x for x in mb.decode().splitlines()
                        if x.startswith("vllm:lora_requests_info{")]
                if line and 'running_lora_adapters="a"' in line[0]:
                    seen.append(line[0])
                    return
                time.sleep(0.002)

        w = threading.Thread(target=watch)
        w.start()
        completion(srv, "a", "hello", n=2000)
        w.join()
        check(seen and float(seen[0].rsplit(" ", 1)[1]) > 1.6e9,
              "lora_requests_info names the running adapter: %s" % seen)

        # runtime loading and unloading (vLLM's messages)
        def load(body):
            st, out, r = srv.post("/v1/load_lora_adapter", body)
            return st, out.decode(), r

        c_gguf = os.path.join(work, "llama-all-f16.gguf")
        st, out, r = load({"lora_name": "c", "lora_path": c_gguf})
        check(st == 200 and out == "Success: LoRA adapter 'c' added successfully.",
              "load c: %d %s" % (st, out))
        st, resp = completion(srv, "c", prompts[0])
        check(st == 200 and resp["model"] == "c", "request to a loaded adapter: %d" % st)
        for body, status, msg in (
                ({"lora_name": "c", "lora_path": c_gguf}, 400,
                 "The lora adapter 'c' has already been loaded."),
                ({"lora_name": "d"}, 400, "Both 'lora_name' and 'lora_path' must be provided."),
                ({"lora_name": "d", "lora_path": "/nonexistent"}, 404, "No adapter found"),
                ({"lora_name": "d", "lora_path": c_path}, 400, "architecture"),
                ({"lora_name": "d", "lora_path": base}, 400, "general.type")):
            st, out, _ = load(body)
            check(st == status and msg in out, "load %s: %d %s" % (body, st, out))
        st, out, _ = srv.post("/v1/load_lora_adapter", b"{nope", raw=True)
        check(st == 400, "load with a bad body: %d" % st)
        st, out, _ = srv.post("/v1/unload_lora_adapter", {"lora_name": "c"})
        check(st == 200 and out.decode() == "Success: LoRA adapter 'c' removed successfully.",
              "unload c: %d %s" % (st, out))
        st, out, _ = srv.post("/v1/unload_lora_adapter", {"lora_name": "c"})
        check(st == 404 and b"The lora adapter 'c' cannot be found." in out,
              "unload c again: %d %s" % (st, out))
        st, out, _ = srv.post("/v1/unload_lora_adapter", {})
        check(st == 400 and b"needs to be provided" in out, "unload without a name: %d" % st)
        st, resp = completion(srv, "c", prompts[0])
        check(st == 404 and resp["error"]["message"] == "The model `c` does not exist.",
              "request to an unloaded adapter: %d %s" % (st, resp))
        st, body, _ = srv.get("/v1/models")
        check([m["id"] for m in json.loads(body)["data"]] == ["tiny", "a", "b"],
              "/v1/models after the unload")
        # three adapters at once with max_loras 2: all finish, each as alone
        st, out, _ = load({"lora_name": "c", "lora_path": c_gguf})
        trio = [("a", prompts[0]), ("b", prompts[0]), ("c", prompts[0]), ("a", prompts[2])]
        solo = {j: answer(completion(srv, *j)[1]) for j in trio}
        threads = [threading.Thread(target=one, args=(j,)) for j in trio]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for j in trio:
            st, resp = results[j]
            check(st == 200 and answer(resp) == solo[j], "%s %r with max_loras 2" % j)

        if shutil.which("node") and os.path.isdir(os.path.join(REFERENCE, "node_modules",
                                                               "openai")):
            r = subprocess.run(["node", os.path.join(REFERENCE, "lora_client.mjs"),
                                "http://127.0.0.1:%d/v1" % srv.port, "a", "tiny"],
                               stdout=subprocess.PIPE, text=True, timeout=300, cwd=REFERENCE)
            print("openai client: " + r.stdout.strip().splitlines()[-1])
            check(r.returncode == 0, "lora_client.mjs:\n" + r.stdout)
    finally:
        srv.stop()

    # without VLLM_ALLOW_RUNTIME_LORA_UPDATING the routes do not exist
    del os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
    srv = Server(exe, base, ["--enable-lora", "--lora-modules", "a=" + a],
                 os.path.join(work, "server-static.log"))
    try:
        st, _, _ = srv.post("/v1/load_lora_adapter", {"lora_name": "c", "lora_path": a})
        check(st == 404, "load route without runtime updating: %d" % st)
        st, resp = completion(srv, "a", "hi", n=2)
        check(st == 200 and resp["model"] == "a", "static adapter served: %d" % st)
    finally:
        srv.stop()

    for extra, msg in ((["--lora-modules", "a=" + a], "--lora-modules needs --enable-lora"),
                       (["--enable-lora", "--lora-modules", "a=/nonexistent"],
                        "No adapter found"),
                       (["--enable-lora", "--max-lora-rank", "8", "--lora-modules", "b=" + b],
                        "LoRA rank 16 is greater than max_lora_rank 8."),
                       (["--enable-lora", "--max-lora-rank", "12"], "--max-lora-rank 12"),
                       (["--enable-lora", "--lora-modules", "noequals"], "name=path")):
        r = subprocess.run([exe, "serve", "--model", base, "--port", "0"] + extra,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        check(r.returncode != 0 and msg in r.stdout,
              "serve %s refused: %d %s" % (" ".join(extra)[-40:], r.returncode,
                                           r.stdout.strip()[-200:]))


def main():
    exe, gen, genlora, work = sys.argv[1:5]
    if not shutil.which("node") or not os.path.isdir(
            os.path.join(REFERENCE, "node_modules", "node-llama-cpp")):
        print("skipped: node or engine/reference/node_modules/node-llama-cpp missing")
        return 77
    os.makedirs(work, exist_ok=True)
    models = run_logits(exe, gen, genlora, work)
    if "llama" in models:
        run_server(exe, models, work)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
