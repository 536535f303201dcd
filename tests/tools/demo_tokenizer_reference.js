#!/usr/bin/env node
// Reference ids and decodes from transformers.js (@lenml/tokenizers) for the built-in demo
// checkpoint's tokenizer (tests/unit/demo_checkpoint_tests.cc). Usage:
//   node demo_tokenizer_reference.js TOKENIZER_DIR OUT.json [COUNT]
// TOKENIZER_DIR holds the tokenizer.json / tokenizer_config.json the demo generator wrote. The
// corpus is tokenizer_corpus.js's (same seed as the main parity test) plus GLM chat prompts that
// spell the demo's special tokens. Writes {"corpus", "ids", "decoded", "decoded_skip"}.
"use strict";
const fs = require("fs");
const path = require("path");
const { generate } = require("./tokenizer_corpus.js");
const { TokenizerLoader } = require("@lenml/tokenizers");

const CHAT = [
  "[gMASK]<sop><|user|>Hello<|assistant|><think></think>",
  "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>What is 2+2?<|assistant|><think>",
  "<|assistant|><think>Let me think.</think>It is 4.<|user|>Thanks!<|assistant|><think>",
  "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call><|observation|>",
  "<tool_response>sunny</tool_response><|begin_of_image|><|image|><|end_of_image|>/nothink",
  "def f(x):\n    return x * 2\n<|endoftext|>",
];

function main() {
  const dir = process.argv[2];
  const out = process.argv[3];
  const count = Number(process.argv[4] || 3000);
  if (!dir || !out) {
    console.error("usage: node demo_tokenizer_reference.js TOKENIZER_DIR OUT.json [COUNT]");
    process.exit(2);
  }
  const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const corpus = CHAT.concat(generate(count));
  const ids = [], decoded = [], decodedSkip = [];
  for (const s of corpus) {
    const e = tok.encode(s);
    ids.push(e);
    decoded.push(e.length ? tok.decode(e) : "");
    decodedSkip.push(e.length ? tok.decode(e, { skip_special_tokens: true }) : "");
  }
  fs.writeFileSync(out, JSON.stringify({ corpus, ids, decoded, decoded_skip: decodedSkip }));
}

main();
