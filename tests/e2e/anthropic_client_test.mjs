// Drives fake_server (the HTTP layer over a scripted engine) with the official Anthropic
// SDK (@anthropic-ai/sdk): models, messages (plain, streaming events, the stream helper's
// final message), tools, count_tokens, typed errors in Anthropic's shape.
// Usage: node anthropic_client_test.mjs FAKE_SERVER_BINARY 0   (see lib/server.mjs; needs `npm ci` in tests/)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner } from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const AnthropicModule = require('@anthropic-ai/sdk');
const Anthropic = AnthropicModule.default ?? AnthropicModule;

const run = makeRunner('server_anthropic_client');
const server = await startServer(serverCommand());
const base = server.base;
const client = new Anthropic({ baseURL: base, apiKey: 'test-key', maxRetries: 0 });
// Anthropic clients send their own model ids; the server answers with its model.
const model = 'claude-sonnet-4-5';
const messages = [{ role: 'user', content: 'hi' }];

await run.check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    ids.push(m.id);
    assert.equal(m.type, 'model');
    assert.equal(m.display_name, 'fake-model');
    assert.ok(!Number.isNaN(Date.parse(m.created_at)), m.created_at);
  }
  assert.deepEqual(ids, ['fake-model']);
});

await run.check('messages.create: thinking and text blocks, end_turn, usage = count_tokens', async () => {
  const m = await client.messages.create({ model, max_tokens: 64, system: 'Be brief.', messages });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, 'fake-model');
  assert.match(m.id, /^msg_/);
  assert.deepEqual(m.content, [
    { type: 'thinking', thinking: 'The user greets me.', signature: '' },
    { type: 'text', text: 'Hello world' },
  ]);
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  const count = await client.messages.countTokens({ model, system: 'Be brief.', messages });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, count.input_tokens);
  assert.ok(count.input_tokens > 0);
  assert.equal(m.usage.output_tokens, 'The user greets me.'.length + 'Hello world'.length);
});

await run.check('messages.stream: event order, and the final message equals the plain reply', async () => {
  const plain = await client.messages.create({ model, max_tokens: 64, messages });
  const stream = client.messages.stream({ model, max_tokens: 64, messages });
  const types = [];
  for await (const ev of stream) types.push(ev.type === 'content_block_delta' ? `delta:${ev.delta.type}` : ev.type);
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, plain.content);
  assert.equal(final.stop_reason, plain.stop_reason);
  assert.equal(final.usage.output_tokens, plain.usage.output_tokens);
  assert.equal(final.usage.input_tokens, plain.usage.input_tokens);
  const squeezed = types.filter((t, i) => t !== types[i - 1]);
  assert.deepEqual(squeezed, ['message_start', 'content_block_start', 'delta:thinking_delta', 'content_block_stop',
    'content_block_start', 'delta:text_delta', 'content_block_stop', 'message_delta', 'message_stop']);
});

const tools = [{
  name: 'get_weather', description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
}];

await run.check('tools: tool_use block with parsed input, stop_reason tool_use, streamed input_json_delta', async () => {
  const m = await client.messages.create({ model, max_tokens: 64, messages, tools, tool_choice: { type: 'auto' } });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content, [
    { type: 'text', text: 'Let me check.' },
    { type: 'tool_use', id: 'call_fake_1', name: 'get_weather', input: { city: 'Paris', days: 3 } },
  ]);
  const stream = client.messages.stream({ model, max_tokens: 64, messages, tools });
  let partial = '';
  stream.on('inputJson', (delta) => { partial += delta; });
  const final = await stream.finalMessage();
  assert.deepEqual(JSON.parse(JSON.stringify(final.content)), m.content);
  assert.deepEqual(JSON.parse(partial), { city: 'Paris', days: 3 });
  // The call and its result go back in the next turn.
  const next = await client.messages.create({
    model, max_tokens: 64, tools,
    messages: [...messages, { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_fake_1', content: '18 C, sunny' },
        { type: 'text', text: 'Thanks!' }] }],
  });
  assert.equal(next.type, 'message');
});

await run.check('errors: typed SDK errors carrying Anthropic error objects', async () => {
  const cases = [
    [{ model, messages }, /max_tokens/],                                                        // required
    [{ model, max_tokens: 8, messages: [] }, /messages/],
    [{ model, max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'http://example.com/a.png' } }] }] }, /data: URLs/],
    [{ model, max_tokens: 8, messages: [{ role: 'robot', content: 'x' }] }, /role/],
    [{ model, max_tokens: 8, messages, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, /web_search/],
    [{ model, max_tokens: 8, messages, thinking: { type: 'enabled' } }, /budget_tokens/],
  ];
  for (const [body, re] of cases) {
    await assert.rejects(client.messages.create(body), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${JSON.stringify(body)}: ${e}`);
      assert.equal(e.status, 400);
      assert.equal(e.error.type, 'error');
      assert.equal(e.error.error.type, 'invalid_request_error');
      assert.match(e.error.error.message, re);
      return true;
    });
  }
  const r = await fetch(`${base}/v1/messages/nope`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 404);
  const j = await r.json();
  assert.equal(j.type, 'error');
  assert.equal(j.error.type, 'not_found_error');
});

await run.finish(server);
