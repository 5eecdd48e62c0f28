// The official `openai` npm client (node_modules here) against `tandem-engine serve`.
//
//     node engine/reference/openai_client.mjs BASE_URL API_KEY [SECOND_KEY]
//
// BASE_URL is http://127.0.0.1:PORT/v1 of a server started with --api-key API_KEY (and
// SECOND_KEY). Checks, through the client: model list, completions and chat (plain and
// streamed), several prompts in one completion request (strings and token ids, streamed, echo),
// several keys, a wrong key as the client's AuthenticationError (401), logit_bias
// steering greedy decoding and its out-of-vocabulary error, allowed_token_ids,
// truncate_prompt_tokens (both sides), embeddings (base64 as the client asks, and floats),
// return_token_ids, return_tokens_as_token_ids, prompt_logprobs and bad_words, best_of refused
// as vLLM v1 does; the Responses API (responses.create whole and streamed, output_text, the
// event sequence, json_schema, its errors).
// Prints one line per check; exits 1 when any failed.
import OpenAI from 'openai';

const [base, key, key2] = process.argv.slice(2);
let fails = 0;
function check(cond, what) {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}`);
  if (!cond) fails++;
}
async function expectError(what, fn, status, pattern) {
  try {
    await fn();
    check(false, `${what}: no error`);
  } catch (e) {
    const msg = e?.error?.message ?? e?.message ?? '';
    check(e instanceof OpenAI.APIError && e.status === status && pattern.test(String(msg)),
          `${what}: ${e?.constructor?.name} ${e?.status} ${String(msg).slice(0, 160)}`);
    return e;
  }
}

const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const models = await client.models.list();
const model = models.data[0].id;
check(models.data.length === 1 && model === 'tiny', `models.list: ${JSON.stringify(models.data)}`);

const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6,
                                            temperature: 0 });
check(c.object === 'text_completion' && c.usage.completion_tokens === 6 &&
      c.choices[0].finish_reason === 'length', `completions.create: ${JSON.stringify(c.usage)}`);

const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0 });
check(chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant',
      `chat.completions.create: ${chat.choices[0].finish_reason}`);

const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0,
  stream: true, stream_options: { include_usage: true } });
let text = '', usage = null;
for await (const ch of stream) {
  if (ch.choices.length) text += ch.choices[0].delta.content ?? '';
  if (ch.usage) usage = ch.usage;
}
check(text === chat.choices[0].message.content && usage?.completion_tokens === 5,
      `streamed chat equals the plain one (${JSON.stringify(text)}), usage ${JSON.stringify(usage)}`);

// several prompts in one request: choice p * n + j is prompt p's j-th, as vLLM indexes them
const prompts = ['Once upon a time', 'The weather today'];
const singles = [];
for (const pr of prompts) {
  singles.push(await client.completions.create({ model, prompt: pr, max_tokens: 4,
                                                 temperature: 0 }));
}
// (vLLM refuses n > 1 with greedy sampling: top_k 1 picks the same tokens without being greedy)
const multi = await client.completions.create({ model, prompt: prompts, n: 2, max_tokens: 4,
                                                temperature: 1, top_k: 1 });
const idx = multi.choices.map((ch) => ch.index).sort((a, b) => a - b);
check(JSON.stringify(idx) === '[0,1,2,3]' &&
      multi.choices.every((ch) => ch.text === singles[Math.floor(ch.index / 2)].choices[0].text),
      `two prompts x n=2: indexes ${JSON.stringify(idx)}, texts equal the single-prompt answers`);
check(multi.usage.prompt_tokens === singles[0].usage.prompt_tokens + singles[1].usage.prompt_tokens &&
      multi.usage.completion_tokens === 16,
      `two prompts: usage ${JSON.stringify(multi.usage)} (prompts counted once each)`);
const mstream = await client.completions.create({ model, prompt: prompts, max_tokens: 4,
                                                  temperature: 0, stream: true,
                                                  stream_options: { include_usage: true } });
const got = ['', ''];
let musage = null;
for await (const ch of mstream) {
  for (const c of ch.choices) got[c.index] += c.text;
  if (ch.usage) musage = ch.usage;
}
check(got[0] === singles[0].choices[0].text && got[1] === singles[1].choices[0].text &&
      musage?.completion_tokens === 8,
      `two prompts streamed: ${JSON.stringify(got)}, usage ${JSON.stringify(musage)}`);
const toks = [];
for (const pr of prompts) {
  toks.push((await fetch(base.replace(/\/v1$/, '') + '/tokenize', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: pr }) }).then((r) => r.json())).tokens);
}
const mtok = await client.completions.create({ model, prompt: toks, max_tokens: 4, temperature: 0,
                                               echo: true });
check(mtok.choices.length === 2 &&
      mtok.choices.every((ch) => ch.text === prompts[ch.index] + singles[ch.index].choices[0].text),
      `two token-id prompts with echo: ${JSON.stringify(mtok.choices.map((c) => c.text))}`);
await expectError('a mixed prompt list', () => client.completions.create({
  model, prompt: ['a', [1, 2]], max_tokens: 1 }), 400, /prompt/);

if (key2) {
  const other = new OpenAI({ baseURL: base, apiKey: key2, maxRetries: 0 });
  check((await other.models.list()).data[0].id === model, 'the second --api-key works');
}
const wrong = new OpenAI({ baseURL: base, apiKey: key + 'x', maxRetries: 0 });
const e401 = await expectError('wrong key', () => wrong.completions.create({
  model, prompt: 'x', max_tokens: 1 }), 401, /.*/);
check(e401 instanceof OpenAI.AuthenticationError, 'a wrong key is an AuthenticationError');

// logit_bias: +100 on one token makes greedy decoding repeat it.
const plain = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 3,
                                                temperature: 0 });
const forced = 7;
const biased = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4,
                                                 temperature: 0, logit_bias: { [forced]: 100 } });
const det = await fetch(base.replace(/\/v1$/, '') + '/detokenize', {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ tokens: [forced, forced, forced, forced] }) }).then((r) => r.json());
check(biased.choices[0].text === det.prompt,
      `logit_bias +100 on ${forced}: ${JSON.stringify(biased.choices[0].text)} vs ` +
      `${JSON.stringify(det.prompt)}`);
// -100 on every token but one leaves greedy decoding that one
const kept = 9;
const minus = {};
for (let i = 0; i < 512; i++) if (i !== kept) minus[i] = -100;
const banned = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 3,
                                                 temperature: 0, logit_bias: minus });
const det9 = await fetch(base.replace(/\/v1$/, '') + '/detokenize', {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ tokens: [kept, kept, kept] }) }).then((r) => r.json());
check(banned.choices[0].text === det9.prompt && plain.choices[0].text !== det9.prompt,
      `logit_bias -100 on all but ${kept}: ${JSON.stringify(banned.choices[0].text)} vs ` +
      `${JSON.stringify(det9.prompt)} (unbiased ${JSON.stringify(plain.choices[0].text)})`);
await expectError('logit_bias out of the vocabulary', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, logit_bias: { 100000: 1 } }), 400,
  /token_id\(s\) \[100000\] in logit_bias contain out-of-vocab token ids\. Vocabulary size: \d+/);
await expectError('logit_bias key', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1,
  logit_bias: { abc: 1 } }), 400, /logit_bias/);
// allowed_token_ids: sampling (temperature 1) only ever picks the allowed ones
const allowed = [11, 12, 40];
const alw = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8,
                                              temperature: 1, seed: 3, allowed_token_ids: allowed,
                                              logprobs: 0 });
const tokz = await fetch(base.replace(/\/v1$/, '') + '/tokenize', {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt: alw.choices[0].text, add_special_tokens: false }) })
  .then((r) => r.json());
const pieces = await Promise.all(allowed.map((t) => fetch(base.replace(/\/v1$/, '') +
  '/detokenize', { method: 'POST', headers: { 'content-type': 'application/json' },
                   body: JSON.stringify({ tokens: [t] }) }).then((r) => r.json())));
const words = alw.choices[0].logprobs.tokens;
check(alw.usage.completion_tokens === 8 && words.every((w) => pieces.some((p) => p.prompt === w)),
      `allowed_token_ids ${allowed}: ${JSON.stringify(words)} (${tokz.count} tokens)`);
await expectError('allowed_token_ids out of the vocabulary', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, allowed_token_ids: [1, 100000] }), 400,
  /allowed_token_ids contains out-of-vocab token id/);
await expectError('allowed_token_ids empty', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, allowed_token_ids: [] }), 400, /allowed_token_ids/);
// truncate_prompt_tokens: the prompt's last k tokens; truncation_side right: its first k (the
// echo shows which: the kept tokens' text, checked against /tokenize + /detokenize)
const root = base.replace(/\/v1$/, '');
const postJson = (path, body) => fetch(root + path, {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body) }).then((r) => r.json());
const long = 'one two three four five six seven eight nine ten eleven twelve';
const ltoks = (await postJson('/tokenize', { prompt: long })).tokens;
const lastK = (await postJson('/detokenize', { tokens: ltoks.slice(-5) })).prompt;
// (/detokenize keeps special tokens, such as a BOS, which the echo skips)
const firstK = (await postJson('/detokenize', { tokens: ltoks.slice(0, 5) })).prompt
  .replace(/^<\|[a-z_]+\|>/, '');
const cut = await client.completions.create({ model, prompt: long, max_tokens: 1, echo: true,
                                              temperature: 0, truncate_prompt_tokens: 5 });
const cutR = await client.completions.create({ model, prompt: long, max_tokens: 1, echo: true,
                                               temperature: 0, truncate_prompt_tokens: 5,
                                               truncation_side: 'right' });
check(ltoks.length > 5 && cut.usage.prompt_tokens === 5 && cutR.usage.prompt_tokens === 5 &&
      cut.choices[0].text.startsWith(lastK) && cutR.choices[0].text.startsWith(firstK),
      `truncate_prompt_tokens 5 of ${ltoks.length}: left ${JSON.stringify(cut.choices[0].text)} ` +
      `(${JSON.stringify(lastK)}), right ${JSON.stringify(cutR.choices[0].text)} ` +
      `(${JSON.stringify(firstK)})`);
await expectError('truncate_prompt_tokens over max_model_len', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, truncate_prompt_tokens: 1000000 }), 400,
  /truncate_prompt_tokens value \(1000000\) is greater than max_model_len/);
// embeddings: the client asks for base64 and decodes it; equal to the float answer
const emb = await client.embeddings.create({ model, input: ['hello', 'the weather today'] });
const embF = await client.embeddings.create({ model, input: ['hello', 'the weather today'],
                                              encoding_format: 'float' });
const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));
check(emb.data.length === 2 && emb.data.every((d, i) => d.index === i &&
        d.embedding.length === embF.data[i].embedding.length &&
        d.embedding.every((x, j) => Math.abs(x - embF.data[i].embedding[j]) <= 1e-6) &&
        Math.abs(norm(d.embedding) - 1) < 1e-5) && emb.usage.completion_tokens === 0,
      `embeddings.create: ${emb.data.length} vectors of ${emb.data[0].embedding.length}, ` +
      `norm ${norm(emb.data[0].embedding)}, usage ${JSON.stringify(emb.usage)}`);
// vLLM's return_token_ids / return_tokens_as_token_ids and bad_words, through the client's
// pass-through of extra body fields
const withIds = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6,
                                                  temperature: 0, ignore_eos: true, logprobs: 1,
                                                  return_token_ids: true,
                                                  return_tokens_as_token_ids: true });
const wc = withIds.choices[0];
const promptIds = (await postJson('/tokenize', { prompt: 'Once upon a time' })).tokens;
check(JSON.stringify(wc.prompt_token_ids) === JSON.stringify(promptIds) &&
      wc.token_ids?.length === 6 &&
      JSON.stringify(wc.logprobs.tokens) ===
        JSON.stringify(wc.token_ids.map((t) => `token_id:${t}`)) &&
      (await postJson('/detokenize', { tokens: wc.token_ids })).prompt === wc.text,
      `return_token_ids + return_tokens_as_token_ids: ${JSON.stringify(wc.token_ids)} ` +
      `${JSON.stringify(wc.logprobs.tokens)}`);
const idStream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0,
  ignore_eos: true, stream: true, return_token_ids: true });
let streamedIds = [], streamPrompt = null;
for await (const ch of idStream) {
  if (ch.prompt_token_ids) streamPrompt = ch.prompt_token_ids;
  for (const cc of ch.choices) streamedIds = streamedIds.concat(cc.token_ids ?? []);
}
const chatIds = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0,
  ignore_eos: true, return_token_ids: true });
check(Array.isArray(streamPrompt) && JSON.stringify(streamPrompt) ===
        JSON.stringify(chatIds.prompt_token_ids) &&
      JSON.stringify(streamedIds) === JSON.stringify(chatIds.choices[0].token_ids) &&
      streamedIds.length === 5,
      `chat return_token_ids, streamed and whole: ${JSON.stringify(streamedIds)}`);
// vLLM's prompt_logprobs: a list per prompt token, null first, then dicts keyed by token id
// (the prompt's token among them) of {logprob, rank, decoded_token}. (A JS object lists integer
// keys in ascending order, so only membership is checked here.)
const plpOk = (plp, ids, k) => Array.isArray(plp) && plp.length === ids.length &&
  plp[0] === null && plp.slice(1).every((e, i) => String(ids[i + 1]) in e &&
    Object.keys(e).length >= k && Object.keys(e).length <= k + 1 &&
    Object.values(e).every((v) => typeof v.logprob === 'number' && v.rank >= 1 &&
                                  typeof v.decoded_token === 'string'));
const plpC = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 1,
                                               temperature: 0, prompt_logprobs: 2,
                                               return_token_ids: true });
const pc = plpC.choices[0];
check(plpOk(pc.prompt_logprobs, pc.prompt_token_ids, 2) &&
      JSON.stringify(pc.prompt_token_ids) === JSON.stringify(promptIds),
      `completions prompt_logprobs: ${JSON.stringify(pc.prompt_logprobs?.slice(0, 2))}`);
const plpChat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, temperature: 0,
  prompt_logprobs: 1, return_token_ids: true });
check(plpOk(plpChat.prompt_logprobs, plpChat.prompt_token_ids ?? [], 1) &&
      plpChat.prompt_logprobs.length === plpChat.usage.prompt_tokens,
      `chat prompt_logprobs: ${JSON.stringify(plpChat.prompt_logprobs?.slice(0, 2))}`);
const echoLp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 2,
                                                 temperature: 0, echo: true, logprobs: 1 });
const el = echoLp.choices[0].logprobs;
check(el.tokens.length === promptIds.length + 2 && el.token_logprobs[0] === null &&
      el.top_logprobs[0] === null && el.text_offset[0] === 0 &&
      echoLp.choices[0].prompt_logprobs?.length === promptIds.length,
      `echo with logprobs covers the prompt: ${JSON.stringify(el.tokens)}`);
await expectError('prompt_logprobs with stream', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, stream: true, prompt_logprobs: 1 }), 400,
  /`prompt_logprobs` are not available when `stream=True`\./);
await expectError('prompt_logprobs above 20', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1, prompt_logprobs: 21 }), 400,
  /Requested prompt logprobs of 21, which is greater than max allowed: 20/);
// a generated token whose text tokenizes back to it alone: as a bad word, never generated
let banWord = null, banId = -1;
for (const t of wc.token_ids) {
  const w = (await postJson('/detokenize', { tokens: [t] })).prompt;
  const back = (await postJson('/tokenize', { prompt: w, add_special_tokens: false })).tokens;
  if (w.trim() === w && w && back.length === 1 && back[0] === t) {
    banWord = w;
    banId = t;
    break;
  }
}
const noBan = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6,
                                                temperature: 0, ignore_eos: true,
                                                return_token_ids: true, bad_words: [banWord] });
check(banWord !== null && noBan.choices[0].token_ids.length === 6 &&
      !noBan.choices[0].token_ids.includes(banId),
      `bad_words ${JSON.stringify(banWord)} (${banId}): ` +
      `${JSON.stringify(noBan.choices[0].token_ids)}`);
await expectError('bad_words not a list', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, bad_words: 'x' }), 400, /bad_words/);
await expectError('bad_words with an empty word', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1, bad_words: [''] }), 400,
  /bad_words cannot contain an empty string/);
await expectError('best_of', () => client.completions.create({
  model, prompt: 'x', max_tokens: 1, best_of: 2 }), 400, /vLLM V1 does not yet support best_of\./);

// vLLM's Responses API: the client's output_text helper and its stream of typed events
const rChat = await client.chat.completions.create({
  model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'hi' }],
  max_tokens: 6, temperature: 0 });
const rText = rChat.choices[0].message.content;
const resp = await client.responses.create({ model, input: 'hi', instructions: 'Be brief.',
                                             max_output_tokens: 6, temperature: 0,
                                             metadata: { run: 'e2e' } });
check(resp.object === 'response' && resp.id.startsWith('resp_') && resp.output_text === rText &&
      resp.output[0].type === 'message' && resp.metadata.run === 'e2e' &&
      resp.usage.output_tokens === rChat.usage.completion_tokens &&
      resp.usage.input_tokens === rChat.usage.prompt_tokens &&
      resp.status === (rChat.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed'),
      `responses.create: output_text ${JSON.stringify(resp.output_text)} equals chat's, ` +
      `status ${resp.status}, usage ${JSON.stringify(resp.usage)}`);
const rStream = await client.responses.create({ model, input: 'hi', instructions: 'Be brief.',
                                                max_output_tokens: 6, temperature: 0,
                                                stream: true });
const rTypes = [];
let rDelta = '', rFinal = null, rSeqOk = true;
for await (const ev of rStream) {
  rSeqOk = rSeqOk && ev.sequence_number === rTypes.length;
  rTypes.push(ev.type);
  if (ev.type === 'response.output_text.delta') rDelta += ev.delta;
  if (ev.type === 'response.completed') rFinal = ev.response;
}
const rWant = ['response.created', 'response.in_progress', 'response.output_item.added',
               'response.content_part.added'];
check(rSeqOk && JSON.stringify(rTypes.slice(0, 4)) === JSON.stringify(rWant) &&
      JSON.stringify(rTypes.slice(-4)) === JSON.stringify(
        ['response.output_text.done', 'response.content_part.done', 'response.output_item.done',
         'response.completed']) &&
      rTypes.slice(4, -4).every((t) => t === 'response.output_text.delta') &&
      rDelta === rText && rFinal?.output[0]?.content[0]?.text === rText &&
      rFinal?.status === resp.status,
      `responses stream: ${rTypes.length} events, text ${JSON.stringify(rDelta)}`);
const rJson = await client.responses.create({
  model, input: 'A user?', max_output_tokens: 96, temperature: 0,
  text: { format: { type: 'json_schema', name: 'user', strict: true,
                    schema: { type: 'object', required: ['name'], additionalProperties: false,
                              properties: { name: { type: 'string', maxLength: 6 } } } } } });
let rDoc = null;
try { rDoc = JSON.parse(rJson.output_text); } catch { rDoc = null; }
check(rJson.status === 'completed' && typeof rDoc?.name === 'string',
      `responses json_schema: ${JSON.stringify(rJson.output_text)}`);
await expectError('responses previous_response_id', () => client.responses.create({
  model, input: 'x', previous_response_id: 'resp_nope' }), 404,
  /Response with id 'resp_nope' not found\./);
await expectError('responses max_output_tokens 0', () => client.responses.create({
  model, input: 'x', max_output_tokens: 0 }), 400, /max_output_tokens/);
await expectError('responses json_object', () => client.responses.create({
  model, input: 'x', text: { format: { type: 'json_object' } } }), 501,
  /json_object is not supported/);
await expectError('responses.retrieve', () => client.responses.retrieve('resp_nope'), 404,
  /Response with id 'resp_nope' not found\./);

console.log(`${fails} failure(s)`);
process.exit(fails ? 1 : 0);
