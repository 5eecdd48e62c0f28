// llama.cpp reference embeddings (node-llama-cpp 3.22.1, its prebuilt CPU library).
//
//   node llama_embed.mjs --model M.gguf --inputs inputs.json [--threads N]
//
// inputs.json is a JSON list of token-id lists. For a generative model without a GGUF pooling
// type, llama.cpp's embedding of a sequence is the hidden state of its last token after the
// final norm (llama_get_embeddings_ith(ctx, -1)), not normalised: what tandem-engine's
// --pooler-config '{"pooling_type": "LAST", "normalize": false}' returns. Prints one JSON line:
// {"tokens": [[...], ...] (what was embedded: BOS added), "embeddings": [[...], ...]}.
import fs from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = {};
for (let i = 0; i + 1 < args.length; i += 2) opt[args[i].replace(/^--/, "")] = args[i + 1];
if (!opt.model || !opt.inputs) throw new Error("usage: --model M.gguf --inputs inputs.json");
const inputs = JSON.parse(fs.readFileSync(opt.inputs, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true,
                               usePrebuiltBinaries: true, progressLogs: false,
                               logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: 0, useMmap: true });
const ctx = await model.createEmbeddingContext({ contextSize: 512, batchSize: 512,
                                                 threads: Number(opt.threads ?? 1) });
const out = [], used = [];
for (const toks of inputs) {
  // node-llama-cpp prepends the BOS (and appends an EOS where the vocabulary says so) to what it
  // embeds: report the tokens it really ran, so the caller embeds the same ones
  const t = toks.slice();
  ctx._prepareInput(t);
  const e = await ctx.getEmbeddingFor(t);
  used.push(t);
  out.push(Array.from(e.vector));
}
await ctx.dispose();
console.log(JSON.stringify({ tokens: used, embeddings: out }));
