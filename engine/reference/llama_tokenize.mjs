// llama.cpp reference tokenization (node-llama-cpp 3.22.1, prebuilt CPU library).
//
//   node llama_tokenize.mjs --model M.gguf --corpus corpus.jsonl [--special] [--out FILE]
//   node llama_tokenize.mjs --jobs jobs.json   (a JSON list of {model, corpus, out, special})
//
// corpus.jsonl holds one {"text": "..."} object per line. For each line one JSON line
// {"ids": [...]} is written (to --out, else stdout), in corpus order: llama.cpp's tokenizer via
// model.tokenize(text, special), which is common_tokenize(vocab, text, add_special = false,
// parse_special = special): no BOS/EOS is added; with --special, special-token text such as
// "<|im_start|>" becomes the special token, otherwise it is tokenized as plain text.
// After the ids, one line {"done": N, "n_vocab": rows of token_embd, "bos": id|null,
// "eos": id|null} summarises the run. With --jobs, a model used by several jobs is loaded once.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function parseArgs(argv) {
    const opts = { special: false };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "--special") {
            opts.special = true;
        } else if (a.startsWith("--") && i + 1 < argv.length) {
            opts[a.slice(2)] = argv[++i];
        } else {
            throw new Error(`unexpected or incomplete argument '${a}'`);
        }
    }
    return opts;
}

function readCorpus(path) {
    const lines = fs.readFileSync(path, "utf8").split("\n");
    const texts = [];
    lines.forEach((line, i) => {
        if (line.trim() === "") return;
        let obj;
        try {
            obj = JSON.parse(line);
        } catch (e) {
            throw new Error(`${path}:${i + 1}: ${e.message}`);
        }
        if (typeof obj?.text !== "string") throw new Error(`${path}:${i + 1}: "text" must be a string`);
        texts.push(obj.text);
    });
    return texts;
}

async function runJob(llama, job, cache) {
    if (!job.model || !job.corpus) throw new Error("--model and --corpus are required");
    const texts = readCorpus(job.corpus);
    let model = cache.get(job.model);
    if (!model) {
        model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0, vocabOnly: true });
        cache.set(job.model, model);
    }
    const embd = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
    const out = texts.map((t) => JSON.stringify({ ids: Array.from(model.tokenize(t, !!job.special)) }));
    out.push(JSON.stringify({
        done: texts.length,
        n_vocab: embd ? Number(embd.dimensions[1]) : null,
        bos: model.tokens.bos ?? null,
        eos: model.tokens.eos ?? null,
    }));
    const text = out.join("\n") + "\n";
    if (job.out) fs.writeFileSync(job.out, text);
    else process.stdout.write(text);
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const jobs = opts.jobs ? JSON.parse(fs.readFileSync(opts.jobs, "utf8")) : [opts];
    if (!Array.isArray(jobs)) throw new Error(`${opts.jobs}: expected a JSON list of jobs`);
    const llama = await getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        logLevel: LlamaLogLevel.error,
    });
    const cache = new Map(); // model path -> loaded model, so jobs can share one load
    let failed = 0;
    for (const job of jobs) {
        try {
            await runJob(llama, job, cache);
        } catch (e) {
            failed++;
            console.error(`llama_tokenize: ${job.model}: ${e.message ?? e}`);
        }
    }
    for (const m of cache.values()) await m.dispose();
    await llama.dispose();
    process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
    console.error(`llama_tokenize: ${e.message ?? e}`);
    process.exitCode = 2;
});
