// Drives fake_server (the HTTP layer over a scripted engine) with the official
// `openai` npm client: models, chat (plain, streaming, stream helper, tools, usage),
// completions, responses (plain and stream helper), typed errors, early stream abort.
// Usage: node openai_client_test.mjs FAKE_SERVER_BINARY   (needs `npm ci` in tests/)
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(new URL('../package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');

const server = spawn(process.argv[2], ['0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((resolve, reject) => {
  server.stdout.once('data', (d) => resolve(Number(String(d).trim().split(/\s+/)[1])));
  server.once('exit', (code) => reject(new Error(`fake_server exited with ${code}`)));
});
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
const messages = [{ role: 'user', content: 'hi' }];
let failures = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    ids.push(m.id);
    assert.equal(m.object, 'model');
    assert.equal(typeof m.created, 'number');
    assert.equal(typeof m.owned_by, 'string');
  }
  assert.deepEqual(ids, ['fake-model']);
});

await check('models.retrieve unknown -> NotFoundError', async () => {
  await assert.rejects(client.models.retrieve('nope'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.error.message.length > 0);
});

let plain;
await check('chat non-streaming', async () => {
  plain = await client.chat.completions.create({ model: 'fake-model', messages });
  assert.equal(plain.object, 'chat.completion');
  assert.ok(plain.id.startsWith('chatcmpl-'));
  assert.ok(Math.abs(plain.created - Date.now() / 1000) < 300);
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.equal(plain.choices[0].message.content, 'Hello world');
  assert.equal(plain.choices[0].message.reasoning_content, 'The user greets me.');
  assert.ok(!('tool_calls' in plain.choices[0].message));
  const u = plain.usage;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(u.completion_tokens_details.reasoning_tokens >= 1);
  assert.ok(plain._request_id);
});

await check('chat streaming: deltas concatenate, usage chunk last', async () => {
  const stream = await client.chat.completions.create({ model: 'fake-model', messages, stream: true, stream_options: { include_usage: true } });
  let content = '';
  let reasoning = '';
  let finishes = 0;
  let last;
  let first = true;
  for await (const chunk of stream) {
    last = chunk;
    if (chunk.choices.length === 0) continue;
    const d = chunk.choices[0].delta;
    if (first) assert.equal(d.role, 'assistant');
    first = false;
    content += d.content ?? '';
    reasoning += d.reasoning_content ?? '';
    if (chunk.choices[0].finish_reason) finishes++;
  }
  assert.equal(content, plain.choices[0].message.content);
  assert.equal(reasoning, plain.choices[0].message.reasoning_content);
  assert.equal(finishes, 1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, plain.usage);
});

await check('chat.completions.stream().finalChatCompletion()', async () => {
  const final = await client.chat.completions.stream({ model: 'fake-model', messages }).finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'Hello world');
  assert.equal(final.choices[0].finish_reason, 'stop');
});

const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }];
let toolPlain;
await check('tool call non-streaming', async () => {
  toolPlain = await client.chat.completions.create({ model: 'fake-model', messages, tools });
  const c = toolPlain.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls[0].type, 'function');
  assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
  assert.equal(JSON.parse(c.message.tool_calls[0].function.arguments).city, 'Paris');
  assert.equal(JSON.parse(c.message.tool_calls[0].function.arguments).days, 3);
});

await check('tool call streaming via stream helper', async () => {
  const final = await client.chat.completions.stream({ model: 'fake-model', messages, tools }).finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.id, toolPlain.choices[0].message.tool_calls[0].id);
  assert.equal(call.function.name, 'get_weather');
  assert.equal(call.function.arguments, toolPlain.choices[0].message.tool_calls[0].function.arguments);
});

await check('errors are typed and never retried 5xx', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'fake-model', messages, temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
  await assert.rejects(client.chat.completions.create({ model: 'fake-model', messages, top_logprobs: 3 }),
    (e) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.chat.completions.create({ model: 'fake-model', messages, max_tokens: 1000000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
  await assert.rejects(client.chat.completions.create({ model: 'other', messages }),
    (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.chat.completions.create({ model: 'fake-model', messages, tools: [] }),
    (e) => e instanceof OpenAI.BadRequestError);
});

await check('unknown body field accepted', async () => {
  const r = await client.chat.completions.create({ model: 'fake-model', messages, some_extension: { a: 1 } });
  assert.equal(r.choices[0].message.content, 'Hello world');
});

await check('early stream abort, then the next request succeeds', async () => {
  const stream = await client.chat.completions.create({ model: 'fake-model', messages, stream: true });
  for await (const _ of stream) break;
  const r = await client.chat.completions.create({ model: 'fake-model', messages });
  assert.equal(r.choices[0].message.content, 'Hello world');
});

await check('completions', async () => {
  const r = await client.completions.create({ model: 'fake-model', prompt: ['ab', 'cd'], n: 2, echo: true, max_tokens: 5 });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.id.startsWith('cmpl-'));
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.ok(r.choices[2].text.startsWith('cd'));
  let text = '';
  const s = await client.completions.create({ model: 'fake-model', prompt: 'x', stream: true });
  for await (const c of s) text += c.choices[0]?.text ?? '';
  assert.equal(text, 'Hello world');
});

await check('responses create and stream', async () => {
  const r = await client.responses.create({ model: 'fake-model', input: 'hi', instructions: 'be brief' });
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'Hello world');
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  const events = [];
  const stream = client.responses.stream({ model: 'fake-model', input: 'hi' });
  stream.on('event', (e) => events.push(e));
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'Hello world');
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  assert.equal(events.at(-1).type, 'response.completed');
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const fc = await client.responses.create({ model: 'fake-model', input: 'weather?', tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object' } }] });
  const call = fc.output.find((o) => o.type === 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.equal(JSON.parse(call.arguments).city, 'Paris');
});

server.kill();
console.log(failures === 0 ? 'all passed' : `${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
