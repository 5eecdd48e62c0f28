// Reference chat-template renderer: @lenml/tokenizers' apply_chat_template (a transformers.js
// port on @huggingface/jinja) over the conversations of engine/template/tests/conversations.json
// for each real tokenizer. Prints one JSON line per (tokenizer, case):
//   {"tokenizer": T, "case": C, "ok": true, "text": "..."}            rendered (tokenize: false)
//   {"tokenizer": T, "case": C, "ok": false, "raised": bool, "error": "..."}
// "raised" is true when the template itself called raise_exception (the error message is one of
// the literal messages the template passes to raise_exception): an expected failure our engine
// must reproduce. Other errors are limits of the reference (cases it cannot render).
// Message content given as text parts is joined with "\n" first, as vLLM does (and as
// chat_template_render does) for templates that expect string content.
// Usage: node render_chat.mjs [conversations.json] [tokenizer...]
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const ALL = ["llama2", "llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"];
const convPath = process.argv[2] ?? join(here, "../template/tests/conversations.json");
const names = process.argv.length > 3 ? process.argv.slice(3) : ALL;
const conv = JSON.parse(readFileSync(convPath, "utf8"));

function normalise(messages) {
    return messages.map((m) => {
        if (!Array.isArray(m.content)) return m;
        const text = m.content.filter((p) => p && p.type === "text").map((p) => p.text).join("\n");
        return { ...m, content: text };
    });
}

for (const name of names) {
    const mod = await import(`@lenml/tokenizer-${name}`);
    const tok = mod.fromPreTrained();
    const tmpl = typeof mod.tokenizerConfig.chat_template === "string" ? mod.tokenizerConfig.chat_template : "";
    const raiseMessages = new Set(
        [...tmpl.matchAll(/raise_exception\((['"])(.*?)\1\)/g)].map((m) => m[2]));
    for (const c of conv.cases) {
        const out = { tokenizer: name, case: c.name };
        try {
            out.text = tok.apply_chat_template(normalise(c.messages), {
                tokenize: false,
                add_generation_prompt: c.add_generation_prompt,
                tools: c.tools,
                date_string: conv.date_string,
            });
            out.ok = true;
        } catch (e) {
            const msg = String(e && e.message ? e.message : e);
            out.ok = false;
            out.raised = raiseMessages.has(msg);
            out.error = msg;
        }
        console.log(JSON.stringify(out));
    }
}
