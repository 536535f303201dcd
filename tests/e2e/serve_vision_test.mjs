// Images (and videos) end to end against the real server on the demo checkpoint, whose
// small random vision tower makes gibberish of them, as its text model does of text. So
// the checks are about the plumbing, judged independently: the prompt grows by exactly
// the placeholder tokens transformers' processor would add (/tokenize with and without the
// image), the image changes the model's input (the first token's logprobs), identical
// requests give identical replies, the three APIs take their own image forms through their
// official clients, and bad media are 400s with OpenAI error objects while the server
// goes on serving. Correctness of the features themselves is glm5_vision tests' job
// (against transformers' outputs).
// Usage: node serve_vision_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { serverCommand, startServer, makeRunner, post200, postJson, assertErrorObject } from './lib/server.mjs';

const require = createRequire(new URL('../package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');
const AnthropicModule = require('@anthropic-ai/sdk');
const Anthropic = AnthropicModule.default ?? AnthropicModule;

const here = path.dirname(fileURLToPath(import.meta.url));
const images = path.join(here, '..', 'data', 'model', 'tiny-vision', 'images');
const b64 = (name) => fs.readFileSync(path.join(images, name)).toString('base64');
const dataUrl = (name, mime = 'image/png') => `data:${mime};base64,${b64(name)}`;
const PAD = dataUrl('b_pad_130x90.png');     // 130x90 -> canvas 140x112: grid 10x8 -> 20 tokens
const TINY = dataUrl('a_tiny_20x30.png');    // upscaled: grid 8x10 -> 20 tokens
const JPEG = dataUrl('f_photo_100x75.jpg', 'image/jpeg');

const cmd = serverCommand();
const run = makeRunner('serve_vision');
const server = await startServer(cmd);
const model = server.model;
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });

const userWith = (...parts) => [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' }, ...parts] }];
const imagePart = (url) => ({ type: 'image_url', image_url: { url } });
const chat = (messages, extra = {}) => ({ model, messages, max_tokens: 12, temperature: 1, reasoning_effort: 'none', ...extra });
// The prompt's length as the chat route counts it (the template with reasoning off).
const tokenCount = async (messages) => (await client.chat.completions.create(chat(messages, { max_tokens: 1 }))).usage.prompt_tokens;

await run.check('an image adds exactly its placeholder tokens (grid / 4) to the prompt', async () => {
  const none = await tokenCount(userWith());
  const one = await tokenCount(userWith(imagePart(PAD)));
  const two = await tokenCount(userWith(imagePart(PAD), imagePart(TINY)));
  // <|begin_of_image|> 20 x <|image|> <|end_of_image|> per image.
  assert.equal(one - none, 22);
  assert.equal(two - none, 44);
  const r = await client.chat.completions.create(chat(userWith(imagePart(PAD))));
  assert.equal(r.usage.prompt_tokens, one);
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].finish_reason, 'length');
});

await run.check('the image is the model\'s input: another image changes the first token\'s logprobs', async () => {
  const first = async (url) => {
    const r = await client.chat.completions.create(chat(userWith(imagePart(url)), { max_tokens: 1, logprobs: true, top_logprobs: 5 }));
    return r.choices[0].logprobs.content[0].top_logprobs.map((t) => [t.token, t.logprob.toFixed(4)]);
  };
  const a = await first(PAD), again = await first(PAD), b = await first(JPEG);
  assert.deepEqual(again, a, 'the same image gives the same distribution');
  assert.notDeepEqual(b, a, 'a different image gives a different distribution');
});

await run.check('identical image requests give identical replies; the stream equals the reply', async () => {
  const body = chat(userWith(imagePart(TINY)), { max_tokens: 16 });
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, a.choices[0].message.content);
});

await run.check('Responses input_image and Anthropic image blocks reach the same prompt', async () => {
  const count = await tokenCount(userWith(imagePart(PAD)));
  const resp = await client.responses.create({
    model, max_output_tokens: 8, reasoning: { effort: 'none' },
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is in this picture?' }, { type: 'input_image', image_url: PAD }] }],
  });
  assert.equal(resp.usage.input_tokens, count);
  const anthropic = new Anthropic({ baseURL: server.base, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });
  const m = await anthropic.messages.create({
    model: 'claude-haiku-4-5', max_tokens: 8, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64('b_pad_130x90.png') } }] }],
  });
  const counted = await anthropic.messages.countTokens({
    model: 'claude-haiku-4-5', thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: b64('b_pad_130x90.png') } }] }],
  });
  assert.equal(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), counted.input_tokens);
  const textOnly = await anthropic.messages.countTokens({
    model: 'claude-haiku-4-5', thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' }] }],
  });
  assert.equal(counted.input_tokens - textOnly.input_tokens, 22);
  // /tokenize renders the same chat (its template defaults) with the image expanded too.
  const tok = async (messages) => (await post200(server, '/tokenize', { model, messages })).count;
  assert.equal((await tok(userWith(imagePart(PAD)))) - (await tok(userWith())), 22);
});

// A PNG whose header claims 100000 x 100000 pixels (a decompression bomb's first bytes).
function hugePng() {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => { let c = 0xffffffff; for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const c = Buffer.alloc(4); c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(100000, 0); ihdr.writeUInt32BE(100000, 4); ihdr[8] = 8; ihdr[9] = 2;
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([sig, chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(Buffer.alloc(64))), chunk('IEND', Buffer.alloc(0))]);
}

await run.check('bad media are 400s with OpenAI error objects; the server keeps serving', async () => {
  const cases = [
    ['a remote URL', imagePart('https://example.com/cat.png'), /data: URL/],
    ['bad base64', imagePart('data:image/png;base64,!!!!'), /base64/i],
    ['bytes of no image format', imagePart('data:image/png;base64,' + Buffer.from('hello world, not an image').toString('base64')), /image/i],
    ['a truncated PNG', imagePart('data:image/png;base64,' + fs.readFileSync(path.join(images, 'b_pad_130x90.png')).subarray(0, 200).toString('base64')), /image|PNG/i],
    ['a 100000 x 100000 PNG header', imagePart('data:image/png;base64,' + hugePng().toString('base64')), /pixels|large|allowed/i],
    ['an image_url without a URL', { type: 'image_url', image_url: {} }, /url/],
    ['an audio part', { type: 'input_audio', input_audio: { data: 'AA==', format: 'wav' } }, /not supported/],
  ];
  for (const [what, part, re] of cases) {
    const r = await postJson(server, '/v1/chat/completions', chat(userWith(part)));
    assert.equal(r.status, 400, `${what}: ${r.text.slice(0, 300)}`);
    assertErrorObject(assert, r, what);
    assert.match(r.json.error.message, re, what);
  }
  const many = Array.from({ length: 51 }, () => imagePart(TINY));
  const r = await postJson(server, '/v1/chat/completions', chat(userWith(...many)));
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.match(r.json.error.message, /at most 50 images and 4 videos, this one has 51 and 0/);
  const ok = await client.chat.completions.create(chat([{ role: 'user', content: 'still there?' }], { max_tokens: 4 }));
  assert.equal(ok.usage.completion_tokens, 4);
});

await run.check('a bad image is named where the client put it, in the message and in param', async () => {
  const junk = 'data:image/png;base64,' + Buffer.from('hello world, not an image').toString('base64');
  // Chat: a system message first; the image is messages[1].content[1].
  const c = await postJson(server, '/v1/chat/completions', chat([{ role: 'system', content: 'Be brief.' }, ...userWith(imagePart(junk))]));
  assert.equal(c.status, 400, c.text.slice(0, 300));
  assert.ok(c.json.error.message.startsWith('messages[1].content[1]: '), c.json.error.message);
  assert.equal(c.json.error.param, 'messages[1].content[1]');
  // Responses: instructions become a system message, yet the client's path is input[0].content[1].
  const r = await postJson(server, '/v1/responses', {
    model, instructions: 'Be brief.', max_output_tokens: 8, reasoning: { effort: 'none' },
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is this?' }, { type: 'input_image', image_url: junk }] }],
  });
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.ok(r.json.error.message.startsWith('input[0].content[1]: '), r.json.error.message);
  assert.equal(r.json.error.param, 'input[0].content[1]');
  // Anthropic: the system prompt is no message of the client's.
  const a = await postJson(server, '/v1/messages', {
    model, max_tokens: 8, system: 'Be brief.', messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: junk.split(',')[1] } },
      { type: 'text', text: 'What is this?' }] }],
  });
  assert.equal(a.status, 400, a.text.slice(0, 300));
  assert.ok(a.json.error.message.startsWith('messages[0].content[0]: '), a.json.error.message);
});

await run.check('a video becomes timed frame groups: 12 frames at 6 fps -> 2 groups of 12 features', async () => {
  const clip = fs.readFileSync(path.join(here, '..', 'data', 'media', 'clip_64x48_12f_6fps.mp4')).toString('base64');
  const video = { type: 'video_url', video_url: { url: `data:video/mp4;base64,${clip}` } };
  const none = await tokenCount(userWith());
  const withVideo = await tokenCount(userWith(video));
  const count = async (prompt) => (await post200(server, '/tokenize', { model, prompt, add_special_tokens: false })).count;
  const seconds = (await count('0.0 seconds')) + (await count('1.0 seconds'));
  // <|begin_of_video|> [<|begin_of_image|> 12 x <|image|> <|end_of_image|> "t seconds"] x 2 <|end_of_video|>
  // in place of the template's <|begin_of_video|><|video|><|end_of_video|>.
  assert.equal(withVideo - none, 2 + 2 * 14 + seconds, `${withVideo} - ${none}, seconds text ${seconds}`);
  const r = await client.chat.completions.create(chat(userWith(video), { max_tokens: 6 }));
  assert.equal(r.usage.prompt_tokens, withVideo);
  const bad = await postJson(server, '/v1/chat/completions', chat(userWith({ type: 'video_url', video_url: { url: 'data:video/mp4;base64,' + clip.slice(0, 400) } })));
  assert.equal(bad.status, 400, bad.text.slice(0, 300));
  assertErrorObject(assert, bad, 'truncated video');
});

await run.check('image and text requests run side by side', async () => {
  const reqs = [];
  for (let i = 0; i < 3; i++) {
    reqs.push(client.chat.completions.create(chat(userWith(imagePart(i % 2 ? PAD : JPEG)), { max_tokens: 8 })));
    reqs.push(client.chat.completions.create(chat([{ role: 'user', content: `text only ${i}` }], { max_tokens: 8 })));
  }
  const out = await Promise.all(reqs);
  for (const r of out) assert.equal(r.usage.completion_tokens, 8);
});

await run.finish(server);
