// GET / on `tensorfold serve` (demo checkpoint) with API_KEY set: the chat page comes without a key,
// self-contained; its SSE parser and reply folding turn a real stream (cut at arbitrary bytes) into the
// non-streamed reply; and its page code, over a stub DOM, sends a conversation with the key and the
// settings, shows the streamed answer, and sends the first reply (with its reasoning) back in the second
// request.
//   node serve_chat_page_test.mjs BINARY serve ARGS...
import assert from 'node:assert/strict';
import vm from 'node:vm';
import { serverCommand, startServer, makeRunner, post200, request } from './lib/server.mjs';

const KEY = 'sk-chat-page-e2e';
const cmd = serverCommand();
const run = makeRunner('serve_chat_page');
const server = await startServer(cmd, { env: { API_KEY: KEY }, apiKey: KEY });
const auth = { authorization: `Bearer ${KEY}` };
let script = '';

await run.check('the page is served at / without a key, as self-contained HTML', async () => {
  const r = await request(server, 'GET', '/');
  assert.equal(r.status, 200, r.text);
  assert.match(String(r.headers['content-type']), /text\/html/);
  assert.equal(r.headers['cache-control'], 'no-store');
  assert.doesNotMatch(r.text, /<script[^>]+src=|<link[^>]+href=|https?:\/\//, 'no external resources');
  assert.doesNotMatch(r.text, /innerHTML/, 'text is set as text, never parsed as HTML');
  const m = /<script>([\s\S]*)<\/script>/.exec(r.text);
  assert.ok(m, 'one inline script');
  script = m[1];
  assert.equal((await request(server, 'POST', '/v1/chat/completions', { body: {} })).status, 401, 'the API stays behind the key');
});

const settings = { effort: 'high', temperature: 0, maxTokens: 20 };
const history = [{ role: 'user', content: 'Name three colours.' }];

await run.check('parseSse() + applyChunk(): a real stream cut anywhere folds into the non-streamed reply', async () => {
  const ctx = vm.createContext({});
  vm.runInContext(script, ctx);  // no document: only the functions are defined
  const body = ctx.requestBody(server.model, history, settings);
  assert.equal(body.stream, true);
  assert.equal(body.reasoning_effort, 'high');
  assert.equal(body.max_tokens, 20);
  const whole = await post200(server, '/v1/chat/completions', { ...JSON.parse(JSON.stringify(body)), stream: false, stream_options: undefined }, { headers: auth });
  const streamed = await request(server, 'POST', '/v1/chat/completions', { body, headers: auth });
  assert.equal(streamed.status, 200);
  const text = `: keep-alive\n\n${streamed.text}`;
  for (const cut of [1, 7, 64, text.length]) {
    const reply = ctx.emptyReply();
    let buffer = '';
    let done = false;
    for (let i = 0; i < text.length; i += cut) {
      const p = ctx.parseSse(buffer + text.slice(i, i + cut));
      buffer = p.rest;
      done = done || p.done;
      for (const ev of p.events) ctx.applyChunk(reply, ev);
    }
    assert.ok(done, `[DONE] seen (pieces of ${cut})`);
    assert.equal(reply.error, null);
    assert.equal(reply.content, whole.choices[0].message.content ?? '', `content, pieces of ${cut}`);
    assert.equal(reply.reasoning, whole.choices[0].message.reasoning_content ?? '', `reasoning, pieces of ${cut}`);
    assert.equal(reply.finish, whole.choices[0].finish_reason);
    assert.equal(reply.usage.completion_tokens, whole.usage.completion_tokens);
  }
  const err = ctx.applyChunk(ctx.emptyReply(), { error: { message: 'boom' } });
  assert.equal(err.error, 'boom');
});

await run.check('the page code over a stub DOM: a two-turn chat sent with the key and the settings', async () => {
  const elements = {};
  const made = [];
  const node = (id) => ({
    id, style: {}, textContent: '', className: '', value: '', disabled: false, children: [], scrollTop: 0, scrollHeight: 0,
    append(...c) { this.children.push(...c); }, appendChild(c) { this.children.push(c); return c; },
    focus() {}, requestSubmit() { this.onsubmit({ preventDefault() {} }); },
  });
  const element = (id) => (elements[id] ??= node(id));
  for (const [id, v] of Object.entries({ effort: 'low', temperature: '0', maxTokens: '12' })) element(id).value = v;
  const storage = { 'tensorfold-key': KEY };
  const sent = [];
  const ctx = vm.createContext({
    document: { getElementById: element, createElement: (tag) => { const n = node(tag); made.push(n); return n; } },
    sessionStorage: { getItem: (k) => storage[k] ?? null, setItem: (k, v) => { storage[k] = v; } },
    performance: { now: () => Date.now() },
    TextDecoder, AbortController,
    fetch: async (url, opts = {}) => {
      sent.push({ url, opts });
      const r = await request(server, opts.method ?? 'GET', url, { body: opts.body, headers: { authorization: opts.headers?.Authorization ?? '' } });
      const bytes = new TextEncoder().encode(r.text);
      let at = 0;
      return {
        status: r.status, ok: r.status === 200, json: async () => r.json,
        body: { getReader: () => ({ read: async () => (at >= bytes.length ? { done: true } : { done: false, value: bytes.slice(at, at += 13) }) }) },
      };
    },
  });
  vm.runInContext(script, ctx);
  const until = async (cond, what) => {
    const deadline = Date.now() + 30000;
    while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(cond(), what);
  };
  await until(() => element('model').textContent === server.model, 'the model name is shown');
  const turn = async (text) => {
    const before = sent.length;
    element('text').value = text;
    elements.send.onsubmit({ preventDefault() {} });
    await until(() => sent.length > before && !elements.go.disabled, `the reply to "${text}" ended`);
    return JSON.parse(sent.at(-1).opts.body);
  };
  const first = await turn('Say something.');
  assert.equal(sent.at(-1).opts.headers.Authorization, `Bearer ${KEY}`);
  assert.equal(first.reasoning_effort, 'low');
  assert.equal(first.temperature, 0);
  assert.equal(first.max_tokens, 12);
  assert.deepEqual(first.messages, [{ role: 'user', content: 'Say something.' }]);
  const expected = await post200(server, '/v1/chat/completions', { ...first, stream: false, stream_options: undefined }, { headers: auth });
  const answerShown = made.filter((n) => n.id === 'div').map((n) => n.textContent);
  assert.ok(answerShown.includes(expected.choices[0].message.content ?? ''), `the answer is shown: ${JSON.stringify(answerShown)}`);
  assert.ok(answerShown.some((t) => /^(length · 12|stop · \d+) tokens · [\d.]+ tok\/s$/.test(t)), `the finish and speed: ${JSON.stringify(answerShown)}`);
  const second = await turn('And again?');
  assert.equal(second.messages.length, 3);
  assert.equal(second.messages[1].role, 'assistant');
  assert.equal(second.messages[1].content, expected.choices[0].message.content ?? '');
  assert.equal(second.messages[1].reasoning_content, expected.choices[0].message.reasoning_content ?? undefined);
  assert.deepEqual(second.messages[2], { role: 'user', content: 'And again?' });
  assert.notEqual(elements.key?.style.display, 'block', 'the key was accepted');
});

await run.finish(server);
