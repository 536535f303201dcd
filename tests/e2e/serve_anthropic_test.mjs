// The Messages API against the real server on the demo checkpoint, through the official
// Anthropic SDK. The demo's text is gibberish, so expected answers come from other
// requests to the same server (the non-streaming twin of a stream, count_tokens), and
// structure is judged independently (JSON.parse + ajv for output_config.format).
// Usage: node serve_anthropic_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner } from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const AnthropicModule = require('@anthropic-ai/sdk');
const Anthropic = AnthropicModule.default ?? AnthropicModule;
const Ajv2020 = require('ajv/dist/2020').default ?? require('ajv/dist/2020');

const cmd = serverCommand();
const run = makeRunner('serve_anthropic');
const server = await startServer(cmd);
const client = new Anthropic({ baseURL: server.base, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });
const model = 'claude-haiku-4-5';  // any name: the reply names the served model
const messages = [{ role: 'user', content: 'Tell me about lighthouses.' }];
// Without a seed the sampler derives one from the prompt: identical requests, identical replies.
const body = (extra = {}) => ({ model, max_tokens: 24, messages, temperature: 1, ...extra });
const blockTypes = (m) => m.content.map((b) => b.type);

await run.check('create: served model, usage = count_tokens; the stream\'s final message equals it', async () => {
  const m = await client.messages.create(body());
  assert.equal(m.model, server.model);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 24);
  const count = await client.messages.countTokens({ model, messages });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, count.input_tokens);
  const final = await client.messages.stream(body()).finalMessage();
  assert.deepEqual(JSON.parse(JSON.stringify(final.content)), m.content);
  assert.equal(final.usage.output_tokens, m.usage.output_tokens);
  // The model thinks by default: the reply opens with a thinking block.
  assert.equal(blockTypes(m)[0], 'thinking');
});

await run.check('thinking disabled: text only; budget_tokens closes the reasoning early', async () => {
  const off = await client.messages.create(body({ thinking: { type: 'disabled' } }));
  assert.deepEqual(blockTypes(off), ['text']);
  const on = await client.messages.create(body({ max_tokens: 40, thinking: { type: 'enabled', budget_tokens: 3 } }));
  assert.equal(blockTypes(on)[0], 'thinking');
  assert.ok(on.usage.output_tokens_details.thinking_tokens <= 4, JSON.stringify(on.usage));
  assert.ok(blockTypes(on).includes('text'), JSON.stringify(on.content));
});

// The demo model's random weights never call a tool by themselves: the calls are the
// tool-call grammar's (tool_choice tool / any is enforced).
await run.check('tool_choice tool / any: a tool_use block, stop_reason tool_use (create and stream)', async () => {
  const tools = [
    { name: 'get_time', description: 'now', input_schema: { type: 'object', properties: {} } },
    { name: 'pick', input_schema: { type: 'object', properties: { color: { enum: ['red', 'green'] } } } },
  ];
  const forced = body({ thinking: { type: 'disabled' }, max_tokens: 200, tools, tool_choice: { type: 'tool', name: 'get_time' } });
  const m = await client.messages.create(forced);
  assert.equal(m.stop_reason, 'tool_use');
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(m.content));
  assert.equal(uses[0].name, 'get_time');
  assert.deepEqual(uses[0].input, {});
  const final = await client.messages.stream(forced).finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.equal(final.content.filter((b) => b.type === 'tool_use')[0].name, 'get_time');
  const any = await client.messages.create(body({ thinking: { type: 'disabled' }, max_tokens: 200, temperature: 0, tools, tool_choice: { type: 'any' } }));
  if (any.stop_reason !== 'max_tokens') {
    assert.equal(any.stop_reason, 'tool_use');
    assert.ok(any.content.some((b) => b.type === 'tool_use' && ['get_time', 'pick'].includes(b.name)), JSON.stringify(any.content));
  }
});

await run.check('stop_sequences: stop_reason stop_sequence names the one that matched', async () => {
  const plain = await client.messages.create(body({ thinking: { type: 'disabled' }, max_tokens: 32 }));
  const text = plain.content[0].text;
  const stop = [...new Set(text.slice(4).split(''))].find((c) => c.trim() && text.indexOf(c) >= 4);
  assert.ok(stop, `no usable stop character in ${JSON.stringify(text)}`);
  const m = await client.messages.create(body({ thinking: { type: 'disabled' }, max_tokens: 32, stop_sequences: [stop] }));
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
});

await run.check('tool_use / tool_result history and a prefilled reply go through the real template', async () => {
  const tools = [{ name: 'lookup', description: 'Look a word up', input_schema: { type: 'object', properties: { word: { type: 'string' } } } }];
  const history = [
    ...messages,
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'I should look it up.', signature: '' },
      { type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { word: 'lighthouse' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'A tower with a light.' }] }] },
  ];
  const m = await client.messages.create(body({ tools, messages: history }));
  assert.equal(m.type, 'message');
  const withTools = await client.messages.countTokens({ model, tools, messages: history });
  const without = await client.messages.countTokens({ model, tools, messages });
  assert.ok(withTools.input_tokens > without.input_tokens + 10);
  // Prefill: the reply continues the last assistant message.
  const pre = await client.messages.create(body({ thinking: { type: 'disabled' },
    messages: [...messages, { role: 'assistant', content: 'Lighthouses are' }] }));
  assert.ok(pre.content.length >= 1);
});

await run.check('output_config.format: a JSON answer that validates', async () => {
  const schema = { type: 'object', properties: { lit: { type: 'boolean' }, kind: { enum: ['tower', 'ship'] } }, required: ['lit', 'kind'] };
  const m = await client.messages.create(body({ max_tokens: 60, thinking: { type: 'disabled' },
    output_config: { format: { type: 'json_schema', schema } } }));
  const text = m.content.find((b) => b.type === 'text').text;
  assert.ok(new Ajv2020().validate(schema, JSON.parse(text)), text);
  assert.equal(m.stop_reason, 'end_turn');
});

await run.finish(server);
