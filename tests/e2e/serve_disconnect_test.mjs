// Client disconnects (issue #5, third check): a long streaming request whose socket is
// destroyed after a few chunks frees everything it held; /health pool_free_tokens is
// back at its idle value within 1 s. The same for a non-streaming request (the server
// peeks the connection while it waits: src/server/peer_socket.h). The server keeps
// serving afterwards.
// Usage: node serve_disconnect_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import assert from 'node:assert/strict';
import http from 'node:http';
import {
  serverCommand, startServer, makeRunner, post200, health, waitHealth, openStream, sleep,
} from './lib/server.mjs';

const cmd = serverCommand();
const run = makeRunner('serve_disconnect');
const server = await startServer(cmd);
const model = server.model;
const messages = [{ role: 'user', content: 'Tell me a very long story about a lighthouse keeper.' }];
const h0 = await health(server);
const LONG = Math.min(4096, Math.floor(h0.context_length / 2));

// Warm up with the same prompt, so that whatever the engine keeps between requests
// (e.g. a prefix cache) is already in the idle value.
await post200(server, '/v1/chat/completions', { model, messages, max_tokens: 2 });
const idle = await health(server);
console.log(`     idle: pool_tokens ${idle.pool_tokens}, pool_free_tokens ${idle.pool_free_tokens}, context ${idle.context_length}`);

// Decode speed of one request alone (the difference of a 72- and an 8-token run, so
// prefill and HTTP overheads cancel), to size the non-streaming case below.
async function timed(n) {
  const t = Date.now();
  await post200(server, '/v1/chat/completions', { model, messages, max_tokens: n, ignore_eos: true });
  return Date.now() - t;
}
// The fastest of three runs of each length: a busy machine (ctest runs suites side by side) only
// ever adds time, and one slow short run would make the difference, and so the rate, absurd.
async function fastest(n) {
  let best = Infinity;
  for (let i = 0; i < 3; ++i) best = Math.min(best, await timed(n));
  return best;
}
const tokensPerSecond = 128 / Math.max(0.001, ((await fastest(136)) - (await fastest(8))) / 1000);
console.log(`     one request alone: ${tokensPerSecond.toFixed(0)} tok/s`);
await run.check('streaming client disconnect mid-stream: pool_free_tokens back to idle within 1 s', async () => {
  const { res, req } = await openStream(server, '/v1/chat/completions',
    { model, messages, max_tokens: LONG, ignore_eos: true, temperature: 1, stream: true });
  assert.equal(res.statusCode, 200);
  // Read a few content/reasoning chunks.
  let chunks = 0;
  await new Promise((resolve, reject) => {
    res.on('data', (d) => {
      chunks += (String(d).match(/"delta":\{"(content|reasoning)/g) ?? []).length;
      if (chunks >= 5) resolve();
    });
    res.on('end', () => reject(new Error('stream ended before the disconnect')));
    setTimeout(() => reject(new Error(`only ${chunks} chunks in 30 s`)), 30000);
  });
  const busy = await health(server);
  assert.equal(busy.requests_running, 1);
  assert.ok(busy.pool_free_tokens < idle.pool_free_tokens, 'the stream holds cache while it runs');
  req.destroy();
  res.destroy();
  const w = await waitHealth(server, (h) => h.pool_free_tokens === idle.pool_free_tokens && h.requests_running === 0, 1000);
  console.log(`     freed after ${w.ms} ms (pool_free_tokens ${w.last.pool_free_tokens}, running ${w.last.requests_running})`);
  assert.ok(w.ok, `not freed within 1 s: ${JSON.stringify(w.last)}`);
});

await run.check('several streams dropped at once all free their cache', async () => {
  const streams = await Promise.all([0, 1, 2].map((i) => openStream(server, '/v1/completions',
    { model, prompt: `Story number ${i}:`, max_tokens: LONG, ignore_eos: true, stream: true })));
  await Promise.all(streams.map(({ res }) => new Promise((resolve) => res.once('data', resolve))));
  for (const { req, res } of streams) {
    req.destroy();
    res.destroy();
  }
  const w = await waitHealth(server, (h) => h.requests_running === 0 && h.requests_waiting === 0, 3000);
  assert.ok(w.ok, JSON.stringify(w.last));
  // Other prompts may now sit in a prefix cache; what matters is that nothing is held
  // by a running request: a full-window request must still be admitted.
  const r = await post200(server, '/v1/chat/completions', { model, messages, max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

await run.check('non-streaming client disconnect: the request is cancelled within 1 s', async () => {
  const idleAgain = await waitHealth(server, (h) => h.requests_running === 0, 2000);
  assert.ok(idleAgain.ok, JSON.stringify(idleAgain.last));
  const before = idleAgain.last;
  // Long enough that running to the cap would take several seconds.
  const cap = Math.min(h0.context_length - 128, Math.max(256, Math.round(tokensPerSecond * 6)));
  const full = (cap / Math.max(tokensPerSecond, 1)) * 1000;
  const payload = JSON.stringify({ model, messages, max_tokens: cap, ignore_eos: true });
  const req = http.request({ host: server.host, port: server.port, method: 'POST', path: '/v1/chat/completions', agent: false,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } });
  req.on('error', () => {});
  req.end(payload);
  const started = await waitHealth(server, (h) => h.requests_running === 1 && h.pool_free_tokens < before.pool_free_tokens, 10000);
  assert.ok(started.ok, 'the request started');
  await sleep(200);
  req.destroy();
  const w = await waitHealth(server, (h) => h.requests_running === 0 && h.pool_free_tokens === before.pool_free_tokens,
    Math.max(20000, full * 3));
  console.log(`     non-streaming request of ${cap} tokens ended ${w.ms} ms after the disconnect ` +
    `(~${Math.round(full)} ms to generate all at ${tokensPerSecond.toFixed(0)} tok/s)`);
  assert.ok(w.ok, `still running: ${JSON.stringify(w.last)}`);
  assert.ok(w.ms < 1000 && w.ms < full / 2, `not cancelled: ended ${w.ms} ms after the disconnect`);
});

await run.check('non-streaming completions with 3 prompts: a disconnect cancels all of them', async () => {
  const idleAgain = await waitHealth(server, (h) => h.requests_running === 0, 2000);
  const before = idleAgain.last;
  const cap = Math.min(h0.context_length - 128, Math.max(256, Math.round(tokensPerSecond * 6)));
  const payload = JSON.stringify({ model, prompt: ['One,', 'Two,', 'Three,'], max_tokens: cap, ignore_eos: true });
  const req = http.request({ host: server.host, port: server.port, method: 'POST', path: '/v1/completions', agent: false,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } });
  req.on('error', () => {});
  req.end(payload);
  const started = await waitHealth(server, (h) => h.requests_running === 3, 10000);
  assert.ok(started.ok, `the three requests started: ${JSON.stringify(started.last)}`);
  req.destroy();
  const w = await waitHealth(server, (h) => h.requests_running === 0 && h.pool_free_tokens === before.pool_free_tokens, 20000);
  console.log(`     3-prompt completion ended ${w.ms} ms after the disconnect`);
  assert.ok(w.ok && w.ms < 1000, `not cancelled within 1 s: ${w.ms} ms, ${JSON.stringify(w.last)}`);
});

await run.check('server still serves afterwards (chat + completions), /health ok', async () => {
  await sleep(10);
  const r = await post200(server, '/v1/chat/completions', { model, messages, max_tokens: 4, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 4);
  const c = await post200(server, '/v1/completions', { model, prompt: 'hello', max_tokens: 3, ignore_eos: true });
  assert.equal(c.usage.completion_tokens, 3);
  const w = await waitHealth(server, (h) => h.requests_running === 0, 2000);
  assert.ok(w.ok, JSON.stringify(w.last));
  assert.equal(w.last.ok, true);
});

await run.finish(server);
