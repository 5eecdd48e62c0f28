// LoRA adapters through the official `openai` npm client.
//
//     node engine/reference/lora_client.mjs BASE_URL ADAPTER BASE_MODEL
//
// The server runs with --enable-lora and ADAPTER loaded. Checks: models.list() has the base
// model and the adapter (parent = the base model); completions and chat completions naming the
// adapter answer with its name as the model, streamed and not; greedy output under the adapter
// differs from the base model's on the same prompt somewhere in a few prompts (the adapter is
// applied); an unknown model is a NotFoundError. Prints "N checks ok" or the failures.
import OpenAI from 'openai';

const [baseURL, adapter, baseModel] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
let fails = 0, oks = 0;
function check(cond, what) {
  if (cond) {
    oks++;
  } else {
    fails++;
    console.log(`FAIL ${what}`);
  }
}

const models = await client.models.list();
const ids = models.data.map((m) => m.id);
check(ids[0] === baseModel && ids.includes(adapter), `models.list: ${ids}`);
const card = models.data.find((m) => m.id === adapter);
check(card && card.parent === baseModel && typeof card.root === 'string',
      `adapter card: ${JSON.stringify(card)}`);

let differs = 0;
for (const prompt of ['hello', 'the cat', 'once upon', 'x y z']) {
  const body = { prompt, max_tokens: 12, temperature: 0, ignore_eos: true };
  const a = await client.completions.create({ ...body, model: adapter });
  const b = await client.completions.create({ ...body, model: baseModel });
  check(a.model === adapter && b.model === baseModel, `response models ${a.model} ${b.model}`);
  check(a.usage.completion_tokens === 12, `usage ${JSON.stringify(a.usage)}`);
  differs += a.choices[0].text !== b.choices[0].text ? 1 : 0;
  const stream = await client.completions.create({ ...body, model: adapter, stream: true });
  let text = '', model = '';
  for await (const chunk of stream) {
    model = chunk.model;
    text += chunk.choices[0]?.text ?? '';
  }
  check(model === adapter && text === a.choices[0].text, `streamed under the adapter: ${model}`);
}
check(differs > 0, 'the adapter changes greedy output on some prompt');

const chat = await client.chat.completions.create({
  model: adapter, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0,
});
check(chat.model === adapter && chat.choices[0].message.role === 'assistant',
      `chat under the adapter: ${chat.model}`);
const chatStream = await client.chat.completions.create({
  model: adapter, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0,
  stream: true,
});
let chatText = '';
for await (const chunk of chatStream) {
  chatText += chunk.choices[0]?.delta?.content ?? '';
}
check(chatText === chat.choices[0].message.content, 'chat streamed = whole');

try {
  await client.completions.create({ model: 'no-such-adapter', prompt: 'x', max_tokens: 1 });
  check(false, 'unknown model accepted');
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `unknown model: ${e}`);
}
console.log(`${oks} checks ok, ${fails} failed`);
process.exitCode = fails ? 1 : 0;
