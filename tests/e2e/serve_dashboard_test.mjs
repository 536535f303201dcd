// GET /dashboard on `tensorfold serve` (demo checkpoint) with API_KEY set: the page comes without a
// key, is self-contained (no external script, style or font), and its script runs: summarize() turns
// two real /health snapshots around a request into the figures shown (the tokens that request made
// per second), and the drawing code runs once over a stub DOM, sending the key it was given.
//   node serve_dashboard_test.mjs BINARY serve ARGS...
import assert from 'node:assert/strict';
import vm from 'node:vm';
import { execFile } from 'node:child_process';
import { serverCommand, startServer, makeRunner, getJson, post200, request } from './lib/server.mjs';

const KEY = 'sk-dashboard-e2e';
const cmd = serverCommand();
const run = makeRunner('serve_dashboard');
const server = await startServer(cmd, { env: { API_KEY: KEY }, apiKey: KEY });
const auth = { headers: { authorization: `Bearer ${KEY}` } };
let page = '';
let script = '';

await run.check('the page is served without a key, as self-contained HTML', async () => {
  const r = await request(server, 'GET', '/dashboard');
  assert.equal(r.status, 200, r.text);
  assert.match(String(r.headers['content-type']), /text\/html/);
  assert.equal(r.headers['cache-control'], 'no-store');
  page = r.text;
  assert.doesNotMatch(page, /<script[^>]+src=|<link[^>]+href=|https?:\/\//, 'no external resources');
  const m = /<script>([\s\S]*)<\/script>/.exec(page);
  assert.ok(m, 'one inline script');
  script = m[1];
  // The data stays behind the key.
  assert.equal((await getJson(server, '/health')).status, 401);
});

await run.check('summarize(): rates from two /health snapshots around a request', async () => {
  const ctx = vm.createContext({});
  vm.runInContext(script, ctx);  // no document: only the functions are defined
  const before = (await getJson(server, '/health', auth)).json;
  const reply = await post200(server, '/v1/chat/completions', {
    model: server.model, messages: [{ role: 'user', content: 'Count to ten.' }], max_tokens: 24,
    temperature: 0, ignore_eos: true, reasoning_effort: 'none',
  }, auth);
  const after = (await getJson(server, '/health', auth)).json;
  const s = ctx.summarize(before, after, 2);
  const made = reply.usage.completion_tokens;
  assert.equal(made, 24);
  assert.equal(s.decode_tps, (after.completion_tokens_total - before.completion_tokens_total) / 2);
  assert.ok(s.decode_tps >= made / 2, `decode_tps ${s.decode_tps} counts the reply's ${made} tokens`);
  assert.ok(s.prefill_tps > 0, 'the prompt was computed');
  assert.equal(s.requests_per_min, 30);  // one request in 2 s
  assert.equal(s.model, server.model);
  assert.equal(s.status, 'ok');
  assert.ok(s.pool_used >= 0 && s.pool_used <= 1, `pool_used ${s.pool_used}`);
  assert.equal(s.streams_max, after.streams.max);
  assert.ok(s.iteration_ms > 0, `iteration_ms ${s.iteration_ms}`);
  assert.equal(s.chats_continued, after.chats_continued);
  assert.equal(ctx.summarize(null, after, 1).decode_tps, null, 'no rate from one snapshot');
});

await run.check('the drawing code runs over a stub DOM and sends the key to /health', async () => {
  const elements = {};
  const element = (id) => (elements[id] ??= {
    id, style: {}, textContent: '', className: '', innerHTML: '', value: '', width: 1200, height: 120,
    addEventListener() {},
    getContext: () => ({ clearRect() {}, beginPath() {}, moveTo() {}, lineTo() {}, stroke() {}, fillText() {} }),
  });
  const timers = [];
  const sent = [];
  const storage = { 'tensorfold-key': KEY };
  const ctx = vm.createContext({
    document: { getElementById: element },
    sessionStorage: { getItem: (k) => storage[k] ?? null, setItem: (k, v) => { storage[k] = v; } },
    performance: { now: () => Date.now() },
    setTimeout: (fn) => timers.push(fn),
    fetch: async (url, opts) => {
      sent.push({ url, opts });
      const r = await getJson(server, '/' + url, { headers: { authorization: opts.headers.Authorization ?? '' } });
      return { status: r.status, json: async () => r.json };
    },
  });
  vm.runInContext(script, ctx);
  for (let i = 0; i < 2; i++) {  // two polls: the second has rates
    const deadline = Date.now() + 10000;
    while (timers.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(timers.length, 1, 'the next poll is scheduled');
    if (i === 0) timers.shift()();
  }
  assert.equal(sent[0].url, 'health');
  assert.equal(sent[0].opts.headers.Authorization, `Bearer ${KEY}`);
  assert.match(elements.cards.innerHTML, /tok\/s/);
  assert.match(elements.cards.innerHTML, /cache pool/);
  assert.equal(elements.model.textContent, server.model);
  assert.equal(elements.status.textContent, 'ok');
  assert.notEqual(elements.key?.style.display, 'block', 'the key was accepted');
});

await run.check('tensorfold tui --once: the same figures in a terminal, behind the same key', async () => {
  const tui = (args, env = {}) => new Promise((resolve) => {
    execFile(cmd.bin, ['tui', '--url', server.base, '--interval', '0.3', '--once', ...args],
      { env: { ...process.env, API_KEY: '', ...env }, timeout: 30000 },
      (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }));
  });
  const r = await tui(['--api-key', KEY]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, new RegExp(`^tensorfold  ${server.model}  \\[ok\\]$`, 'm'));
  assert.match(r.stdout, /^decode +[\d.]+ tok\/s +prefill +[\d.]+ tok\/s$/m, 'rates from two snapshots');
  const h = (await getJson(server, '/health', auth)).json;
  assert.match(r.stdout, new RegExp(`^streams +\\d+ / ${h.streams.max} `, 'm'));
  assert.match(r.stdout, new RegExp(`of ${h.pool_tokens} tokens, window ${h.context_length}$`, 'm'));
  assert.match(r.stdout, /^kept +\d+ prompts: \d+ prompt ends, \d+ system blocks, \d+ shared prefixes, \d+ restored$/m);
  // The key from API_KEY (the first of a list) does too; without one: exit 1, saying why.
  assert.equal((await tui([], { API_KEY: `${KEY},another` })).code, 0);
  const refused = await tui([]);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /needs the API key/);
});

await run.finish(server);
