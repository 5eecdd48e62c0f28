// llama.cpp reference logits (node-llama-cpp 3.22.1, its prebuilt CPU library).
//
//   node llama_logits.mjs --model M.gguf --tokens 1,2,3 [--teacher 4,5,6] [--threads N]
//        [--mode step|batch] [--ctx N] [--lora A.gguf [--lora-scale S]] --out FILE
//   node llama_logits.mjs --jobs jobs.json        (a JSON list of {model, tokens, teacher,
//                                                   out, threads, mode, lora, lora_scale};
//                                                   one process, many runs)
//
// Writes float32 little-endian logits, one row of n_vocab values per evaluated position: the
// last prompt position, then one row after each teacher token (the format of
// `tandem-engine generate --dump-logits`). The KV cache is F32 (llama.cpp's default F16 cache
// moves logits by ~7e-4), flash attention is off, sampling is greedy so the logits are the
// model's raw output. --mode step (default) evaluates the prompt in one batch and then each
// teacher token on its own, as generation does; --mode batch evaluates everything in one batch.
// --lora applies a llama.cpp LoRA adapter GGUF (convert_lora_to_gguf.py's format) to the
// context at --lora-scale (default 1; llama.cpp multiplies it by the adapter's alpha / rank).
// Prints one JSON line per job on stdout: {"out", "rows", "n_vocab", "argmax": [...]}.
//
// Run as: UV_THREADPOOL_SIZE=1 node --v8-pool-size=0 --single-threaded-gc llama_logits.mjs ...
// (Node's own threads otherwise compete with ggml's spinning threads on small machines).
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

function parseArgs(argv) {
    const opts = {};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (!a.startsWith("--")) throw new Error(`unexpected argument '${a}'`);
        const key = a.slice(2);
        if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
        opts[key] = argv[++i];
    }
    return opts;
}

function parseIds(s, flag) {
    if (s === undefined || s === "") return [];
    if (Array.isArray(s)) return s.map(Number);
    return String(s).split(",").map((x) => {
        const v = Number(x);
        if (!Number.isInteger(v) || v < 0) throw new Error(`${flag}: bad token id '${x}'`);
        return v;
    });
}

async function runJob(llama, job, cache) {
    const tokens = parseIds(job.tokens, "--tokens");
    const teacher = parseIds(job.teacher, "--teacher");
    if (tokens.length === 0) throw new Error("--tokens: at least one prompt token is needed");
    if (!job.out) throw new Error("--out is required");
    const mode = job.mode ?? "step";
    if (mode !== "step" && mode !== "batch") throw new Error(`--mode: unknown '${mode}'`);
    const loraScaleArg = job.lora_scale ?? job["lora-scale"] ?? 1;
    const loraScale = Number(loraScaleArg);
    if (loraScaleArg === "" || !Number.isFinite(loraScale)) {
        throw new Error(`--lora-scale: expected a number, got '${loraScaleArg}'`);
    }
    let model = cache.get(job.model);
    if (!model) {
        model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0, useMmap: true });
        cache.set(job.model, model);
    }
    const embd = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
    const nVocab = Number(embd?.dimensions?.[1] ?? 0);
    if (!nVocab) throw new Error(`${job.model}: no token_embd.weight`);
    const total = tokens.length + teacher.length;
    const ctxSize = Math.max(64, Math.ceil((total + 1) / 64) * 64);
    const context = await model.createContext({
        contextSize: ctxSize,
        batchSize: ctxSize,
        sequences: 1,
        threads: Number(job.threads ?? 1),
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
        ...(job.lora ? { lora: { adapters: [{ filePath: job.lora, scale: loraScale }] } } : {}),
    });
    const seq = context.getSequence();
    const want = { generateNext: { logits: true, options: { temperature: 0 } } };
    const rows = [];
    const collect = (res) => {
        const m = res?.next?.logits;
        if (!m) throw new Error("llama.cpp returned no logits");
        const row = new Float32Array(nVocab);
        if (m.size !== nVocab) throw new Error(`expected ${nVocab} logits, got ${m.size}`);
        for (const [tok, val] of m) row[tok] = val;
        rows.push(row);
    };
    try {
        if (mode === "batch") {
            const items = tokens.map((t, i) => (i === tokens.length - 1 ? [t, want] : t));
            for (const t of teacher) items.push([t, want]);
            const res = await seq.controlledEvaluate(items);
            for (let i = tokens.length - 1; i < items.length; i++) collect(res[i]);
        } else {
            const items = tokens.map((t, i) => (i === tokens.length - 1 ? [t, want] : t));
            let res = await seq.controlledEvaluate(items);
            collect(res[items.length - 1]);
            for (const t of teacher) {
                res = await seq.controlledEvaluate([[t, want]]);
                collect(res[0]);
            }
        }
    } finally {
        await context.dispose();
    }
    const buf = Buffer.alloc(rows.length * nVocab * 4);
    rows.forEach((r, i) => {
        for (let j = 0; j < nVocab; j++) buf.writeFloatLE(r[j], (i * nVocab + j) * 4);
    });
    fs.writeFileSync(job.out, buf);
    const argmax = rows.map((r) => r.reduce((b, v, j) => (v > r[b] ? j : b), 0));
    return { out: job.out, rows: rows.length, n_vocab: nVocab, argmax };
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    let jobs;
    if (opts.jobs) {
        jobs = JSON.parse(fs.readFileSync(opts.jobs, "utf8"));
        if (!Array.isArray(jobs)) throw new Error(`${opts.jobs}: expected a JSON list of jobs`);
    } else {
        if (!opts.model) throw new Error("--model is required");
        jobs = [opts];
    }
    const llama = await getLlama({
        gpu: false,
        build: "never",
        skipDownload: true,
        usePrebuiltBinaries: true,
        progressLogs: false,
        logLevel: LlamaLogLevel.error,
    });
    const cache = new Map();
    let failed = 0;
    for (const job of jobs) {
        try {
            console.log(JSON.stringify(await runJob(llama, job, cache)));
        } catch (e) {
            failed++;
            console.log(JSON.stringify({ out: job.out ?? null, model: job.model, error: String(e.message ?? e) }));
        }
    }
    for (const m of cache.values()) await m.dispose();
    await llama.dispose();
    process.exitCode = failed ? 1 : 0;
}

main().catch((e) => {
    console.error(`llama_logits: ${e.message ?? e}`);
    process.exitCode = 2;
});
