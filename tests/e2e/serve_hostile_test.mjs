// Hostile and malformed requests against the real server (issue #5, "Errors"): every
// case gets a 4xx with an OpenAI error object {error:{message,type,param,code}},
// never a 5xx or a hang, and the server keeps serving: slow-loris connections stay
// open while the corpus runs, a normal request succeeds afterwards, /health is ok.
//
// The corpus is one data table (CASES). A body is a string (sent verbatim), a Buffer,
// or an object (JSON-encoded); `status` is the exact expected status, `param` and
// `code` the expected error fields when given. A few transport-level cases (oversized
// body, partial headers, chunked garbage) follow the table.
// Usage: node serve_hostile_test.mjs BINARY [ARGS...]   (see lib/server.mjs)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import zlib from 'node:zlib';
import {
  serverCommand, startServer, makeRunner, request, postJson, rawExchange, assertErrorObject, health, sleep, post200, waitHealth,
} from './lib/server.mjs';

const cmd = serverCommand();
const run = makeRunner('serve_hostile');
const server = await startServer(cmd);
const model = server.model;
const CTX = (await health(server)).context_length;

const C = '/v1/chat/completions';
const P = '/v1/completions';
const R = '/v1/responses';
const user = [{ role: 'user', content: 'hi' }];
const chat = (extra) => ({ model, messages: user, max_tokens: 4, ...extra });
const comp = (extra) => ({ model, prompt: 'hi', max_tokens: 4, ...extra });
const resp = (extra) => ({ model, input: 'hi', max_output_tokens: 4, ...extra });
const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const deepObject = (n) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
// $defs a0 -> a1 -> ... -> aN by $ref: a chain that the JSON's own nesting does not show.
const refChain = (n) => ({
  $defs: Object.fromEntries(Array.from({ length: n + 1 }, (_, i) => [`a${i}`, i < n ? { $ref: `#/$defs/a${i + 1}` } : { type: 'string' }])),
  $ref: '#/$defs/a0',
});
// {k0: schema, k1: schema, ...}: n keys.
const keyed = (n, value) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, value]));
const schemaFormat = (schema) => ({ type: 'json_schema', json_schema: { name: 'x', schema } });
const alternatives = (n) => Array.from({ length: n }, (_, i) => `x${i}`);
const toolCallTurn = (args) => [user[0], { role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] },
  { role: 'tool', tool_call_id: 'c1', content: 'x' }];

// [name, path, body, status, param?, code?]
const CASES = [
  // -- not JSON / not an object
  ['empty body', C, '', 400, 'body'],
  ['truncated JSON', C, '{"messages":[{"role":"user"', 400, 'body'],
  ['plain text', C, 'hello there', 400, 'body'],
  ['JSON array body', C, '[]', 400, 'body'],
  ['JSON null body', C, 'null', 400, 'body'],
  ['JSON number body', C, '42', 400, 'body'],
  ['JSON string body', C, '"chat"', 400, 'body'],
  ['trailing garbage', C, JSON.stringify(chat({})) + 'xyz', 400, 'body'],
  ['NaN literal', C, '{"messages":[{"role":"user","content":"hi"}],"temperature":NaN}', 400, 'body'],
  ['single quotes', C, "{'messages':[]}", 400, 'body'],
  ['invalid UTF-8 in a string', C, Buffer.concat([Buffer.from('{"model":"' + model + '","messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), 400],
  ['lone surrogate escape', C, '{"messages":[{"role":"user","content":"\\ud800"}]}', 400],
  ['deep array nesting', C, deep(5000), 400, 'body'],
  ['deep object nesting in a field', C, `{"messages":[{"role":"user","content":"hi"}],"metadata":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`, 400, 'body'],
  ['NUL bytes', C, '\u0000\u0000\u0000', 400, 'body'],
  // -- JSON sent inside strings is parsed with the same bounds (it used to crash the server)
  ['guided_json string nesting 10^5 levels', C, chat({ guided_json: deep(100000) }), 400, 'guided_json'],
  ['tool call arguments nesting 10^5 levels', C, { model, max_tokens: 4, messages: toolCallTurn(deepObject(100000)) }, 400],
  ['tool call arguments not JSON (the template walks them)', C, { model, max_tokens: 4, messages: toolCallTurn('not json') }, 400, 'messages[1].tool_calls[0].function.arguments'],
  ['json_schema $ref chain of 20000 $defs', C, chat({ guided_json: refChain(20000) }), 400],
  // -- messages
  ['no messages', C, { model }, 400, 'messages'],
  ['messages a string', C, { model, messages: 'hi' }, 400, 'messages'],
  ['messages empty', C, { model, messages: [] }, 400, 'messages'],
  ['message a number', C, { model, messages: [1] }, 400, 'messages[0]'],
  ['message without role', C, { model, messages: [{ content: 'x' }] }, 400, 'messages[0].role'],
  ['unknown role', C, { model, messages: [{ role: 'wizard', content: 'x' }] }, 400, 'messages[0].role'],
  ['role a number', C, { model, messages: [{ role: 7, content: 'x' }] }, 400, 'messages[0].role'],
  ['content a number', C, { model, messages: [{ role: 'user', content: 5 }] }, 400, 'messages[0].content'],
  ['content an object', C, { model, messages: [{ role: 'user', content: { text: 'x' } }] }, 400, 'messages[0].content'],
  ['user without content', C, { model, messages: [{ role: 'user' }] }, 400, 'messages[0].content'],
  ['content part of unknown type', C, { model, messages: [{ role: 'user', content: [{ type: 'bogus' }] }] }, 400, 'messages[0].content[0].type'],
  ['content part a string', C, { model, messages: [{ role: 'user', content: ['hi'] }] }, 400],
  ['text part with a number', C, { model, messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }, 400],
  ['image part with undecodable bytes', C, { model, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AA' } }] }] }, 400],
  ['tool message without tool_call_id content type', C, { model, messages: [{ role: 'tool', content: 7 }] }, 400],
  // -- max tokens
  ['max_tokens negative', C, chat({ max_tokens: -1 }), 400, 'max_tokens'],
  ['max_tokens zero', C, chat({ max_tokens: 0 }), 400, 'max_tokens'],
  ['max_tokens a string', C, chat({ max_tokens: 'ten' }), 400, 'max_tokens'],
  ['max_tokens fractional', C, chat({ max_tokens: 1.5 }), 400, 'max_tokens'],
  ['max_tokens 1e300', C, chat({ max_tokens: 1e300 }), 400, 'max_tokens'],
  ['max_tokens 2^64', C, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":18446744073709551616}`, 400, 'max_tokens'],
  ['max_tokens 26 digits', C, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":99999999999999999999999999}`, 400, 'max_tokens'],
  ['max_completion_tokens negative', C, chat({ max_completion_tokens: -5 }), 400, 'max_completion_tokens'],
  ['max_tokens = window', C, chat({ max_tokens: CTX }), 400, 'messages', 'context_length_exceeded'],
  ['max_tokens 2^40', C, chat({ max_tokens: 2 ** 40 }), 400, 'messages', 'context_length_exceeded'],
  ['prompt longer than the window', C, { model, messages: [{ role: 'user', content: 'lighthouse '.repeat(CTX + 10) }], max_tokens: 1 }, 400, 'messages', 'context_length_exceeded'],
  // -- sampling ranges and types
  ['temperature 3', C, chat({ temperature: 3 }), 400, 'temperature'],
  ['temperature negative', C, chat({ temperature: -0.1 }), 400, 'temperature'],
  ['temperature a string', C, chat({ temperature: 'hot' }), 400, 'temperature'],
  ['temperature 1e400 (inf)', C, '{"messages":[{"role":"user","content":"hi"}],"temperature":1e400}', 400],
  ['top_p zero', C, chat({ top_p: 0 }), 400, 'top_p'],
  ['top_p 1.5', C, chat({ top_p: 1.5 }), 400, 'top_p'],
  ['top_k -2', C, chat({ top_k: -2 }), 400, 'top_k'],
  ['min_p 2', C, chat({ min_p: 2 }), 400, 'min_p'],
  ['n zero', C, chat({ n: 0 }), 400, 'n'],
  ['n negative', C, chat({ n: -1 }), 400, 'n'],
  ['n huge', C, chat({ n: 100000 }), 400, 'n'],
  ['n a string', C, chat({ n: 'two' }), 400, 'n'],
  ['n above MAX_QUEUED (64): never admitted, so 400 and not 429', C, chat({ n: 65 }), 400, 'n'],
  ['presence_penalty 5', C, chat({ presence_penalty: 5 }), 400, 'presence_penalty'],
  ['frequency_penalty -3', C, chat({ frequency_penalty: -3 }), 400, 'frequency_penalty'],
  ['repetition_penalty zero', C, chat({ repetition_penalty: 0 }), 400, 'repetition_penalty'],
  ['repetition_penalty 2.5 (the sampler allows (0, 2])', C, chat({ repetition_penalty: 2.5 }), 400, 'repetition_penalty'],
  ['repetition_penalty 100', P, comp({ repetition_penalty: 100 }), 400, 'repetition_penalty'],
  ['seed a string', C, chat({ seed: 'abc' }), 400, 'seed'],
  ['seed 1e40', C, chat({ seed: 1e40 }), 400, 'seed'],
  ['stop a number', C, chat({ stop: 5 }), 400, 'stop'],
  ['stop list with a number', C, chat({ stop: ['a', 1] }), 400, 'stop'],
  ['stop: 17 strings', C, chat({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), 400, 'stop'],
  ['logit_bias non-numeric key', C, chat({ logit_bias: { abc: 1 } }), 400, 'logit_bias'],
  ['logit_bias value 1000', C, chat({ logit_bias: { 5: 1000 } }), 400, 'logit_bias'],
  ['logit_bias an array', C, chat({ logit_bias: [1] }), 400, 'logit_bias'],
  ['repetition_detection a number', C, chat({ repetition_detection: 3 }), 400, 'repetition_detection'],
  ['repetition_detection min_count 1', C, chat({ repetition_detection: { max_pattern_size: 8, min_count: 1 } }), 400, 'repetition_detection'],
  ['repetition_detection max_pattern_size 10^9', P, comp({ repetition_detection: { max_pattern_size: 1e9, min_count: 3 } }), 400, 'repetition_detection.max_pattern_size'],
  ['allowed_token_ids empty', C, chat({ allowed_token_ids: [] }), 400, 'allowed_token_ids'],
  ['allowed_token_ids past the vocabulary', P, comp({ allowed_token_ids: [1, 2 ** 31 - 1] }), 400, 'allowed_token_ids'],
  ['allowed_token_ids strings', C, chat({ allowed_token_ids: ['a'] }), 400, 'allowed_token_ids'],
  ['logit_bias id past the vocabulary', C, chat({ logit_bias: { 2147483647: 5 } }), 400, 'logit_bias'],
  ['bad_words a number', C, chat({ bad_words: 5 }), 400, 'bad_words'],
  ['bad_words blank', P, comp({ bad_words: ['  '] }), 400, 'bad_words'],
  ['bad_words: 65 words', C, chat({ bad_words: Array.from({ length: 65 }, (_, i) => `w${i}`) }), 400, 'bad_words'],
  ['prompt_logprobs -1 (the whole vocabulary)', P, comp({ prompt_logprobs: -1 }), 400, 'prompt_logprobs'],
  ['prompt_logprobs 21', C, chat({ prompt_logprobs: 21 }), 400, 'prompt_logprobs'],
  ['prompt_logprobs a string', P, comp({ prompt_logprobs: 'all' }), 400, 'prompt_logprobs'],
  ['priority a string', C, chat({ priority: 'high' }), 400, 'priority'],
  ['priority an object', P, comp({ priority: { level: 'background' } }), 400, 'priority'],
  ['draft a string', C, chat({ draft: 'off' }), 400, 'draft'],
  ['decisions: questions a string', '/v1/decisions', { input: 'x', questions: 'q' }, 400, 'questions'],
  ['decisions: a question without an id', '/v1/decisions', { input: 'x', questions: [{ type: 'yes_no', question: 'a' }] }, 400, 'questions'],
  ['decisions: 65 questions', '/v1/decisions', { input: 'x', questions: Array.from({ length: 65 }, (_, i) => ({ id: `q${i}`, type: 'yes_no', question: 'a' })) }, 400, 'questions'],
  ['decisions: temperature NaN-like string', '/v1/decisions', { input: 'x', questions: [{ id: 'q', type: 'score', question: 'a', levels: ['x', 'y'] }], temperature: 'nan' }, 400, 'temperature'],
  ['embeddings: input an object', '/v1/embeddings', { input: { text: 'x' } }, 400, 'input'],
  ['embeddings: 2049 inputs', '/v1/embeddings', { input: Array(2049).fill('x') }, 400, 'input'],
  ['embeddings: a token id past int32', '/v1/embeddings', { input: [1, 4294967297] }, 400, 'input'],
  ['embeddings: nested three deep', '/v1/embeddings', { input: [[[1]]] }, 400, 'input'],
  ['embeddings: dimensions 0', '/v1/embeddings', { input: 'x', dimensions: 0 }, 400, 'dimensions'],
  ['embeddings: encoding_format a number', '/v1/embeddings', { input: 'x', encoding_format: 1 }, 400, 'encoding_format'],
  ['decisions: input a number', '/v1/decisions', { input: 5, questions: [{ id: 'q', type: 'score', question: 'a', levels: ['x', 'y'] }] }, 400, 'input'],
  ['cache_salt empty', C, chat({ cache_salt: '' }), 400, 'cache_salt'],
  ['cache_salt a number', P, comp({ cache_salt: 42 }), 400, 'cache_salt'],
  ['cache_salt of 5000 bytes', C, chat({ cache_salt: 's'.repeat(5000) }), 400, 'cache_salt'],
  ['truncate_prompt_tokens 0', P, comp({ truncate_prompt_tokens: 0 }), 400, 'truncate_prompt_tokens'],
  ['truncate_prompt_tokens -2', C, chat({ truncate_prompt_tokens: -2 }), 400, 'truncate_prompt_tokens'],
  ['truncate_prompt_tokens a string', C, chat({ truncate_prompt_tokens: 'all' }), 400, 'truncate_prompt_tokens'],
  ['top_logprobs without logprobs', C, chat({ top_logprobs: 3 }), 400, 'top_logprobs'],
  ['top_logprobs 50', C, chat({ logprobs: true, top_logprobs: 50 }), 400, 'top_logprobs'],
  ['logprobs a string', C, chat({ logprobs: 'yes' }), 400, 'logprobs'],
  ['stream a string', C, chat({ stream: 'yes' }), 400, 'stream'],
  ['stream_options without stream', C, chat({ stream_options: { include_usage: true } }), 400, 'stream_options'],
  // -- tools, formats, templating
  ['tools empty', C, chat({ tools: [] }), 400, 'tools'],
  ['tools an object', C, chat({ tools: {} }), 400, 'tools'],
  ['tool without function', C, chat({ tools: [{ type: 'function' }] }), 400, 'tools[0].function'],
  ['tool_choice required without tools', C, chat({ tool_choice: 'required' }), 400, 'tool_choice'],
  ['tool_choice naming an unknown function', C, chat({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }), 400, 'tool_choice'],
  ['tool_choice nonsense', C, chat({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'sometimes' }), 400, 'tool_choice'],
  ['json_schema without schema object', C, chat({ response_format: { type: 'json_schema' } }), 400, 'response_format.json_schema'],
  ['response_format xml', C, chat({ response_format: { type: 'xml' } }), 400, 'response_format.type'],
  ['response_format a string', C, chat({ response_format: 'json' }), 400, 'response_format'],
  ['two structured outputs', C, chat({ guided_json: { type: 'object' }, guided_regex: 'a+' }), 400, 'structured_outputs'],
  ['regex {3,2}', C, chat({ guided_regex: 'a{3,2}' }), 400],
  ['regex unbalanced', C, chat({ guided_regex: '(ab' }), 400],
  ['regex repeat 10^5', C, chat({ guided_regex: 'a{100000}' }), 400],
  ['regex lookahead', C, chat({ guided_regex: '(?=a)a' }), 400],
  ['grammar unterminated group', C, chat({ guided_grammar: 'root ::= ("a"' }), 400],
  ['grammar left-recursive', C, chat({ guided_grammar: 'root ::= root "a" | "a"' }), 400],
  ['grammar without root', C, chat({ guided_grammar: 'item ::= "a"' }), 400],
  ['json_schema false', C, chat({ guided_json: false }), 400],
  ['json_schema multipleOf', C, chat({ guided_json: { type: 'integer', multipleOf: 3 } }), 400],
  ['json_schema dangling $ref', C, chat({ guided_json: { $ref: '#/$defs/nope' } }), 400],
  ['json_schema $ref cycle', C, chat({ guided_json: { $defs: { a: { $ref: '#/$defs/a' } }, $ref: '#/$defs/a' } }), 400],
  ['choice empty', C, chat({ guided_choice: [] }), 400, 'guided_choice'],
  // -- structured outputs at the compiler's and the matcher's limits
  ['json_schema of 100,000 optional properties (a recursion per property crashed the server)', C,
    chat({ response_format: schemaFormat({ type: 'object', properties: keyed(100000, { type: 'integer' }) }) }), 400, 'response_format'],
  ['json_schema enum of 5,000 strings (more than 4096 parses open at its start)', C, chat({ guided_json: { enum: alternatives(5000) } }), 400, 'guided_json'],
  ['regex of 5,000 alternatives', C, chat({ guided_regex: alternatives(5000).join('|') }), 400, 'guided_regex'],
  ['grammar of 5,000 alternatives', C, chat({ guided_grammar: `root ::= ${alternatives(5000).map((a) => `"${a}"`).join(' | ')}` }), 400, 'guided_grammar'],
  ['grammar ("a"?){10000} "b": 10,001 parses open at its start', C, chat({ guided_grammar: 'root ::= ("a"?){10000} "b"' }), 400, 'guided_grammar'],
  ['chat_template_kwargs of 257 keys (the template searches its globals linearly)', C, chat({ chat_template_kwargs: keyed(257, 'v') }), 400, 'chat_template_kwargs'],
  ['chat_template_kwargs of 100,000 keys (40 s of CPU before)', C, chat({ chat_template_kwargs: keyed(100000, 'v') }), 400, 'chat_template_kwargs'],
  ['reasoning_effort extreme', C, chat({ reasoning_effort: 'extreme' }), 400, 'reasoning_effort'],
  ['functions (deprecated)', C, chat({ functions: [{ name: 'f' }] }), 400, 'functions'],
  ['audio output', C, chat({ audio: { voice: 'x' } }), 400, 'audio'],
  ['add_generation_prompt + continue_final_message', C, chat({ add_generation_prompt: true, continue_final_message: true }), 400, 'continue_final_message'],
  ['chat_template_kwargs a list', C, chat({ chat_template_kwargs: [1] }), 400, 'chat_template_kwargs'],
  // -- unknown model, everywhere
  ['unknown model (chat)', C, chat({ model: 'other-model' }), 404, 'model', 'model_not_found'],
  ['unknown model (completions)', P, comp({ model: 'other-model' }), 404, 'model', 'model_not_found'],
  ['unknown model (responses)', R, resp({ model: 'other-model' }), 404, 'model', 'model_not_found'],
  ['unknown model (tokenize)', '/tokenize', { model: 'other-model', prompt: 'hi' }, 404, 'model', 'model_not_found'],
  // -- completions
  ['completions without prompt', P, { model }, 400, 'prompt'],
  ['completions empty prompt', P, comp({ prompt: '' }), 400, 'prompt'],
  ['completions empty list', P, comp({ prompt: [] }), 400, 'prompt'],
  ['completions negative token id', P, comp({ prompt: [-1] }), 400, 'prompt'],
  ['completions mixed token list', P, comp({ prompt: [1, 'a'] }), 400, 'prompt'],
  ['completions prompt an object', P, comp({ prompt: { a: 1 } }), 400, 'prompt'],
  ['completions token id past the vocabulary', P, comp({ prompt: [2 ** 31 - 1] }), 400, 'prompt'],
  ['completions suffix', P, comp({ suffix: 'y' }), 400, 'suffix'],
  ['completions 65 prompts, above MAX_QUEUED (64)', P, comp({ prompt: Array(65).fill('hi') }), 400, 'prompt'],
  ['completions logprobs 30', P, comp({ logprobs: 30 }), 400, 'logprobs'],
  ['completions best_of 0', P, comp({ best_of: 0 }), 400, 'best_of'],
  ['completions max_tokens 0 without echo', P, comp({ max_tokens: 0 }), 400, 'max_tokens'],
  ['completions over the window', P, comp({ max_tokens: CTX }), 400, 'messages', 'context_length_exceeded'],
  ['completions token prompt over the window', P, comp({ prompt: Array(CTX + 1).fill(1), max_tokens: 1 }), 400, 'messages', 'context_length_exceeded'],
  // -- responses
  ['responses without input', R, { model }, 400, 'input'],
  ['responses function_call arguments not JSON', R, resp({ input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: 'not json' }] }), 400, 'input[0].arguments'],
  ['responses input a number', R, resp({ input: 5 }), 400, 'input'],
  ['responses item without role', R, resp({ input: [{ type: 'message' }] }), 400, 'input[0].role'],
  ['responses unknown item type', R, resp({ input: [{ type: 'weird' }] }), 400, 'input[0].type'],
  ['responses previous_response_id', R, resp({ previous_response_id: 'resp_x' }), 404, 'previous_response_id'],
  ['responses max_output_tokens negative', R, resp({ max_output_tokens: -3 }), 400, 'max_output_tokens'],
  ['responses over the window', R, resp({ max_output_tokens: CTX }), 400, 'messages', 'context_length_exceeded'],
  // -- tokenize / detokenize / routes
  ['tokenize without prompt', '/tokenize', {}, 400, 'prompt'],
  ['tokenize prompt a number', '/tokenize', { prompt: 7 }, 400, 'prompt'],
  ['tokenize messages a string', '/tokenize', { messages: 'hi' }, 400, 'messages'],
  ['detokenize without tokens', '/detokenize', {}, 400, 'tokens'],
  ['detokenize string tokens', '/detokenize', { tokens: ['a'] }, 400, 'tokens'],
  ['detokenize negative id', '/v1/detokenize', { tokens: [-5] }, 400, 'tokens'],
  ['detokenize id past the vocabulary', '/detokenize', { tokens: [2 ** 31 - 1] }, 400, 'tokens'],
  ['unknown route', '/v1/nonexistent', {}, 404],
  ['unknown model id (GET)', ['GET', '/v1/models/no-such-model'], undefined, 404, 'model'],
];

// Slow-loris connections opened first and held while the corpus runs: partial headers,
// and a body promised by Content-Length that never fully arrives.
const loris = [
  rawExchange(server, ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le'], { timeoutMs: 55000 }),
  rawExchange(server, ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"messages":[{"ro'], { timeoutMs: 55000 }),
  rawExchange(server, ['GET /health HTTP/1.1\r\n'], { timeoutMs: 55000 }),
  rawExchange(server, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{"prompt":"hi",'], { timeoutMs: 55000 }),
];
const lorisStart = Date.now();
// A head trickled one byte every 2 s (each well within the 30 s read timeout) held its
// connection and worker for ever; the head's deadline (30 s from its first byte) ends it with
// a 408. Started here so that its 30 s pass while the corpus runs.
const trickledHead = rawExchange(server, `GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(40)}\r\n\r\n`.split(''),
  { gapMs: 2000, timeoutMs: 60000 });

// Transport-level garbage, started with the slow-loris connections (some only end at
// the server's read timeout): each gets a 4xx or a closed connection, never a 5xx.
const TRANSPORT = [
  ['garbage request line', ['NOT-HTTP\r\n\r\n']],
  ['bad Content-Length', ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}']],
  ['negative Content-Length', ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}']],
  ['bad chunk size', ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n']],
  ['header line of 100 KB', [`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100000)}\r\n\r\n`]],
  ['10,000 headers', [`GET /health HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(10000)}\r\n`]],
  ['body shorter than Content-Length, then close', ['POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a":'], true],
];
const transport = Promise.all(TRANSPORT.map(async ([name, chunks, endAfter, okAllowed]) => {
  try {
    const r = await rawExchange(server, chunks, { timeoutMs: 45000, endAfter: !!endAfter });
    console.log(`     ${name}: ${r.status ?? 'closed without an answer'} after ${r.ms} ms`);
    const fine = r.status === null || (r.status >= 400 && r.status < 500) || (okAllowed && r.status === 200);
    return fine ? null : `${name}: ${r.status}`;
  } catch (e) {
    return `${name}: ${e.message}`;
  }
}));

await run.check(`table of ${CASES.length} malformed requests: exact 4xx + OpenAI error object`, async () => {
  assert.ok(CASES.length >= 50);
  const bad = [];
  for (const [name, path, body, status, param, code] of CASES) {
    const [method, p] = Array.isArray(path) ? path : ['POST', path];
    let r;
    try {
      r = await request(server, method, p, { body, timeoutMs: 20000 });
    } catch (e) {
      bad.push(`${name}: ${e.message}`);
      continue;
    }
    try {
      assert.equal(r.status, status, `status ${r.status}: ${r.text.slice(0, 200)}`);
      assertErrorObject(assert, r, name);
      if (param !== undefined) assert.equal(r.json.error.param, param, 'error.param');
      if (code !== undefined) assert.equal(r.json.error.code, code, 'error.code');
    } catch (e) {
      bad.push(`${name}: ${e.message.split('\n')[0]}`);
    }
  }
  assert.deepEqual(bad, []);
});

// Anthropic's route answers malformed bodies with 400 and Anthropic's error object.
const M = '/v1/messages';
const msg = (extra = {}) => ({ model: 'claude-x', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra });
const ANTHROPIC_CASES = [
  ['not JSON', '{"max_tokens":'],
  ['empty body', ''],
  ['body null', 'null'],
  ['messages an object', msg({ messages: { role: 'user' } })],
  ['messages empty', msg({ messages: [] })],
  ['block without type', msg({ messages: [{ role: 'user', content: [{ text: 'x' }] }] })],
  ['block text a number', msg({ messages: [{ role: 'user', content: [{ type: 'text', text: 1 }] }] })],
  ['tool_use input a string', msg({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'f', input: 'x' }] }] })],
  ['tool_result without tool_use_id', msg({ messages: [{ role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] })],
  ['document block', msg({ messages: [{ role: 'user', content: [{ type: 'document', source: {} }] }] })],
  ['system a number', msg({ system: 5 })],
  ['max_tokens missing', { messages: [{ role: 'user', content: 'hi' }] }],
  ['max_tokens negative', msg({ max_tokens: -3 })],
  ['prompt beyond the window', msg({ messages: [{ role: 'user', content: 'lighthouse '.repeat(CTX + 10) }] })],
  ['stop_sequences a number', msg({ stop_sequences: 5 })],
  ['temperature 7', msg({ temperature: 7 })],
  ['thinking budget negative', msg({ thinking: { type: 'enabled', budget_tokens: -1 } })],
  ['thinking type odd', msg({ thinking: { type: 'sometimes' } })],
  ['tool without input_schema', msg({ tools: [{ name: 'f' }] })],
  ['server tool', msg({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] })],
  ['tool_choice unknown tool', msg({ tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'tool', name: 'g' } })],
  ['output_config.format without schema', msg({ output_config: { format: { type: 'json_schema' } } })],
  ['output_config.format with a bad schema', msg({ output_config: { format: { type: 'json_schema', schema: { type: 'integer', multipleOf: 2 } } } })],
];

await run.check(`Anthropic: ${ANTHROPIC_CASES.length} malformed /v1/messages bodies -> 400 + Anthropic error object`, async () => {
  const bad = [];
  for (const [name, body] of ANTHROPIC_CASES) {
    const r = await request(server, 'POST', M, { body, timeoutMs: 20000 });
    const e = r.json?.error;
    if (r.status !== 400 || r.json?.type !== 'error' || e?.type !== 'invalid_request_error' || typeof e?.message !== 'string' || !e.message)
      bad.push(`${name}: ${r.status} ${r.text.slice(0, 200)}`);
  }
  assert.deepEqual(bad, []);
  const ok = await request(server, 'POST', M, { body: msg() });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.json.type, 'message');
});

// nlohmann's ordered_json parse scanned an object's keys on every insert: quadratic, a
// minute of CPU per 200k members. The body parser is linear.
await run.check('an object of 500,000 members is parsed in linear time (400 within 10 s)', async () => {
  const members = Array.from({ length: 500000 }, (_, i) => `"k${i}":${i}`).join(',');
  const t0 = Date.now();
  const r = await request(server, 'POST', C, { body: `{"messages":"hi","metadata":{${members}}}`, timeoutMs: 60000 });
  const ms = Date.now() - t0;
  assert.equal(r.status, 400, r.text.slice(0, 200));
  assert.equal(r.json.error.param, 'messages');
  assert.ok(ms < 10000, `took ${ms} ms`);
});

// Past the matcher's limits a parse state counted as dead: a grammar with 5,000 alternatives
// open at once masked every token ("every token is excluded", blaming the sampling fields).
// At the grammar's start it is refused when compiled; later, when the mask is computed.
await run.check('structured outputs past the matcher limits: 400s that name the limit, not the sampler', async () => {
  const start = await postJson(server, C, chat({ guided_json: { enum: alternatives(5000) } }));
  assert.equal(start.status, 400, start.text.slice(0, 300));
  assert.match(start.json.error.message, /more than 4096 parses open at once/);
  const later = await postJson(server, C, chat({
    max_tokens: 8, reasoning_effort: 'none', response_format: schemaFormat({ type: 'object', properties: keyed(5000, { type: 'integer' }) }),
  }));
  assert.equal(later.status, 400, later.text.slice(0, 300));
  assert.match(later.json.error.message, /too ambiguous.*4096/);
  assert.doesNotMatch(later.json.error.message, /every token is excluded/);
  // 4,096 enum strings fit, and so do 256 template kwargs.
  const fits = await postJson(server, C, chat({ max_tokens: 8, reasoning_effort: 'none', guided_json: { enum: alternatives(4096) } }));
  assert.equal(fits.status, 200, fits.text.slice(0, 300));
  assert.equal((await postJson(server, C, chat({ chat_template_kwargs: keyed(256, 'v') }))).status, 200);
});

// The template's tojson called values nested more than 100 levels circular: a tool schema
// nested 240 deep (the body allows 256) failed with "Circular reference detected".
await run.check('a tool schema nested 240 levels deep renders (/tokenize renders the chat template)', async () => {
  const body = `{"model":"${model}","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",`
    + `"function":{"name":"f","parameters":${'{"type":"array","items":'.repeat(240)}{}${'}'.repeat(240)}}}]}`;
  const r = await request(server, 'POST', '/tokenize', { body, timeoutMs: 60000 });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.ok(r.json.count > 240);
});

await run.check('a normal request completes while a 100,000-property schema is converted', async () => {
  const heavy = postJson(server, C, chat({ response_format: schemaFormat({ type: 'object', properties: keyed(100000, { type: 'integer' }) }) }));
  const t0 = Date.now();
  const normal = await post200(server, C, chat({}));
  const ms = Date.now() - t0;
  assert.equal(normal.object, 'chat.completion');
  assert.equal((await heavy).status, 400);
  console.log(`     the normal request took ${ms} ms`);
});

await run.check('context_length_exceeded message names the window', async () => {
  const r = await postJson(server, C, chat({ max_tokens: CTX }));
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, new RegExp(`maximum context length is ${CTX} tokens`));
});

await run.check('body over 96 MiB -> 413 with an error object', async () => {
  const big = Buffer.alloc(97 * 1024 * 1024 + 17, 0x61);
  Buffer.from('{"messages":[{"role":"user","content":"').copy(big);
  const r = await request(server, 'POST', C, { body: big, timeoutMs: 60000 });
  assert.equal(r.status, 413, r.text.slice(0, 200));
  assertErrorObject(assert, r, '413');
});

// curl -d sends application/x-www-form-urlencoded; httplib refuses such bodies over 8 KiB
// with 413, which used to blame the 96 MiB limit.
// The way from the body to the prompt's tokens holds a few copies of the text (and the
// tokenizer's working memory); a huge prompt is refused by the window, and the server answers
// others meanwhile.
await run.check('a 16 MB chat message -> 400 context_length_exceeded while a normal chat beside it answers', async () => {
  const huge = Buffer.from(JSON.stringify({ model, messages: [{ role: 'user', content: 'word '.repeat(3 << 20) }], max_tokens: 4 }));
  const big = request(server, 'POST', C, { body: huge, timeoutMs: 240000 });
  await sleep(200);
  const normal = await post200(server, C, chat({}));
  assert.equal(normal.object, 'chat.completion');
  const r = await big;
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assertErrorObject(assert, r, 'huge prompt');
  assert.equal(r.json.error.code, 'context_length_exceeded');
});

// httplib checks the body limit against Content-Length only; the server holds the decoded body to it.
await run.check('a gzip body that decodes past 96 MiB -> 413 naming the limit, not read whole', async () => {
  const raw = Buffer.alloc(100 * 1024 * 1024, 0x61);
  Buffer.from('{"messages":[{"role":"user","content":"').copy(raw);
  const r = await request(server, 'POST', C, { body: zlib.gzipSync(raw, { level: 1 }), headers: { 'content-encoding': 'gzip' }, timeoutMs: 60000 });
  assert.equal(r.status, 413, r.text.slice(0, 200));
  assertErrorObject(assert, r, 'gzip 413');
  assert.match(r.json.error.message, /96 MiB/);
  const small = await request(server, 'POST', C, { body: zlib.gzipSync(Buffer.from(JSON.stringify(chat({})))), headers: { 'content-encoding': 'gzip' } });
  assert.equal(small.status, 200, small.text.slice(0, 200));
});

await run.check('PROMPT_BUDGET_MIB=1: a body larger than the budget -> 413 naming it; others are served', async () => {
  const tight = await startServer(cmd, { env: { PROMPT_BUDGET_MIB: '1' } });
  try {
    const h = await health(tight);
    assert.equal(h.prompt_budget.bytes, 1 << 20);
    const r = await postJson(tight, C, { model: tight.model, messages: [{ role: 'user', content: 'x'.repeat(2 << 20) }], max_tokens: 2 });
    assert.equal(r.status, 413, r.text.slice(0, 200));
    assertErrorObject(assert, r, 'budget 413');
    assert.equal(r.json.error.code, 'request_too_large');
    assert.match(r.json.error.message, /PROMPT_BUDGET_MIB/);
    assert.equal((await post200(tight, C, { model: tight.model, messages: user, max_tokens: 2 })).object, 'chat.completion');
    assert.equal((await health(tight)).prompt_budget.held_bytes, 0);
  } finally {
    await tight.stop();
  }
});

// httplib reads a head into a string that grew as long as the client sent (500 MB of one
// header line: +510 MB of RSS) and bounded neither the time nor the number of header lines.
// The head is held to 64 KiB and 256 fields (bounded_http_server.h).
await run.check('an endless header line is cut at 64 KiB: the RSS stays bounded and /health answers meanwhile', async () => {
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))[1]) * 1024;
  const before = rss();
  let peak = before;
  let sent = 0;
  let answer = '';
  const healthMs = [];
  const sock = net.connect(server.port, server.host);
  sock.on('data', (d) => { answer += d.toString('latin1'); });
  const ended = new Promise((resolve) => { sock.on('close', resolve); sock.on('error', () => {}); });
  const sampler = setInterval(() => { peak = Math.max(peak, rss()); }, 20);
  const prober = (async () => {
    while (!sock.destroyed) {
      const t0 = Date.now();
      assert.equal((await health(server)).ok, true);
      healthMs.push(Date.now() - t0);
      await sleep(100);
    }
  })();
  prober.catch(() => {});  // awaited below
  await new Promise((resolve) => sock.once('connect', resolve));
  sock.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Endless: ');
  const mib = Buffer.alloc(1 << 20, 0x61);
  while (sent < 512 * mib.length && !sock.destroyed && !sock.writableEnded) {
    const room = sock.write(mib);
    sent += mib.length;
    if (!room) await Promise.race([new Promise((r) => sock.once('drain', r)), ended]);
  }
  await Promise.race([ended, sleep(10000)]);
  sock.destroy();
  await prober;
  clearInterval(sampler);
  peak = Math.max(peak, rss());
  const grew = (peak - before) / 1048576;
  console.log(`     ${(sent / 1048576).toFixed(0)} MiB written before the server closed; server RSS ${(before / 1048576).toFixed(1)} -> `
    + `peak ${(peak / 1048576).toFixed(1)} MiB (+${grew.toFixed(1)}); /health ${healthMs.length} times, slowest ${Math.max(...healthMs)} ms`);
  assert.ok(grew < 64, `RSS grew ${grew.toFixed(1)} MiB`);
  assert.ok(sent < 64 * 1048576, `the server read on: ${sent} bytes written`);
  assert.ok(answer === '' || answer.startsWith('HTTP/1.1 431'), answer.slice(0, 200));
  assert.ok(healthMs.length >= 1);
});

await run.check('100,000 header fields -> 431 with an error object; 200 fields are fine', async () => {
  const r = await rawExchange(server, [`GET /health HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(100000)}\r\n`], { timeoutMs: 20000 });
  assert.equal(r.status, 431, r.text.slice(0, 300));
  assert.match(r.text, /"code":"request_header_fields_too_large"/);
  const fields = Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x-f${i}`, 'v']));
  assert.equal((await request(server, 'GET', '/health', { headers: fields })).status, 200);
});

// The server runs httplib's keep-alive loop itself now (bounded_http_server.h).
await run.check('keep-alive: requests one after another and pipelined on one connection', async () => {
  const sock = net.connect(server.port, server.host);
  await new Promise((resolve, reject) => { sock.once('connect', resolve); sock.once('error', reject); });
  let buf = Buffer.alloc(0);
  sock.on('data', (d) => { buf = Buffer.concat([buf, d]); });
  // The next whole answer on the socket: [status, body].
  const next = async () => {
    const t0 = Date.now();
    for (;;) {
      const text = buf.toString('latin1');
      const h = text.indexOf('\r\n\r\n');
      const m = h >= 0 ? /content-length:\s*(\d+)/i.exec(text.slice(0, h)) : null;
      if (m && buf.length >= h + 4 + Number(m[1])) {
        const end = h + 4 + Number(m[1]);
        const answer = [Number(/^HTTP\/1\.1 (\d+)/.exec(text)[1]), buf.subarray(h + 4, end).toString('utf8')];
        buf = buf.subarray(end);
        return answer;
      }
      assert.ok(Date.now() - t0 < 20000 && !sock.destroyed, `no answer: ${text.slice(0, 200)}`);
      await sleep(5);
    }
  };
  const payload = JSON.stringify(chat({}));
  const post = `POST ${C} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`;
  const get = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  sock.write(get);
  assert.equal((await next())[0], 200);
  sock.write(post);
  const [status, body] = await next();
  assert.equal(status, 200, body.slice(0, 200));
  assert.equal(JSON.parse(body).object, 'chat.completion');
  sock.write(get + get);  // pipelined
  assert.equal((await next())[0], 200);
  assert.equal((await next())[0], 200);
  sock.destroy();
});

// A body of unknown size used to be charged the whole 96 MiB body limit up front: under the
// default 128 MiB budget such bodies went one at a time, and one trickled slowly made every
// other chunked or compressed body wait 60 s for a 503. It is charged as it arrives now.
await run.check('a chunked upload trickled slowly does not hold back chunked or gzip requests beside it', async () => {
  const before = (await health(server)).prompt_budget.held_bytes;  // the slow-loris bodies hold some
  const slow = net.connect(server.port, server.host);
  slow.on('error', () => {});
  const slowAnswer = new Promise((resolve) => { let t = ''; slow.on('data', (d) => { t += d; }); slow.on('close', () => resolve(t)); });
  const chunk = (s) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;
  await new Promise((resolve) => slow.once('connect', resolve));
  slow.write(`POST ${C} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`
    + chunk(`{"model":"${model}","max_tokens":2,"messages":[{"role":"user","content":"`));
  const trickle = setInterval(() => slow.write(chunk('a')), 1000);
  try {
    const held = await waitHealth(server, (h) => h.prompt_budget.held_bytes >= before + (1 << 20), 10000);
    assert.ok(held.ok, JSON.stringify(held.last.prompt_budget));
    const t0 = Date.now();
    const chunked = await new Promise((resolve, reject) => {
      const req = http.request({ host: server.host, port: server.port, method: 'POST', path: C, agent: false, headers: { 'content-type': 'application/json' } },
        (res) => { let t = ''; res.on('data', (d) => { t += d; }); res.on('end', () => resolve({ status: res.statusCode, text: t })); });
      req.on('error', reject);
      req.write(JSON.stringify(chat({})).slice(0, 10));
      req.end(JSON.stringify(chat({})).slice(10));  // no Content-Length: node sends it chunked
    });
    assert.equal(chunked.status, 200, chunked.text.slice(0, 200));
    const gz = await request(server, 'POST', C, { body: zlib.gzipSync(Buffer.from(JSON.stringify(chat({})))), headers: { 'content-encoding': 'gzip' } });
    assert.equal(gz.status, 200, gz.text.slice(0, 200));
    const ms = Date.now() - t0;
    console.log(`     a chunked and a gzip chat beside the trickled upload took ${ms} ms`);
    assert.ok(ms < 15000, `took ${ms} ms`);
  } finally {
    clearInterval(trickle);
  }
  slow.write(`${chunk('"}]}')}0\r\n\r\n`);
  const answer = await slowAnswer;
  assert.match(answer, /^HTTP\/1\.1 200/, answer.slice(0, 200));
  const after = (await health(server)).prompt_budget.held_bytes;
  assert.ok(after <= before, `held ${after} bytes after, ${before} before`);
});

await run.check('JSON over 8 KiB sent as application/x-www-form-urlencoded -> 413 naming that limit', async () => {
  const body = chat({ messages: [{ role: 'user', content: 'x'.repeat(9000) }] });
  const r = await request(server, 'POST', C, { body, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  assert.equal(r.status, 413, r.text.slice(0, 200));
  assertErrorObject(assert, r, 'form body');
  assert.match(r.json.error.message, /x-www-form-urlencoded.*8 KiB/);
});

await run.check('a body trickled in one byte per 20 ms is still parsed (400 for bad JSON)', async () => {
  const body = '{"messages": 12}';
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`;
  const r = await rawExchange(server, [head, ...body.split('')], { gapMs: 20, timeoutMs: 20000 });
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.match(r.text, /"param":"messages"/);
});

await run.check('the server keeps serving: normal chat succeeds while slow-loris connections are open; /health ok', async () => {
  const r = await post200(server, C, chat({ temperature: 0 }));
  assert.equal(r.object, 'chat.completion');
  assert.ok(r.usage.completion_tokens >= 1);
  const h = await health(server);
  assert.equal(h.ok, true);
  assert.equal(h.requests_running, 0);
  const m = await request(server, 'GET', '/metrics');
  assert.equal(m.status, 200);
  assert.doesNotMatch(m.text, /status="5\d\d"/, 'no 5xx recorded in /metrics');
});

await run.check('transport-level garbage: 4xx or a closed connection, never 5xx', async () => {
  assert.deepEqual((await transport).filter((x) => x), []);
});

await run.check('a head trickled one byte per 2 s is cut at the 30 s head deadline: 408 with an error object', async () => {
  const r = await trickledHead;
  console.log(`     the trickled head was answered ${r.status} after ${(r.ms / 1000).toFixed(1)} s`);
  assert.equal(r.status, 408, r.text.slice(0, 300));
  assert.ok(r.ms >= 28000 && r.ms < 45000, `after ${r.ms} ms`);
  assert.match(r.text, /"error":/);
});

await run.check('slow-loris connections are closed by the server (read timeout) without a 5xx', async () => {
  const results = await Promise.allSettled(loris);
  const bad = [];
  results.forEach((res, i) => {
    if (res.status === 'rejected') bad.push(`loris ${i}: ${res.reason.message}`);
    else if (res.value.status !== null && (res.value.status < 400 || res.value.status >= 500)) bad.push(`loris ${i}: ${res.value.status}`);
  });
  console.log(`     slow-loris connections closed after ${((Date.now() - lorisStart) / 1000).toFixed(1)} s`);
  assert.deepEqual(bad, []);
  await sleep(10);
  assert.equal((await post200(server, C, chat({}))).object, 'chat.completion');
});

// A second server with one stream and a queue of one: the third concurrent request
// finds the queue full and gets 429 with an error object and Retry-After.
await run.check('queue full -> 429 rate_limit_exceeded with Retry-After (PARALLEL=1, MAX_QUEUED=1)', async () => {
  const small = await startServer(cmd, { env: { PARALLEL: '1', MAX_QUEUED: '1' } });
  try {
    const body = { model: small.model, messages: user, max_tokens: 64, ignore_eos: true };
    const answers = await Promise.all(Array.from({ length: 4 }, () => postJson(small, C, body)));
    const statuses = answers.map((r) => r.status).sort();
    console.log(`     statuses of 4 concurrent requests: ${statuses.join(', ')}`);
    assert.ok(statuses.includes(200), 'some requests were served');
    const limited = answers.filter((r) => r.status === 429);
    assert.ok(limited.length >= 1, 'some request found the queue full');
    assert.ok(answers.every((r) => r.status === 200 || r.status === 429));
    for (const r of limited) {
      assertErrorObject(assert, r, '429');
      assert.equal(r.json.error.type, 'rate_limit_exceeded');
      assert.ok(r.headers['retry-after'], 'Retry-After header');
    }
    const h = await health(small);
    assert.equal(h.ok, true);
    assert.equal((await post200(small, C, { ...body, max_tokens: 2 })).choices.length, 1);
  } finally {
    await small.stop();
  }
});

// Every running or waiting request holds an HTTP worker. There were 64 workers whatever
// PARALLEL + MAX_QUEUED admit: past 64 held requests /health stopped answering and the
// queue's 429 was never reached (connections waited unseen in httplib's queue).
await run.check('PARALLEL=1, MAX_QUEUED=80: more than 64 requests are held at once and /health answers at once', async () => {
  const busy = await startServer(cmd, { env: { PARALLEL: '1', MAX_QUEUED: '80' } });
  const socks = [];
  try {
    const payload = JSON.stringify({ model: busy.model, messages: user, max_tokens: 2000, ignore_eos: true, stream: true });
    const head = `POST ${C} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n`;
    for (let i = 0; i < 81; ++i) {
      const sock = net.connect(busy.port, busy.host, () => sock.write(head + payload));
      sock.on('error', () => {});
      socks.push(sock);
    }
    // One runs at a time, so few finish meanwhile (on a loaded 2-core machine ~10 did before
    // /health saw them all: the bound is what the check claims, more than 64, not 81 - 9);
    // each /health call must answer within 10 s.
    const held = await waitHealth(busy, (h) => h.requests_running + h.requests_waiting > 64, 30000);
    assert.ok(held.ok, `held: ${JSON.stringify(held.last)}`);
    const t0 = Date.now();
    await health(busy);
    assert.ok(Date.now() - t0 < 5000, `/health took ${Date.now() - t0} ms`);
  } finally {
    for (const s of socks) s.destroy();
    await busy.stop();
  }
});

// Idle keep-alive sockets and slow clients hold a worker each; with a fixed pool of ~70,
// 300 silent sockets delayed /health 9.5 s and half-sent requests held workers 30 s.
await run.check('600 connections open at once (300 silent, 300 with half a request line): /health and a chat still answer', async () => {
  const socks = [];
  try {
    for (let i = 0; i < 600; ++i) {
      const sock = net.connect(server.port, server.host, () => { if (i % 2) sock.write('GET /health HTTP/1.1\r\nHost: x\r\n'); });
      sock.on('error', () => {});
      socks.push(sock);
    }
    await sleep(1000);
    const t0 = Date.now();
    assert.equal((await health(server)).ok, true);
    assert.equal((await post200(server, C, chat({}))).object, 'chat.completion');
    assert.ok(Date.now() - t0 < 5000, `/health and a chat took ${Date.now() - t0} ms behind 600 open connections`);
  } finally {
    for (const s of socks) s.destroy();
  }
});

await run.check('API key configured (API_KEY): missing or wrong key -> 401 invalid_api_key; right key -> 200', async () => {
  const locked = await startServer(cmd, { env: { API_KEY: 'e2e-secret' }, apiKey: 'e2e-secret' });
  try {
    const body = { model: locked.model, messages: user, max_tokens: 2 };
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: 'e2e-secret' }]) {
      const r = await postJson(locked, C, body, { headers });
      assert.equal(r.status, 401, JSON.stringify(headers));
      assertErrorObject(assert, r, '401');
      assert.equal(r.json.error.code, 'invalid_api_key');
    }
    const ok = await postJson(locked, C, body, { headers: { authorization: 'Bearer e2e-secret' } });
    assert.equal(ok.status, 200, ok.text);
  } finally {
    await locked.stop();
  }
});

await run.finish(server);
