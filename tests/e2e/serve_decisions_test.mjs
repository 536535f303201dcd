// POST /v1/decisions on `tensorfold serve` (demo checkpoint): each question's prompt is the
// format's wording rendered by the chat template with thinking off (checked against /tokenize of
// the same message), and its probabilities are the labels' share of the next-token distribution
// there: checked against /v1/completions scoring the prompt followed by each label (echo with
// logprobs, another path through the engine). Determinism, temperature, refusals.
//   node serve_decisions_test.mjs BINARY serve ARGS...
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner, post200, postJson, assertErrorObject } from './lib/server.mjs';

const cmd = serverCommand();
const run = makeRunner('serve_decisions');
const server = await startServer(cmd);
const INPUT = 'Customer: I was charged twice for my subscription this month and need a refund.';

const choice = {
  id: 'team', type: 'choice', question: 'Which team should handle this ticket?',
  options: [{ name: 'billing', description: 'payments, invoices and refunds' }, { name: 'technical' }, { name: 'sales' }],
};
const score = { id: 'urgency', type: 'score', question: 'How urgent is it?', levels: ['low', 'medium', 'high'] };
// The format's wording of the two questions above (decision prompt format version 1).
const wording = {
  team: `${INPUT}\n\nQuestion: Which team should handle this ticket?\nA: billing - payments, invoices and refunds\n`
    + 'B: technical\nC: sales\nAnswer with the letter of one option only.',
  urgency: `${INPUT}\n\nQuestion: How urgent is it?\n0: low\n1: medium\n2: high\nAnswer with the number of one level only.`,
};

const decide = (body) => post200(server, '/v1/decisions', { input: INPUT, ...body });

// The logprob the model gives `label` after `prompt`: the last echoed token's, scoring prompt + label.
async function labelLogprob(prompt, label) {
  const r = await post200(server, '/v1/completions', {
    model: server.model, prompt: [...prompt, label], max_tokens: 0, echo: true, logprobs: 0,
  });
  const lps = r.choices[0].logprobs.token_logprobs;
  assert.equal(lps.length, prompt.length + 1);
  return lps[lps.length - 1];
}

let first;
await run.check('answers: the format wording, the labels scored where the chat prompt ends', async () => {
  first = await decide({ questions: [choice, score], return_prompt_token_ids: true, model: server.model });
  assert.equal(first.object, 'decisions');
  assert.equal(first.model, server.model);
  assert.equal(first.prompt_format_version, 1);
  assert.deepEqual(Object.keys(first.answers), ['team', 'urgency']);
  let promptTokens = 0;
  for (const q of [choice, score]) {
    const a = first.answers[q.id];
    assert.equal(a.type, q.type);
    // The prompt: the wording as a user message, thinking off, rendered as /tokenize renders it.
    const tok = await post200(server, '/tokenize', {
      model: server.model, messages: [{ role: 'user', content: wording[q.id] }],
      chat_template_kwargs: { enable_thinking: false },
    });
    assert.deepEqual(a.prompt_token_ids, tok.tokens, `${q.id}: prompt ids`);
    promptTokens += tok.tokens.length;
    const names = q.type === 'choice' ? q.options.map((o) => o.name) : q.levels.map((_, i) => String(i));
    assert.deepEqual(Object.keys(a.probabilities), names);
    assert.equal(a.label_token_ids.length, names.length);
    assert.equal(new Set(a.label_token_ids).size, names.length, 'distinct label tokens');
    // Each label's logprob from a completions request that scores the prompt and the label.
    const lps = [];
    for (const id of a.label_token_ids) lps.push(await labelLogprob(a.prompt_token_ids, id));
    const mass = lps.reduce((s, lp) => s + Math.exp(lp), 0);
    assert.ok(Math.abs(a.label_mass - mass) <= 1e-4 * mass, `${q.id}: label_mass ${a.label_mass} vs ${mass}`);
    let sum = 0;
    names.forEach((n, i) => {
      const want = Math.exp(lps[i]) / mass;
      assert.ok(Math.abs(a.probabilities[n] - want) <= 1e-4, `${q.id}/${n}: ${a.probabilities[n]} vs ${want}`);
      sum += a.probabilities[n];
    });
    assert.ok(Math.abs(sum - 1) < 1e-9, 'probabilities sum to 1');
    if (q.type === 'choice') {
      const best = names.reduce((b, n) => (a.probabilities[n] > a.probabilities[b] ? n : b), names[0]);
      assert.equal(a.choice, best);
    } else {
      const expect = names.reduce((s, n, i) => s + i * a.probabilities[n], 0);
      assert.ok(Math.abs(a.score - expect) < 1e-9, `score ${a.score} vs ${expect}`);
    }
  }
  assert.equal(first.usage.prompt_tokens, promptTokens);
  assert.equal(first.usage.completion_tokens, 0);
  assert.equal(first.usage.total_tokens, promptTokens);
});

await run.check('the same request gives the same answers; temperature flattens, label_mass stays', async () => {
  const again = await decide({ questions: [choice, score], return_prompt_token_ids: true });
  assert.deepEqual(again.answers, first.answers);
  const hot = await decide({ questions: [choice], temperature: 3 });
  const p = Object.values(first.answers.team.probabilities), q = Object.values(hot.answers.team.probabilities);
  assert.ok(Math.max(...q) < Math.max(...p), 'the likeliest option loses share');
  assert.ok(Math.min(...q) > Math.min(...p), 'the least likely gains');
  assert.ok(Math.abs(hot.answers.team.label_mass - first.answers.team.label_mass) < 1e-12);
  assert.equal(hot.answers.team.prompt_token_ids, undefined, 'ids only on request');
});

await run.check('yes_no: answered when yes and no are single tokens after the prompt, else a 400 naming the label', async () => {
  const body = { input: INPUT, questions: [{ id: 'refund', type: 'yes_no', question: 'The customer wants money back.' }] };
  const r = await postJson(server, '/v1/decisions', body);
  const single = async (t) => (await post200(server, '/tokenize', { model: server.model, prompt: t, add_special_tokens: false })).count === 1;
  if ((await single('yes')) && (await single('no'))) {
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(Object.keys(r.json.answers.refund.probabilities), ['yes', 'no']);
  } else {
    assert.equal(r.status, 400, r.text);
    assertErrorObject(assert, r, 'yes_no');
    assert.match(r.json.error.message, /question 'refund': the answer label '(yes|no)' is not one distinct token/);
  }
});

await run.check('labels are checked after the prompt\'s last tokens: text the tokenizer splits inside characters', async () => {
  // The demo tokenizer has no CJK or emoji tokens: these characters become byte tokens, so the window of the
  // prompt's last 64 tokens that the labels are checked after can start inside a character; the check then
  // grows it until its text encodes back to its ids. Shifted by 0..5 short words until the window does.
  let exercised = false;
  for (let shift = 0; shift < 6 && !exercised; shift++) {
    const cjk = { id: 'cjk', type: 'choice', question: '誰が対応しますか？',
      options: [{ name: 'billing', description: '請求書と返金 🚀'.repeat(3) }, { name: 'technical', description: '技術的な問題 🔧'.repeat(3) + ' a'.repeat(shift) }] };
    const r = await post200(server, '/v1/decisions', { input: INPUT, questions: [cjk], return_prompt_token_ids: true });
    const a = r.answers.cjk;
    const lines = cjk.options.map((o, i) => `${'AB'[i]}: ${o.name} - ${o.description}`).join('\n');
    const wording = `${INPUT}\n\nQuestion: ${cjk.question}\n${lines}\nAnswer with the letter of one option only.`;
    const tok = await post200(server, '/tokenize', { model: server.model, messages: [{ role: 'user', content: wording }], chat_template_kwargs: { enable_thinking: false } });
    assert.deepEqual(a.prompt_token_ids, tok.tokens);
    assert.deepEqual(a.label_token_ids, first.answers.team.label_token_ids.slice(0, 2), 'the same label tokens as before');
    const lp = await labelLogprob(a.prompt_token_ids, a.label_token_ids[0]);
    assert.ok(Math.abs(Math.exp(lp) - a.probabilities.billing * a.label_mass) < 1e-4);
    // Did the last 64 tokens' text fail to encode back to them (the wider window was needed)?
    const window = a.prompt_token_ids.slice(-64);
    const text = (await post200(server, '/detokenize', { model: server.model, tokens: window })).prompt;
    const again = await post200(server, '/tokenize', { model: server.model, prompt: text, add_special_tokens: false });
    exercised = JSON.stringify(again.tokens) !== JSON.stringify(window);
  }
  assert.ok(exercised, 'one of the inputs needed the wider window');
});

await run.check('a chat before and after decisions gives the same greedy reply', async () => {
  const chat = {
    model: server.model, messages: [{ role: 'user', content: INPUT }], max_tokens: 16, temperature: 0,
    reasoning_effort: 'none', ignore_eos: true,
  };
  const before = await post200(server, '/v1/chat/completions', chat);
  await decide({ questions: [choice] });
  const after = await post200(server, '/v1/chat/completions', chat);
  assert.equal(after.choices[0].message.content, before.choices[0].message.content);
});

await run.check('refusals are OpenAI error objects naming the field', async () => {
  const cases = [
    [{ input: INPUT, questions: [choice], stream: true }, 400, 'stream'],
    [{ input: INPUT, questions: [] }, 400, 'questions'],
    [{ input: ' ', questions: [choice] }, 400, 'input'],
    [{ input: INPUT, questions: [choice], temperature: 0 }, 400, 'temperature'],
    [{ input: INPUT, questions: [choice], prompt_format_version: 2 }, 400, 'prompt_format_version'],
    [{ input: INPUT, questions: [choice], chat_template_kwargs: { enable_thinking: true } }, 400, 'chat_template_kwargs'],
    [{ input: INPUT, questions: [{ ...choice, options: [{ name: 'only' }] }] }, 400, 'questions'],
    [{ input: INPUT, questions: [choice, { ...score, id: 'team' }] }, 400, 'questions'],
    [{ input: INPUT, questions: [choice], model: 'another-model' }, 404, 'model'],
    [{ input: 'word '.repeat(4000), questions: [choice] }, 400, 'questions'],
  ];
  for (const [body, status, param] of cases) {
    const r = await postJson(server, '/v1/decisions', body);
    assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 120)}: ${r.text.slice(0, 300)}`);
    assertErrorObject(assert, r, param);
    assert.equal(r.json.error.param, param, r.text);
  }
  const long = await postJson(server, '/v1/decisions', { input: 'word '.repeat(4000), questions: [choice] });
  assert.equal(long.json.error.code, 'context_length_exceeded');
  const bad = await postJson(server, '/v1/decisions', '{"input": "x", "questions": [');
  assert.equal(bad.status, 400);
  assertErrorObject(assert, bad, 'malformed JSON');
});

await run.finish(server);
