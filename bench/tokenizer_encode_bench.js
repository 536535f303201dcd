#!/usr/bin/env node
// Encode throughput of transformers.js (@lenml/tokenizers, from tests/node_modules) on the
// benchmark corpus, the reference side of bench/run_tokenizer_bench.sh.
//   node tokenizer_encode_bench.js --make-corpus OUT [MB=10]   writes the corpus (JSON array of documents)
//   node tokenizer_encode_bench.js NAME CORPUS [REPEAT=1]      NAME: qwen3, llama3, deepseek_v3, gptoss
// The corpus is deterministic: documents of ~4 KB joined from tests/tools/tokenizer_corpus.js
// strings (prose in many scripts, code, whitespace runs, digits, emoji, special-token spellings).
// Prints one line: "transformers.js NAME: BYTES bytes, TOKENS tokens, SECONDS s, MB/s" with MB = 1e6
// bytes of UTF-8 input; the best of REPEAT timed passes, after a warm-up pass over the first MB.
"use strict";
const fs = require("fs");
const path = require("path");
const testsDir = path.join(__dirname, "..", "tests");
const { generate } = require(path.join(testsDir, "tools", "tokenizer_corpus.js"));

function makeCorpus(out, mb) {
  const target = mb * 1e6;
  const docs = [];
  let total = 0;
  let seed = 1;
  while (total < target) {
    const strings = generate(2000, 7919 * seed++);
    let doc = "";
    for (const s of strings) {
      doc += s + "\n";
      if (Buffer.byteLength(doc) >= 4096) {
        docs.push(doc);
        total += Buffer.byteLength(doc);
        doc = "";
        if (total >= target) break;
      }
    }
  }
  fs.writeFileSync(out, JSON.stringify(docs));
  console.error(`corpus: ${docs.length} documents, ${total} bytes -> ${out}`);
}

function bench(name, corpusPath, repeat) {
  const pkg = path.join(testsDir, "node_modules", "@lenml", "tokenizer-" + name);
  const tok = require(pkg).fromPreTrained();
  const docs = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
  const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);
  let warm = 0;
  for (const d of docs) {
    tok.encode(d);
    warm += d.length;
    if (warm > 1e6) break;
  }
  let best = Infinity, tokens = 0;
  for (let r = 0; r < repeat; ++r) {
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const d of docs) n += tok.encode(d).length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    best = Math.min(best, s);
    tokens = n;
  }
  const mbs = bytes / 1e6 / best;
  console.log(`transformers.js ${name}: ${bytes} bytes, ${tokens} tokens, ${best.toFixed(3)} s, ${mbs.toFixed(2)} MB/s`);
}

const args = process.argv.slice(2);
if (args[0] === "--make-corpus" && args[1]) {
  makeCorpus(args[1], Number(args[2] || 10));
} else if (args.length >= 2) {
  bench(args[0], args[1], Number(args[2] || 1));
} else {
  console.error("usage: tokenizer_encode_bench.js --make-corpus OUT [MB] | NAME CORPUS [REPEAT]");
  process.exit(2);
}
