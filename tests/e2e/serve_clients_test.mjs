// Popular client libraries other than the official SDKs, against `tensorfold serve` on the demo
// checkpoint: the Vercel AI SDK (@ai-sdk/openai's chat model and @ai-sdk/openai-compatible) and
// LangChain (@langchain/openai). The demo model's weights are random, so answers are compared with
// the same server's own (a stream with its non-streaming twin at temperature 0), and tool calls and
// structured answers come from the grammars: tool_choice required / named, json_schema.
//   node serve_clients_test.mjs BINARY serve ARGS...
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner } from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const { generateText, streamText, generateObject, tool } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');
const { ChatOpenAI } = require('@langchain/openai');
const { tool: lcTool } = require('@langchain/core/tools');
const { z } = require('zod');

const cmd = serverCommand();
const run = makeRunner('serve_clients');
const server = await startServer(cmd);
const model = server.model;
const baseURL = `${server.base}/v1`;

// Thinking off: the random model would otherwise reason until max_tokens.
const noThinking = { openai: { reasoningEffort: 'none' }, tf: { reasoningEffort: 'none' } };
const weatherSchema = z.object({ city: z.enum(['Paris', 'Oslo']) });

const sdkModels = {
  'ai-sdk openai.chat': createOpenAI({ baseURL, apiKey: 'e2e-key' }).chat(model),
  // supportsStructuredOutputs: json_schema response formats (else the provider sends json_object).
  'ai-sdk openai-compatible': createOpenAICompatible({ name: 'tf', baseURL, apiKey: 'e2e-key', supportsStructuredOutputs: true })(model),
};

for (const [name, m] of Object.entries(sdkModels)) {
  await run.check(`${name}: generateText = streamText at temperature 0; usage`, async () => {
    const prompt = 'Tell me about lighthouses.';
    const a = await generateText({ model: m, prompt, maxOutputTokens: 12, temperature: 0, providerOptions: noThinking });
    const s = streamText({ model: m, prompt, maxOutputTokens: 12, temperature: 0, providerOptions: noThinking });
    let streamed = '';
    for await (const d of s.textStream) streamed += d;
    assert.equal(streamed, a.text);
    assert.ok(a.text.length > 0);
    assert.equal(a.finishReason, 'length');
    assert.equal(a.usage.outputTokens, 12);
    assert.ok(a.usage.inputTokens > 0);
  });

  await run.check(`${name}: toolChoice required / named gives valid tool calls (generate and stream)`, async () => {
    const tools = { weather: tool({ description: 'get weather', inputSchema: weatherSchema }) };
    const r = await generateText({ model: m, prompt: 'Weather in Paris?', maxOutputTokens: 200, tools, toolChoice: 'required', providerOptions: noThinking });
    assert.ok(r.toolCalls.length >= 1, JSON.stringify(r.content));
    for (const c of r.toolCalls) {
      assert.equal(c.toolName, 'weather');
      assert.ok(['Paris', 'Oslo'].includes(c.input.city), JSON.stringify(c.input));
    }
    assert.equal(r.finishReason, 'tool-calls');
    const s = streamText({ model: m, prompt: 'Weather?', maxOutputTokens: 200, tools, toolChoice: { type: 'tool', toolName: 'weather' }, providerOptions: noThinking });
    const calls = await s.toolCalls;
    assert.equal(calls.length, 1);
    assert.ok(['Paris', 'Oslo'].includes(calls[0].input.city));
  });

  await run.check(`${name}: generateObject (json_schema) validates`, async () => {
    const r = await generateObject({ model: m, prompt: 'A lighthouse', maxOutputTokens: 200, providerOptions: noThinking,
      schema: z.object({ lit: z.boolean(), color: z.enum(['red', 'white']) }) });
    assert.equal(typeof r.object.lit, 'boolean');
    assert.ok(['red', 'white'].includes(r.object.color));
  });
}

const lc = (extra = {}) => new ChatOpenAI({ configuration: { baseURL }, apiKey: 'e2e-key', model, maxTokens: 12, temperature: 0, maxRetries: 0, modelKwargs: { reasoning_effort: 'none' }, ...extra });

await run.check('langchain: invoke = stream at temperature 0; batch; logprobs', async () => {
  const a = await lc().invoke('Tell me about lighthouses.');
  let streamed = '';
  for await (const c of await lc().stream('Tell me about lighthouses.')) streamed += c.content;
  assert.equal(streamed, a.content);
  assert.ok(a.content.length > 0);
  const b = await lc().batch(['Tell me about lighthouses.', 'Hi']);
  assert.equal(b[0].content, a.content);
  const l = await lc({ logprobs: true, topLogprobs: 2 }).invoke('Hi');
  assert.equal(l.response_metadata.logprobs.content.length, 12);
});

await run.check('langchain: bindTools with tool_choice required / named, withStructuredOutput', async () => {
  const weather = lcTool(async () => 'sunny', { name: 'weather', description: 'get weather', schema: weatherSchema });
  // One call (parallel_tool_calls false): the random model would go on calling until max_tokens.
  const r = await lc({ maxTokens: 200 }).bindTools([weather], { tool_choice: 'required', parallel_tool_calls: false }).invoke('Weather in Paris?');
  assert.equal(r.tool_calls.length, 1);
  for (const c of r.tool_calls) assert.ok(c.name === 'weather' && ['Paris', 'Oslo'].includes(c.args.city), JSON.stringify(c));
  let acc;
  for await (const c of await lc({ maxTokens: 200 }).bindTools([weather], { tool_choice: 'weather' }).stream('Weather?')) acc = acc ? acc.concat(c) : c;
  assert.equal(acc.tool_calls.length, 1);
  assert.ok(['Paris', 'Oslo'].includes(acc.tool_calls[0].args.city));
  const schema = z.object({ color: z.enum(['red', 'blue']) });
  const viaTool = await lc({ maxTokens: 200 }).withStructuredOutput(schema, { method: 'functionCalling' }).invoke('A color');
  assert.ok(['red', 'blue'].includes(viaTool.color));
  const viaSchema = await lc({ maxTokens: 200 }).withStructuredOutput(schema, { method: 'jsonSchema' }).invoke('A color');
  assert.ok(['red', 'blue'].includes(viaSchema.color));
});

await run.finish(server);
