// End-to-end API suite against the real server (issue #5, first check): chat
// (non-streaming, SSE, include_usage, the SDK's stream helper), completions (string,
// list, token-id prompts, echo, streaming), responses (non-streaming, event order,
// final object = non-streaming one), /v1/models, usage = /tokenize of the same messages,
// determinism (no seed at temperature 1, different seeds differ), n=2, logprobs shapes,
// stop strings, max_tokens -> "length".
//
// The demo checkpoint has random weights, so the text is gibberish: every expected
// answer here comes from another request to the same server (greedy runs, the
// non-streaming twin of a stream, /tokenize), never from a hard-coded string.
// `ignore_eos` keeps lengths exact where a test needs them.
// Usage: node serve_api_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  serverCommand, startServer, makeRunner, post200, postJson, postSse, getJson, assertErrorObject, waitHealth, usageCore, health, request,
} from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');

const cmd = serverCommand();
const run = makeRunner('serve_api');
const server = await startServer(cmd);
const model = server.model;
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'e2e-key', maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Tell me about lighthouses.' }];
const MAX = 12;

// Everything a chat choice produced, for equality checks.
const chatText = (c) => ({ reasoning: c.message.reasoning_content ?? '', content: c.message.content ?? '' });
const chatBody = (extra = {}) => ({ model, messages, max_tokens: MAX, ...extra });

// Concatenates the chat SSE deltas per choice and checks the framing invariants.
function foldChatStream(r, n = 1) {
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.match(String(r.headers['content-type']), /text\/event-stream/);
  assert.ok(r.text.trimEnd().endsWith('data: [DONE]'), 'stream ends with [DONE]');
  const chunks = r.events.filter((e) => e.data !== '[DONE]').map((e) => e.json);
  assert.ok(chunks.every((c) => c && !c.error), 'no error chunk');
  const first = chunks[0];
  const per = Array.from({ length: n }, () => ({ reasoning: '', content: '', finish: [], role: null, afterFinish: false }));
  let usageChunk = null;
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, first.id);
    assert.equal(c.created, first.created);
    assert.equal(c.model, model);
    if (c.choices.length === 0) {
      assert.equal(usageChunk, null, 'one usage chunk');
      usageChunk = c;
      continue;
    }
    assert.ok(c.usage === undefined || c.usage === null, 'usage only on the usage chunk');
    for (const ch of c.choices) {
      const p = per[ch.index];
      assert.ok(p, `choice index ${ch.index} in range`);
      if (p.finish.length) p.afterFinish = true;
      if (ch.delta.role) p.role = ch.delta.role;
      p.reasoning += ch.delta.reasoning_content ?? '';
      p.content += ch.delta.content ?? '';
      if (ch.finish_reason) p.finish.push(ch.finish_reason);
    }
  }
  if (usageChunk) assert.equal(usageChunk, chunks.at(-1), 'usage chunk is last');
  for (const p of per) {
    assert.equal(p.role, 'assistant');
    assert.equal(p.finish.length, 1, 'exactly one finish chunk per choice');
    assert.equal(p.afterFinish, false, 'nothing after the finish chunk');
  }
  return { id: first.id, per, usageChunk };
}

await run.check('/v1/models lists the served model; retrieve; unknown -> 404', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    ids.push(m.id);
    assert.equal(m.object, 'model');
    assert.ok(Number.isInteger(m.created));
    assert.equal(typeof m.owned_by, 'string');
  }
  assert.deepEqual(ids, [model]);
  const i = cmd.args.indexOf('--served-name');
  if (i >= 0) assert.equal(model, cmd.args[i + 1]);
  assert.equal((await client.models.retrieve(model)).id, model);
  await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  const raw = await getJson(server, '/v1/models');
  assert.match(String(raw.headers['content-type']), /application\/json/);
  assert.ok(raw.json.data[0].max_model_len > 0);
  // llama.cpp's /props: the same window, the streams, the checkpoint's own template.
  const props = (await getJson(server, '/props')).json;
  assert.equal(props.default_generation_settings.n_ctx, raw.json.data[0].max_model_len);
  assert.equal(props.model_alias, model);
  assert.ok(Number.isInteger(props.total_slots) && props.total_slots >= 1, JSON.stringify(props));
  assert.match(props.chat_template, /\{%/, 'the Jinja source');
  assert.equal(typeof props.modalities.vision, 'boolean');
});

let greedy;
await run.check('chat non-streaming (openai client): shape and usage', async () => {
  greedy = await client.chat.completions.create(chatBody({ temperature: 0 }));
  assert.equal(greedy.object, 'chat.completion');
  assert.ok(greedy.id.startsWith('chatcmpl-'));
  assert.ok(Math.abs(greedy.created - Date.now() / 1000) < 300);
  assert.equal(greedy.model, model);
  assert.equal(greedy.choices.length, 1);
  const c = greedy.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.ok(!('tool_calls' in c.message));
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  const t = chatText(c);
  assert.ok(t.reasoning.length + t.content.length > 0, 'some text');
  assert.ok(!t.content.includes('<think>') && !t.content.includes('</think>'));
  if (c.message.reasoning_content) assert.equal(c.message.reasoning, c.message.reasoning_content);
  const u = greedy.usage;
  assert.ok(u.prompt_tokens > 0);
  assert.ok(u.completion_tokens >= 1 && u.completion_tokens <= MAX);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(u.completion_tokens, MAX);
  assert.ok(u.completion_tokens_details.reasoning_tokens <= u.completion_tokens);
  assert.ok(greedy._request_id);
});

await run.check('usage.prompt_tokens equals /tokenize (chat form) of the same messages, both paths', async () => {
  for (const p of ['/tokenize', '/v1/tokenize']) {
    const tk = await post200(server, p, { model, messages });
    assert.equal(tk.count, greedy.usage.prompt_tokens);
    assert.equal(tk.tokens.length, tk.count);
    assert.ok(tk.max_model_len > 0);
  }
  // With tools the rendered prompt grows, and the two still agree.
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const tk = await post200(server, '/tokenize', { model, messages, tools });
  assert.ok(tk.count > greedy.usage.prompt_tokens);
  const r = await post200(server, '/v1/chat/completions', chatBody({ tools, temperature: 0, max_tokens: 2 }));
  assert.equal(r.usage.prompt_tokens, tk.count);
  // Thinking off renders a different prompt; tokenize must follow chat_template_kwargs.
  const kw = { enable_thinking: false };
  const tk2 = await post200(server, '/tokenize', { model, messages, chat_template_kwargs: kw });
  const r2 = await post200(server, '/v1/chat/completions', chatBody({ chat_template_kwargs: kw, max_tokens: 2 }));
  assert.equal(r2.usage.prompt_tokens, tk2.count);
  // So must reasoning_effort (none closes the think block in the prompt).
  const tk3 = await post200(server, '/tokenize', { model, messages, reasoning_effort: 'none' });
  const r3 = await post200(server, '/v1/chat/completions', chatBody({ reasoning_effort: 'none', max_tokens: 2 }));
  assert.equal(r3.usage.prompt_tokens, tk3.count);
  assert.notEqual(tk3.count, greedy.usage.prompt_tokens);
});

// Python's json.dumps(x, ensure_ascii=False): what transformers' tojson writes, keys in insertion order.
const pyDumps = (x) => Array.isArray(x) ? `[${x.map(pyDumps).join(', ')}]`
  : x !== null && typeof x === 'object' ? `{${Object.entries(x).map(([k, v]) => `${JSON.stringify(k)}: ${pyDumps(v)}`).join(', ')}}`
    : JSON.stringify(x);

await run.check('the chat template sees the client\'s key order (tool schemas, arguments), as transformers renders it', async () => {
  const fn = { name: 'search', description: 'd', parameters: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer' } }, required: ['query'] } };
  const body = {
    model, tools: [{ type: 'function', function: fn }],
    messages: [{ role: 'user', content: 'hi' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: { query: 'x', limit: 3 } } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'ok' }],
  };
  const tk = await post200(server, '/tokenize', body);
  const text = (await post200(server, '/detokenize', { model, tokens: tk.tokens })).prompt;
  assert.ok(text.includes(pyDumps(fn)), `${pyDumps(fn)} not in\n${text}`);
  assert.ok(text.includes('<arg_key>query</arg_key><arg_value>x</arg_value><arg_key>limit</arg_key>'), text);
});

await run.check('/tokenize completion form and /detokenize round trip, token strings', async () => {
  const text = 'Hello, lighthouse keeper! 123 ünïcödé ✓';
  const tk = await post200(server, '/tokenize', { model, prompt: text, add_special_tokens: false, return_token_strs: true });
  assert.equal(tk.count, tk.tokens.length);
  assert.equal(tk.token_strs.length, tk.count);
  for (const p of ['/detokenize', '/v1/detokenize']) assert.equal((await post200(server, p, { model, tokens: tk.tokens })).prompt, text);
  const bad = await postJson(server, '/detokenize', { model, tokens: [2 ** 31 - 1] });
  assert.equal(bad.status, 400);
  assertErrorObject(assert, bad, 'detokenize out of range');
});

await run.check('chat streaming (raw SSE) with include_usage equals the non-streaming answer at temperature 0', async () => {
  const r = await postSse(server, '/v1/chat/completions', chatBody({ temperature: 0, stream: true, stream_options: { include_usage: true } }));
  const s = foldChatStream(r);
  assert.ok(s.id.startsWith('chatcmpl-'));
  assert.deepEqual({ reasoning: s.per[0].reasoning, content: s.per[0].content }, chatText(greedy.choices[0]));
  assert.equal(s.per[0].finish[0], greedy.choices[0].finish_reason);
  assert.ok(s.usageChunk, 'usage chunk present');
  assert.deepEqual(usageCore(s.usageChunk.usage), usageCore(greedy.usage));
});

await run.check('chat streaming without stream_options sends no usage chunk', async () => {
  const r = await postSse(server, '/v1/chat/completions', chatBody({ temperature: 0, stream: true }));
  const s = foldChatStream(r);
  assert.equal(s.usageChunk, null);
  assert.ok(r.events.every((e) => e.data === '[DONE]' || !e.json.usage));
  assert.equal(s.per[0].reasoning + s.per[0].content, chatText(greedy.choices[0]).reasoning + chatText(greedy.choices[0]).content);
});

await run.check('chat.completions.stream().finalChatCompletion() (SDK accumulator) matches', async () => {
  const final = await client.chat.completions.stream(chatBody({ temperature: 0 })).finalChatCompletion();
  assert.equal(final.choices[0].message.content ?? '', chatText(greedy.choices[0]).content);
  assert.equal(final.choices[0].finish_reason, greedy.choices[0].finish_reason);
});

await run.check('no seed at temperature 1: identical requests give identical output', async () => {
  const a = await post200(server, '/v1/chat/completions', chatBody({ temperature: 1 }));
  const b = await post200(server, '/v1/chat/completions', chatBody({ temperature: 1 }));
  assert.deepEqual(chatText(b.choices[0]), chatText(a.choices[0]));
  assert.deepEqual(usageCore(b.usage), usageCore(a.usage));
  const s = await postSse(server, '/v1/chat/completions', chatBody({ temperature: 1, stream: true }));
  const f = foldChatStream(s);
  assert.deepEqual({ reasoning: f.per[0].reasoning, content: f.per[0].content }, chatText(a.choices[0]));
});

await run.check('seeds: same seed identical, different seeds differ (temperature 1)', async () => {
  const body = (seed) => chatBody({ temperature: 1, seed, max_tokens: 16, ignore_eos: true });
  const [a, a2, b, c] = await Promise.all([1, 1, 2, 3].map((s) => post200(server, '/v1/chat/completions', body(s))));
  const key = (r) => JSON.stringify(chatText(r.choices[0]));
  assert.equal(key(a2), key(a));
  assert.notEqual(key(b), key(a));
  assert.notEqual(key(c), key(b));
  // Large seeds (int64 range) are accepted.
  await post200(server, '/v1/chat/completions', body(-(2 ** 53) + 1));
});

await run.check('n=2: two choices, each equal to its streamed twin; temperature 1 choices differ', async () => {
  const body = chatBody({ temperature: 1, n: 2, seed: 11, max_tokens: 16, ignore_eos: true });
  const r = await post200(server, '/v1/chat/completions', body);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.notEqual(JSON.stringify(chatText(r.choices[0])), JSON.stringify(chatText(r.choices[1])));
  for (const c of r.choices) assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 32);
  const s = foldChatStream(await postSse(server, '/v1/chat/completions', { ...body, stream: true, stream_options: { include_usage: true } }), 2);
  for (const c of r.choices) assert.deepEqual({ reasoning: s.per[c.index].reasoning, content: s.per[c.index].content }, chatText(c));
  assert.deepEqual(usageCore(s.usageChunk.usage), usageCore(r.usage));
});

await run.check('chat logprobs/top_logprobs shapes (greedy token = top-1)', async () => {
  const r = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, logprobs: true, top_logprobs: 3, max_tokens: 8, ignore_eos: true }));
  const lp = r.choices[0].logprobs;
  assert.ok(lp && Array.isArray(lp.content), 'logprobs.content');
  assert.equal(lp.content.length, r.usage.completion_tokens);
  for (const e of lp.content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.ok(e.bytes === null || (Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256)));
    assert.equal(e.top_logprobs.length, 3);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'descending');
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
  }
  // Without logprobs the field is null.
  const plain = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 2 }));
  assert.equal(plain.choices[0].logprobs, null);
  // Streaming carries per-chunk logprobs that add up to the same entries.
  const s = await postSse(server, '/v1/chat/completions', chatBody({ temperature: 0, logprobs: true, top_logprobs: 3, max_tokens: 8, ignore_eos: true, stream: true }));
  const streamed = s.events.filter((e) => e.json?.choices?.[0]?.logprobs).flatMap((e) => e.json.choices[0].logprobs.content);
  assert.deepEqual(streamed.map((e) => e.token), lp.content.map((e) => e.token));
});

await run.check('usage.completion_tokens_details.reasoning_tokens counts only the think block', async () => {
  // Thinking on, cut by the cap before any </think>: every token is reasoning.
  const on = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 6, ignore_eos: true }));
  if (on.choices[0].message.content === null) assert.equal(on.usage.completion_tokens_details.reasoning_tokens, 6);
  // Thinking off: no reasoning, so no reasoning tokens.
  const off = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 6, ignore_eos: true, reasoning_effort: 'none' }));
  assert.equal(off.choices[0].message.reasoning_content ?? null, null);
  assert.equal(off.usage.completion_tokens_details.reasoning_tokens, 0);
});

await run.check('max_tokens -> finish_reason length; max_completion_tokens wins', async () => {
  const a = await client.chat.completions.create(chatBody({ max_tokens: 5, ignore_eos: true }));
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 5);
  const b = await client.chat.completions.create(chatBody({ max_tokens: 9, max_completion_tokens: 3, ignore_eos: true }));
  assert.equal(b.choices[0].finish_reason, 'length');
  assert.equal(b.usage.completion_tokens, 3);
});

// Picks a stop string from the middle of a greedy text: the answer with it must be the
// text up to its first occurrence.
function pickStop(text) {
  for (let p = Math.floor(text.length / 2); p < text.length - 2; p++) {
    const s = text.slice(p, p + 2);
    if (/^[\x21-\x7e]{2}$/.test(s) && text.indexOf(s) > 0) return s;
  }
  for (let p = Math.floor(text.length / 2); p < text.length - 1; p++) {
    const s = text.slice(p, p + 1);
    if (s.trim() && !s.includes('\uFFFD') && text.indexOf(s) > 0) return s;
  }
  return null;
}

await run.check('stop strings (completions and chat content): cut before the first match, finish_reason stop', async () => {
  const base = { model, prompt: 'The lighthouse keeper said', max_tokens: 32, temperature: 0, ignore_eos: true };
  const full = (await post200(server, '/v1/completions', base)).choices[0].text;
  const stop = pickStop(full);
  assert.ok(stop, `no usable stop string in ${JSON.stringify(full)}`);
  const cut = await post200(server, '/v1/completions', { ...base, stop: ['\u0001never\u0002', stop] });
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)), `stop ${JSON.stringify(stop)} in ${JSON.stringify(full)}`);
  assert.equal(cut.choices[0].finish_reason, 'stop');
  const streamed = await postSse(server, '/v1/completions', { ...base, stop, stream: true });
  assert.equal(streamed.events.filter((e) => e.json).map((e) => e.json.choices[0]?.text ?? '').join(''), cut.choices[0].text);
  // Chat with thinking off: the whole answer is content.
  const cb = chatBody({ temperature: 0, max_tokens: 32, ignore_eos: true, reasoning_effort: 'none' });
  const chatFull = (await post200(server, '/v1/chat/completions', cb)).choices[0].message.content ?? '';
  const cs = pickStop(chatFull);
  assert.ok(cs, `no usable stop string in ${JSON.stringify(chatFull)}`);
  const chatCut = await post200(server, '/v1/chat/completions', { ...cb, stop: cs });
  assert.equal(chatCut.choices[0].message.reasoning_content ?? null, null);
  assert.equal(chatCut.choices[0].message.content ?? '', chatFull.slice(0, chatFull.indexOf(cs)));
  assert.equal(chatCut.choices[0].finish_reason, 'stop');
});

await run.check('logit_bias +100 on one token makes greedy decoding repeat it', async () => {
  const tk = await post200(server, '/tokenize', { model, prompt: ' harbor', add_special_tokens: false });
  const id = tk.tokens[0];
  const r = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 4, temperature: 0, ignore_eos: true, logit_bias: { [id]: 100 } });
  const expected = (await post200(server, '/detokenize', { model, tokens: [id, id, id, id] })).prompt;
  assert.equal(r.choices[0].text, expected);
  // -100 bans it: the same request with the ban never produces that token first.
  const banned = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 1, temperature: 0, logit_bias: { [id]: -100 }, logprobs: 1 });
  assert.notEqual(banned.choices[0].logprobs.tokens[0], (await post200(server, '/detokenize', { model, tokens: [id] })).prompt);
});

await run.check('vLLM sampling fields: allowed_token_ids, bad_words (as written and after a space), thinking_token_budget', async () => {
  const ids = async (text) => (await post200(server, '/tokenize', { model, prompt: text, add_special_tokens: false })).tokens;
  const [harbor] = await ids(' harbor');
  const [light] = await ids(' light');
  const str = async (id) => (await post200(server, '/detokenize', { model, tokens: [id] })).prompt;
  // Sampled among two ids only: every token of the reply is one of them.
  const allowed = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 24, temperature: 1, seed: 3, ignore_eos: true, allowed_token_ids: [harbor, light], logprobs: 1 });
  const names = new Set([await str(harbor), await str(light)]);
  assert.equal(allowed.choices[0].logprobs.tokens.length, 24);
  for (const t of allowed.choices[0].logprobs.tokens) assert.ok(names.has(t), JSON.stringify(t));
  assert.equal(allowed.choices[0].text, allowed.choices[0].logprobs.tokens.join(''));
  // A +100 bias makes greedy decoding write that token (a space and a word piece) every time;
  // bad_words with the piece written without its space bans it anyway, since a word is banned
  // after a space too (vLLM's rule).
  const forced = { model, prompt: 'The lighthouse keeper said', max_tokens: 12, temperature: 0, ignore_eos: true, logit_bias: { [harbor]: 100 } };
  assert.equal((await post200(server, '/v1/completions', forced)).choices[0].text, (await str(harbor)).repeat(12));
  const banned = await post200(server, '/v1/completions', { ...forced, bad_words: [(await str(harbor)).trim()], logprobs: 1 });
  assert.equal(banned.usage.completion_tokens, 12);
  assert.ok(!banned.choices[0].logprobs.tokens.includes(await str(harbor)), JSON.stringify(banned.choices[0].logprobs.tokens));
  // thinking_token_budget (vLLM's name for thinking_budget) closes the reasoning after 3 tokens.
  const budget = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 24, ignore_eos: true, thinking_token_budget: 3 }));
  assert.ok(budget.usage.completion_tokens_details.reasoning_tokens <= 4, JSON.stringify(budget.usage));
  assert.ok((budget.choices[0].message.content ?? '').length > 0, JSON.stringify(budget.choices[0].message));
  // bad_words cannot keep the engine from closing the reasoning: the same reply with '</think>' banned.
  const unbanned = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 24, ignore_eos: true, thinking_token_budget: 3, bad_words: ['</think>'] }));
  assert.deepEqual(unbanned.choices[0].message, budget.choices[0].message);
});

await run.check('return_token_ids: the prompt\'s and the reply\'s ids, streamed the same (chat, completions)', async () => {
  const prompt = 'The lighthouse keeper said';
  const comp = { model, prompt, max_tokens: 10, temperature: 0, ignore_eos: true, return_token_ids: true };
  const r = await post200(server, '/v1/completions', comp);
  const c = r.choices[0];
  assert.deepEqual(c.prompt_token_ids, (await post200(server, '/tokenize', { model, prompt })).tokens);
  assert.equal(c.token_ids.length, r.usage.completion_tokens);
  assert.equal((await post200(server, '/detokenize', { model, tokens: c.token_ids })).prompt, c.text);
  const s = await postSse(server, '/v1/completions', { ...comp, stream: true });
  const chunks = s.events.filter((e) => e.data !== '[DONE]').map((e) => e.json).filter((j) => j.choices.length);
  assert.deepEqual(chunks[0].choices[0].prompt_token_ids, c.prompt_token_ids);
  assert.deepEqual(chunks.flatMap((j) => j.choices[0].token_ids ?? []), c.token_ids);
  // Without the field: no ids.
  const plain = await post200(server, '/v1/completions', { ...comp, return_token_ids: undefined });
  assert.equal(plain.choices[0].token_ids, undefined);

  const chat = chatBody({ temperature: 0, max_tokens: 10, ignore_eos: true, return_token_ids: true });
  const cr = await post200(server, '/v1/chat/completions', chat);
  assert.deepEqual(cr.prompt_token_ids, (await post200(server, '/tokenize', { model, messages })).tokens);
  assert.equal(cr.choices[0].token_ids.length, cr.usage.completion_tokens);
  const cs = await postSse(server, '/v1/chat/completions', { ...chat, stream: true });
  const cchunks = cs.events.filter((e) => e.data !== '[DONE]').map((e) => e.json).filter((j) => j.choices.length);
  assert.deepEqual(cchunks[0].prompt_token_ids, cr.prompt_token_ids);
  assert.deepEqual(cchunks.flatMap((j) => j.choices[0].token_ids ?? []), cr.choices[0].token_ids);
  // token_sha256: the SHA-256 of the ids as little-endian int32s, on every finished choice.
  const sha = (ids) => createHash('sha256').update(Buffer.from(Int32Array.from(ids).buffer)).digest('hex');
  assert.equal(cr.choices[0].token_sha256, sha(cr.choices[0].token_ids));
  assert.equal(c.token_sha256, sha(c.token_ids));
  assert.equal(plain.choices[0].token_sha256, c.token_sha256, 'without return_token_ids too');
  const last = (chunks) => chunks.filter((j) => j.choices[0].finish_reason)[0].choices[0];
  assert.equal(last(cchunks).token_sha256, cr.choices[0].token_sha256, 'on the streamed finish chunk');
  assert.equal(last(chunks).token_sha256, c.token_sha256);
});

await run.check('truncate_prompt_tokens runs the prompt\'s last k tokens (completions with echo, chat)', async () => {
  const prompt = 'The lighthouse keeper said to the harbour master';
  const ids = (await post200(server, '/tokenize', { model, prompt })).tokens;
  assert.ok(ids.length > 4);
  const body = { model, max_tokens: 6, temperature: 0, ignore_eos: true };
  const cut = await post200(server, '/v1/completions', { ...body, prompt, truncate_prompt_tokens: 4, echo: true });
  const tail = await post200(server, '/v1/completions', { ...body, prompt: ids.slice(-4) });
  assert.equal(cut.usage.prompt_tokens, 4);
  const echoed = (await post200(server, '/detokenize', { model, tokens: ids.slice(-4) })).prompt;
  assert.equal(cut.choices[0].text, echoed + tail.choices[0].text);
  // Longer than the prompt (or -1, the window): nothing is cut.
  const whole = await post200(server, '/v1/completions', { ...body, prompt, truncate_prompt_tokens: -1 });
  assert.equal(whole.usage.prompt_tokens, ids.length);
  const chat = await post200(server, '/v1/chat/completions', chatBody({ temperature: 0, truncate_prompt_tokens: 5 }));
  assert.equal(chat.usage.prompt_tokens, 5);
});

await run.check('stream_options.continuous_usage_stats: every chunk carries the usage so far (chat, completions)', async () => {
  const opts = { include_usage: true, continuous_usage_stats: true };
  for (const [path, body] of [
    ['/v1/chat/completions', chatBody({ temperature: 0, max_tokens: 10, ignore_eos: true })],
    ['/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 10, temperature: 0, ignore_eos: true }],
  ]) {
    const s = await postSse(server, path, { ...body, stream: true, stream_options: opts });
    const chunks = s.events.filter((e) => e.data !== '[DONE]').map((e) => e.json);
    const final = chunks.at(-1);
    assert.equal(final.choices.length, 0, 'the usage chunk is last');
    let last = 0;
    for (const c of chunks.slice(0, -1)) {
      assert.ok(c.usage, `${path}: a chunk without usage: ${JSON.stringify(c)}`);
      assert.equal(c.usage.prompt_tokens, final.usage.prompt_tokens);
      assert.ok(c.usage.completion_tokens >= last, JSON.stringify(c.usage));
      assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
      last = c.usage.completion_tokens;
    }
    assert.equal(last, final.usage.completion_tokens);
    // Without it (include_usage alone) only the last chunk has usage.
    const plain = await postSse(server, path, { ...body, stream: true, stream_options: { include_usage: true } });
    const pc = plain.events.filter((e) => e.data !== '[DONE]').map((e) => e.json);
    assert.ok(pc.slice(0, -1).every((c) => c.usage === undefined || c.usage === null));
  }
});

await run.check('LOOP_GUARD closes a reasoning loop (the model answers); repetition_detection ends a reply with "repetition"', async () => {
  // A server of its own with a short guard; one token forced by logit_bias is a 1-token loop.
  const server = await startServer({ bin: cmd.bin, args: [...cmd.args, '--loop-guard', '24', '--drafter', 'none'] });
  try {
    const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'e2e-key', maxRetries: 0, timeout: 60000 });
    const id = (await post200(server, '/tokenize', { model, prompt: ' harbor', add_special_tokens: false })).tokens[0];
    const text = async (n) => (await post200(server, '/detokenize', { model, tokens: Array(n).fill(id) })).prompt;
    const body = { model, messages, max_tokens: 40, temperature: 0, ignore_eos: true, logit_bias: { [id]: 100 } };
    // 24 looping reasoning tokens, then </think> (usage counts it with the reasoning), then the answer.
    const r = await client.chat.completions.create(body);
    assert.equal(r.choices[0].message.reasoning_content, await text(24));
    assert.equal(r.choices[0].message.content, await text(40 - 25));
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 25);
    const streamed = foldChatStream(await postSse(server, '/v1/chat/completions', { ...body, stream: true }));
    assert.deepEqual(streamed.per[0].reasoning, r.choices[0].message.reasoning_content);
    assert.deepEqual(streamed.per[0].content, r.choices[0].message.content);

    // vLLM's repetition_detection: 5 copies of a 1..4-token block end the reply at its 5th token.
    const rd = { ...body, repetition_detection: { max_pattern_size: 4, min_count: 5 } };
    const ended = await client.chat.completions.create(rd);
    assert.equal(ended.choices[0].finish_reason, 'repetition');
    assert.equal(ended.usage.completion_tokens, 5);
    const endedStream = foldChatStream(await postSse(server, '/v1/chat/completions', { ...rd, stream: true }));
    assert.deepEqual(endedStream.per[0].finish, ['repetition']);
    const comp = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 40, temperature: 0, ignore_eos: true, logit_bias: { [id]: 100 }, repetition_detection: { max_pattern_size: 2, min_count: 7 } });
    assert.equal(comp.choices[0].finish_reason, 'repetition');
    assert.equal(comp.choices[0].text, await text(7));

    const h = await health(server);
    assert.deepEqual(h.loops, { reasoning_closed_total: 2, repetition_stops_total: 3 });
    const m = await request(server, 'GET', '/metrics');
    assert.match(m.text, /^tensorfold:loop_guard_closed_total 2$/m);
    assert.match(m.text, /^tensorfold:repetition_stops_total 3$/m);
    assert.match(m.text, /finished_reason="repetition"/);
  } finally {
    await server.stop();
  }
});

// The demo model's random weights never call a tool by themselves: these calls are the
// tool-call grammar's (tool_choice required / named is enforced, api.md §6).
await run.check('tool_choice required / named is enforced: chat, stream, SDK, Responses', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_time', description: 'now', parameters: { type: 'object', properties: {} } } },
    { type: 'function', function: { name: 'pick', parameters: { type: 'object', properties: { color: { enum: ['red', 'green'] } } } } },
  ];
  const base = { model, messages: [{ role: 'user', content: 'What time is it?' }], tools, reasoning_effort: 'none', max_tokens: 200, temperature: 0 };
  const named = await post200(server, '/v1/chat/completions', { ...base, tool_choice: { type: 'function', function: { name: 'get_time' } } });
  const nc = named.choices[0];
  assert.equal(nc.finish_reason, 'stop');  // OpenAI's finish_reason for a named choice
  assert.equal(nc.message.tool_calls.length, 1);
  assert.equal(nc.message.tool_calls[0].function.name, 'get_time');
  assert.equal(nc.message.tool_calls[0].function.arguments, '{}');
  assert.ok(!nc.message.content);
  // The SDK's stream accumulator sees the same call.
  const acc = await client.chat.completions.stream({ ...base, tool_choice: { type: 'function', function: { name: 'get_time' } } }).finalChatCompletion();
  assert.equal(acc.choices[0].message.tool_calls[0].function.name, 'get_time');
  assert.equal(acc.choices[0].finish_reason, 'stop');
  let called = 0;
  for (const seed of [1, 2, 3]) {
    const r = await post200(server, '/v1/chat/completions', { ...base, tool_choice: 'required', temperature: 1, seed });
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;  // still inside a call when max_tokens ran out
    assert.equal(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const tc of c.message.tool_calls) {
      assert.ok(['get_time', 'pick'].includes(tc.function.name), tc.function.name);
      const args = JSON.parse(tc.function.arguments);
      for (const [k, v] of Object.entries(args)) assert.ok(k === 'color' && ['red', 'green'].includes(v), tc.function.arguments);
      ++called;
    }
  }
  assert.ok(called >= 1, 'no seed finished its calls');
  // parallel_tool_calls false: exactly one call.
  const one = await post200(server, '/v1/chat/completions', { ...base, tool_choice: 'required', parallel_tool_calls: false, seed: 4, temperature: 1 });
  if (one.choices[0].finish_reason !== 'length') assert.equal(one.choices[0].message.tool_calls.length, 1);
  // Responses: a named function tool gives a function_call item.
  const resp = await post200(server, '/v1/responses', {
    model, input: 'What time is it?', max_output_tokens: 200, reasoning: { effort: 'none' },
    tools: [{ type: 'function', name: 'get_time', parameters: { type: 'object', properties: {} } }], tool_choice: { type: 'function', name: 'get_time' },
  });
  const fc = resp.output.filter((o) => o.type === 'function_call');
  assert.equal(fc.length, 1);
  assert.equal(fc[0].name, 'get_time');
  // Next to a response format, a forced call still wins: the answer is the call.
  const both = await post200(server, '/v1/chat/completions', { ...base, tool_choice: { type: 'function', function: { name: 'get_time' } }, response_format: { type: 'text' } });
  assert.equal(both.choices[0].message.tool_calls[0].function.name, 'get_time');
  const req = await post200(server, '/v1/chat/completions', { ...base, tool_choice: 'required', parallel_tool_calls: false, response_format: { type: 'json_object' }, seed: 4, temperature: 1 });
  if (req.choices[0].finish_reason !== 'length') assert.equal(req.choices[0].finish_reason, 'tool_calls');
});

await run.check('copy drafts: a reply that repeats itself is verified several tokens a step (/health, /metrics)', async () => {
  // One token forced by logit_bias: once the reply has repeated it 16 times (COPY_MATCH 8, twice
  // that inside the reply), its next tokens are copied as drafts and every one is kept.
  // On a server of its own without MTP drafts: the draft policy weighs a draft against the
  // measured cost of multi-row steps, and the main server's earlier (wrong) MTP verify steps,
  // timed on a busy CI machine, could make even a likely draft look too dear to try.
  const server = await startServer({ bin: cmd.bin, args: [...cmd.args, '--drafter', 'none'] });
  try {
    await copyDraftsCheck(server);
  } finally {
    await server.stop();
  }
});

async function copyDraftsCheck(server) {
  const tk = await post200(server, '/tokenize', { model, prompt: ' harbor', add_special_tokens: false });
  const id = tk.tokens[0];
  const before = (await health(server)).speculation;
  assert.ok(before && Number.isInteger(before.steps_total), JSON.stringify(before));
  const r = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 64, temperature: 0, ignore_eos: true, logit_bias: { [id]: 100 } });
  const expected = (await post200(server, '/detokenize', { model, tokens: Array(64).fill(id) })).prompt;
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.usage.completion_tokens, 64);
  const after = (await health(server)).speculation;
  const kept = after.accepted_tokens_total - before.accepted_tokens_total;
  assert.ok(after.steps_total > before.steps_total && kept > 0, JSON.stringify({ before, after }));
  assert.ok(after.drafted_tokens_total - before.drafted_tokens_total >= kept, JSON.stringify({ before, after }));
  const m = await request(server, 'GET', '/metrics');
  assert.match(m.text, new RegExp(`^tensorfold:accepted_tokens_total ${after.accepted_tokens_total}$`, 'm'));
  // draft: false (the reference engine's serial reference): the same reply, no verify step.
  const serial = await post200(server, '/v1/completions', { model, prompt: 'The lighthouse keeper said', max_tokens: 64, temperature: 0, ignore_eos: true, logit_bias: { [id]: 100 }, draft: false });
  assert.equal(serial.choices[0].text, expected);
  assert.equal(serial.choices[0].token_sha256, r.choices[0].token_sha256, 'the drafted reply is the serial one, token for token');
  assert.deepEqual((await health(server)).speculation, after, 'no drafts for draft: false');
}

await run.check('REASONING_EFFORT and THINKING_BUDGET: the defaults of requests that choose none', async () => {
  const srv = await startServer({ bin: cmd.bin, args: [...cmd.args, '--reasoning-effort', 'high', '--thinking-budget', '3'] });
  try {
    const q = { model, messages: [{ role: 'user', content: 'Why is the sea blue?' }], max_tokens: 24, temperature: 0, ignore_eos: true, return_token_ids: true };
    const plain = await post200(srv, '/v1/chat/completions', q);
    const explicit = await post200(srv, '/v1/chat/completions', { ...q, reasoning_effort: 'high', thinking_budget: 3 });
    assert.deepEqual(plain.choices[0].message, explicit.choices[0].message, 'the same as asking for them');
    assert.deepEqual(plain.prompt_token_ids, explicit.prompt_token_ids);
    assert.ok(plain.usage.completion_tokens_details.reasoning_tokens <= 4, JSON.stringify(plain.usage));
    // /tokenize renders the prompt the chat route runs.
    const tok = await post200(srv, '/tokenize', { model, messages: q.messages });
    assert.deepEqual(tok.tokens, plain.prompt_token_ids);
    // The default (max) effort's prompt is another one; a request's own choices win.
    const max = await post200(srv, '/tokenize', { model, messages: q.messages, reasoning_effort: 'max' });
    assert.notDeepEqual(max.tokens, plain.prompt_token_ids);
    const off = await post200(srv, '/v1/chat/completions', { ...q, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(off.usage.completion_tokens_details.reasoning_tokens, 0, 'enable_thinking false wins');
    const longer = await post200(srv, '/v1/chat/completions', { ...q, thinking_budget: 10 });
    assert.ok(longer.usage.completion_tokens_details.reasoning_tokens > 4, JSON.stringify(longer.usage));
  } finally {
    await srv.stop();
  }
});

await run.check('Responses accepts tools: [] (as OpenAI does); /metrics counts streamed answers as 200', async () => {
  const r = await post200(server, '/v1/responses', { model, input: 'hi', max_output_tokens: 4, tools: [] });
  assert.equal(r.object, 'response');
  await postSse(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 2 }));
  const m = await request(server, 'GET', '/metrics');
  assert.doesNotMatch(m.text, /status="-1"/);
  assert.match(m.text, /tensorfold:http_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\}/);
});

await run.check('unknown body fields are ignored; x-request-id is echoed; JSON content type', async () => {
  const r = await postJson(server, '/v1/chat/completions', chatBody({ temperature: 0, some_extension: { a: 1 }, user: 'u1', metadata: { k: 'v' } }),
    { headers: { 'x-request-id': 'e2e-request-42' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers['x-request-id'], 'e2e-request-42');
  assert.match(String(r.headers['content-type']), /application\/json/);
  assert.deepEqual(chatText(r.json.choices[0]), chatText(greedy.choices[0]));
  const g = await getJson(server, '/v1/models');
  assert.ok(g.headers['x-request-id'], 'a request id is generated when none is sent');
});

await run.check('CORS (CORS_ORIGINS=* by default): a browser\'s preflight is 204 without a key; answers carry the origin', async () => {
  const origin = 'http://localhost:5173';
  const pre = await request(server, 'OPTIONS', '/v1/chat/completions', {
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,x-stainless-os' },
  });
  assert.equal(pre.status, 204, pre.text);
  assert.equal(pre.headers['access-control-allow-origin'], '*');
  assert.match(String(pre.headers['access-control-allow-methods']), /\bPOST\b/);
  assert.equal(pre.headers['access-control-allow-headers'], 'authorization,content-type,x-stainless-os');
  assert.equal(pre.headers['access-control-max-age'], '86400');
  const r = await postJson(server, '/v1/chat/completions', chatBody({ temperature: 0 }), { headers: { origin } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers['access-control-allow-origin'], '*');
  assert.match(String(r.headers['access-control-expose-headers']), /x-request-id/);
  const s = await postSse(server, '/v1/chat/completions', chatBody({ temperature: 0, stream: true }), { headers: { origin } });
  assert.equal(s.status, 200, s.text.slice(0, 300));
  assert.equal(s.headers['access-control-allow-origin'], '*');
  const none = await request(server, 'GET', '/no/such/route', { headers: { origin } });
  assert.equal(none.status, 404);
  assert.equal(none.headers['access-control-allow-origin'], '*');
  const plain = await getJson(server, '/v1/models');
  assert.equal(plain.headers['access-control-allow-origin'], undefined, 'no Origin, no CORS header');
});

let compText;
await run.check('completions: string prompt, default max_tokens 16, token-id prompt gives the same text', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.id.startsWith('cmpl-'));
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  compText = r.choices[0].text;
  const tk = await post200(server, '/tokenize', { model, prompt: 'Once upon a time' });
  assert.equal(tk.count, r.usage.prompt_tokens);
  const ids = await client.completions.create({ model, prompt: tk.tokens, temperature: 0, ignore_eos: true });
  assert.equal(ids.choices[0].text, compText);
  assert.equal(ids.usage.prompt_tokens, tk.count);
});

await run.check('completions: list of prompts x n=2 -> indices prompt*n+i, each equal to the prompt alone', async () => {
  const r = await post200(server, '/v1/completions', { model, prompt: ['Once upon a time', 'In a galaxy'], n: 2, temperature: 0, ignore_eos: true, max_tokens: 16 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(r.choices[0].text, compText);
  assert.equal(r.choices[1].text, compText);
  const second = await post200(server, '/v1/completions', { model, prompt: 'In a galaxy', temperature: 0, ignore_eos: true, max_tokens: 16 });
  assert.equal(r.choices[2].text, second.choices[0].text);
  assert.equal(r.usage.completion_tokens, 64);
  // Token-id lists of lists.
  const tk = await post200(server, '/tokenize', { model, prompt: 'In a galaxy' });
  const rr = await post200(server, '/v1/completions', { model, prompt: [tk.tokens, tk.tokens], temperature: 0, ignore_eos: true, max_tokens: 16 });
  assert.deepEqual(rr.choices.map((c) => c.text), [second.choices[0].text, second.choices[0].text]);
});

await run.check('completions: echo prepends the prompt; max_tokens 0 with echo returns the prompt', async () => {
  const r = await post200(server, '/v1/completions', { model, prompt: 'Once upon a time', echo: true, temperature: 0, ignore_eos: true });
  assert.equal(r.choices[0].text, 'Once upon a time' + compText);
  const z = await postJson(server, '/v1/completions', { model, prompt: 'Once upon a time', echo: true, max_tokens: 0 });
  assert.equal(z.status, 200, z.text);
  assert.equal(z.json.choices[0].text, 'Once upon a time');
});

await run.check('completions streaming: text deltas concatenate, usage chunk, [DONE]', async () => {
  const body = { model, prompt: ['Once upon a time', 'In a galaxy'], temperature: 0, ignore_eos: true, max_tokens: 16 };
  const plain = await post200(server, '/v1/completions', body);
  const r = await postSse(server, '/v1/completions', { ...body, stream: true, stream_options: { include_usage: true } });
  assert.equal(r.status, 200);
  assert.match(String(r.headers['content-type']), /text\/event-stream/);
  assert.ok(r.text.trimEnd().endsWith('data: [DONE]'));
  const texts = ['', ''];
  const finishes = [0, 0];
  let usage = null;
  for (const e of r.events) {
    if (e.data === '[DONE]') continue;
    assert.equal(e.json.object, 'text_completion');
    if (e.json.choices.length === 0) { usage = e.json.usage; continue; }
    for (const c of e.json.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finishes[c.index]++;
    }
  }
  assert.deepEqual(texts, plain.choices.map((c) => c.text));
  assert.deepEqual(finishes, [1, 1]);
  assert.deepEqual(usage, plain.usage);
});

await run.check('completions logprobs: parallel arrays of equal length, offsets consistent', async () => {
  const r = await post200(server, '/v1/completions', { model, prompt: 'Once upon a time', logprobs: 2, temperature: 0, ignore_eos: true, max_tokens: 8 });
  const lp = r.choices[0].logprobs;
  const n = r.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) assert.equal(lp[k].length, n, k);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let i = 0; i < n; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const tops = Object.values(lp.top_logprobs[i]);
    assert.ok(tops.length >= 1 && tops.length <= 2);
    assert.ok(Math.abs(Math.max(...tops) - lp.token_logprobs[i]) < 1e-6, 'greedy token is the top one');
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  }
});

await run.check('streamed logprobs hold every token of the non-streamed reply (same seed), in order; text_offset agrees', async () => {
  // Sampling at temperature 1 picks tokens that show no text on their own (half of a
  // multi-byte character, special tokens): a stream once dropped their entries.
  for (const seed of [1, 2, 3, 4]) {
    const chat = chatBody({ temperature: 1, seed, logprobs: true, top_logprobs: 2, max_tokens: 24, skip_special_tokens: true });
    const r = await post200(server, '/v1/chat/completions', chat);
    assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
    const s = await postSse(server, '/v1/chat/completions', { ...chat, stream: true });
    const streamed = s.events.filter((e) => e.json?.choices?.[0]?.logprobs).flatMap((e) => e.json.choices[0].logprobs.content);
    assert.deepEqual(streamed, r.choices[0].logprobs.content, `chat seed ${seed}`);

    const body = { model, prompt: 'Once upon a time', logprobs: 2, temperature: 1, seed, max_tokens: 24 };
    const c = await post200(server, '/v1/completions', body);
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, c.usage.completion_tokens);
    const cs = await postSse(server, '/v1/completions', { ...body, stream: true });
    // text_offset: code points into the returned text, never past it, never going back.
    const chars = [...c.choices[0].text].length;
    lp.text_offset.forEach((o, i) => assert.ok(o <= chars && (i === 0 || o >= lp.text_offset[i - 1]), `offset ${i}`));
    const keys = ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'];
    const joined = Object.fromEntries(keys.map((k) => [k, []]));
    for (const e of cs.events) {
      const l = e.json?.choices?.[0]?.logprobs;
      if (l) for (const k of keys) joined[k].push(...l[k]);
    }
    for (const k of keys) assert.deepEqual(joined[k], lp[k], `completions ${k} seed ${seed}`);
  }
  // With echo, the prompt's tokens come first and the reply's offsets count from the start of
  // the echoed prompt (code points, not bytes).
  const prompt = 'Café au lait, s’il vous plaît:';
  const body = { model, prompt, echo: true, logprobs: 1, temperature: 0, ignore_eos: true, max_tokens: 4 };
  const e = await post200(server, '/v1/completions', body);
  const promptTokens = e.usage.prompt_tokens;
  assert.equal(e.choices[0].logprobs.text_offset.length, promptTokens + 4);
  assert.equal(e.choices[0].logprobs.text_offset[promptTokens], [...prompt].length);
  const es = await postSse(server, '/v1/completions', { ...body, stream: true });
  const streamedOffsets = es.events.flatMap((x) => x.json?.choices?.[0]?.logprobs?.text_offset ?? []);
  assert.deepEqual(streamedOffsets, e.choices[0].logprobs.text_offset);
});

// lm-evaluation-harness's local-completions scores a text with echo, logprobs 1 and max_tokens 0.
await run.check('completions echo + logprobs scores every prompt token (max_tokens 0 and more; streamed the same)', async () => {
  const prompt = 'Café au lait, s’il vous plaît: the lighthouse keeper said';
  const keys = ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'];
  const body = { model, prompt, echo: true, logprobs: 1, max_tokens: 0 };
  const r = await post200(server, '/v1/completions', body);
  const c = r.choices[0];
  assert.equal(c.text, prompt);
  assert.equal(r.usage.completion_tokens, 0);
  const n = r.usage.prompt_tokens;
  const lp = c.logprobs;
  for (const k of keys) assert.equal(lp[k].length, n, k);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  const chars = [...prompt].length;
  for (let i = 1; i < n; i++) {
    assert.ok(lp.token_logprobs[i] <= 0, `token ${i}`);
    const tops = lp.top_logprobs[i];
    assert.ok(Object.keys(tops).length >= 1 && Object.keys(tops).length <= 2, 'top 1 and the token');
    assert.ok(lp.token_logprobs[i] <= Math.max(...Object.values(tops)) + 1e-6);
    assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1] && lp.text_offset[i] <= chars, `offset ${i}`);
  }
  const streamed = await postSse(server, '/v1/completions', { ...body, stream: true });
  const joined = Object.fromEntries(keys.map((k) => [k, []]));
  let text = '';
  for (const e of streamed.events) {
    const ch = e.json?.choices?.[0];
    if (!ch) continue;
    text += ch.text;
    if (ch.logprobs) for (const k of keys) joined[k].push(...ch.logprobs[k]);
  }
  assert.equal(text, prompt);
  for (const k of keys) assert.deepEqual(joined[k], lp[k], `streamed ${k}`);
  // The reply's tokens scored as part of a longer prompt get the logprobs the reply reported.
  const g = await post200(server, '/v1/completions', { model, prompt, logprobs: 1, temperature: 0, ignore_eos: true, max_tokens: 6 });
  const longer = await post200(server, '/v1/completions', { model, prompt: prompt + g.choices[0].text, echo: true, logprobs: 1, max_tokens: 0 });
  const scored = longer.choices[0].logprobs;
  const tail = scored.tokens.length - 6;
  if (scored.tokens.slice(tail).join('') === g.choices[0].text) {  // the text tokenizes back to the same tokens
    for (let j = 0; j < 6; j++) assert.ok(Math.abs(scored.token_logprobs[tail + j] - g.choices[0].logprobs.token_logprobs[j]) < 1e-3, `reply token ${j}`);
  }
  // Several prompts and n: each choice scores its own prompt.
  const many = await post200(server, '/v1/completions', { model, prompt: [prompt, 'In a galaxy'], n: 2, echo: true, logprobs: 1, max_tokens: 2, temperature: 0, ignore_eos: true });
  const small = await post200(server, '/v1/completions', { model, prompt: 'In a galaxy', echo: true, logprobs: 1, max_tokens: 0 });
  assert.equal(many.choices.length, 4);
  for (const [i, want] of [[0, lp], [1, lp], [2, small.choices[0].logprobs], [3, small.choices[0].logprobs]]) {
    const got = many.choices[i].logprobs;
    assert.equal(got.tokens.length, want.tokens.length + 2, `choice ${i}`);
    assert.deepEqual(got.tokens.slice(0, want.tokens.length), want.tokens, `choice ${i}`);
    assert.equal(got.token_logprobs[0], null);
    for (let t = 1; t < want.tokens.length; t++) assert.ok(Math.abs(got.token_logprobs[t] - want.token_logprobs[t]) < 1e-4, `choice ${i} token ${t}`);
  }
});

// Responses: normalises what legitimately differs between two runs (ids, timestamps).
function normalizeResponse(r) {
  const j = JSON.parse(JSON.stringify(r));
  delete j.id;
  delete j.created_at;
  delete j.output_text;
  delete j.output_parsed;  // added by the SDK's stream accumulator
  if (j.usage) delete j.usage.input_tokens_details;  // cached_tokens: prefix reuse between runs
  for (const o of j.output ?? []) {
    delete o.id;
    for (const part of o.content ?? []) delete part.parsed;
  }
  return j;
}

let respPlain;
await run.check('responses non-streaming: object, output items, usage = /tokenize of instructions + input', async () => {
  const body = { model, input: 'Tell me about lighthouses.', instructions: 'You are terse.', max_output_tokens: MAX, temperature: 0 };
  const r = await post200(server, '/v1/responses', body);
  respPlain = r;
  assert.equal(r.object, 'response');
  assert.ok(r.id.startsWith('resp_'));
  assert.ok(['completed', 'incomplete'].includes(r.status));
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.model, model);
  assert.ok(r.output.length >= 1);
  for (const o of r.output) {
    assert.ok(['reasoning', 'message'].includes(o.type));
    assert.ok(o.id && o.status === 'completed');
  }
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  const tk = await post200(server, '/tokenize', { model, messages });
  assert.equal(r.usage.input_tokens, tk.count);
  // Same conversation as message items.
  const items = await post200(server, '/v1/responses', { ...body, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Tell me about lighthouses.' }] }] });
  assert.deepEqual(normalizeResponse(items), normalizeResponse(r));
  // The SDK's output_text helper sees the message text.
  const sdk = await client.responses.create(body);
  assert.equal(sdk.output_text, r.output.filter((o) => o.type === 'message').map((o) => o.content[0].text).join(''));
});

// Streams `body` and checks the Responses event sequence item by item; the final
// event's response must equal `plain` (the non-streaming answer) apart from ids.
async function checkResponsesStream(body, plain) {
  const r = await postSse(server, '/v1/responses', { ...body, stream: true });
  assert.equal(r.status, 200);
  assert.match(String(r.headers['content-type']), /text\/event-stream/);
  const ev = r.events.filter((e) => e.data !== '[DONE]');
  ev.forEach((e, i) => {
    assert.equal(e.json.sequence_number, i, 'sequence_number');
    assert.equal(e.event, e.json.type, 'event line = data type');
  });
  assert.equal(ev[0].json.type, 'response.created');
  assert.equal(ev[1].json.type, 'response.in_progress');
  assert.equal(ev[0].json.response.status, 'in_progress');
  assert.deepEqual(ev[0].json.response.output, []);
  // Per item: added, content_part.added, deltas, text done, part done, item done.
  let i = 2;
  const items = [];
  while (i < ev.length - 1) {
    const added = ev[i++].json;
    assert.equal(added.type, 'response.output_item.added');
    assert.equal(added.output_index, items.length);
    assert.equal(added.item.status, 'in_progress');
    const prefix = added.item.type === 'reasoning' ? 'response.reasoning_text' : 'response.output_text';
    const part = ev[i++].json;
    assert.equal(part.type, 'response.content_part.added');
    assert.equal(part.item_id, added.item.id);
    let text = '';
    while (ev[i].json.type === `${prefix}.delta`) {
      assert.equal(ev[i].json.item_id, added.item.id);
      assert.equal(ev[i].json.output_index, items.length);
      text += ev[i++].json.delta;
    }
    const done = ev[i++].json;
    assert.equal(done.type, `${prefix}.done`);
    assert.equal(done.text, text);
    assert.equal(ev[i++].json.type, 'response.content_part.done');
    const itemDone = ev[i++].json;
    assert.equal(itemDone.type, 'response.output_item.done');
    assert.equal(itemDone.item.status, 'completed');
    assert.equal(itemDone.item.id, added.item.id);
    assert.equal(itemDone.item.content[0].text, text);
    items.push(itemDone.item);
  }
  const last = ev.at(-1).json;
  assert.equal(last.type, plain.status === 'completed' ? 'response.completed' : 'response.incomplete');
  assert.deepEqual(normalizeResponse(last.response), normalizeResponse(plain));
  assert.deepEqual(last.response.output, items);
  // The SDK's accumulator accepts the sequence.
  const final = await client.responses.stream(body).finalResponse();
  assert.deepEqual(normalizeResponse(final), normalizeResponse(plain));
  return items;
}

await run.check('responses streaming, cut by max_output_tokens: event order; response.incomplete = non-streaming', async () => {
  const body = { model, input: 'Tell me about lighthouses.', instructions: 'You are terse.', max_output_tokens: MAX, temperature: 0 };
  await checkResponsesStream(body, respPlain);
});

await run.check('responses streaming, ended by a stop string: response.completed = non-streaming', async () => {
  const body = { model, input: 'Tell me about lighthouses.', max_output_tokens: 32, temperature: 0, reasoning: { effort: 'none' } };
  const full = await post200(server, '/v1/responses', body);
  const text = full.output.filter((o) => o.type === 'message').map((o) => o.content[0].text).join('');
  const stop = pickStop(text);
  assert.ok(stop, `no usable stop string in ${JSON.stringify(text)}`);
  const plain = await post200(server, '/v1/responses', { ...body, stop: [stop] });
  assert.equal(plain.status, 'completed');
  assert.equal(plain.incomplete_details, null);
  assert.ok(plain.usage.output_tokens < 32);
  const items = await checkResponsesStream({ ...body, stop: [stop] }, plain);
  assert.deepEqual(items.map((o) => o.type), ['message']);
  assert.equal(items[0].content[0].text, text.slice(0, text.indexOf(stop)));
});

await run.check('responses include message.output_text.logprobs: the answer\'s tokens as chat reports them, streamed the same', async () => {
  const body = { model, input: 'Tell me about lighthouses.', max_output_tokens: 16, temperature: 0, reasoning: { effort: 'none' },
    include: ['message.output_text.logprobs'], top_logprobs: 2 };
  const plain = await post200(server, '/v1/responses', body);
  const msg = plain.output.find((o) => o.type === 'message');
  const lps = msg.content[0].logprobs;
  assert.ok(Array.isArray(lps) && lps.length > 0, JSON.stringify(msg));
  lps.forEach((l) => assert.equal(l.top_logprobs.length, 2));
  const chat = await post200(server, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Tell me about lighthouses.' }],
    max_tokens: 16, temperature: 0, reasoning_effort: 'none', logprobs: true, top_logprobs: 2 });
  assert.deepEqual(lps, chat.choices[0].logprobs.content);
  const items = await checkResponsesStream(body, plain);
  assert.deepEqual(items.find((o) => o.type === 'message').content[0].logprobs, lps);
  const s = await postSse(server, '/v1/responses', { ...body, stream: true });
  const deltas = s.events.filter((e) => e.json?.type === 'response.output_text.delta').flatMap((e) => e.json.logprobs);
  assert.deepEqual(deltas, lps, 'the deltas carry their tokens');
  // A reply that thinks: only the answer's tokens (the reasoning's are left out).
  const thinking = await post200(server, '/v1/responses', { ...body, reasoning: { effort: 'high' }, max_output_tokens: 40 });
  const answer = thinking.output.find((o) => o.type === 'message');
  if (answer) assert.ok(answer.content[0].logprobs.length < thinking.usage.output_tokens, JSON.stringify(thinking.usage));
  const none = await post200(server, '/v1/responses', { ...body, include: undefined });
  assert.equal(none.output.find((o) => o.type === 'message').content[0].logprobs, undefined, 'only on request');
  const bad = await postJson(server, '/v1/responses', { ...body, include: 'message.output_text.logprobs' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'include');
});

await run.check('responses reasoning round trip (openai client, store false): encrypted_content on request, reasoning items sent back reach the prompt as chat\'s reasoning_content does', async () => {
  const ask = 'Why is the sky blue?';
  const body = { model, input: ask, reasoning: { effort: 'high' }, max_output_tokens: 24, temperature: 0, store: false };
  const first = await client.responses.create({ ...body, include: ['reasoning.encrypted_content'] });
  const rs = first.output.find((o) => o.type === 'reasoning');
  assert.ok(rs, JSON.stringify(first.output));
  const thought = rs.content[0].text;
  assert.ok(thought.length > 0);
  assert.match(rs.encrypted_content, /^tfr1:/);
  const streamed = await postSse(server, '/v1/responses', { ...body, include: ['reasoning.encrypted_content'], stream: true });
  const done = streamed.events.map((e) => e.json).find((j) => j?.type === 'response.output_item.done' && j.item.type === 'reasoning');
  assert.equal(done.item.encrypted_content, rs.encrypted_content, 'streamed the same');
  const plain = await client.responses.create(body);
  assert.equal(plain.output.find((o) => o.type === 'reasoning').encrypted_content, undefined, 'only on request');
  // The next turn: the reasoning item as returned, as encrypted_content alone, or left out.
  const answer = first.output.filter((o) => o.type !== 'reasoning');
  const next = (items) => client.responses.create({ model, input: [{ role: 'user', content: ask }, ...items,
    { role: 'user', content: 'And at sunset?' }], reasoning: { effort: 'none' }, max_output_tokens: 1, store: false });
  const withText = await next([rs, ...answer]);
  const sealedOnly = await next([{ type: 'reasoning', id: rs.id, summary: [], encrypted_content: rs.encrypted_content }, ...answer]);
  // Left out, the server gives back the reasoning it remembers for this conversation's reply
  // (REASONING_MEMORY_MIB), when the reply kept a message to give it to (a reply cut inside its
  // reasoning leaves no assistant turn); under another cache_salt it remembers none.
  const without = await next(answer);
  const withoutElsewhere = await client.responses.create({ model, input: [{ role: 'user', content: ask }, ...answer,
    { role: 'user', content: 'And at sunset?' }], reasoning: { effort: 'none' }, max_output_tokens: 1, store: false,
    cache_salt: 'responses-elsewhere' });
  assert.equal(sealedOnly.usage.input_tokens, withText.usage.input_tokens);
  assert.ok(withText.usage.input_tokens > withoutElsewhere.usage.input_tokens,
    `${withText.usage.input_tokens} vs ${withoutElsewhere.usage.input_tokens}`);
  if (answer.length) assert.equal(without.usage.input_tokens, withText.usage.input_tokens, 'remembered');
  else assert.equal(without.usage.input_tokens, withoutElsewhere.usage.input_tokens);
  const msg = answer.find((o) => o.type === 'message');
  const chat = await post200(server, '/v1/chat/completions', { model, max_tokens: 1, reasoning_effort: 'none',
    messages: [{ role: 'user', content: ask }, { role: 'assistant', content: msg ? msg.content[0].text : '', reasoning_content: thought },
      { role: 'user', content: 'And at sunset?' }] });
  assert.equal(chat.usage.prompt_tokens, withText.usage.input_tokens, 'the prompt chat renders');
});

await run.check('embeddings (openai client): unit vectors of the model width, the same for the same text', async () => {
  const props = (await getJson(server, '/props')).json;
  // The client asks for base64 and decodes it; float comes as JSON numbers.
  const r = await client.embeddings.create({ model, input: ['The lighthouse keeper', 'A harbour at night', 'The lighthouse keeper'] });
  assert.equal(r.data.length, 3);
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  for (const [i, d] of r.data.entries()) {
    assert.equal(d.index, i);
    assert.ok(d.embedding.length > 0 && Math.abs(norm(d.embedding) - 1) < 1e-5, `norm ${norm(d.embedding)}`);
  }
  assert.deepEqual(r.data[2].embedding, r.data[0].embedding, 'the same text, the same vector');
  assert.notDeepEqual(r.data[1].embedding, r.data[0].embedding);
  const f = await post200(server, '/v1/embeddings', { model, input: 'The lighthouse keeper', encoding_format: 'float' });
  assert.deepEqual(f.data[0].embedding.map(Math.fround), r.data[0].embedding);
  const ids = (await post200(server, '/tokenize', { model, prompt: 'The lighthouse keeper' })).tokens;
  assert.equal(f.usage.prompt_tokens, ids.length);
  const byIds = await post200(server, '/v1/embeddings', { model, input: ids, encoding_format: 'float' });
  assert.deepEqual(byIds.data[0].embedding, f.data[0].embedding, 'token ids embed as their text');
  const bad = await postJson(server, '/v1/embeddings', { model, input: 'x', dimensions: f.data[0].embedding.length - 1 });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'dimensions');
  assert.ok(props.default_generation_settings.n_ctx > 0);
});

await run.check('responses: small max_output_tokens -> incomplete / max_output_tokens', async () => {
  const r = await post200(server, '/v1/responses', { model, input: 'hi', max_output_tokens: 2, ignore_eos: true });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 2);
});

await run.check('prompt reuse: a repeated long chat resumes from its kept state (cached_tokens), same reply', async () => {
  const words = Array.from({ length: 160 }, (_, i) => `fact${(i * 37) % 211}`).join(' ');
  const body = {
    model, max_tokens: 12, temperature: 1, ignore_eos: true,
    messages: [{ role: 'system', content: `Remember these: ${words}` }, { role: 'user', content: 'Which came first?' }],
  };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.ok(a.usage.prompt_tokens > 520, `a long prompt (${a.usage.prompt_tokens} tokens)`);
  const cachedA = a.usage.prompt_tokens_details?.cached_tokens ?? 0;
  const cachedB = b.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cachedB > cachedA && cachedB < b.usage.prompt_tokens, `cached ${cachedA} then ${cachedB} of ${b.usage.prompt_tokens}`);
  assert.ok(cachedB >= b.usage.prompt_tokens - 1024, 'resumed at most a chunk before the end');
  assert.deepEqual(chatText(b.choices[0]), chatText(a.choices[0]));
  assert.deepEqual(usageCore(b.usage), usageCore(a.usage));
  // The next turn starts with this prompt: it resumes too, and the stream says the same.
  const next = { ...body, stream: true, stream_options: { include_usage: true },
    messages: [...body.messages, { role: 'assistant', content: a.choices[0].message.content ?? '' }, { role: 'user', content: 'And then?' }] };
  const continuedBefore = (await health(server)).chats_continued;
  const s = await postSse(server, '/v1/chat/completions', next);
  const u = foldChatStream(s).usageChunk.usage;
  assert.ok(u.prompt_tokens_details.cached_tokens >= cachedB, JSON.stringify(u));
  const h = await health(server);
  assert.ok(h.kept_prompts >= 1 && h.kept_prompt_tokens >= cachedB, JSON.stringify(h));
  // Cache diagnostics: why each state was kept, and this turn counted as a chat continued.
  const mix = h.kept_mix;
  assert.equal(mix.prompt_end + mix.system_block + mix.shared_prefix + mix.restored, h.kept_prompts, JSON.stringify(mix));
  assert.ok(mix.prompt_end >= 1, JSON.stringify(mix));
  assert.equal(h.chats_continued, continuedBefore + 1);
  assert.ok(h.prompts_resumed_total >= 2 && h.iteration_s > 0 && h.iteration_s_mean > 0, JSON.stringify(h));
  assert.ok(h.cached_tokens_total >= cachedB + u.prompt_tokens_details.cached_tokens, JSON.stringify(h));
});

await run.check('a chat whose client drops the reasoning: it is given back, and the next turn resumes after the warmed-up reply, bit for bit a fresh run', async () => {
  const words = Array.from({ length: 110 }, (_, i) => `item${(i * 41) % 223}`).join(' ');
  const salt = `turns-${Date.now()}`;  // this check's own states and replies
  const turn1 = [{ role: 'system', content: `Keep in mind: ${words}` }, { role: 'user', content: 'Tell me a story.' }];
  const before = await health(server);
  // The first turn streamed: its reply is remembered and warmed up once the stream ends.
  // (thinking_budget: the reasoning ends, an answer follows.)
  const s = await postSse(server, '/v1/chat/completions', { model, messages: turn1, max_tokens: 200, temperature: 0,
    ignore_eos: true, cache_salt: salt, thinking_budget: 60, stream: true, stream_options: { include_usage: true } });
  const first = foldChatStream(s);
  const reply = first.per[0];
  const promptTokens1 = first.usageChunk.usage.prompt_tokens;
  assert.ok(reply.reasoning.length > 0 && reply.content.trim().length > 0, JSON.stringify(reply));
  const warmed = await waitHealth(server, (h) => h.reply_warmups_total > before.reply_warmups_total && h.requests_running === 0, 10000);
  assert.ok(warmed.ok, JSON.stringify(warmed.last));
  assert.ok(warmed.last.reply_warmup_tokens_total - before.reply_warmup_tokens_total >= 200, 'the reply ran as a prompt');
  assert.equal(warmed.last.requests_total, before.requests_total + 1, 'a warm-up is not a client request');
  const turn2 = (assistant) => [...turn1, { role: 'assistant', content: reply.content || null, ...assistant },
    { role: 'user', content: 'And then?' }];
  const ask = (msgs, extra = {}) => client.chat.completions.create({ model, messages: msgs, max_tokens: 8, temperature: 0, ...extra });
  const dropped = await ask(turn2({}), { cache_salt: salt });
  const kept = await ask(turn2({ reasoning_content: reply.reasoning }), { cache_salt: salt });
  assert.equal(dropped.usage.prompt_tokens, kept.usage.prompt_tokens, 'the dropped reasoning was given back');
  assert.deepEqual(chatText(dropped.choices[0]), chatText(kept.choices[0]));
  const cached = dropped.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > promptTokens1, `resumed inside the reply: ${cached} cached, the first prompt had ${promptTokens1}`);
  assert.ok(cached >= promptTokens1 + 200 - 1024, 'at most a chunk before the reply\'s end');
  // A fresh run (another salt: no kept state, no remembered reasoning) of the same prompt gives the same reply.
  const fresh = await ask(turn2({ reasoning: reply.reasoning }), { cache_salt: `${salt}-fresh` });
  assert.equal(fresh.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  assert.equal(fresh.usage.prompt_tokens, kept.usage.prompt_tokens);
  assert.deepEqual(chatText(fresh.choices[0]), chatText(dropped.choices[0]), 'bit for bit a fresh run');
  // Under another salt nothing is remembered: the dropped reasoning stays dropped.
  const elsewhere = await ask(turn2({}), { cache_salt: `${salt}-fresh` });
  assert.ok(elsewhere.usage.prompt_tokens < kept.usage.prompt_tokens, `${elsewhere.usage.prompt_tokens} vs ${kept.usage.prompt_tokens}`);
  // Nor for a conversation that differs before the reply.
  const edited = [{ ...turn1[0], content: `${turn1[0].content}!` }, ...turn2({}).slice(1)];
  const other = await ask(edited, { cache_salt: salt });
  const otherKept = await ask([{ ...turn1[0], content: `${turn1[0].content}!` }, ...turn2({ reasoning_content: reply.reasoning }).slice(1)], { cache_salt: salt });
  assert.ok(other.usage.prompt_tokens < otherKept.usage.prompt_tokens);
  const h = await health(server);
  assert.ok(h.chats_continued > before.chats_continued, JSON.stringify(h));
  const m = await request(server, 'GET', '/metrics');
  assert.match(m.text, /^tensorfold:reply_warmups_total [1-9]/m);
});

await run.check("prompt_logprobs (vLLM): each prompt token's logprob and rank, its top alternatives, beside echo's", async () => {
  const body = { model, prompt: 'The quick brown fox jumps over the lazy dog', max_tokens: 2, temperature: 0,
    prompt_logprobs: 3, echo: true, logprobs: 1, return_token_ids: true };
  const r = await post200(server, '/v1/completions', body);
  const c = r.choices[0];
  const ids = c.prompt_token_ids;
  const pl = c.prompt_logprobs;
  assert.equal(pl.length, ids.length);
  assert.equal(pl[0], null, 'nothing precedes the first token');
  for (let i = 1; i < pl.length; i++) {
    // (JavaScript lists integer keys in ascending order, whatever order the JSON had.)
    const own = pl[i][String(ids[i])];
    assert.ok(own, `position ${i}: the prompt's own token ${ids[i]} is listed`);
    const keys = [String(ids[i]), ...Object.keys(pl[i]).filter((k) => k !== String(ids[i]))];
    assert.ok(Number.isInteger(own.rank) && own.rank >= 1, JSON.stringify(own));
    assert.equal(typeof own.decoded_token, 'string');
    // The top 3 carry ranks 1..3; the own token adds a key only when it is not among them.
    const tops = keys.slice(1).map((k) => pl[i][k]).concat(own.rank <= 3 ? [own] : []).sort((x, y) => x.rank - y.rank);
    assert.deepEqual(tops.map((t) => t.rank), [1, 2, 3], `position ${i}: ${JSON.stringify(pl[i])}`);
    assert.equal(keys.length, own.rank <= 3 ? 3 : 4);
    for (let j = 1; j < tops.length; j++) assert.ok(tops[j].logprob <= tops[j - 1].logprob);
    assert.ok(own.logprob <= tops[0].logprob);
    if (own.rank > 3) assert.ok(own.logprob <= tops[2].logprob);
    // The echo's logprob of the same token is the same score; its alternatives keep echo's own count.
    assert.equal(c.logprobs.token_logprobs[i], own.logprob, `position ${i}`);
    assert.ok(Object.keys(c.logprobs.top_logprobs[i]).length <= 2, JSON.stringify(c.logprobs.top_logprobs[i]));
  }
  // In the JSON text (Python keeps that order) the own token comes first, as in vLLM.
  const raw = await postJson(server, '/v1/completions', body);
  assert.ok(raw.text.includes(`"prompt_logprobs":[null,{"${ids[1]}":{"logprob":`), raw.text.slice(0, 400));
  // Chat puts them at the top; 0 alternatives: the own token alone.
  const chat = await post200(server, '/v1/chat/completions', { model, max_tokens: 1, prompt_logprobs: 0,
    messages: [{ role: 'user', content: 'Rank these tokens.' }] });
  assert.equal(chat.prompt_logprobs.length, chat.usage.prompt_tokens);
  assert.equal(chat.prompt_logprobs[0], null);
  assert.ok(chat.prompt_logprobs.slice(1).every((p) => p && Object.keys(p).length === 1));
  const streamed = await postJson(server, '/v1/completions', { ...body, stream: true });
  assert.equal(streamed.status, 400);
  assert.equal(streamed.json.error.param, 'prompt_logprobs');
});

await run.check('cache_salt: a prompt resumes only from states kept under the same salt', async () => {
  const words = Array.from({ length: 170 }, (_, i) => `note${(i * 29) % 199}`).join(' ');
  const body = (extra) => ({ model, max_tokens: 4, temperature: 0, ignore_eos: true, ...extra,
    messages: [{ role: 'user', content: `Private: ${words}` }] });
  const cached = (r) => r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  const first = await client.chat.completions.create(body({ cache_salt: 'alice-3b1f9c' }));
  assert.ok(first.usage.prompt_tokens > 520, `a long prompt (${first.usage.prompt_tokens} tokens)`);
  assert.equal(cached(first), 0, 'a new prompt');
  // Other salts, and no salt, see no kept state; the same salt resumes, with the same reply.
  const other = await client.chat.completions.create(body({ cache_salt: 'mallory' }));
  const plain = await client.chat.completions.create(body({}));
  assert.equal(cached(other), 0, JSON.stringify(other.usage));
  assert.equal(cached(plain), 0, JSON.stringify(plain.usage));
  const again = await client.chat.completions.create(body({ cache_salt: 'alice-3b1f9c' }));
  assert.ok(cached(again) > 0, JSON.stringify(again.usage));
  assert.deepEqual(chatText(again.choices[0]), chatText(first.choices[0]));
  assert.deepEqual(chatText(other.choices[0]), chatText(first.choices[0]), 'the salt changes no token');
  // The unsalted prompt kept its own state: it resumes from it, and completions take the field too.
  assert.ok(cached(await client.chat.completions.create(body({}))) > 0);
  const bad = await postJson(server, '/v1/completions', { model, prompt: 'x', cache_salt: '' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'cache_salt');
});

await run.check('prompt reuse: completions report cached_tokens as chat does, streamed and not', async () => {
  const text = Array.from({ length: 220 }, (_, i) => `item${(i * 41) % 223}`).join(' ');
  const body = { model, prompt: `List: ${text}`, max_tokens: 3, temperature: 0 };
  const a = await post200(server, '/v1/completions', body);
  assert.ok(a.usage.prompt_tokens > 520, `a long prompt (${a.usage.prompt_tokens} tokens)`);
  assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(a.usage));
  const b = await client.completions.create(body);
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached < b.usage.prompt_tokens, JSON.stringify(b.usage));
  assert.equal(b.choices[0].text, a.choices[0].text);
  const s = await postSse(server, '/v1/completions', { ...body, stream: true, stream_options: { include_usage: true } });
  const last = s.events.filter((e) => e.json?.usage).at(-1).json.usage;
  assert.equal(last.prompt_tokens_details.cached_tokens, cached, JSON.stringify(last));
});

await run.check('prompt reuse: a second chat with the same long system prompt resumes from its system block', async () => {
  const rules = Array.from({ length: 100 }, (_, i) => `rule${(i * 53) % 197}`).join(' ');
  const chat = (q) => ({ model, max_tokens: 4, temperature: 0, messages: [{ role: 'system', content: `Obey: ${rules}` }, { role: 'user', content: q }] });
  const sys = await post200(server, '/tokenize', { model, messages: [{ role: 'system', content: `Obey: ${rules}` }], add_generation_prompt: false });
  assert.ok(sys.count > 300, `a long system block (${sys.count} tokens)`);
  const a = await client.chat.completions.create(chat('First question?'));
  const b = await client.chat.completions.create(chat('A different second question?'));
  assert.equal(a.usage.prompt_tokens_details?.cached_tokens ?? 0, 0);
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached <= sys.count, `cached ${cached} of a ${sys.count}-token system block`);
});

await run.check('/health reports an idle engine after the suite', async () => {
  const w = await waitHealth(server, (x) => x.requests_running === 0 && x.requests_waiting === 0, 2000);
  assert.ok(w.ok, JSON.stringify(w.last));
  const h = w.last;
  assert.equal(h.ok, true);
  assert.ok(h.pool_free_tokens > 0 && h.pool_free_tokens <= h.pool_tokens);
  assert.ok(h.requests_total >= 20);
  // DEVICE=auto (the default): the CPU here unless this build has CUDA and a GPU it can run on.
  assert.ok(['cpu', 'cuda'].includes(h.device), `device ${h.device}`);
});

await run.finish(server);
