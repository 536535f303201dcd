// Continuous batching seen from outside (issue #5, second check): with PARALLEL=4,
// 8 concurrent clients (temperature 1, different prompts, half of them streaming) all
// finish; a /health poller never sees more than 4 active streams or running requests
// and does see requests waiting; and every reply equals the reply the same request
// gets when it runs alone afterwards (row-independent math + position-keyed sampling).
// Usage: node serve_concurrency_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner, post200, postSse, health, waitHealth, sleep, usageCore } from './lib/server.mjs';

const PARALLEL = 4;
const CLIENTS = 8;
const cmd = serverCommand();
const run = makeRunner('serve_concurrency');
const server = await startServer(cmd, { env: { PARALLEL: String(PARALLEL) } });
const model = server.model;

const topics = ['lighthouses', 'volcanoes', 'the moon', 'bread baking', 'chess openings', 'tides', 'bees', 'glaciers'];
const bodies = topics.slice(0, CLIENTS).map((t, i) => ({
  model,
  messages: [{ role: 'user', content: `Write ${i + 2} sentences about ${t}.` }],
  temperature: 1,
  max_tokens: 16 + 2 * i,  // different lengths, so streams finish at different steps
  ignore_eos: true,
}));

// One request, streaming or not, reduced to what must match: text, finish, usage.
async function ask(body, streaming) {
  if (!streaming) {
    const r = await post200(server, '/v1/chat/completions', body);
    const c = r.choices[0];
    return { reasoning: c.message.reasoning_content ?? '', content: c.message.content ?? '', finish: c.finish_reason, usage: usageCore(r.usage) };
  }
  const r = await postSse(server, '/v1/chat/completions', { ...body, stream: true, stream_options: { include_usage: true } });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  const out = { reasoning: '', content: '', finish: null, usage: null };
  for (const e of r.events) {
    if (e.data === '[DONE]') continue;
    assert.ok(!e.json.error, JSON.stringify(e.json));
    if (e.json.usage) out.usage = usageCore(e.json.usage);
    for (const ch of e.json.choices) {
      out.reasoning += ch.delta.reasoning_content ?? '';
      out.content += ch.delta.content ?? '';
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  return out;
}

await run.check('/health reports streams.max = PARALLEL', async () => {
  const h = await health(server);
  assert.equal(h.streams.max, PARALLEL);
});

let together;
const seen = { maxActive: 0, maxRunning: 0, maxWaiting: 0, polls: 0 };
await run.check(`${CLIENTS} concurrent clients all finish; never more than ${PARALLEL} active; others waited`, async () => {
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const h = await health(server);
      seen.polls++;
      seen.maxActive = Math.max(seen.maxActive, h.streams.decoding + h.streams.prefilling);
      seen.maxRunning = Math.max(seen.maxRunning, h.requests_running);
      seen.maxWaiting = Math.max(seen.maxWaiting, h.requests_waiting);
      await sleep(5);
    }
  })();
  try {
    together = await Promise.all(bodies.map((b, i) => ask(b, i % 2 === 0)));
  } finally {
    polling = false;
    await poller;
  }
  console.log(`     /health polled ${seen.polls} times: max active streams ${seen.maxActive}, max running ${seen.maxRunning}, max waiting ${seen.maxWaiting}`);
  together.forEach((r, i) => {
    assert.equal(r.finish, 'length', `client ${i}`);
    assert.equal(r.usage.completion_tokens, bodies[i].max_tokens, `client ${i}`);
  });
  assert.ok(seen.maxActive <= PARALLEL, `active streams ${seen.maxActive}`);
  assert.ok(seen.maxRunning <= PARALLEL, `requests_running ${seen.maxRunning}`);
  assert.ok(seen.maxActive >= 2, 'requests did run concurrently');
  assert.ok(seen.maxWaiting > 0, 'some requests waited');
});

await run.check('every reply equals the same request run alone (temperature 1)', async () => {
  assert.ok(together, 'the concurrent run produced replies');
  const differ = [];
  for (let i = 0; i < bodies.length; i++) {
    const alone = await ask(bodies[i], i % 2 === 1);  // the other transport this time
    try {
      assert.deepEqual(alone, together[i]);
    } catch (e) {
      differ.push(`client ${i}: ${e.message.split('\n').slice(0, 12).join('\n')}`);
    }
  }
  assert.deepEqual(differ, []);
});

await run.check('idle afterwards', async () => {
  const w = await waitHealth(server, (x) => x.requests_running === 0, 2000);
  const h = w.last;
  assert.equal(h.requests_running, 0);
  assert.equal(h.requests_waiting, 0);
  assert.equal(h.streams.decoding + h.streams.prefilling, 0);
});

await run.check('priority (vLLM\'s, and "background"): a waiting request with a lower value is admitted first', async () => {
  const idle = await waitHealth(server, (h) => h.requests_running === 0 && h.requests_waiting === 0, 60000);
  assert.ok(idle.ok, JSON.stringify(idle.last));
  const ask = (content, max_tokens, priority) => post200(server, '/v1/chat/completions', {
    model, messages: [{ role: 'user', content }], max_tokens, ignore_eos: true, temperature: 0, priority });
  // Every slot busy, freed one at a time (different lengths).
  const long = [40, 70, 100, 130].map((n, i) => ask(`Busy stream ${i}.`, n, 0));
  const full = await waitHealth(server, (h) => h.requests_running === PARALLEL, 60000);
  assert.ok(full.ok, JSON.stringify(full.last));
  const finished = [];
  // The reference engine's "background" waits behind every ordinary priority, however early.
  const background = ask('Background.', 2, 'background').then(() => finished.push('background'));
  assert.ok((await waitHealth(server, (h) => h.requests_waiting === 1, 30000)).ok);
  const low = ask('Low priority.', 2, 5).then(() => finished.push('low'));
  assert.ok((await waitHealth(server, (h) => h.requests_waiting === 2, 30000)).ok);
  const high = ask('High priority.', 2, -5).then(() => finished.push('high'));
  assert.ok((await waitHealth(server, (h) => h.requests_waiting === 3, 30000)).ok);
  await Promise.all([background, low, high, ...long]);
  assert.deepEqual(finished, ['high', 'low', 'background'], 'the later, more urgent requests took the first free slots');
});

await run.finish(server);
