// Structured output end to end against the real server on the demo checkpoint (random
// weights: unconstrained, its text is gibberish). Every constrained answer is checked by
// an independent judge: JSON.parse + ajv (JSON Schema 2020-12) for json_schema, JavaScript's
// RegExp for regex, set membership for choice. Through the official `openai` client
// (response_format, extra vLLM fields) and raw HTTP (streams, the Responses API).
// Usage: node serve_structured_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { serverCommand, startServer, makeRunner, post200, postJson, postSse, assertErrorObject } from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');
const Ajv2020 = require('ajv/dist/2020').default ?? require('ajv/dist/2020');

const cmd = serverCommand();
const run = makeRunner('serve_structured');
const server = await startServer(cmd);
const model = server.model;
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });
const ajv = new Ajv2020({ strict: false });

// Thinking off: the answer starts at once (the constraint applies after the reasoning).
const ask = (extra = {}) => ({
  model, messages: [{ role: 'user', content: 'Describe a lamp as JSON.' }], max_tokens: 160, temperature: 1,
  reasoning_effort: 'none', ...extra,
});

// A finite language (enums, booleans, bounded arrays), so every answer must complete.
const lampSchema = {
  type: 'object',
  properties: {
    zeta: { type: 'boolean' },
    alpha: { enum: ['on', 'off', 'dim'] },
    parts: { type: 'array', items: { $ref: '#/$defs/part' }, minItems: 1, maxItems: 2 },
    note: { anyOf: [{ type: 'null' }, { const: 'fragile' }] },
  },
  required: ['zeta', 'alpha', 'parts'],
  $defs: { part: { type: 'object', properties: { kind: { enum: ['bulb', 'shade'] } }, required: ['kind'] } },
};

await run.check('json_schema (openai client): valid, complete, keys in the schema order', async () => {
  const validate = ajv.compile(lampSchema);
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create(ask({
      seed, response_format: { type: 'json_schema', json_schema: { name: 'lamp', schema: lampSchema } },
    }));
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', JSON.stringify(c.message));
    const value = JSON.parse(c.message.content);
    assert.ok(validate(value), `${c.message.content}: ${JSON.stringify(validate.errors)}`);
    const order = Object.keys(value);
    const expected = Object.keys(lampSchema.properties).filter((k) => k in value);
    assert.deepEqual(order, expected, 'properties come in the order the schema declares them');
  }
});

await run.check('json_schema stream: the deltas join to the non-streaming answer', async () => {
  const body = ask({ seed: 11, response_format: { type: 'json_schema', json_schema: { name: 'lamp', schema: lampSchema } } });
  const plain = await post200(server, '/v1/chat/completions', body);
  const s = await postSse(server, '/v1/chat/completions', { ...body, stream: true });
  assert.equal(s.status, 200);
  let text = '';
  for (const e of s.events) if (e.json?.choices?.[0]?.delta?.content) text += e.json.choices[0].delta.content;
  assert.equal(text, plain.choices[0].message.content);
  assert.ok(ajv.validate(lampSchema, JSON.parse(text)));
});

await run.check('json_schema numeric bounds are enforced (ajv judges every finished answer)', async () => {
  const schema = {
    type: 'object',
    properties: {
      n: { type: 'integer', minimum: -15, maximum: 123 },
      x: { type: 'number', exclusiveMinimum: 0, maximum: 1.5 },
      k: { type: ['integer', 'null'], exclusiveMaximum: -7 },
    },
    required: ['n', 'x', 'k'],
  };
  const validate = ajv.compile(schema);
  let finished = 0;
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const c = (await post200(server, '/v1/chat/completions', ask({
      seed, response_format: { type: 'json_schema', json_schema: { name: 'bounds', schema } },
    }))).choices[0];
    if (c.finish_reason !== 'stop') continue;  // a long fraction may reach max_tokens
    finished += 1;
    assert.ok(validate(JSON.parse(c.message.content)), `${c.message.content}: ${JSON.stringify(validate.errors)}`);
  }
  assert.ok(finished > 0, 'no answer finished');
  const r = await postJson(server, '/v1/chat/completions', ask({
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 5, maximum: 1 } } },
  }));
  assert.equal(r.status, 400, r.text);
  assertErrorObject(assert, r, 'empty range');
  assert.match(r.json.error.message, /minimum.*maximum/);
});

await run.check('guided_choice, guided_regex and a GBNF grammar', async () => {
  const choices = ['red', 'green light', 'grün', 'red!'];
  for (const seed of [1, 2, 3]) {
    const c = await post200(server, '/v1/chat/completions', ask({ seed, guided_choice: choices }));
    assert.ok(choices.includes(c.choices[0].message.content), c.choices[0].message.content);
  }
  const pattern = '[A-Z]{2}-[0-9]{2,3}( [a-z]{1,4})?';
  for (const seed of [1, 2, 3]) {
    const c = await post200(server, '/v1/chat/completions', ask({ seed, structured_outputs: { regex: pattern } }));
    assert.match(c.choices[0].message.content, new RegExp(`^(?:${pattern})$`));
  }
  const grammar = 'root ::= "(" num ("+" num){0,3} ")"\nnum ::= [1-9] [0-9]?';
  const c = await post200(server, '/v1/chat/completions', ask({ seed: 5, guided_grammar: grammar }));
  assert.match(c.choices[0].message.content, /^\([1-9][0-9]?(\+[1-9][0-9]?){0,3}\)$/);
});

await run.check('completions and the Responses API take the same constraints', async () => {
  const c = await post200(server, '/v1/completions',
    { model, prompt: 'Colour:', max_tokens: 20, seed: 3, guided_choice: ['cyan', 'magenta'] });
  assert.ok(['cyan', 'magenta'].includes(c.choices[0].text), c.choices[0].text);
  const r = await post200(server, '/v1/responses', {
    model, input: 'Describe a lamp.', max_output_tokens: 160, reasoning: { effort: 'none' }, temperature: 1,
    text: { format: { type: 'json_schema', name: 'lamp', schema: lampSchema } },
  });
  assert.equal(r.status, 'completed');
  const msg = r.output.find((o) => o.type === 'message');
  assert.ok(ajv.validate(lampSchema, JSON.parse(msg.content[0].text)), msg.content[0].text);
});

await run.check('Responses and Anthropic read only their own schema field: another API\'s in the body is ignored', async () => {
  // A chat-only field (guided_json, response_format) beside text.format / output_config.format once
  // replaced the schema the endpoint's own field declared.
  const other = { type: 'object', properties: { zzz: { type: 'boolean' } }, required: ['zzz'], additionalProperties: false };
  const r = await post200(server, '/v1/responses', {
    model, input: 'Describe a lamp.', max_output_tokens: 160, reasoning: { effort: 'none' }, temperature: 1,
    text: { format: { type: 'json_schema', name: 'lamp', schema: lampSchema } },
    guided_json: other, response_format: { type: 'json_schema', json_schema: { name: 'o', schema: other } },
  });
  const msg = r.output.find((o) => o.type === 'message');
  assert.ok(ajv.validate(lampSchema, JSON.parse(msg.content[0].text)), msg.content[0].text);
  const a = await post200(server, '/v1/messages', {
    model, max_tokens: 160, temperature: 1, messages: [{ role: 'user', content: 'Describe a lamp.' }],
    thinking: { type: 'disabled' }, output_config: { format: { type: 'json_schema', schema: lampSchema } }, guided_json: other,
  });
  const text = a.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.ok(ajv.validate(lampSchema, JSON.parse(text)), text);
});

await run.check('json_object: a finished answer is a JSON object', async () => {
  for (const seed of [1, 2]) {
    const r = await client.chat.completions.create(ask({ seed, max_tokens: 60, response_format: { type: 'json_object' } }));
    const c = r.choices[0];
    if (c.finish_reason === 'stop') {
      const v = JSON.parse(c.message.content);
      assert.ok(v && typeof v === 'object' && !Array.isArray(v), c.message.content);
    } else {
      assert.equal(c.finish_reason, 'length');
      assert.ok(c.message.content.startsWith('{'), c.message.content);
    }
  }
});

await run.check('bad constraints are 400s naming the problem; the server still answers', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', multipleOf: 2 } } } }, /multipleOf/],
    [{ guided_regex: '(a)\\1' }, /regex/],
    [{ guided_grammar: 'root ::= undefined-rule' }, /undefined-rule/],
    [{ guided_grammar: 'root ::= root "a"' }, /left-recursive/],
  ];
  for (const [extra, re] of cases) {
    const r = await postJson(server, '/v1/chat/completions', ask(extra));
    assert.equal(r.status, 400, r.text);
    assertErrorObject(assert, r, JSON.stringify(extra));
    assert.match(r.json.error.message, re);
  }
  const ok = await post200(server, '/v1/chat/completions', ask({ guided_choice: ['fine'] }));
  assert.equal(ok.choices[0].message.content, 'fine');
});

await run.finish(server);
