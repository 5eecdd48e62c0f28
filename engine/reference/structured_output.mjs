// Structured output through the official `openai` npm client, validated by code no one here
// wrote: ajv for JSON schemas, JavaScript's RegExp for regexes.
//
//     node engine/reference/structured_output.mjs BASE_URL [N_SCHEMAS] [SEED]
//
// BASE_URL is http://127.0.0.1:PORT/v1 of `tandem-engine serve` on a small random model. The
// model knows nothing of JSON, so every well-formed answer is the grammar's doing. Checks:
//   - N_SCHEMAS (200) random JSON schemas (nested objects, arrays with bounds, enums, const,
//     strings with length bounds and patterns, integers and numbers with inclusive and exclusive
//     bounds, booleans, nulls, required and optional properties, anyOf, $defs/$ref), each with
//     its own seed, some streamed, sent as response_format json_schema, structured_outputs.json
//     and guided_json in turn: every answer finishes with "stop", parses, and validates;
//   - response_format json_object: a JSON object;
//   - random regexes (structured_outputs.regex / guided_regex): the whole answer matches;
//   - choices (structured_outputs.choice / guided_choice): the answer is one of them;
//   - a GBNF grammar (structured_outputs.grammar): the answer is in its language;
//   - 400s naming the field: two constraints, a bad regex, a bad grammar, an unsupported schema
//     keyword, json_schema without a schema.
// Prints one line per failure and a summary; exits 1 when any check failed.
import Ajv from 'ajv';
import OpenAI from 'openai';

const [base, nArg, seedArg] = process.argv.slice(2);
const N = Number(nArg ?? 200);
let rngState = BigInt(seedArg ?? 20261205);
let fails = 0, oks = 0;
function check(cond, what) {
  if (cond) {
    oks++;
  } else {
    fails++;
    console.log(`FAIL ${what}`);
  }
}

// splitmix64: the test is reproducible from its seed
function rand() {
  rngState = (rngState + 0x9E3779B97F4A7C15n) & 0xFFFFFFFFFFFFFFFFn;
  let z = rngState;
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & 0xFFFFFFFFFFFFFFFFn;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & 0xFFFFFFFFFFFFFFFFn;
  return Number((z ^ (z >> 31n)) >> 11n) / 2 ** 53;
}
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (xs) => xs[int(0, xs.length - 1)];

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'x', 'y_z', 'name', 'id', 'caf\u00e9', 'q"t'];

function stringSchema() {
  const s = { type: 'string' };
  const r = rand();
  if (r < 0.25) {
    s.enum = [...new Set([pick(WORDS), pick(WORDS), pick(WORDS)])];
    delete s.type;
  } else if (r < 0.45) {
    s.pattern = pick(['^[a-z]{1,6}$', '^[A-Z][a-z0-9_]{0,5}$', '^(yes|no|maybe)$',
                      '^\\d{3}-\\d{4}$', '^[^"\\\\]{2,4}$', '^a+b?c*$', '^\\w{1,3}\\s?\\w{0,2}$']);
  } else {
    s.maxLength = int(0, 10);
    if (rand() < 0.5) s.minLength = int(0, s.maxLength);
  }
  return s;
}

function intSchema() {
  const s = { type: 'integer' };
  const lo = int(-1200, 1200);
  const r = rand();
  if (r < 0.3) {
    s.minimum = lo;
    s.maximum = lo + int(0, 3000);
  } else if (r < 0.5) {
    s.exclusiveMinimum = lo;
    s.exclusiveMaximum = lo + int(2, 500);
  } else if (r < 0.65) {
    s.minimum = lo;
  } else if (r < 0.8) {
    s.maximum = lo;
  }
  return s;
}

function numberSchema() {
  const s = { type: 'number' };
  const r = rand();
  if (r < 0.4) {
    s.minimum = int(-100, 100) / 4;
    s.maximum = s.minimum + int(1, 400) / 8;
  } else if (r < 0.6) {
    s.exclusiveMinimum = int(-50, 50);
  }
  return s;
}

function schema(depth) {
  const r = rand();
  if (depth >= 3 || r < 0.45) {
    return pick([stringSchema, intSchema, numberSchema, () => ({ type: 'boolean' }),
                 () => ({ type: 'null' }), () => ({ const: pick([1, 'k', true, null]) }),
                 () => ({ enum: [int(-5, 5), 'v', false] }), stringSchema, intSchema])();
  }
  if (r < 0.7) {
    const n = int(0, 4);
    const props = {};
    const names = [];
    for (let i = 0; i < n; i++) {
      const k = pick(WORDS) + (i ? String(i) : '');
      if (props[k]) continue;
      props[k] = schema(depth + 1);
      names.push(k);
    }
    const s = { type: 'object', properties: props,
                required: names.filter(() => rand() < 0.6) };
    const ap = rand();
    if (ap < 0.6) s.additionalProperties = false;
    return s;
  }
  if (r < 0.85) {
    const s = { type: 'array', items: schema(depth + 1), maxItems: int(0, 4) };
    if (rand() < 0.5) s.minItems = int(0, s.maxItems);
    return s;
  }
  if (r < 0.93) {
    return { anyOf: [schema(depth + 1), schema(depth + 1)] };
  }
  return { type: ['string', 'null'], maxLength: int(1, 6) };
}

function topSchema() {
  // the top is an object; sometimes with $defs and a $ref into them
  const s = schema(0);
  const obj = s.type === 'object' ? s : { type: 'object', properties: { value: s },
                                          required: ['value'], additionalProperties: false };
  if (rand() < 0.15) {
    obj.$defs = { item: { type: 'object', properties: { n: intSchema() }, required: ['n'],
                          additionalProperties: false } };
    obj.properties = { ...obj.properties, ref: { $ref: '#/$defs/item' } };
    obj.required = [...(obj.required ?? []), 'ref'];
  }
  return obj;
}

const client = new OpenAI({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;
const ajv = new Ajv({ strict: false, allErrors: true });

async function complete(body, stream) {
  const req = { model, messages: [{ role: 'user', content: 'Reply in JSON.' }],
                max_tokens: 1500, temperature: 1, ...body };
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  const s = await client.chat.completions.create({ ...req, stream: true });
  let text = '', finish = null;
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    text += ch.choices[0].delta.content ?? '';
    finish = ch.choices[0].finish_reason ?? finish;
  }
  return { text, finish };
}

async function oneSchema(i) {
  const sch = topSchema();
  const validate = ajv.compile(sch);
  const form = i % 3;
  const body = form === 0
    ? { response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema: sch,
                                                                strict: true } } }
    : form === 1 ? { structured_outputs: { json: sch } } : { guided_json: JSON.stringify(sch) };
  const { text, finish } = await complete({ ...body, seed: 1000 + i }, i % 4 === 3);
  let doc, ok = false;
  try {
    doc = JSON.parse(text);
    ok = validate(doc);
  } catch (e) {
    doc = e.message;
  }
  check(finish === 'stop' && ok,
        `schema ${i} (${['response_format', 'structured_outputs', 'guided_json'][form]}): ` +
        `finish ${finish}, ${JSON.stringify(sch)} -> ${JSON.stringify(text)} ` +
        `${JSON.stringify(validate.errors ?? doc)}`);
}

// a few at a time: grammars of different requests share a batch
async function pool(n, width, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) await fn(next++);
  }));
}
await pool(N, 8, oneSchema);

// disable_any_whitespace: no blanks outside strings
for (let i = 0; i < 6; i++) {
  const sch = topSchema();
  const validate = ajv.compile(sch);
  const { text, finish } = await complete({ structured_outputs: { json: sch,
                                                                  disable_any_whitespace: true },
                                            seed: 500 + i }, i % 2 === 1);
  let ok = false;
  try {
    ok = validate(JSON.parse(text)) && !/\s/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, ''));
  } catch { /* not JSON */ }
  check(finish === 'stop' && ok, `compact ${i}: ${finish} ${JSON.stringify(text)}`);
}

// json_object: any object
for (let i = 0; i < 6; i++) {
  const { text, finish } = await complete({ response_format: { type: 'json_object' },
                                            seed: i, max_tokens: 600 }, i % 2 === 1);
  let ok = false;
  try {
    const v = JSON.parse(text);
    ok = v !== null && typeof v === 'object' && !Array.isArray(v);
  } catch { /* not JSON */ }
  // an unbounded grammar may run to max_tokens; what came out must then still be a prefix
  check(finish === 'length' || ok, `json_object ${i}: ${finish} ${JSON.stringify(text)}`);
}

// regexes: the whole answer matches
// [the regex sent, the same language in JavaScript's syntax]: '.' is any character but a line
// feed, \w and \d are ASCII (xgrammar's reading)
const REGEXES = [['[a-z]{3,8}'], ['(cat|dog|bird)s?'], ['\\d{1,3}(\\.\\d{1,2})?'],
                 ['[A-F0-9]{4}-[A-F0-9]{4}'], ['x(ab|cd)*y'], ['[^\\s]{1,5}'],
                 ['\\w{1,8}@\\w{1,8}\\.(com|org)'], ['(?:[01]\\d|2[0-3]):[0-5]\\d'],
                 ['\u00e9{1,3}[\u4e00-\u4e05]?'], ['a.b', 'a[^\\n]b']];
for (let i = 0; i < REGEXES.length * 2; i++) {
  const [re, js] = REGEXES[i % REGEXES.length];
  const body = i % 2 ? { guided_regex: re } : { structured_outputs: { regex: re } };
  const { text, finish } = await complete({ ...body, seed: i, max_tokens: 200 }, i % 3 === 0);
  check(finish === 'stop' && new RegExp(`^(?:${js ?? re})$`, 'u').test(text),
        `regex ${re}: ${finish} ${JSON.stringify(text)}`);
}

// choices
const CHOICES = ['positive', 'negative', 'neutral \u2014 "quoted"', 'a\\b'];
for (let i = 0; i < 8; i++) {
  const body = i % 2 ? { guided_choice: CHOICES } : { structured_outputs: { choice: CHOICES } };
  const { text, finish } = await complete({ ...body, seed: i }, i % 3 === 0);
  check(finish === 'stop' && CHOICES.includes(text), `choice: ${finish} ${JSON.stringify(text)}`);
}

// a GBNF grammar: sums of small numbers
const GBNF = 'root ::= term (" + " term){0,3}\nterm ::= [1-9] [0-9]? | "(" root ")"\n';
for (let i = 0; i < 6; i++) {
  const { text, finish } = await complete({ structured_outputs: { grammar: GBNF }, seed: i,
                                            max_tokens: 300 }, i % 2 === 1);
  // the language checked independently: balanced parentheses around the same shape
  let t = text, prev;
  do {
    prev = t;
    t = t.replace(/\((?:[1-9][0-9]?|N)(?: \+ (?:[1-9][0-9]?|N)){0,3}\)/g, 'N');
  } while (t !== prev);
  check(finish === 'stop' && /^(?:[1-9][0-9]?|N)(?: \+ (?:[1-9][0-9]?|N)){0,3}$/.test(t),
        `grammar: ${finish} ${JSON.stringify(text)}`);
}

// errors name the field
async function expect400(what, body, pattern) {
  try {
    await complete(body, false);
    check(false, `${what}: no error`);
  } catch (e) {
    const msg = String(e?.error?.message ?? e?.message ?? '');
    check(e instanceof OpenAI.APIError && e.status === 400 && pattern.test(msg),
          `${what}: ${e?.status} ${msg.slice(0, 200)}`);
  }
}
await expect400('two constraints', { guided_regex: 'a', structured_outputs: { choice: ['b'] } },
                /only use one kind/);
await expect400('bad regex', { structured_outputs: { regex: 'a(b' } }, /structured_outputs.regex/);
await expect400('lookahead', { guided_regex: '(?=a)a' }, /guided_regex/);
await expect400('bad grammar', { structured_outputs: { grammar: 'root ::= nope' } },
                /undefined rule 'nope'/);
await expect400('unsupported keyword',
                { response_format: { type: 'json_schema',
                                     json_schema: { name: 'x', schema: { type: 'integer',
                                                                         multipleOf: 3 } } } },
                /multipleOf/);
await expect400('json_schema without schema',
                { response_format: { type: 'json_schema' } }, /'json_schema' field must be/);
await expect400('structural_tag', { response_format: { type: 'structural_tag' } },
                /structural_tag/);

console.log(`${oks} ok, ${fails} failed`);
process.exit(fails ? 1 : 0);
