// Tool calling through the official `openai` npm client; arguments validated by ajv.
//
//     node engine/reference/tool_calls.mjs BASE_URL_WITH_PARSER BASE_URL_WITHOUT
//
// The first server runs with --enable-auto-tool-choice --tool-call-parser hermes, the second
// with neither; both serve a small random model. Checks:
//   - tool_choice "required" (streamed and not, parallel_tool_calls true and false): calls of
//     the given tools whose arguments validate against their parameters, finish "tool_calls";
//   - a named tool choice (streamed and not): that tool's arguments, finish "stop";
//   - "auto" with the hermes parser: output forced into a <tool_call> block by a regex comes
//     back as tool_calls with content null (and the same calls when streamed); free text comes
//     back as content;
//   - a conversation with an assistant tool call and a tool result is accepted;
//   - vLLM's 400s: empty tools, tool_choice without tools, an unknown named tool, "auto"
//     without the server flags, tools forced together with another constraint.
import Ajv from 'ajv';
import OpenAI from 'openai';

const [withParser, without] = process.argv.slice(2);
let fails = 0, oks = 0;
function check(cond, what) {
  if (cond) {
    oks++;
  } else {
    fails++;
    console.log(`FAIL ${what}`);
  }
}

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', required: ['city'], additionalProperties: false,
                  properties: { city: { type: 'string', maxLength: 12 },
                                unit: { enum: ['celsius', 'fahrenheit'] } } } } },
  { type: 'function', function: { name: 'add',
    parameters: { type: 'object', required: ['a', 'b'], additionalProperties: false,
                  properties: { a: { type: 'integer', minimum: -100, maximum: 100 },
                                b: { type: 'integer', minimum: -100, maximum: 100 } } } } },
  { type: 'function', function: { name: 'ping' } },
];
const ajv = new Ajv({ strict: false });
const validators = Object.fromEntries(TOOLS.map((t) => [t.function.name,
  ajv.compile(t.function.parameters ?? { type: 'object', properties: {} })]));
const MSGS = [{ role: 'user', content: 'What is the weather in Paris?' }];

const client = new OpenAI({ baseURL: withParser, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const plain = new OpenAI({ baseURL: without, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;

async function run(c, body, stream) {
  const req = { model, messages: MSGS, max_tokens: 400, temperature: 1, tools: TOOLS, ...body };
  if (!stream) {
    const r = await c.chat.completions.create(req);
    const m = r.choices[0].message;
    return { content: m.content, calls: (m.tool_calls ?? []).map((t) => ({ id: t.id,
      name: t.function.name, args: t.function.arguments, type: t.type })),
             finish: r.choices[0].finish_reason };
  }
  const s = await c.chat.completions.create({ ...req, stream: true });
  let content = null, finish = null;
  const calls = [];
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    const d = ch.choices[0].delta;
    if (d.content) content = (content ?? '') + d.content;
    for (const tc of d.tool_calls ?? []) {
      if (!calls[tc.index]) {
        // the first entry of a call brings its id and name
        calls[tc.index] = { id: tc.id, name: tc.function?.name, args: '', type: tc.type };
      } else if (tc.id || tc.function?.name) {
        calls[tc.index].bad = true;
      }
      calls[tc.index].args += tc.function?.arguments ?? '';
    }
    finish = ch.choices[0].finish_reason ?? finish;
  }
  return { content, calls, finish };
}

function validCall(c) {
  let args;
  try {
    args = JSON.parse(c.args);
  } catch {
    return false;
  }
  return !c.bad && c.type === 'function' && /^chatcmpl-tool-[0-9a-f]{32}$/.test(c.id) &&
         validators[c.name] !== undefined && validators[c.name](args);
}

for (let i = 0; i < 8; i++) {
  const stream = i % 2 === 1;
  const parallel = i < 6;
  const r = await run(client, { tool_choice: 'required', seed: i, parallel_tool_calls: parallel },
                      stream);
  check(r.finish === 'tool_calls' && r.calls.length >= 1 && (parallel || r.calls.length === 1) &&
        r.calls.every(validCall) && !r.content,
        `required ${i} (stream ${stream}, parallel ${parallel}): ${JSON.stringify(r)}`);
}

for (let i = 0; i < 6; i++) {
  const stream = i % 2 === 1;
  const name = ['get_weather', 'add', 'ping'][i % 3];
  const r = await run(client, { tool_choice: { type: 'function', function: { name } }, seed: i },
                      stream);
  check(r.finish === 'stop' && r.calls.length === 1 && r.calls[0].name === name &&
        validCall(r.calls[0]) && !r.content,
        `named ${name} (stream ${stream}): ${JSON.stringify(r)}`);
}

// auto + hermes: a regex makes the random model write a <tool_call> block
const BLOCK = '<tool_call>\\n\\{"name": "add", "arguments": \\{"a": [1-9][0-9]?, "b": -?[0-9]\\}\\}\\n</tool_call>';
for (let i = 0; i < 4; i++) {
  const stream = i % 2 === 1;
  const r = await run(client, { structured_outputs: { regex: BLOCK }, seed: i }, stream);
  check(r.finish === 'tool_calls' && r.calls.length === 1 && r.calls[0].name === 'add' &&
        validCall(r.calls[0]) && r.content === null,
        `auto hermes block (stream ${stream}): ${JSON.stringify(r)}`);
}
for (let i = 0; i < 2; i++) {
  const r = await run(client, { structured_outputs: { regex: '[a-z ]{5,20}' }, seed: i }, i === 1);
  check(r.calls.length === 0 && typeof r.content === 'string' && r.content.length >= 5 &&
        r.finish === 'stop', `auto with plain text (stream ${i === 1}): ${JSON.stringify(r)}`);
}

// the template sees the tools and an assistant's tool_calls with their arguments parsed
// (/tokenize renders the prompt; /detokenize gives its text back)
{
  const root = withParser.replace(/\/v1$/, '');
  const chat_template =
    '{% for m in messages %}{% if m.tool_calls %}{% for tc in m.tool_calls %}' +
    '[{{ tc.function.name }}:{{ tc.function.arguments.city }}]{% endfor %}' +
    '{% else %}{{ m.content }}{% endif %}{% endfor %}' +
    '{% for t in tools %}<{{ t.function.name }}>{% endfor %}';
  const messages = [{ role: 'user', content: 'hi' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'chatcmpl-tool-1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] }];
  const post = async (path, body) => (await fetch(root + path, { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();
  const tok = await post('/tokenize', { model, messages, tools: TOOLS, chat_template,
                                        add_generation_prompt: false });
  const text = (await post('/detokenize', { model, tokens: tok.tokens })).prompt;
  check(text === 'hi[get_weather:Paris]<get_weather><add><ping>',
        `the template sees tools and parsed tool-call arguments: ${JSON.stringify(text)}`);
}

// a conversation that already called a tool
{
  const messages = [...MSGS,
    { role: 'assistant', content: '', tool_calls: [{ id: 'chatcmpl-tool-1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'chatcmpl-tool-1', content: '{"temp": 21}' }];
  const r = await client.chat.completions.create({ model, messages, tools: TOOLS, max_tokens: 5,
                                                   tool_choice: 'none' });
  check(r.choices[0].message.tool_calls === undefined || r.choices[0].message.tool_calls.length === 0,
        `tool_choice none after a tool result: ${JSON.stringify(r.choices[0].message)}`);
}

async function expect400(what, c, body, pattern) {
  try {
    await c.chat.completions.create({ model, messages: MSGS, max_tokens: 5, ...body });
    check(false, `${what}: no error`);
  } catch (e) {
    const msg = String(e?.error?.message ?? e?.message ?? '');
    check(e instanceof OpenAI.APIError && e.status === 400 && pattern.test(msg),
          `${what}: ${e?.status} ${msg.slice(0, 200)}`);
  }
}
await expect400('empty tools', client, { tools: [] }, /must not be an empty array/);
await expect400('tool_choice without tools', client, { tool_choice: 'required' },
                /`tools` must be set/);
await expect400('unknown named tool', client,
                { tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } },
                /does not match any of the specified `tools`/);
await expect400('bad tool_choice', client, { tools: TOOLS, tool_choice: 'sometimes' },
                /Invalid value for `tool_choice`/);
await expect400('auto without the flags', plain, { tools: TOOLS },
                /requires --enable-auto-tool-choice and --tool-call-parser/);
await expect400('forced tools and a constraint', client,
                { tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } },
                /either use constraints for structured outputs or tools/);
// "none" needs no flags
{
  const r = await plain.chat.completions.create({ model, messages: MSGS, max_tokens: 4,
                                                  tools: TOOLS, tool_choice: 'none' });
  check(r.choices[0].message.content !== null, 'tool_choice none without the flags');
}

console.log(`${oks} ok, ${fails} failed`);
process.exit(fails ? 1 : 0);
