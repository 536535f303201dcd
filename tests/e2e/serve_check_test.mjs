// `tensorfold check` against `tensorfold serve` on the demo checkpoint (random weights): the
// checks that judge the server (prompt_reuse, pool_pressure, toolcheck's server items) pass;
// the ones that judge the model (needle, end_of_turn, toolcheck's calls) run to the end and
// report; the exit code and the JSON report say the same as the text; a bad check name and
// an unreachable server are exit 2.
//   node serve_check_test.mjs BINARY serve ARGS...
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { serverCommand, startServer, makeRunner, waitHealth } from './lib/server.mjs';

const cmd = serverCommand();
const run = makeRunner('serve_check');
const server = await startServer(cmd, { env: { PARALLEL: '2' } });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tf-check-'));

const check = (args) => new Promise((resolve) => {
  execFile(cmd.bin, ['check', '--url', server.base, ...args], { env: { ...process.env, API_KEY: '' }, timeout: 170000 },
    (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }));
});
const items = (c) => Object.fromEntries(c.items.map((i) => [i.what, i]));

await run.check('server checks pass on the demo: prompt reuse, pool pressure, tool-call plumbing', async () => {
  const json = path.join(dir, 'server.json');
  const r = await check(['prompt_reuse', 'pool_pressure', 'toolcheck', '--reuse-tokens', '500',
    '--pressure-prompt-tokens', '700', '--json', json]);
  const report = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.equal(report.model, server.model);
  assert.deepEqual(report.checks.map((c) => c.name), ['prompt_reuse', 'pool_pressure', 'toolcheck']);
  const [reuse, pressure, tools] = report.checks;
  assert.equal(reuse.passed, true, r.stdout);
  // States are kept at prefill-chunk ends: the repeat resumes up to the last one before its end.
  assert.ok(reuse.data.repeat.cached_tokens > 0 && reuse.data.repeat.cached_tokens < reuse.data.repeat.prompt_tokens,
    JSON.stringify(reuse.data));
  assert.equal(pressure.passed, true, r.stdout);
  assert.equal(pressure.data.requests, 6);  // 2 x PARALLEL + 2
  assert.equal(pressure.data.answered + pressure.data.refused, 6);
  assert.ok(pressure.data.max_busy_streams <= 2);
  const t = items(tools);
  for (const what of ['the streamed reply equals the whole one', 'a tool result in the history is answered',
    'an earlier call with blank arguments is answered',
    'an earlier call with arguments that are not JSON is answered or refused naming the field'])
    assert.equal(t[what]?.ok, true, `${what}: ${JSON.stringify(t[what])}`);
  // The text report says the same, and the exit code follows the verdicts.
  assert.match(r.stdout, /^prompt_reuse +PASS/m);
  assert.match(r.stdout, /^pool_pressure +PASS/m);
  assert.equal(r.code, tools.passed ? 0 : 1, r.stdout + r.stderr);
  assert.match(r.stdout, new RegExp(`^${report.checks.filter((c) => c.passed).length} of 3 checks passed$`, 'm'));
  // The replies came back; the server's books close a moment later.
  const idle = await waitHealth(server, (h) => h.requests_running === 0, 10000);
  assert.ok(idle.ok, JSON.stringify(idle.last));
});

await run.check('model checks run to the end and report what they saw', async () => {
  const json = path.join(dir, 'model.json');
  const r = await check(['needle', 'end_of_turn', '--needle-tokens', '600', '--eot-prompts', '3',
    '--eot-max-tokens', '16', '--json', json]);
  assert.ok(r.code === 0 || r.code === 1, r.stderr);
  const [needle, eot] = JSON.parse(fs.readFileSync(json, 'utf8')).checks;
  assert.equal(needle.error, null, needle.error);
  assert.deepEqual(needle.data.runs.map((x) => x.depth), [0.1, 0.5, 0.9]);
  for (const x of needle.data.runs) assert.ok(x.prompt_tokens > 400 && x.prompt_tokens < 2048, JSON.stringify(x));
  assert.equal(eot.error, null, eot.error);
  assert.equal(eot.data.replies.length, 3);
  for (const x of eot.data.replies) assert.ok(['stop', 'length'].includes(x.finish_reason), JSON.stringify(x));
  assert.equal(r.code, needle.passed && eot.passed ? 0 : 1);
});

await run.check('a bad check name or an unreachable server is exit 2, saying why', async () => {
  const bad = await check(['nope']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /no check named 'nope' \(checks: needle, toolcheck, end_of_turn, prompt_reuse, pool_pressure\)/);
  const away = await new Promise((resolve) => execFile(cmd.bin, ['check', '--url', 'http://127.0.0.1:1'],
    (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stderr })));
  assert.equal(away.code, 2);
  assert.match(away.stderr, /connection refused/);
});

await run.finish(server);
