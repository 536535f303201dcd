// Shared helpers of the end-to-end suites: start the server binary on a free port,
// talk raw HTTP/SSE to it with node:http (no client library in the way, so status
// codes, headers and event framing are what the server really sent), and a tiny
// check() runner that reports every failure instead of stopping at the first.
//
// A suite is run as `node SUITE.mjs BINARY [ARGS...]`. BINARY is either the real
// `tensorfold` (ARGS then start with `serve ...`; it prints "listening on
// http://HOST:PORT") or tests/e2e/fake_server (ARGS = [PORT]; it prints "PORT <n>").
// Both lines are accepted. Extra environment (PARALLEL=4, ...) is passed by the suite.
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';

// ---------------------------------------------------------------- server process

export function serverCommand() {
  const [bin, ...args] = process.argv.slice(2);
  if (!bin) {
    console.error(`usage: node ${path.basename(process.argv[1])} BINARY [ARGS...]`);
    process.exit(2);
  }
  return { bin, args };
}

export function isFake(bin) {
  return path.basename(bin).startsWith('fake_server');
}

// `tensorfold serve` reads these from the environment; the suites start from none of
// them (hermetic under any CI environment) and pass what they mean explicitly.
const SERVE_ENV = ['MODEL_DIR', 'SERVED_NAME', 'HOST', 'PORT', 'PARALLEL', 'CONTEXT', 'KV', 'MEMORY_RESERVE_GIB',
  'KV_POOL_GIB', 'MAX_TOKENS', 'MAX_QUEUED', 'TP', 'API_KEY', 'TF_CACHE_DIR', 'PROMPT_BUDGET_MIB'];

// Starts the server and resolves once it printed its port. `startTimeoutMs` covers
// generating the demo checkpoint on first use.
export async function startServer({ bin, args }, { env = {}, startTimeoutMs = 120000, apiKey } = {}) {
  const base = { ...process.env };
  for (const k of SERVE_ENV) delete base[k];
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...base, ...env } });
  let stderrTail = '';
  let stdoutAll = '';
  proc.stderr.on('data', (d) => {
    stderrTail = (stderrTail + d).slice(-8000);
    if (process.env.E2E_VERBOSE) process.stderr.write(d);
  });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not print its port within ${startTimeoutMs} ms\n${stderrTail}`)),
      startTimeoutMs);
    proc.stdout.on('data', (d) => {
      stdoutAll += d;
      const m = /listening on http:\/\/[^\s:]+:(\d+)/.exec(stdoutAll) ?? /^PORT (\d+)/m.exec(stdoutAll);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? sig}) before listening\n${stdoutAll}\n${stderrTail}`));
    });
  });
  proc.stdout.resume();
  const server = {
    proc,
    port,
    host: '127.0.0.1',
    base: `http://127.0.0.1:${port}`,
    get stderrTail() { return stderrTail; },
    alive: () => proc.exitCode === null && proc.signalCode === null,
    async stop() {
      if (!server.alive()) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
      await exited;
      clearTimeout(t);
    },
  };
  const models = await getJson(server, '/v1/models', apiKey ? { headers: { authorization: `Bearer ${apiKey}` } } : {});
  if (models.status !== 200) throw new Error(`/v1/models answered ${models.status}: ${models.text}`);
  server.model = models.json.data[0].id;
  return server;
}

// ---------------------------------------------------------------- raw HTTP

// One request over node:http. Resolves {status, headers, text, json}; rejects on a
// socket error or when nothing complete arrives within timeoutMs (a hang is a failure).
export function request(server, method, urlPath, { body, headers = {}, timeoutMs = 60000 } = {}) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined
      : Buffer.isBuffer(body) ? body : typeof body === 'string' ? Buffer.from(body) : Buffer.from(JSON.stringify(body));
    const req = http.request({
      host: server.host, port: server.port, method, path: urlPath, agent: false,
      headers: { ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}), ...headers },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        clearTimeout(timer);
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
      res.on('error', reject);
    });
    const timer = setTimeout(() => { req.destroy(new Error(`${method} ${urlPath}: no answer within ${timeoutMs} ms`)); }, timeoutMs);
    req.on('error', (e) => { clearTimeout(timer); reject(e); });
    if (payload) req.write(payload);
    req.end();
  });
}

export const getJson = (server, p, opts) => request(server, 'GET', p, opts);
export const postJson = (server, p, body, opts) => request(server, 'POST', p, { ...opts, body });

// POST expecting 200 + JSON; throws with the server's answer otherwise.
export async function post200(server, p, body, opts) {
  const r = await postJson(server, p, body, opts);
  if (r.status !== 200 || !r.json) throw new Error(`POST ${p} -> ${r.status}: ${r.text.slice(0, 500)}`);
  return r.json;
}

// Parses an SSE body into events [{event, data, json}] (comments dropped).
export function parseSse(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null;
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (!data.length && event === null) continue;
    const d = data.join('\n');
    let json;
    if (d !== '[DONE]') { try { json = JSON.parse(d); } catch { json = undefined; } }
    events.push({ event, data: d, json });
  }
  return events;
}

// A whole streaming request: {status, headers, text, events}.
export async function postSse(server, p, body, opts) {
  const r = await postJson(server, p, body, opts);
  return { ...r, events: parseSse(r.text) };
}

// Opens a streaming POST and hands back the live response, for tests that read part
// of a stream and then drop the connection. Resolves {req, res, socket}.
export function openStream(server, p, body) {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(JSON.stringify(body));
    const req = http.request({
      host: server.host, port: server.port, method: 'POST', path: p, agent: false,
      headers: { 'content-type': 'application/json', 'content-length': payload.length },
    }, (res) => resolve({ req, res, socket: req.socket }));
    req.on('error', reject);
    req.end(payload);
  });
}

// Raw TCP: sends `chunks` (strings or Buffers) with `gapMs` between them, then waits
// for the server to answer or close. Resolves {status, text, closed, ms}; status is
// null when the server closed without answering.
export function rawExchange(server, chunks, { gapMs = 0, timeoutMs = 60000, endAfter = false } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const sock = net.connect(server.port, server.host);
    const got = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const text = Buffer.concat(got).toString('utf8');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : null, text, ms: Date.now() - t0 });
      sock.destroy();
    };
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      sock.destroy();
      reject(new Error(`raw exchange: no answer or close within ${timeoutMs} ms`));
    }, timeoutMs);
    sock.on('data', (d) => {
      got.push(d);
      // A complete answer: headers plus Content-Length bytes of body.
      const text = Buffer.concat(got).toString('latin1');
      const h = text.indexOf('\r\n\r\n');
      if (h >= 0) {
        const m = /content-length:\s*(\d+)/i.exec(text.slice(0, h));
        if (m && Buffer.concat(got).length >= h + 4 + Number(m[1])) finish();
      }
    });
    sock.on('end', finish);
    sock.on('close', finish);
    sock.on('error', () => finish());
    sock.on('connect', async () => {
      for (const c of chunks) {
        if (sock.destroyed) return;
        sock.write(c);
        if (gapMs) await sleep(gapMs);
      }
      if (endAfter) sock.end();
    });
  });
}

// ---------------------------------------------------------------- utilities

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function health(server) {
  const r = await getJson(server, '/health', { timeoutMs: 10000 });
  if (!r.json) throw new Error(`/health answered ${r.status}: ${r.text}`);
  return r.json;
}

// Polls until pred(health) holds; resolves {ok, ms, last}.
export async function waitHealth(server, pred, timeoutMs) {
  const t0 = Date.now();
  let last;
  for (;;) {
    last = await health(server);
    if (pred(last)) return { ok: true, ms: Date.now() - t0, last };
    if (Date.now() - t0 > timeoutMs) return { ok: false, ms: Date.now() - t0, last };
    await sleep(20);
  }
}

// Usage without prompt_tokens_details.cached_tokens, which legitimately differs
// between two runs of one request when the engine reuses cached prefixes.
export function usageCore(u) {
  if (!u) return u;
  const { prompt_tokens_details: _cached, ...rest } = u;
  return rest;
}

// Checks that `body` is an OpenAI error object {error:{message,type,param,code}}.
export function assertErrorObject(assert, r, what = '') {
  assert.ok(r.json && typeof r.json === 'object', `${what}: body is not JSON: ${r.text.slice(0, 200)}`);
  const e = r.json.error;
  assert.ok(e && typeof e === 'object', `${what}: no error object: ${r.text.slice(0, 200)}`);
  assert.equal(typeof e.message, 'string', `${what}: error.message`);
  assert.ok(e.message.length > 0, `${what}: empty error.message`);
  assert.equal(typeof e.type, 'string', `${what}: error.type`);
  assert.ok('param' in e && (e.param === null || typeof e.param === 'string'), `${what}: error.param`);
  assert.ok('code' in e && (e.code === null || typeof e.code === 'string'), `${what}: error.code`);
  assert.match(String(r.headers['content-type']), /application\/json/, `${what}: content-type`);
}

// ---------------------------------------------------------------- test runner

export function makeRunner(name) {
  let failures = 0;
  let passed = 0;
  const t0 = Date.now();
  return {
    async check(title, fn) {
      const t = Date.now();
      try {
        await fn();
        passed++;
        console.log(`ok   ${title} (${Date.now() - t} ms)`);
      } catch (e) {
        failures++;
        console.log(`FAIL ${title}: ${e.stack || e}`);
      }
    },
    fail(msg) {
      failures++;
      console.log(`FAIL ${msg}`);
    },
    async finish(server) {
      if (server) {
        if (!server.alive()) {
          failures++;
          console.log(`FAIL server died during the suite\n${server.stderrTail}`);
        }
        await server.stop();
      }
      console.log(`${name}: ${passed} passed, ${failures} failed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      process.exit(failures === 0 && passed > 0 ? 0 : 1);
    },
  };
}
